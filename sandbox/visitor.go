package sandbox

import (
	"time"

	"github.com/retainer-gw/retainer/program"
)

// Waiting for the visitor's request body is the visitor's time, not the
// program's (docs/architecture.md, "Blame"): while the isolate waits with a
// body.read in flight, the current activity's bound is extended by that
// wait. Only time the isolate spends waiting counts (the loop blocked, its
// thread free): a program that reads a slow body and spins meanwhile is
// stopped at its bound as before. The gateway ends a body that stops
// arriving for request_body_idle, so the extension of one read is bounded
// there.

// visitorOp is the host call that reads the visitor's request body.
const visitorOp = "body.read"

// VisitorOp is program.VisitorOp: the host calls that wait for the
// visitor's request body.
func VisitorOp(op string) bool { return program.VisitorOp(op) }

// visitorTime is the account of the visitor's time in the current
// activity, guarded by watchdog.mu (the watchdog timers read it). Whether a
// body read is in flight is the host calls' (hostCalls.visitors).
type visitorTime struct {
	waited time.Duration
	// since is when the loop blocked with a body read in flight, zero
	// when it is not blocked so: a watchdog that fires during the wait
	// counts the wait so far (it would otherwise fire at the bound while
	// the loop, blocked until the same moment, had not yet noted it).
	since time.Time
}

// blocks notes that the loop blocks now, with a body read in flight or
// not, and answers the time for waited.
func (w *watchdog) blocks(reading bool) time.Time {
	now := time.Now()
	if reading {
		w.mu.Lock()
		w.visitor.since = now
		w.mu.Unlock()
	}
	return now
}

// waited notes that the loop, blocked since blocked (blocks), runs again;
// the wait counts as the visitor's when a body read was in flight.
func (w *watchdog) waited(blocked time.Time, reading bool) {
	if !reading {
		return
	}
	w.mu.Lock()
	w.visitor.waited += time.Since(blocked)
	w.visitor.since = time.Time{}
	w.mu.Unlock()
}

// visitorExtra is how far the current activity's deadlines have moved.
func (w *watchdog) visitorExtra() time.Duration {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.visitorExtraLocked()
}

// visitorExtraLocked is visitorExtra with w.mu held: the waits ended and
// the one in progress.
func (w *watchdog) visitorExtraLocked() time.Duration {
	if w.visitor.since.IsZero() {
		return w.visitor.waited
	}
	return w.visitor.waited + time.Since(w.visitor.since)
}

// resetVisitor starts a new activity's account (its body reads still in
// flight keep counting as pending).
func (w *watchdog) resetVisitor() {
	w.mu.Lock()
	w.visitor.waited = 0
	w.visitor.since = time.Time{}
	w.mu.Unlock()
}

// arm terminates the isolate once due has passed, plus the visitor's time,
// while activity id is current; the timer re-arms itself when the
// visitor's time grew meanwhile. w.mu is taken.
//
// An isolate has one timer for all its activities, set again only when it
// would fire too late: under load an invocation arms nothing (the timer
// armed for an earlier one fires first, finds a later deadline and moves
// to it), where a timer of its own, made and stopped, cost an invocation
// three allocations and two changes of the timer heap
// (docs/history/performance-log.md, "The worker's CPU a request"). An
// activity that ends leaves the timer as it is; the loop stops it when it
// waits for work (idle).
func (w *watchdog) arm(id uint64, due time.Time) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.armed, w.due, w.credited = id, due, w.visitorExtraLocked()
	switch {
	case w.disposed:
	case w.timer == nil:
		w.timer = time.AfterFunc(time.Until(due), w.fire)
		w.timerAt = due
	case w.timerAt.IsZero() || w.timerAt.After(due):
		w.timer.Reset(time.Until(due))
		w.timerAt = due
	}
}

// dueAt answers when the current activity's bound ends, moved by the
// visitor's time so far (zero when none is under way): a host call carries
// it to the gateway, which bounds the call's waits by what is left of it
// (program.WithDue).
func (w *watchdog) dueAt() time.Time {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.current == 0 || w.current != w.armed || w.due.IsZero() {
		return time.Time{}
	}
	due := w.due
	if extra := w.visitorExtraLocked(); extra > w.credited {
		due = due.Add(extra - w.credited)
	}
	return due
}

// fire is the timer's: it terminates the armed activity if it is still
// current and its deadline (moved by the visitor's time) has passed, and
// sets the timer again for a deadline still ahead.
func (w *watchdog) fire() {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.timerAt = time.Time{}
	if w.current == 0 || w.current != w.armed || w.disposed {
		return
	}
	if extra := w.visitorExtraLocked(); extra > w.credited {
		w.due = w.due.Add(extra - w.credited)
		w.credited = extra
	}
	if d := time.Until(w.due); d > 0 {
		w.timer.Reset(d)
		w.timerAt = w.due
		return
	}
	w.terminated = true
	w.terminate()
}
