package sandbox

// #include "threadhold.h"
import "C"

import (
	"runtime"
	"time"
	"unsafe"

	v8 "rogchap.com/v8go"
)

// threadHold is an outer v8::Locker and Isolate::Enter that the isolate's
// loop takes for each turn of work (see threadhold.cc for why): with it
// held, each v8go call's own Locker is a cheap nested one instead of a
// top-level one that sets up and frees V8's per-thread state.
//
// The hold pins the loop's goroutine to its OS thread (runtime.LockOSThread)
// while it is held, and only then: the loop drops it before it waits for
// work. Measured both ways (docs/history/performance-log.md): pinned for the isolate's
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
// timeout is a strike only when the program itself spent the time, so every
// hold that could matter is charged on the thread's CPU clock, never on the
// wall clock: a turn that spent 80 ms of CPU is not charged the second its
// worker was descheduled (stopped, or the machine busy) in the middle of it.
//
// Reading a thread's CPU clock is a system call (~0.7–1.4 µs here, more
// under the worker's seccomp filter), and three of them a request cost a
// busy handle a fifth of its throughput (docs/history/performance-log.md, round
// 16). So the clock is read as seldom as the account allows:
//   - take uses a reading of the thread's clock at most staleCPU old (each
//     OS thread keeps its last one, threadhold.cc): the clock cannot advance
//     faster than the wall clock, so it is at most staleCPU behind, and it
//     is read again only when older (at most once per staleCPU per thread
//     under load);
//   - a hold shorter than shortHold on the monotonic clock (vDSO, ~30 ns) is
//     charged its wall time (never less than its CPU time), with no read;
//   - a longer one is charged the clock's reading at its end minus the one
//     at its start (and never more than its wall time).
//
// So a hold is charged at most its CPU time plus staleCPU (a long one) or
// shortHold (a short one, whatever it was descheduled for). Once the
// current activity has been charged more than preciseAfter, every take and
// drop reads the clock afresh (the turns of a long activity are worth it).
type threadHold struct {
	iso unsafe.Pointer
	h   unsafe.Pointer // the Locker while held, nil otherwise
	// account is the time charged for every hold so far (ns); wallStart
	// is the monotonic clock when the current hold was taken, cpuStart the
	// thread's CPU clock then (a reading at most staleCPU old, or a fresh
	// one when precise; -1 when it could not be read).
	account, wallStart, cpuStart int64
	precise                      bool
	// activity is the account when the current activity began (begin).
	activity int64
}

const (
	// shortHold is how long a hold may be, on the wall clock, and still be
	// charged its wall time without reading the CPU clock.
	shortHold = int64(2 * time.Millisecond)
	// staleCPU is how old a reading of the thread's CPU clock may be for
	// a take (and for begin and mark) to use it.
	staleCPU = int64(2 * time.Millisecond)
	// preciseAfter is how much an activity is charged before its holds'
	// CPU clock is read afresh at every take and drop.
	preciseAfter = int64(20 * time.Millisecond)
)

// monoEpoch makes monotonic readings into numbers.
var monoEpoch = time.Now()

func monotonic() int64 { return int64(time.Since(monoEpoch)) }

// threadCPU is the calling thread's CPU time in ns, as read at most maxAge
// ago on this thread (0: read now); -1 when it cannot be read.
func threadCPU(maxAge int64) int64 {
	return int64(C.retainer_thread_cpu(C.int64_t(maxAge)))
}

// begin marks the start of an activity (a run, a busy period) and answers
// the account then, for used's caller to subtract.
func (t *threadHold) begin() int64 {
	t.activity = t.mark()
	return t.activity
}

// used is the isolate's charged time so far (ns), the current hold
// included, read afresh: the end of what blame measures. Called on the
// loop's goroutine only.
func (t *threadHold) used() int64 {
	if t.h == nil {
		return t.account
	}
	return t.account + t.open(true)
}

// mark is used for the start of what blame measures: it may be up to
// staleCPU behind (so the time measured from it errs towards charging)
// and costs no system call more often than once per staleCPU.
func (t *threadHold) mark() int64 {
	if t.h == nil {
		return t.account
	}
	return t.account + t.open(false)
}

// open is what the current hold is charged so far; fresh reads the CPU
// clock now, when the hold is long enough to be charged on it.
func (t *threadHold) open(fresh bool) int64 {
	wall := monotonic() - t.wallStart
	if (wall <= shortHold && !t.precise) || t.cpuStart < 0 {
		return wall
	}
	age := staleCPU
	if fresh {
		age = 0
	}
	now := threadCPU(age)
	if now < 0 {
		return wall
	}
	return min(now-t.cpuStart, wall)
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
	t.precise = t.account-t.activity > preciseAfter
	age := staleCPU
	if t.precise {
		age = 0
	}
	var cpu C.int64_t
	if t.h = C.retainer_isolate_hold(t.iso, C.int64_t(age), &cpu); t.h == nil {
		// Out of memory for the Locker: v8go's own Lockers still work.
		runtime.UnlockOSThread()
		return
	}
	t.wallStart, t.cpuStart = monotonic(), int64(cpu)
}

// drop releases the outer Locker and unpins the goroutine; a no-op when
// not held. The isolate may then be used (or disposed) by plain v8go calls.
func (t *threadHold) drop() {
	if t.h == nil {
		return
	}
	t.account += t.open(true)
	C.retainer_isolate_release(t.iso, t.h)
	t.h = nil
	runtime.UnlockOSThread()
}
