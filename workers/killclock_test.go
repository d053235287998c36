package workers

import (
	"strings"
	"testing"
	"time"
)

// One timer keeps every call's deadline (killclock.go): a call with a
// short bound that comes after one with a long bound is still looked at
// on time (the clock is set earlier for it), a call that ended before its
// bound kills nothing, and the worker goes for the overrunning call alone.
func TestOneClockKeepsEachCallsDeadline(t *testing.T) {
	pool := startPool(t, Config{Workers: 1, Grace: 50 * time.Millisecond})
	p := waitUp(t, pool)
	pid := p.pid
	// Records as callOrdered makes them, for calls the worker never
	// answers (ids past any real call's).
	call := func(id uint64, bound time.Duration) *callRecord {
		p.mu.Lock()
		defer p.mu.Unlock()
		rec := &callRecord{id: id, bound: bound, allowed: bound, due: time.Now().Add(bound), cpuAtBound: -1}
		p.running[id] = rec
		p.armClock(rec.due)
		return rec
	}
	const base = 1 << 62
	call(base, time.Hour)
	ended := call(base+1, 20*time.Millisecond)
	call(base+2, 300*time.Millisecond)
	p.mu.Lock()
	delete(p.running, ended.id) // answered before its bound
	p.mu.Unlock()
	waitReplaced(t, pool, pid)
	p.mu.Lock()
	overrunner, why := p.overrunner, p.killedBy
	p.mu.Unlock()
	if overrunner != base+2 || !strings.Contains(why, "overran its 300ms bound") {
		t.Fatalf("killed for call %d (%q), want the 300ms call %d", overrunner, why, uint64(base+2))
	}
}
