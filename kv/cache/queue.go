package cache

import (
	"encoding/json"
	"sort"
	"time"

	"github.com/retainer-gw/retainer/budgets"
	"github.com/retainer-gw/retainer/internal/hostcache"
	"github.com/retainer-gw/retainer/internal/wirejson"
)

// Writes that do not wait. A kv.put or kv.delete of a run whose
// space the worker knows is answered at once: the value goes into the
// cache (so the run, and this worker's other runs, read it) and into an
// ordered queue that one flusher sends to the gateway in batches. Nothing
// leaves the worker on the run's behalf before its writes are applied
// (settle): not its answer, not a fetch or tool call; a write the gateway
// refuses (quota, a bound) fails the invocation or run that made it, as an
// acknowledged response must never hold a lost write. A kv.get that misses
// the cache, and kv.list, wait for the queue first (read your writes).

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

// writeNow answers a kv write at once when it can (ok false: send it);
// due is when its invocation's bound ends (zero: not known).
func (c *Worker) writeNow(id, op string, args json.RawMessage, due time.Time) (json.RawMessage, bool) {
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
	w := BatchWrite{ID: id, Due: due, Write: Write{Op: op, Key: *a.Key}}
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
