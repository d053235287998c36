// Package gctarget sets the Go collector's target (GOGC) for a process
// whose live heap is small and whose allocation rate is high, as the
// gateway's and its workers' are: a high target while the live heap is
// small, so that the collector does not start a cycle every few MiB, and
// a bounded headroom as the live heap grows, so that a process whose live
// heap is large (many handles, or a tenant holding big bodies in flight)
// is not allowed five times it before it collects.
//
// The target is adjusted after every collection (a finalizer re-armed at
// each cycle, as the runtime offers no hook of its own), from the live
// heap the runtime measured (/gc/heap/live:bytes).
package gctarget

import (
	"math"
	"runtime"
	"runtime/debug"
	"runtime/metrics"
	"sync"
)

// Percent is the target for a live heap of live bytes: max while the
// headroom it allows (live × max / 100) is within headroom bytes; past
// that the percent that allows headroom bytes, and never below Go's
// default of 100.
func Percent(live uint64, max int, headroom uint64) int {
	if max <= 100 || live == 0 || live*uint64(max)/100 <= headroom {
		return max
	}
	p := int(headroom * 100 / live)
	if p < 100 {
		return 100
	}
	return p
}

var (
	mu        sync.Mutex
	following bool
	armed     bool // the hook runs for the life of the process once set
	maxP      int
	room      uint64
)

// Follow sets the target from the live heap now and after every
// collection, for the life of the process; a later call changes the
// policy (the hook is armed once, whatever Stop did in between).
func Follow(max int, headroom uint64) {
	mu.Lock()
	first := !armed
	following, armed, maxP, room = true, true, max, headroom
	mu.Unlock()
	adjust()
	if first {
		arm()
	}
}

// Apply takes up a policy that Policy answered in another process:
// followed when it has a headroom, otherwise the fixed target (0 leaves
// Go's default).
func Apply(max int, headroom uint64) {
	switch {
	case headroom > 0:
		Follow(max, headroom)
	case max != 0:
		debug.SetGCPercent(max)
	}
}

// Stop ends following: the target stays where it is until set again (the
// hook, once armed, stays and does nothing).
func Stop() {
	mu.Lock()
	following = false
	mu.Unlock()
}

// Policy is what a process started from this one should follow: the
// policy given to Follow, or (headroom 0) the fixed target in force.
func Policy() (max int, headroom uint64) {
	mu.Lock()
	defer mu.Unlock()
	if following {
		return maxP, room
	}
	return Current(), 0
}

// Current is the target in force as GOGC would say it: -1 for off (the
// runtime reports it as -1 converted to uint64), 0 when it cannot be read.
func Current() int {
	s := []metrics.Sample{{Name: "/gc/gogc:percent"}}
	metrics.Read(s)
	if s[0].Value.Kind() != metrics.KindUint64 {
		return 0
	}
	v := s[0].Value.Uint64()
	if v > math.MaxInt32 {
		return -1
	}
	return int(v)
}

func adjust() {
	mu.Lock()
	on, max, headroom := following, maxP, room
	mu.Unlock()
	if !on {
		return
	}
	s := []metrics.Sample{{Name: "/gc/heap/live:bytes"}}
	metrics.Read(s)
	var live uint64
	if s[0].Value.Kind() == metrics.KindUint64 {
		live = s[0].Value.Uint64()
	}
	p := Percent(live, max, headroom)
	if p != Current() {
		debug.SetGCPercent(p)
	}
}

// cycle is what the hook's finalizer hangs on; it holds a pointer so that
// the allocator never batches it with other tiny objects.
type cycle struct{ _ *int }

// arm sets a finalizer that runs after the next collection: it adjusts
// the target and arms itself again.
func arm() {
	runtime.SetFinalizer(&cycle{}, func(*cycle) {
		adjust()
		arm()
	})
}
