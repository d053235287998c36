package sandbox

import (
	"context"
	"sync/atomic"

	"github.com/retainer-gw/retainer/fault"
)

// A run whose caller gave up (its context ends: the parent run of a spawned
// child ended, the executor socket that started it closed, the request
// left) is ended where it runs, not only abandoned by the caller: its
// JavaScript is terminated and its waits are woken, and it answers
// errCancelled, which nobody is charged for (docs/architecture.md,
// "Budgets"). Only the run is ended: a token ties the cancel to it, so a
// late cancel never touches the handle a finished deploy retained.

// runTicket tags one run; cancelled holds even before the run begins on
// the isolate's loop (its job may still wait for the isolate).
type runTicket struct{ cancelled atomic.Bool }

// errCancelled is the answer of a run cancelled by its caller.
var errCancelled = fault.Wrap(fault.Timeout, fault.ErrNotCaused, "The run was cancelled: whoever started it is gone.")

// cancelOnDone ends the run tagged token when ctx ends; stop undoes it.
func (w *watchdog) cancelOnDone(ctx context.Context, token *runTicket) (stop func() bool) {
	if ctx.Done() == nil {
		return func() bool { return true }
	}
	return context.AfterFunc(ctx, func() {
		token.cancelled.Store(true)
		w.cancel(token)
	})
}

// cancel ends run token if it is the isolate's now (one that has not
// begun is refused at beginRun; one whose JavaScript has not started is
// terminated as it starts, in begin).
func (w *watchdog) cancel(token *runTicket) {
	w.mu.Lock()
	if w.token != token || w.disposed {
		w.mu.Unlock()
		return
	}
	w.cancelled = true
	if w.current != 0 {
		w.terminate()
	}
	w.mu.Unlock()
	w.wake()
}

// beginRun and endRun tag the run under way (on the isolate's loop).
func (w *watchdog) beginRun(token *runTicket) {
	w.mu.Lock()
	w.token, w.cancelled = token, token.cancelled.Load()
	w.mu.Unlock()
}

func (w *watchdog) endRun() {
	w.mu.Lock()
	w.token, w.cancelled = nil, false
	w.mu.Unlock()
}
