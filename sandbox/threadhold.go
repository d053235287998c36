package sandbox

// #include "threadhold.h"
import "C"

import (
	"runtime"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"
	v8 "rogchap.com/v8go"
)

// threadHold is an outer v8::Locker and Isolate::Enter that the isolate's
// loop takes for each turn of work (see threadhold.cc for why): with it
// held, each v8go call's own Locker is a cheap nested one instead of a
// top-level one that sets up and frees V8's per-thread state.
//
// The hold pins the loop's goroutine to its OS thread (runtime.LockOSThread)
// while it is held, and only then: the loop drops it before it waits for
// work. Measured both ways (docs/performance-log.md): pinned for the isolate's
// whole life, one handle served ~30–55% more, but 32 isolates of one worker
// served ~22% less, because every hand-off to a sleeping isolate then had
// to wake that isolate's own thread.
//
// Every method is called on the loop's goroutine; while the hold is taken
// no other thread may make a v8go call on the isolate (the vm's rule
// already: every V8 call happens on its loop).
//
// The hold also keeps the isolate's CPU account (used): while it is held
// the isolate's work runs on this one thread, so the thread's CPU time
// between take and drop is the isolate's. Blame reads it (bounds.go): a
// timeout is a strike only when the program itself spent the time.
//
// Reading a thread's CPU clock is a system call (~1.4 µs here, more under
// the worker's seccomp filter), and three of them a request cost a busy
// handle a fifth of its throughput (docs/performance-log.md, round 16). So a
// hold is timed on the monotonic clock (vDSO, ~30 ns), and the CPU clock is
// read only once the current activity has held the isolate for more than
// preciseAfter: the account is CPU time from then on, and wall time (never
// less than the CPU time) before, so it errs only towards charging, by at
// most preciseAfter plus a turn that began before it.
type threadHold struct {
	iso unsafe.Pointer
	h   unsafe.Pointer // the Locker while held, nil otherwise
	// account is the time charged for every hold so far (ns); wallStart
	// and cpuStart are the clocks when the current hold was taken, cpuStart
	// -1 when the CPU clock was not read for it.
	account, wallStart, cpuStart int64
	// activity is the account when the current activity began (begin).
	activity int64
}

// preciseAfter is how long an activity holds its isolate, as the wall
// clock counts, before its holds are timed on the thread's CPU clock.
const preciseAfter = int64(20 * time.Millisecond)

// monoEpoch makes monotonic readings into numbers.
var monoEpoch = time.Now()

func monotonic() int64 { return int64(time.Since(monoEpoch)) }

// threadCPU is the calling thread's CPU time in ns.
func threadCPU() int64 {
	var ts unix.Timespec
	if unix.ClockGettime(unix.CLOCK_THREAD_CPUTIME_ID, &ts) != nil {
		return 0
	}
	return ts.Nano()
}

// begin marks the start of an activity (a run, a busy period) and answers
// the account then, for used's caller to subtract.
func (t *threadHold) begin() int64 {
	t.activity = t.used()
	return t.activity
}

// used is the isolate's charged time so far (ns), the current hold
// included. Called on the loop's goroutine only.
func (t *threadHold) used() int64 {
	if t.h == nil {
		return t.account
	}
	return t.account + t.open()
}

// open is what the current hold is charged so far.
func (t *threadHold) open() int64 {
	if t.cpuStart >= 0 {
		return threadCPU() - t.cpuStart
	}
	return monotonic() - t.wallStart
}

func newThreadHold(iso *v8.Isolate) threadHold {
	return threadHold{iso: isolatePointer(iso)}
}

// take pins the goroutine and takes the outer Locker; a no-op when held.
func (t *threadHold) take() {
	if t.h != nil || t.iso == nil {
		return
	}
	runtime.LockOSThread()
	if t.h = C.retainer_isolate_hold(t.iso); t.h == nil {
		// Out of memory for the Locker: v8go's own Lockers still work.
		runtime.UnlockOSThread()
		return
	}
	t.wallStart, t.cpuStart = monotonic(), -1
	if t.account-t.activity > preciseAfter {
		t.cpuStart = threadCPU()
	}
}

// drop releases the outer Locker and unpins the goroutine; a no-op when
// not held. The isolate may then be used (or disposed) by plain v8go calls.
func (t *threadHold) drop() {
	if t.h == nil {
		return
	}
	t.account += t.open()
	C.retainer_isolate_release(t.iso, t.h)
	t.h = nil
	runtime.UnlockOSThread()
}
