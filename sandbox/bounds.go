package sandbox

import (
	_ "embed"
	"errors"
	"time"

	"github.com/retainer-gw/retainer/fault"
)

// semiSpaceMiB bounds each of V8's young-generation semi-spaces. V8's
// default (16 MiB each, 48 MiB for the young generation) would by itself
// nearly fill a 64 MiB bound; small isolates do not need it.
const semiSpaceMiB = 1

// oldSpaceMiB is the --max-old-space-size that makes an isolate's whole heap
// limit (old space plus young generation, as V8 reports it in
// HeapSizeLimit) come out at memoryMiB; TestHeapLimitMatchesBound checks it.
func oldSpaceMiB(memoryMiB int) int {
	n := memoryMiB - 3*semiSpaceMiB
	if n < 8 {
		n = 8
	}
	return n
}

// bounded runs f as one bounded activity: a fresh run id, a watchdog that
// terminates the isolate at the timeout (only while this run is current),
// and the heap guard. A bound hit makes the isolate dead.
func (m *vm) bounded(timeout time.Duration, f func(deadline time.Time) error) error {
	m.mu.Lock()
	m.runSeq++
	id := m.runSeq
	m.current = id
	m.hostActivity = id
	m.terminated = false
	if m.cancelled {
		// Cancelled before its JavaScript started: it ends as it starts
		// (cancel.go).
		m.iso.TerminateExecution()
	}
	m.mu.Unlock()
	deadline := time.Now().Add(timeout)
	m.activityCPU = m.hold.begin()
	m.activityLogs = logBuffer{}
	m.beginHostScope(timeout)
	defer m.endHostScope()
	defer m.noteDroppedLogs()
	m.resetVisitor()
	watchdog := m.watchdog(id, timeout)
	err := f(deadline)
	watchdog.Stop()
	m.mu.Lock()
	m.current = 0
	m.mu.Unlock()
	if bound := m.boundHit(); bound != nil {
		err = bound
	}
	if errors.Is(err, fault.ErrTimeout) || errors.Is(err, fault.ErrMemory) {
		m.dead = true
	}
	return err
}

// noteDroppedLogs tells a retained handle's log that an activity's output
// passed its bound.
func (m *vm) noteDroppedLogs() {
	if m.activityLogs.dropped > 0 && m.handleID != "" && m.eng.cfg.OnLog != nil {
		m.eng.cfg.OnLog(m.handleID, LogEntry{Time: time.Now(), Level: "warn", Message: m.activityLogs.note()})
	}
}

// boundHit reports a bound that ended the current activity. V8 can report
// success for a run terminated inside a microtask loop, so this is checked
// after every call into V8, whatever the call returned.
func (m *vm) boundHit() error {
	if m.guard.hit() {
		return fault.OutOfMemory(m.memoryMiB)
	}
	m.mu.Lock()
	t, cancelled := m.terminated, m.cancelled
	m.mu.Unlock()
	if cancelled {
		return errCancelled // cancel.go
	}
	if t {
		return m.timeoutFault()
	}
	return nil
}

// timeoutFault is the TIMEOUT of the current activity (a run, a timer
// callback, or the busy period of a handle's invocations).
func (m *vm) timeoutFault() error { return m.timeoutSince(m.activityCPU) }

// timeoutSince is the TIMEOUT of work that began when the isolate's CPU
// account read start. Blame: it is a strike only when the isolate used at
// least half the bound in CPU since then; a timeout it did not cause (the
// machine busy with other work, or a wait for an upstream, a tool or the
// visitor) is marked fault.ErrNotCaused.
func (m *vm) timeoutSince(start int64) error {
	f := fault.TimedOut(m.timeout.Milliseconds())
	if used := m.hold.used() - start; used < m.timeout.Nanoseconds()/2 {
		f.Cause = fault.ErrNotCaused
	}
	return f
}
