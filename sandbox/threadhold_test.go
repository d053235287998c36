package sandbox

import (
	"testing"
	"time"

	v8 "rogchap.com/v8go"
)

// burnCPU spins until the calling thread's CPU clock has advanced by d.
func burnCPU(d time.Duration) {
	start := threadCPU(0)
	for threadCPU(0)-start < d.Nanoseconds() {
		for i := 0; i < 10000; i++ {
		}
	}
}

// A hold is charged the CPU its thread spent, not the time the thread was
// kept off a CPU in the middle of it (docs/architecture.md, Blame): here
// the thread sleeps 300 ms inside the hold, as a worker stopped or
// descheduled by a busy machine would, and spends 40 ms of CPU. Before,
// an activity's first 20 ms of holds were charged wall time, so this one
// hold was charged ~340 ms.
func TestHoldChargesCPUNotWallTime(t *testing.T) {
	iso := v8.NewIsolate()
	defer iso.Dispose()
	h := newThreadHold(iso)
	h.take()
	start := h.begin()
	time.Sleep(150 * time.Millisecond)
	burnCPU(20 * time.Millisecond)
	time.Sleep(150 * time.Millisecond)
	burnCPU(20 * time.Millisecond)
	mid := h.used() - start
	h.drop()
	charged := h.used() - start
	if charged < 40*time.Millisecond.Nanoseconds() || charged > (60*time.Millisecond).Nanoseconds() {
		t.Fatalf("a hold of 40 ms CPU and 300 ms asleep was charged %v (%v while held), want 40 ms and at most its staleness more", time.Duration(charged), time.Duration(mid))
	}
	t.Logf("40 ms of CPU and 300 ms asleep in one hold: charged %v", time.Duration(charged))
	// A short hold is charged at most its wall time.
	before := h.used()
	wall := time.Now()
	h.take()
	h.drop()
	if got := h.used() - before; got > time.Since(wall).Nanoseconds() || got < 0 {
		t.Fatalf("a short hold was charged %v", time.Duration(got))
	}
}
