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

// visitorWait is a vm's account of the visitor's time in the current
// activity: pending is loop-owned; waited and since are guarded by vm.mu
// (the watchdogs read them).
type visitorWait struct {
	pending int
	waited  time.Duration
	// since is when the loop blocked with a body read in flight, zero
	// when it is not blocked so: a watchdog that fires during the wait
	// counts the wait so far (it would otherwise fire at the bound while
	// the loop, blocked until the same moment, had not yet noted it).
	since time.Time
}

// blocks notes that the loop blocks now, and answers the time for waited.
func (m *vm) blocks() time.Time {
	now := time.Now()
	if m.visitor.pending > 0 {
		m.mu.Lock()
		m.visitor.since = now
		m.mu.Unlock()
	}
	return now
}

// waited notes that the loop, blocked since blocked (blocks), runs again;
// the wait counts as the visitor's when a body read was in flight.
func (m *vm) waited(blocked time.Time) {
	if m.visitor.pending == 0 {
		return
	}
	m.mu.Lock()
	m.visitor.waited += time.Since(blocked)
	m.visitor.since = time.Time{}
	m.mu.Unlock()
}

// visitorExtra is how far the current activity's deadlines have moved.
func (m *vm) visitorExtra() time.Duration {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.visitorExtraLocked()
}

// visitorExtraLocked is visitorExtra with m.mu held: the waits ended and
// the one in progress.
func (m *vm) visitorExtraLocked() time.Duration {
	if m.visitor.since.IsZero() {
		return m.visitor.waited
	}
	return m.visitor.waited + time.Since(m.visitor.since)
}

// resetVisitor starts a new activity's account (its body reads still in
// flight keep counting as pending).
func (m *vm) resetVisitor() {
	m.mu.Lock()
	m.visitor.waited = 0
	m.visitor.since = time.Time{}
	m.mu.Unlock()
}

// watchdog terminates the isolate once timeout has passed, plus the
// visitor's time, while activity id is current; it re-arms itself when the
// visitor's time grew meanwhile. m.mu is taken.
func (m *vm) watchdog(id uint64, timeout time.Duration) *time.Timer {
	var t *time.Timer
	credited := m.visitorExtra()
	var fire func()
	fire = func() {
		m.mu.Lock()
		defer m.mu.Unlock()
		if m.current != id || m.disposed {
			return
		}
		if extra := m.visitorExtraLocked(); extra > credited {
			t.Reset(extra - credited)
			credited = extra
			return
		}
		m.terminated = true
		m.iso.TerminateExecution()
	}
	m.mu.Lock()
	t = time.AfterFunc(timeout, fire)
	m.mu.Unlock()
	return t
}
