package cache

import (
	"context"
	"encoding/json"
	"sync"
	"time"

	"github.com/retainer-gw/retainer/budgets"
	"github.com/retainer-gw/retainer/fault"
	"github.com/retainer-gw/retainer/internal/hostcache"
	"github.com/retainer-gw/retainer/internal/wirejson"
)

// The worker's kv read cache: a kv.get answered from the worker costs no
// round trip to the gateway.
//
// Coherence rule. The gateway is the only writer of kv. It tells a worker
// which key space (a tenant's, in a registry) a run's kv calls reach, with
// the answer of a kv call that succeeded (so the run holds the grant); the
// worker then caches values per space and key:
//   - what a kv.get answered, unless a write to that key was sent from this
//     worker, or an invalidation arrived, while the get was in flight;
//   - what a kv.put or kv.delete of this worker wrote, once the gateway
//     accepted it, unless another write to the key was in flight alongside
//     it or an invalidation arrived meanwhile.
//
// Before the gateway acknowledges a write from one worker, every other
// worker that was told of that space drops the key (a drop, answered
// before the write's own answer), so a write is visible everywhere before
// the writer's await ends and long before its response leaves (the output
// gate). A failed commit drops every worker's whole cache.

type cacheKey struct{ space, key string }

// Worker is the worker's side of the kv cache: reads answered from it,
// writes answered at once and queued, and the output gate that holds a
// run's answer and its other host calls until its writes are applied. It
// implements hostcache.Worker.
type Worker struct {
	// send delivers a batch of writes, each of its run, to the gateway in
	// order, with the answers carried along (carried: none or more): it
	// answers how many writes were applied and the error of the one after
	// them, if any.
	send func(writes []BatchWrite, carried []hostcache.Answer) (int, error)
	// answering runs the answers a batch settled (WhenSettled), together.
	answering func(answers []func())

	mu       sync.Mutex
	spaceOf  map[string]string // run or handle id → its kv space
	writable map[string]bool   // run or handle id → it may write its space
	values   map[cacheKey]json.RawMessage
	// writers names, for a value this worker wrote, the run or handle that
	// wrote it: until the gateway answers a read of the key (its commit
	// done), only the writer reads it from here (no phantom reads).
	writers  map[cacheKey]string
	bytes    int
	gen      uint64              // invalidations received
	writes   map[cacheKey]uint64 // writes sent, per key
	inflight map[cacheKey]int    // writes in flight, per key

	// Writes answered at once (writeNow) wait here, in order, for the
	// flusher, each numbered (seq: the last queued); every write up to
	// done is over (applied or refused). last is, per id, its latest
	// write's number while it is not over, and failed holds, per id, the
	// refusals no waiter has answered yet.
	queue    []queuedWrite
	seq      uint64
	done     uint64
	last     map[string]uint64
	failed   map[string][]refusal
	flushing bool
	applied  *sync.Cond
	// settled are the answers waiting for their run's writes (whenSettled),
	// run by the flusher once those are applied, or carried with them.
	settled []settleWaiter
	// waiting counts the callers blocked in Settle or drain: the flusher
	// sends for them at once.
	waiting int
	// hold starts the flusher holdWrites after a write when nothing else
	// did (armed: it is set).
	hold  *time.Timer
	armed bool
}

// NewWorker is a worker's cache. send carries a batch frame of queued
// writes to the gateway's side (Gateway.Batch, or Gateway.Carry with the
// answers carried along) and answers its reply; answering runs the
// answers one batch settled, together (the worker writes them in one
// system call); nil runs them one after another.
func NewWorker(send func(frame []byte, carried []hostcache.Answer) ([]byte, error), answering func(answers []func())) *Worker {
	c := &Worker{spaceOf: map[string]string{}, writable: map[string]bool{}, values: map[cacheKey]json.RawMessage{}, writers: map[cacheKey]string{},
		writes: map[cacheKey]uint64{}, inflight: map[cacheKey]int{},
		last: map[string]uint64{}, failed: map[string][]refusal{},
		answering: answering}
	if c.answering == nil {
		c.answering = func(answers []func()) {
			for _, a := range answers {
				a()
			}
		}
	}
	if send != nil {
		c.send = func(writes []BatchWrite, carried []hostcache.Answer) (int, error) {
			res, err := send(batch{Writes: writes}.encode(), carried)
			if err != nil {
				return 0, fault.New(fault.Internal, "The gateway did not answer.")
			}
			var rep batchReply
			if err := json.Unmarshal(res, &rep); err != nil {
				return 0, fault.New(fault.Internal, "The gateway's answer was malformed.")
			}
			if err := rep.err(); err != nil {
				return rep.Applied, err
			}
			return len(writes), nil
		}
	}
	c.applied = sync.NewCond(&c.mu)
	return c
}

var _ hostcache.Worker = (*Worker)(nil)

// Now answers a kv call at once when it can: a read from the cache, a
// write into the queue, which carries what is left of its invocation's
// bound (due) to the gateway. It never waits.
func (c *Worker) Now(id, op string, args json.RawMessage, due func() time.Time) (json.RawMessage, bool) {
	switch op {
	case opGet:
		return c.lookup(id, args)
	case opPut, opDelete:
		var d time.Time
		if due != nil {
			d = due()
		}
		return c.writeNow(id, op, args, d)
	}
	return nil, false
}

