package sandbox

import (
	"runtime"
	"sync"
)

// Background work on isolates, making the prewarmed ones and tearing down
// the used ones, runs on threads of the lowest scheduling class
// (SCHED_IDLE, background_linux.go), so that it takes a core only when no
// answer needs it.
//
// Why: a computation's own path is short (~0.3 ms in the isolate), but each
// one also costs the making of the next isolate (~3.5 ms of CPU) and the
// disposal of its own (~0.6 ms). On two cores that work held both when an
// answer had to wake the gateway's reader, and a wake-up onto a busy core
// waited for the scheduler (docs/performance.md, round 7: the answer's hop
// 0.46 ms p50, p90 2.5–3.8 ms). A thread in SCHED_IDLE is preempted by any
// other thread that wakes, on Linux's fair scheduler as on the older one.
// When the cores are full with requests the refill starves, the pool runs
// dry, and a run makes its isolate on its own path at normal priority: the
// foreground never waits for the background.
//
// Each background goroutine is locked to its thread for its whole life and
// never unlocks it: an unprivileged thread cannot leave SCHED_IDLE (its
// RLIMIT_NICE is 0), so the thread must end with the goroutine (the Go
// runtime ends a thread whose goroutine exits locked) and never carry the
// class to other goroutines.

// backgroundThread pins the calling goroutine to its thread for good and
// lowers the thread's class. It answers whether the class was lowered (a
// filter or an older kernel may refuse it; the work runs either way).
func backgroundThread() bool {
	runtime.LockOSThread()
	return idleThreadClass() == nil
}

// teardowns hands used isolates to the process's disposer. Buffered so a
// loop never waits for it; when it is full the loop disposes on its own
// thread, so a flood of ended isolates cannot pile up unbounded memory
// behind a starved disposer.
var (
	teardowns     = make(chan *vm, 16)
	disposerStart sync.Once
)

// retire hands the isolate's V8 teardown to the background disposer, or
// does it here when the disposer is behind. The loop has already let go of
// the isolate (its hold dropped, its queue drained).
func (m *vm) retire() {
	disposerStart.Do(func() { go disposer() })
	select {
	case teardowns <- m:
	default:
		m.teardown()
	}
}

// disposer tears isolates down for the whole process, one at a time.
func disposer() {
	backgroundThread()
	for m := range teardowns {
		m.teardown()
	}
}
