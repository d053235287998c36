package sandbox

// #include "threadhold.h"
import "C"

import (
	"runtime"
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
// work. Measured both ways (docs/performance.md): pinned for the isolate's
// whole life, one handle served ~30–55% more, but 32 isolates of one worker
// served ~22% less, because every hand-off to a sleeping isolate then had
// to wake that isolate's own thread.
//
// Every method is called on the loop's goroutine; while the hold is taken
// no other thread may make a v8go call on the isolate (the vm's rule
// already: every V8 call happens on its loop).
//
// The hold also keeps the isolate's CPU account (used): while it is held
// the isolate's work runs on this one thread, so the thread's CPU clock
// between take and drop is the isolate's CPU time, whatever else the
// machine runs. Blame reads it (bounds.go): a timeout is a strike only
// when the program itself spent the time.
type threadHold struct {
	iso unsafe.Pointer
	h   unsafe.Pointer // the Locker while held, nil otherwise
	// cpuTotal is the thread CPU time of every hold so far, cpuStart the
	// thread's clock when the current one was taken (ns).
	cpuTotal, cpuStart int64
}

// threadCPU is the calling thread's CPU time in ns.
func threadCPU() int64 {
	var ts unix.Timespec
	if unix.ClockGettime(unix.CLOCK_THREAD_CPUTIME_ID, &ts) != nil {
		return 0
	}
	return ts.Nano()
}

// used is the isolate's CPU time so far (ns), the current hold included.
// Called on the loop's goroutine only.
func (t *threadHold) used() int64 {
	if t.h == nil {
		return t.cpuTotal
	}
	return t.cpuTotal + threadCPU() - t.cpuStart
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
	t.cpuStart = threadCPU()
}

// drop releases the outer Locker and unpins the goroutine; a no-op when
// not held. The isolate may then be used (or disposed) by plain v8go calls.
func (t *threadHold) drop() {
	if t.h == nil {
		return
	}
	t.cpuTotal += threadCPU() - t.cpuStart
	C.retainer_isolate_release(t.iso, t.h)
	t.h = nil
	runtime.UnlockOSThread()
}
