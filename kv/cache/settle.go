package cache

import "github.com/retainer-gw/retainer/internal/hostcache"

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

// SettledNow answers what WhenSettled would give f at once, when id has no
// write on its way (ok); ok false: WhenSettled would wait.
func (c *Worker) SettledNow(id string) (ok bool, err error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.owes(id) > 0 {
		return false, nil
	}
	return true, c.refused(id, c.done)
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
