package worker

import (
	"sync"
	"time"
)

// turns keeps one handle's invocations in arrival order across the two
// places where goroutines could reorder them (SPEC §5): the gateway sends
// each invocation from its caller's goroutine, and the worker serves each
// frame on a goroutine of its own. A ticket is taken where the order is
// known (the pool counting the calls ahead; the worker's read loop, one
// frame after another), and the step that must keep that order (writing
// the frame; queuing the invocation on its isolate) waits for its turn.
//
// A turn is waited for at most turnWait: a ticket whose holder never
// arrives must not hold the others for ever. Every path gives its ticket
// back at once, so the wait only runs out for a holder the scheduler has
// not run for that long. When every ticket of a handle is back, its count
// starts over in a new epoch; a ticket of an old epoch changes nothing.
type turns struct {
	mu      sync.Mutex
	line    map[string]*line
	epoch   uint64
	changed chan struct{}
}

// line is one handle's tickets: issued so far and the next whose turn it is.
type line struct {
	epoch        uint64
	issued, next uint64
}

// ticket is a place in a handle's line.
type ticket struct {
	epoch, n uint64
}

const turnWait = time.Second

func newTurns() *turns {
	return &turns{line: map[string]*line{}, changed: make(chan struct{})}
}

// take hands out id's next ticket.
func (t *turns) take(id string) ticket {
	t.mu.Lock()
	defer t.mu.Unlock()
	l := t.line[id]
	if l == nil {
		t.epoch++
		l = &line{epoch: t.epoch}
		t.line[id] = l
	}
	l.issued++
	return ticket{l.epoch, l.issued - 1}
}

// wait returns when tk is id's turn (or after turnWait).
func (t *turns) wait(id string, tk ticket) {
	var timer *time.Timer
	defer func() {
		if timer != nil {
			timer.Stop()
		}
	}()
	for {
		t.mu.Lock()
		l := t.line[id]
		if l == nil || l.epoch != tk.epoch || l.next >= tk.n {
			t.mu.Unlock()
			return
		}
		ch := t.changed
		t.mu.Unlock()
		if timer == nil {
			timer = time.NewTimer(turnWait)
		}
		select {
		case <-ch:
		case <-timer.C:
			return
		}
	}
}

// done ends tk's step: the next ticket's turn. It may be called more than
// once, and late.
func (t *turns) done(id string, tk ticket) {
	t.mu.Lock()
	defer t.mu.Unlock()
	l := t.line[id]
	if l == nil || l.epoch != tk.epoch {
		return
	}
	if l.next < tk.n+1 {
		l.next = tk.n + 1
	}
	if l.next >= l.issued {
		delete(t.line, id)
	}
	close(t.changed)
	t.changed = make(chan struct{})
}
