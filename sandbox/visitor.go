package sandbox

import "time"

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

// visitorWait is a vm's account of the visitor's time in the current
// activity: pending is loop-owned; waited is guarded by vm.mu (the
// watchdogs read it).
type visitorWait struct {
	pending int
	waited  time.Duration
}

// waited notes that the loop was blocked for d; it counts as the
// visitor's when a body read was in flight meanwhile.
func (m *vm) waited(d time.Duration) {
	if m.visitor.pending == 0 || d <= 0 {
		return
	}
	m.mu.Lock()
	m.visitor.waited += d
	m.mu.Unlock()
}

// visitorExtra is how far the current activity's deadlines have moved.
func (m *vm) visitorExtra() time.Duration {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.visitor.waited
}

// resetVisitor starts a new activity's account (its body reads still in
// flight keep counting as pending).
func (m *vm) resetVisitor() {
	m.mu.Lock()
	m.visitor.waited = 0
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
		if extra := m.visitor.waited; extra > credited {
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
