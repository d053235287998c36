package workers

import (
	"context"
	"sync"
	"time"

	"github.com/retainer-gw/retainer/fault"
)

// sendWindow bounds how many of one retained isolate's invocations are
// sent to its worker and not yet answered: the handle's concurrency (the
// ones in progress) plus a few queued there (ahead), so the worker never
// waits for the gateway between two of them. Past the window an
// invocation waits in the gateway, where a worker's death leaves it
// provably not started: it is sent again to the replacement instead of
// answering WORKER_CRASHED (docs/architecture.md, "When a worker dies").
//
// How many wait ahead follows the handle's own pace. The queue only has
// to cover the time the gateway takes to send the next invocation after
// an answer, so ahead is what the handle answers in refillTarget, at
// most windowAhead: a handle that answers in 30 µs keeps all windowAhead
// queued (its pipelining and grouped writes need them, a fifth of its
// throughput at 32 connections: docs/history/performance-log.md), one that
// answers every 500 µs keeps two, and one slower than 2 ms an answer
// keeps none: the worker then waits one turnaround of the gateway
// between two calls (tens of µs here, a few percent of 2 ms at worst),
// and every call its worker holds has started, so a worker kill fails
// only those (README.md, "Blame"), where a fixed window of sixteen failed
// seventeen calls of a 20 ms handle a kill.
//
// Waiting invocations are served in arrival order: a freed slot is handed
// to the first waiter, so a burst never wakes every waiter for one slot.
type sendWindow struct {
	mu   sync.Mutex
	conc int // invocations in progress at once
	// ahead is how many more may be sent beyond conc, from interval.
	ahead int
	sent  int // sent (or handed a slot) and not yet released
	// waiters wait for a slot, first come first served; each channel gets
	// one value when its waiter is handed a slot.
	waiters []chan struct{}
	// interval is the moving average of the time between two answers
	// while the handle was busy throughout (ns); 0 before the first.
	interval float64
	// from is where the next answer's interval starts: the last answer,
	// or when the window last went from empty to one (that interval holds
	// a round trip too, which errs towards fewer ahead); zero while the
	// window is empty.
	from time.Time
	now  func() time.Time // the clock (tests set their own)
}

// refillTarget is the time the invocations queued ahead in the worker
// should last: the gateway's turnaround from an answer to the next send,
// with room (tens of µs on loopback, ~1 ms on a slow virtual machine
// under load: docs/history/performance-log.md).
const refillTarget = time.Millisecond

// initialAhead is the window's allowance before the handle has answered:
// none, so a burst at a new handle puts no call at risk that has not
// started; a fast handle's first answers widen it within a millisecond.
const initialAhead = 0

func newSendWindow(conc int) *sendWindow {
	return &sendWindow{conc: max(conc, 1), ahead: initialAhead, now: time.Now}
}

// acquire takes a slot, waiting for one while the window is full. most
// is the handle's queue: with that many sent or waiting already, the call
// answers OVERLOADED at once. A worker's exit (exited) or the caller's
// context ends the wait; the invocation then never reached the worker.
func (w *sendWindow) acquire(ctx context.Context, exited <-chan struct{}, most int) error {
	w.mu.Lock()
	if w.sent+len(w.waiters) >= most {
		w.mu.Unlock()
		return fault.Overload()
	}
	if len(w.waiters) == 0 && w.room() {
		w.take()
		w.mu.Unlock()
		return nil
	}
	ch := slots.Get().(chan struct{})
	w.waiters = append(w.waiters, ch)
	w.mu.Unlock()
	var err error
	select {
	case <-ch:
		slots.Put(ch) // emptied, and out of the line
		return nil
	case <-exited:
		err = fault.NotStarted()
	case <-ctx.Done():
		err = ctx.Err()
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	for i, c := range w.waiters {
		if c == ch {
			w.waiters = append(w.waiters[:i], w.waiters[i+1:]...)
			slots.Put(ch) // never handed a slot: empty
			return err
		}
	}
	// Handed a slot as it gave up: the slot goes to the next in line.
	w.sent--
	w.handOff()
	return err
}

// slots holds the channels waiters are handed their slot on (each with
// room for one), reused once emptied: a waiter past the window is most
// calls of a busy handle.
var slots = sync.Pool{New: func() any { return make(chan struct{}, 1) }}

// room says a slot is free; with w.mu held.
func (w *sendWindow) room() bool { return w.sent < w.conc+w.ahead }

// take counts a slot taken; with w.mu held.
func (w *sendWindow) take() {
	if w.sent == 0 {
		w.from = w.now()
	}
	w.sent++
}

// release frees a slot. answered says the worker answered the invocation
// (any answer, error or not): its timing then updates the pace. A call
// that never reached the worker, or whose worker died, says nothing of it.
func (w *sendWindow) release(answered bool) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if answered {
		now := w.now()
		if !w.from.IsZero() {
			w.pace(now.Sub(w.from))
		}
		w.from = now
	}
	if w.sent--; w.sent == 0 {
		w.from = time.Time{} // an idle spell is no part of any interval
	}
	w.handOff()
}

// pace folds one interval between answers into the average and sizes
// ahead from it; with w.mu held. The average moves by an eighth: a busy
// worker writes up to eight answers in one system call (wire's
// replyLater), so intervals come as a long one and several near zero,
// whose mean is the pace.
func (w *sendWindow) pace(d time.Duration) {
	if w.interval == 0 {
		w.interval = float64(d)
	} else {
		w.interval += (float64(d) - w.interval) / 8
	}
	ahead := windowAhead
	if w.interval > 0 {
		ahead = min(windowAhead, int(float64(refillTarget)/w.interval+0.5))
	}
	w.ahead = ahead
}

// handOff gives free slots to the first waiters; with w.mu held.
func (w *sendWindow) handOff() {
	for len(w.waiters) > 0 && w.room() {
		ch := w.waiters[0]
		w.waiters = w.waiters[1:]
		w.take()
		ch <- struct{}{}
	}
}
