package sandbox

import (
	_ "embed"
	"errors"
	"sync"
	"time"

	"github.com/retainer-gw/retainer/fault"
	"github.com/retainer-gw/retainer/program"
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

// watchdog is an isolate's bound state, shared with the goroutines that
// end its work from outside: the watchdog timers (arm), a caller that gives
// up its run (cancel.go), the visitor's time that moves the deadlines
// (visitor.go). mu guards every field but the two hooks back to the
// isolate, which are set when it is made.
type watchdog struct {
	// terminate stops the isolate's JavaScript (the one call into the
	// isolate made off its loop); wake wakes the loop if it waits for
	// work.
	terminate func()
	wake      func()

	mu sync.Mutex
	// seq numbers the activities; current is the one under way (0:
	// none), terminated says the watchdog ended it, disposed that the
	// isolate is gone.
	seq        uint64
	current    uint64
	terminated bool
	disposed   bool
	// token is the run (Engine.Run) under way, and cancelled says its
	// caller gave up on it (cancel.go).
	token     *runTicket
	cancelled bool
	visitor   visitorTime // the visitor's time in the current activity (visitor.go)
	// The one timer (arm): timerAt is when it fires (zero: not set),
	// armed the activity whose deadline is due, credited the visitor's
	// time already added to due.
	timer    *time.Timer
	timerAt  time.Time
	armed    uint64
	due      time.Time
	credited time.Duration
}

// next numbers a new activity without starting a watch on it (a busy
// period: concurrent.go).
func (w *watchdog) next() uint64 {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.seq++
	return w.seq
}

// begin makes a new activity current and answers its id; a run cancelled
// before its JavaScript started ends as it starts (cancel.go).
func (w *watchdog) begin() uint64 {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.seq++
	w.current = w.seq
	w.terminated = false
	if w.cancelled {
		w.terminate()
	}
	return w.current
}

// end says no activity is under way: a watchdog that fires later does
// nothing.
func (w *watchdog) end() {
	w.mu.Lock()
	w.current = 0
	w.mu.Unlock()
}

// dispose says the isolate is gone: nothing terminates it any more.
func (w *watchdog) dispose() {
	w.mu.Lock()
	w.disposed = true
	if w.timer != nil {
		w.timer.Stop() // nothing to keep the ended isolate for
		w.timerAt = time.Time{}
	}
	w.mu.Unlock()
}

// idle stops the timer while the isolate waits for work (arm sets it
// again): a timer left set would wake an idle worker to find nothing
// current, which a worker asked every few milliseconds (many tenants',
// docs/performance.md) would pay every 500 ms. Work that follows work
// keeps it, so under load it is neither stopped nor set.
func (w *watchdog) idle() {
	w.mu.Lock()
	if w.current == 0 && !w.timerAt.IsZero() {
		w.timer.Stop()
		w.timerAt = time.Time{}
	}
	w.mu.Unlock()
}

// ended answers whether the watchdog terminated the current activity and
// whether its run was cancelled.
func (w *watchdog) ended() (terminated, cancelled bool) {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.terminated, w.cancelled
}

// bounded runs f as one bounded activity: a fresh run id, a watchdog that
// terminates the isolate at the timeout (only while this run is current),
// and the heap guard. A bound hit makes the isolate dead.
func (m *vm) bounded(timeout time.Duration, f func(deadline time.Time) error) error {
	id := m.watch.begin()
	deadline := time.Now().Add(timeout)
	m.activityCPU = m.hold.begin()
	m.activityLogs = logBuffer{}
	m.host.beginScope(id)
	defer m.host.endScope()
	defer m.noteDroppedLogs()
	m.watch.resetVisitor()
	m.watch.arm(id, deadline)
	err := f(deadline)
	m.watch.end()
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
	if m.activityLogs.dropped > 0 {
		m.handleLog("warn", m.activityLogs.note())
	}
}

// handleLog writes to a retained handle's log (nothing before the handle
// is retained).
func (m *vm) handleLog(level, msg string) {
	if m.handleID != "" && m.eng.cfg.OnLog != nil {
		m.eng.cfg.OnLog(m.handleID, program.LogEntry{Time: time.Now(), Level: level, Message: msg})
	}
}

// boundHit reports a bound that ended the current activity. V8 can report
// success for a run terminated inside a microtask loop, so this is checked
// after every call into V8, whatever the call returned.
func (m *vm) boundHit() error {
	if m.guard.hit() {
		return fault.OutOfMemory(m.memoryMiB)
	}
	t, cancelled := m.watch.ended()
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
