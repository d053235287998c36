package workers

import (
	"sync"
	"time"
)

// turns keeps one handle's invocations in arrival order where goroutines
// could reorder them (docs/architecture.md): the gateway sends each invocation from its
// caller's goroutine. A ticket is taken where the order is known (the pool
// counting the calls ahead), and the frame's write waits for its turn. The
// worker needs none: its read loop queues each invocation on its isolate
// as the frame arrives (takeInvoke in child's serve.go).
//
// A turn is waited for at most turnWait: a ticket whose holder never
// arrives must not hold the others for ever. Every path gives its ticket
// back at once, so the wait only runs out for a holder the scheduler has
// not run for that long. When every ticket of a handle is back, its count
// starts over in a new epoch; a ticket of an old epoch changes nothing.
//
// Only the ticket whose turn comes is woken (its own channel), never every
// waiter: under load a handle has tens of frames in line, and waking them
// all at each step cost a context switch apiece for nothing.
type turns struct {
	mu    sync.Mutex
	line  map[string]*line
	epoch uint64
}

// line is one handle's tickets: issued so far, the next whose turn it is,
// and the tickets parked in wait.
type line struct {
	epoch        uint64
	issued, next uint64
	waiting      map[uint64]chan struct{}
}

// ticket is a place in a handle's line.
type ticket struct {
	epoch, n uint64
}

const turnWait = time.Second

func newTurns() *turns {
	return &turns{line: map[string]*line{}}
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
	t.mu.Lock()
	l := t.line[id]
	if l == nil || l.epoch != tk.epoch || l.next >= tk.n {
		t.mu.Unlock()
		return
	}
	ch := make(chan struct{})
	if l.waiting == nil {
		l.waiting = map[uint64]chan struct{}{}
	}
	l.waiting[tk.n] = ch
	t.mu.Unlock()
	timer := time.NewTimer(turnWait)
	defer timer.Stop()
	select {
	case <-ch:
	case <-timer.C:
		t.mu.Lock()
		if l.waiting[tk.n] == ch {
			delete(l.waiting, tk.n)
		}
		t.mu.Unlock()
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
	for n, ch := range l.waiting {
		if n <= l.next {
			close(ch)
			delete(l.waiting, n)
		}
	}
	if l.next >= l.issued {
		delete(t.line, id)
	}
}
