package cache

import (
	"context"
	"encoding/json"
	"sort"
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

// refusal is a write the gateway refused: its number and why.
type refusal struct {
	seq uint64
	err error
}

// settleWaiter is an answer (or a Settle) that waits until every write
// its id made before it, up to upTo, is over.
type settleWaiter struct {
	id   string
	upTo uint64
	f    func(error)
	// carry is the answer f would write, when it may ride with the
	// writes it waits for (nil: it may not).
	carry *hostcache.Answer
}

// holdWrites is the longest queued writes wait for something to send them
// with. Writes answered at once are sent when an answer waits for them
// (and then ride in one frame with it), when a caller waits for them
// (Settle, a read that goes to the gateway), or past this hold (a write of
// a ctx.waitUntil or a timer, whose answer left before it). A handler's
// last write is followed by its answer within microseconds, so the hold
// passes only for those.
const holdWrites = 500 * time.Microsecond

// Carried answers ride with the writes they wait for only while small: at
// most maxCarriedBytes in all a frame (a batch is at most
// budgets.KVWriteBatchBytes and a value; the gateway reads frames far
// larger), MaxCarriedAnswer each.
const (
	maxCarriedBytes  = 1 << 20
	MaxCarriedAnswer = 64 << 10
)

type queuedWrite struct {
	seq uint64
	id  string
	w   BatchWrite
	k   cacheKey
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

// Writes that do not wait. A kv.put or kv.delete of a run whose
// space the worker knows is answered at once: the value goes into the
// cache (so the run, and this worker's other runs, read it) and into an
// ordered queue that one flusher sends to the gateway in batches. Nothing
// leaves the worker on the run's behalf before its writes are applied
// (settle): not its answer, not a fetch or tool call; a write the gateway
// refuses (quota, a bound) fails the invocation or run that made it, as an
// acknowledged response must never hold a lost write. A kv.get that misses
// the cache, and kv.list, wait for the queue first (read your writes).

// writeNow answers a kv write at once when it can (ok false: send it).
func (c *Worker) writeNow(id, op string, args json.RawMessage) (json.RawMessage, bool) {
	if c.send == nil || op != opPut && op != opDelete {
		return nil, false
	}
	a, err := decodeArgs(args)
	if err != nil || a.Key == nil || *a.Key == "" || len(*a.Key) > budgets.KVKeyBytes ||
		op == opPut && (a.Value == nil || len(*a.Value) > budgets.KVValueBytes) {
		return nil, false // the gateway answers the error
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	space, known := c.spaceOf[id]
	if !known || !c.writable[id] {
		return nil, false // the gateway answers, and refuses what is not granted
	}
	k := cacheKey{space, *a.Key}
	c.writes[k]++
	c.inflight[k]++
	v := json.RawMessage("null")
	w := BatchWrite{ID: id, Write: Write{Op: op, Key: *a.Key}}
	if op == opPut {
		v, _ = wirejson.Marshal(*a.Value)
		w.Value = a.Value
	}
	c.store(k, v, id)
	c.seq++
	c.queue = append(c.queue, queuedWrite{seq: c.seq, id: id, w: w, k: k})
	c.last[id] = c.seq
	c.kick(false)
	return json.RawMessage("null"), true
}

// kick starts the flusher for the queue: now, or within holdWrites (an
// answer or a waiting caller may come first and send it at once). c.mu is
// held.
func (c *Worker) kick(now bool) {
	if c.flushing || len(c.queue) == 0 {
		return
	}
	if !now {
		if !c.armed {
			c.armed = true
			if c.hold == nil {
				c.hold = time.AfterFunc(holdWrites, c.held)
			} else {
				c.hold.Reset(holdWrites)
			}
		}
		return
	}
	if c.armed {
		c.armed = false
		c.hold.Stop()
	}
	c.flushing = true
	go c.flush()
}

// held sends what the hold kept waiting (holdWrites).
func (c *Worker) held() {
	c.mu.Lock()
	c.armed = false
	if c.flushing || len(c.queue) == 0 {
		c.mu.Unlock()
		return
	}
	c.flushing = true
	c.mu.Unlock()
	c.flush()
}

// urgent reports whether someone waits for the queue now: an answer held
// for writes still queued, or a caller in Settle or drain. c.mu is held.
func (c *Worker) urgent() bool {
	if c.waiting > 0 {
		return true
	}
	for _, w := range c.settled {
		if w.upTo > c.done {
			return true
		}
	}
	return false
}

// owes answers the number of id's latest write not yet over (0: none).
// c.mu is held.
func (c *Worker) owes(id string) uint64 {
	if s := c.last[id]; s > c.done {
		return s
	}
	return 0
}

// refused answers the first refusal of id's writes up to upTo no waiter
// has answered, and forgets them all: the waiter that answers it is the
// first whose writes reach it (a write fails the invocation that made
// it, docs/decisions.md "kv read cache"). c.mu is held.
func (c *Worker) refused(id string, upTo uint64) error {
	rs := c.failed[id]
	var err error
	n := 0
	for _, r := range rs {
		if r.seq > upTo {
			break
		}
		if err == nil {
			err = r.err
		}
		n++
	}
	if n == len(rs) {
		delete(c.failed, id)
	} else if n > 0 {
		c.failed[id] = rs[n:]
	}
	return err
}

// takeCarried removes from the waiters the answers that ride with the
// first n queued writes: those whose every write not yet over is among
// them (the earlier ones are over, so the gateway may release the answer
// once it applied these), with no refusal to answer, while they fit the
// frame. c.mu is held.
func (c *Worker) takeCarried(n int) []settleWaiter {
	var carried []settleWaiter
	size := 0
	through := c.queue[n-1].seq
	kept := c.settled[:0]
	for _, w := range c.settled {
		if w.carry != nil && w.upTo <= through && len(c.failed[w.id]) == 0 && size+len(w.carry.Reply) <= maxCarriedBytes {
			size += len(w.carry.Reply)
			carried = append(carried, w)
			continue
		}
		kept = append(kept, w)
	}
	for i := len(kept); i < len(c.settled); i++ {
		c.settled[i] = settleWaiter{}
	}
	c.settled = kept
	return carried
}

// flush sends the queue in order, in batches of writes of any runs: one
// round trip carries what every run of the worker wrote meanwhile, and the
// answers waiting for nothing but those writes ride along (takeCarried).
// A write the gateway refuses fails its run; the writes after it are sent
// again, and an answer carried with writes not applied comes back to wait
// here as any other. Once no one waits for the queue, what is left waits
// for the hold (kick).
func (c *Worker) flush() {
	c.mu.Lock()
	defer c.mu.Unlock()
	// The first frame goes whoever started the flusher (an answer, a
	// waiting caller, the hold); the next only while someone waits.
	for first := true; len(c.queue) > 0 && (first || c.urgent()); first = false {
		n, size := 0, 0
		var batch []BatchWrite
		for n < len(c.queue) && (n == 0 || size < budgets.KVWriteBatchBytes) {
			w := c.queue[n].w
			batch = append(batch, w)
			size += len(w.Key)
			if w.Value != nil {
				size += len(*w.Value)
			}
			n++
		}
		carried := c.takeCarried(n)
		var answers []hostcache.Answer
		for _, w := range carried {
			a := *w.carry
			a.ID = w.id
			answers = append(answers, a)
		}
		c.mu.Unlock()
		applied, err := c.send(batch, answers)
		c.mu.Lock()
		if len(carried) > 0 {
			// An answer the gateway released waited for writes of its id
			// all applied (Gateway.Carry); the others wait here again.
			late := map[string]bool{}
			for _, w := range batch[min(applied, len(batch)):] {
				late[w.ID] = true
			}
			var back []settleWaiter
			for _, w := range carried {
				if late[w.id] {
					w.carry = nil
					back = append(back, w)
				} else if w.carry.Sent != nil {
					w.carry.Sent()
				}
			}
			if len(back) > 0 {
				// In the order they came, per id (a refusal answers the
				// first that waited for it): numbers only grow per id.
				c.settled = append(back, c.settled...)
				sort.SliceStable(c.settled, func(i, j int) bool { return c.settled[i].upTo < c.settled[j].upTo })
			}
		}
		done := applied
		if err != nil && done < n {
			done++ // the refused write is over too
		}
		if done == 0 {
			done = n // nothing could be sent: the whole batch fails
		}
		if len(c.failed) >= budgets.KVCacheRunsPerWorker {
			c.failed = map[string][]refusal{} // ids that never settled again
		}
		for i, q := range c.queue[:done] {
			if c.inflight[q.k]--; c.inflight[q.k] <= 0 {
				delete(c.inflight, q.k)
			}
			if i >= applied {
				c.drop(q.k) // the cache may hold what was refused
				c.gen++
				c.failed[q.id] = append(c.failed[q.id], refusal{q.seq, err})
			}
		}
		c.done = c.queue[done-1].seq
		for _, q := range c.queue[:done] {
			if c.last[q.id] <= c.done {
				delete(c.last, q.id)
			}
		}
		c.queue = c.queue[done:]
		c.applied.Broadcast()
		if ready := c.takeSettled(); len(ready) > 0 {
			c.mu.Unlock()
			c.answering(ready)
			c.mu.Lock()
		}
	}
	c.flushing = false
	c.kick(false)
}

// Settle waits until every write run id made so far is applied, and
// answers the gateway's refusal of one of them, if any (once).
func (c *Worker) Settle(id string) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	upTo := c.last[id]
	if upTo > c.done {
		c.waiting++
		c.kick(true)
		for upTo > c.done {
			c.applied.Wait()
		}
		c.waiting--
	}
	// Every write of id so far is over: any refusal not yet answered is
	// this caller's (a ctx.waitUntil's write refused after its answer
	// left fails the run's next settle, as before the numbering).
	return c.refused(id, max(upTo, c.done))
}

// WhenSettled calls f with what Settle would answer, once every write run
// id made so far is applied: at once, on the caller's goroutine, when none
// is on its way; otherwise from the flusher, so an invocation's answer
// waits for its writes with no goroutine parked for it (the output gate).
// The answer carry makes may instead ride to the gateway with those
// writes, in one frame (takeCarried): the gateway hands it on once it
// applied them, and its output gate holds it until they are durable.
func (c *Worker) WhenSettled(id string, carry func() *hostcache.Answer, f func(error)) {
	c.mu.Lock()
	if upTo := c.owes(id); upTo > 0 {
		w := settleWaiter{id: id, upTo: upTo, f: f}
		if carry != nil && c.send != nil {
			if a := carry(); a != nil && len(a.Reply) <= MaxCarriedAnswer {
				w.carry = a
			}
		}
		c.settled = append(c.settled, w)
		c.kick(true)
		c.mu.Unlock()
		return
	}
	err := c.refused(id, c.done)
	c.mu.Unlock()
	f(err)
}

// takeSettled removes the waiters whose writes are all over and answers
// their calls, to be made without c.mu: each as soon as its own writes are
// (not once its id has none on the way: a handle under load always has),
// in the order they came, so a refusal answers the first that waited for
// it.
func (c *Worker) takeSettled() []func() {
	var ready []func()
	kept := c.settled[:0]
	for _, w := range c.settled {
		if w.upTo > c.done {
			kept = append(kept, w)
			continue
		}
		err := c.refused(w.id, w.upTo)
		f := w.f
		ready = append(ready, func() { f(err) })
	}
	for i := len(kept); i < len(c.settled); i++ {
		c.settled[i] = settleWaiter{}
	}
	c.settled = kept
	return ready
}

// drain waits until the whole queue is applied (a read that goes to the
// gateway must see this worker's writes).
func (c *Worker) drain() {
	c.mu.Lock()
	defer c.mu.Unlock()
	if len(c.queue) == 0 {
		return
	}
	c.waiting++
	c.kick(true)
	for len(c.queue) > 0 {
		c.applied.Wait()
	}
	c.waiting--
}

// Now answers a kv call at once when it can: a read from the cache, a
// write into the queue. It never waits.
func (c *Worker) Now(id, op string, args json.RawMessage) (json.RawMessage, bool) {
	switch op {
	case opGet:
		return c.lookup(id, args)
	case opPut, opDelete:
		return c.writeNow(id, op, args)
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
