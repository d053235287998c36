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
// not run for that long.
type turns struct {
	mu      sync.Mutex
	issued  map[string]uint64
	next    map[string]uint64
	changed chan struct{}
}

const turnWait = time.Second

func newTurns() *turns {
	return &turns{issued: map[string]uint64{}, next: map[string]uint64{}, changed: make(chan struct{})}
}

// take hands out id's next ticket.
func (t *turns) take(id string) uint64 {
	t.mu.Lock()
	defer t.mu.Unlock()
	n := t.issued[id]
	t.issued[id] = n + 1
	return n
}

// wait returns when ticket is id's turn (or after turnWait).
func (t *turns) wait(id string, ticket uint64) {
	var timer *time.Timer
	defer func() {
		if timer != nil {
			timer.Stop()
		}
	}()
	for {
		t.mu.Lock()
		if t.next[id] >= ticket {
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

// done ends ticket's step: the next ticket's turn. It may be called more
// than once.
func (t *turns) done(id string, ticket uint64) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.next[id] < ticket+1 {
		t.next[id] = ticket + 1
	}
	if t.next[id] >= t.issued[id] {
		delete(t.next, id)
		delete(t.issued, id)
	}
	close(t.changed)
	t.changed = make(chan struct{})
}
