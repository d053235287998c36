package gctarget

import (
	"runtime"
	"runtime/debug"
	"testing"
	"time"

	"github.com/retainer-gw/retainer/internal/waitfor"
)

func TestPercent(t *testing.T) {
	const mib = 1 << 20
	for _, c := range []struct {
		live     uint64
		max      int
		headroom uint64
		want     int
	}{
		{9 * mib, 400, 256 * mib, 400},   // the gateway under load: 36 MiB of headroom
		{64 * mib, 400, 256 * mib, 400},  // exactly at the bound
		{128 * mib, 400, 256 * mib, 200}, // past it: 256 MiB of headroom
		{512 * mib, 400, 256 * mib, 100}, // never below Go's default
		{0, 400, 256 * mib, 400},         // not measured yet
		{512 * mib, 100, 256 * mib, 100}, // a low target is kept
		{512 * mib, 50, 256 * mib, 50},
		{512 * mib, -1, 256 * mib, -1}, // off stays off
	} {
		if got := Percent(c.live, c.max, c.headroom); got != c.want {
			t.Errorf("Percent(%d MiB, %d, %d MiB) = %d, want %d", c.live/mib, c.max, c.headroom/mib, got, c.want)
		}
	}
}

// Follow moves the target with the live heap, collection by collection:
// a live heap past the bound brings it down, and it goes back up once the
// heap is freed.
func TestFollowTracksTheLiveHeap(t *testing.T) {
	old := debug.SetGCPercent(100)
	defer debug.SetGCPercent(old)
	Follow(400, 32<<20)
	defer Stop()
	if max, room := Policy(); max != 400 || room != 32<<20 {
		t.Fatalf("Policy() = %d, %d", max, room)
	}
	waitFor := func(want int) {
		t.Helper()
		if !waitfor.Within(30*time.Second, func() bool {
			if Current() == want {
				return true
			}
			runtime.GC()
			return false
		}) {
			t.Fatalf("the target is %d, want %d", Current(), want)
		}
	}
	waitFor(400)
	big := make([][]byte, 64) // 64 MiB live: 400% would allow 256 MiB more
	for i := range big {
		big[i] = make([]byte, 1<<20)
	}
	waitFor(100) // 32 MiB of room over 64 MiB is under Go's default
	runtime.KeepAlive(big)
	big = nil //nolint:ineffassign // garbage from here on, whatever the compiler's liveness
	waitFor(400)
}

// Stopped, the hook leaves the target alone, and Policy is the fixed one.
func TestStop(t *testing.T) {
	old := debug.SetGCPercent(100)
	defer debug.SetGCPercent(old)
	Follow(400, 32<<20)
	Stop()
	debug.SetGCPercent(150)
	for i := 0; i < 3; i++ {
		runtime.GC()
		time.Sleep(time.Millisecond)
	}
	if Current() != 150 {
		t.Errorf("the target is %d after Stop, want 150", Current())
	}
	if max, room := Policy(); max != 150 || room != 0 {
		t.Errorf("Policy() = %d, %d after Stop, want 150, 0", max, room)
	}
}

// Apply is Policy's other half: a headroom means follow, none a fixed
// target, 0 Go's default untouched.
func TestApply(t *testing.T) {
	old := debug.SetGCPercent(100)
	defer debug.SetGCPercent(old)
	defer Stop()
	Apply(0, 0)
	if Current() != 100 {
		t.Errorf("Apply(0, 0) moved the target to %d", Current())
	}
	Apply(175, 0)
	if max, room := Policy(); Current() != 175 || max != 175 || room != 0 {
		t.Errorf("Apply(175, 0): target %d, Policy %d, %d", Current(), max, room)
	}
	Apply(300, 64<<20)
	if max, room := Policy(); Current() != 300 || max != 300 || room != 64<<20 {
		t.Errorf("Apply(300, 64 MiB): target %d, Policy %d, %d", Current(), max, room)
	}
}