// lookup answers a kv.get from the cache, if it can.
func (c *Worker) lookup(id string, args json.RawMessage) (json.RawMessage, bool) {
	a, err := decodeArgs(args)
	if err != nil || a.Key == nil {
		return nil, false
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	space, known := c.spaceOf[id]
	if !known {
		return nil, false
	}
	k := cacheKey{space, *a.Key}
	if w := c.writers[k]; w != "" && w != id {
		return nil, false // another's write: read through the gateway
	}
	v, ok := c.values[k]
	return v, ok
}

// Call serves a host call of run or handle id: a kv call through the
// cache (call); any other only once the run's writes are applied, as
// nothing may leave on its behalf before (and kv.list after this
// worker's writes are all applied, to read them).
func (c *Worker) Call(ctx context.Context, id, op string, args json.RawMessage, roundTrip func() (res, note json.RawMessage, err error)) (json.RawMessage, error) {
	switch op {
	case opGet, opPut, opDelete:
		return c.call(ctx, id, op, args, func() (json.RawMessage, *hint, error) {
			res, note, err := roundTrip()
			if err != nil || len(note) == 0 {
				return res, nil, err
			}
			var h hint
			if json.Unmarshal(note, &h) != nil {
				return res, nil, nil // cache nothing of what cannot be read
			}
			return res, &h, nil
		})
	case opList:
		c.drain()
	}
	if err := c.Settle(id); err != nil {
		return nil, err
	}
	res, _, err := roundTrip()
	return res, err
}

// call serves kv.get from the cache when it can, and otherwise asks the
// gateway through rt, caching what the rule allows.
func (c *Worker) call(ctx context.Context, id, op string, args json.RawMessage, rt func() (json.RawMessage, *hint, error)) (json.RawMessage, error) {
	a, err := decodeArgs(args)
	if err != nil || a.Key == nil {
		res, _, err := rt()
		return res, err
	}
	c.mu.Lock()
	space, known := c.spaceOf[id]
	k := cacheKey{space, *a.Key}
	if op == opGet && known {
		if v, ok := c.values[k]; ok && (c.writers[k] == "" || c.writers[k] == id) {
			c.mu.Unlock()
			return v, nil
		}
	}
	c.mu.Unlock()
	c.drain() // what goes to the gateway comes after this worker's writes
	c.mu.Lock()
	gen := c.gen
	var seq uint64
	alone := false
	if known && op != opGet {
		c.writes[k]++
		seq = c.writes[k]
		alone = c.inflight[k] == 0
		c.inflight[k]++
	}
	sentWrites := c.writes[k]
	c.mu.Unlock()

	res, hint, err := rt()

	c.mu.Lock()
	defer c.mu.Unlock()
	if known && op != opGet {
		if c.inflight[k]--; c.inflight[k] <= 0 {
			delete(c.inflight, k)
		}
	}
	if err != nil || hint == nil || hint.Space == "" {
		if known && op != opGet {
			c.drop(k)
		}
		return res, err
	}
	if len(c.spaceOf) >= budgets.KVCacheRunsPerWorker {
		c.spaceOf = map[string]string{}
		c.writable = map[string]bool{}
	}
	c.spaceOf[id] = hint.Space
	c.writable[id] = hint.Write
	if !known || hint.Space != space {
		// Nothing was sequenced against this key: a write drops it (and
		// keeps gets in flight from caching what came before it).
		if op != opGet {
			c.gen++
			c.drop(cacheKey{hint.Space, *a.Key})
		}
		return res, nil
	}
	switch op {
	case opGet:
		if c.gen == gen && c.writes[k] == sentWrites && c.inflight[k] == 0 {
			c.store(k, res, "")
		}
	case opPut, opDelete:
		if alone && c.gen == gen && c.writes[k] == seq {
			v := json.RawMessage("null")
			if op == opPut && a.Value != nil {
				v, _ = wirejson.Marshal(*a.Value)
			}
			c.store(k, v, id)
		} else {
			c.drop(k)
		}
	}
	return res, nil
}

// store caches v for k; writer is the run or handle that wrote it ("" for
// a value the gateway answered, which is durable).
func (c *Worker) store(k cacheKey, v json.RawMessage, writer string) {
	c.drop(k)
	if c.bytes+len(v)+len(k.key) > budgets.KVCacheBytesPerWorker {
		c.values = map[cacheKey]json.RawMessage{}
		c.writers = map[cacheKey]string{}
		c.bytes = 0
	}
	c.values[k] = v
	if writer != "" {
		c.writers[k] = writer
	}
	c.bytes += len(v) + len(k.key)
}

func (c *Worker) drop(k cacheKey) {
	if v, ok := c.values[k]; ok {
		c.bytes -= len(v) + len(k.key)
		delete(c.values, k)
	}
	delete(c.writers, k)
}

// Tell serves the gateway side's message: it drops what another worker's
// write changed (or everything, after a failed commit).
func (c *Worker) Tell(msg []byte) error {
	var m drop
	if err := json.Unmarshal(msg, &m); err != nil {
		return err
	}
	c.invalidate(m)
	return nil
}

// invalidate drops what the gateway says another worker's write changed.
func (c *Worker) invalidate(m drop) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.gen++
	if m.All {
		c.values = map[cacheKey]json.RawMessage{}
		c.writers = map[cacheKey]string{}
		c.bytes = 0
		return
	}
	for _, k := range m.Keys {
		c.drop(cacheKey{m.Space, k})
	}
}
