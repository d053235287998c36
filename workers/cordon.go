package workers

import (
	"context"
	"fmt"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/retainer-gw/retainer/fault"
)

// Isolation modes (docs/architecture.md, "Tenant cordons").
const (
	// IsolationShared lets every worker host every tenant's isolates: one
	// trust domain.
	IsolationShared = "shared"
	// IsolationTenant makes a worker host one tenant's isolates at a time,
	// so a crash, a memory bomb, a hard kill or a compromised V8 touches
	// only the tenant that caused it. Workers start as tenants need them,
	// as many as memory allows (memory.go) or Workers, spares are kept
	// started ahead (spares.go), and a worker is taken from its tenant for another only
	// when nothing of its tenant is in progress there and it has been idle
	// for RecycleIdle (recyclable). An active tenant is never evicted for a
	// newcomer: the newcomer waits for a slot within its own bound.
	IsolationTenant = "tenant"
)

func (pool *Pool) cordoned() bool { return pool.cfg.Isolation == IsolationTenant }

// auto reports whether the number of workers follows the memory budget.
func (pool *Pool) auto() bool { return pool.cordoned() && pool.cfg.Workers == 0 }

// waitPoll is how often a newcomer waiting for a worker looks again: a slot
// frees when a worker dies or its tenant's last work ends, and a worker
// becomes recyclable by the clock alone.
const waitPoll = 20 * time.Millisecond

// pickFor chooses a worker that hosts tenant alone: one it already holds
// with room, else the spare, else a new process where capacity allows, else
// another tenant's idle worker, recycled. When none is free the call waits
// for one until wait has passed (or ctx ends), then answers OVERLOADED; a
// retaining run of a tenant that holds a full worker answers ErrNoCapacity
// at once instead (ErrTenantFull: the caller parks one of the tenant's own
// idle handles).
//
// A tenant under its share (TenantWorkerMemory) that waits is a waiter:
// while one waits, a tenant over its share is given no worker, not even
// its own (its calls wait in turn), and its workers that fall idle are
// taken for the waiters at once, without RecycleIdle (recyclable). Three
// computations of one tenant once held 96% of worker_memory, and 5 of 6
// newcomers answered OVERLOADED.
func (pool *Pool) pickFor(ctx context.Context, tenant string, retaining bool, wait time.Duration) (*process, error) {
	deadline := time.Now().Add(wait)
	waiting := false
	defer func() {
		if waiting {
			pool.mu.Lock()
			if pool.waiters[tenant]--; pool.waiters[tenant] <= 0 {
				delete(pool.waiters, tenant)
			}
			pool.mu.Unlock()
		}
	}()
	for {
		p, err, again, started := pool.tryPickFor(ctx, tenant, retaining)
		if !again {
			return p, err
		}
		if started {
			// A start for this tenant (the spare it claimed, or a worker
			// started for its first request) ended while it waited: the
			// worker is its own now, so it picks again whatever its bound
			// says. The wait was for a process to start, not for a slot to
			// free; under load a spare took 561-744 ms to come up, past a
			// 500 ms bound, and a new tenant's first deploy answered
			// OVERLOADED with its worker ready.
			continue
		}
		if !waiting {
			pool.mu.Lock()
			if !pool.overShare(tenant) {
				if pool.waiters == nil {
					pool.waiters = map[string]int{}
				}
				pool.waiters[tenant]++
				waiting = true
			}
			pool.mu.Unlock()
		}
		left := time.Until(deadline)
		if left <= 0 {
			return nil, fault.Overload()
		}
		select {
		case <-ctx.Done():
			return nil, fault.Overload()
		case <-pool.stop:
			return nil, fault.New(fault.Overloaded, "The gateway is stopping.")
		case <-time.After(min(waitPoll, left)):
		}
	}
}

// tryPickFor is one attempt of pickFor; again asks the caller to wait and
// try once more, at once (started) when the attempt waited for a start for
// the tenant that has ended.
func (pool *Pool) tryPickFor(ctx context.Context, tenant string, retaining bool) (p *process, err error, again, started bool) {
	pool.mu.Lock()
	if pool.closed {
		pool.mu.Unlock()
		return nil, fault.New(fault.Overloaded, "The gateway is stopping."), false, false
	}
	var best, spare *process
	bestScore, mine := 0, 0
	for _, w := range pool.workers {
		if w == nil || !w.alive() {
			continue
		}
		switch w.owner() {
		case "":
			spare = w
		case tenant:
			mine++
			retained, inflight := w.load()
			if retaining && retained >= pool.cfg.IsolatesPerWorker || inflight >= pool.callLimit() {
				continue
			}
			if score := retained + inflight; best == nil || score < bestScore {
				best, bestScore = w, score
			}
		}
	}
	if mine > 0 && pool.othersWait(tenant) && pool.overShare(tenant) {
		// Over its share while another tenant waits for a worker: its
		// calls wait, so that its workers drain for the waiters.
		pool.mu.Unlock()
		return nil, nil, true, false
	}
	if best != nil {
		best.reserve(retaining) // pool.go
		pool.mu.Unlock()
		return best, nil, false, false
	}
	if starting := pool.startingFor[tenant]; starting != nil {
		// A worker is being started for this tenant: a burst of its first
		// requests waits for that one start.
		pool.mu.Unlock()
		select {
		case <-starting:
			return nil, nil, true, true
		case <-ctx.Done():
			return nil, fault.Overload(), false, false
		}
	}
	if spare == nil && len(pool.spareStarts) > 0 {
		// A spare is on its way: it is this newcomer's, sooner than a
		// process started now beside it (spares.go).
		err := pool.claimSpare(ctx, tenant)
		return nil, err, err == nil, err == nil
	}
	if spare != nil {
		spare.mu.Lock()
		spare.tenant = tenant
		spare.lastActive = time.Now()
		spare.takenFirst = true
		spare.mu.Unlock()
		spare.reserve(retaining)
		pool.beginTakenRun()
		// The next spare starts in the same hold of the lock, so the next
		// newcomer finds it starting (to claim), never a gap between
		// (spares.go).
		pool.startSpare()
		pool.mu.Unlock()
		pool.logf("worker %d (pid %d) now hosts tenant %q", spare.index, spare.pid, tenant)
		return spare, nil, false, false
	}
	slot := -1
	if pool.canStart() {
		slot = pool.freeSlot()
	} else if victim := pool.recyclable(mine > 0); victim != nil {
		slot = victim.index
		pool.unroute(victim, "recycled for another tenant (it was idle and every worker was taken)")
		go victim.kill("recycled for another tenant")
	}
	if slot >= 0 {
		pool.noteOutran() // no spare was up or starting (spares.go)
	}
	if slot < 0 {
		pool.mu.Unlock()
		if retaining && mine > 0 {
			return nil, ErrTenantFull, false, false
		}
		return nil, nil, true, false
	}
	p, err = pool.startFor(tenant, slot, retaining)
	return p, err, false, false
}

// startFor starts a worker in slot for tenant, for a run reserved on it
// (reserve); pool.mu is held on entry and released.
func (pool *Pool) startFor(tenant string, slot int, retaining bool) (*process, error) {
	pool.starting[slot] = true
	started := make(chan struct{})
	pool.startingFor[tenant] = started
	defer func() {
		pool.mu.Lock()
		delete(pool.startingFor, tenant)
		pool.mu.Unlock()
		close(started)
	}()
	pool.mu.Unlock()
	p, err := pool.spawn(slot)
	pool.mu.Lock()
	delete(pool.starting, slot)
	if err == nil && (pool.closed || slot >= len(pool.workers)) {
		pool.mu.Unlock()
		p.kill("pool closed or resized")
		return nil, fault.New(fault.Overloaded, "The gateway is stopping.")
	}
	if err != nil {
		pool.mu.Unlock()
		pool.logf("worker %d: start for a tenant failed: %v", slot, err)
		return nil, fault.Overload()
	}
	p.tenant = tenant
	p.lastActive = time.Now()
	p.reserve(retaining)
	pool.workers[slot] = p
	pool.restarts++
	pool.logf("worker %d (pid %d) started for tenant %q", slot, p.pid, tenant)
	pool.mu.Unlock()
	pool.ensureSpare()
	return p, nil
}

// recyclable is the worker a newcomer may take from its tenant, or nil.
// Only a worker whose tenant has nothing in progress there (idleFor) and
// that has been idle for RecycleIdle qualifies; among those, the one with
// the least to lose: no retained isolates, then the fewest, then the least
// recently active. A tenant that already holds a worker (grows) takes only
// a worker with no retained isolates: its own load must never cost another
// tenant its state. pool.mu is held.
func (pool *Pool) recyclable(grows bool) *process {
	now := time.Now()
	var best *process
	bestRetained, bestIdle := 0, time.Duration(0)
	for _, w := range pool.workers {
		if w == nil || !w.alive() || w.owner() == "" {
			continue
		}
		idle, retained, ok := w.idleFor(now)
		if !ok {
			continue
		}
		// A worker of a tenant over its share, holding no handle, goes
		// at once to a tenant that waits (pickFor).
		drained := !grows && retained == 0 && pool.overShare(w.owner())
		if !drained && (idle < pool.cfg.RecycleIdle || grows && retained > 0) {
			continue
		}
		if best == nil || retained < bestRetained || retained == bestRetained && idle > bestIdle {
			best, bestRetained, bestIdle = w, retained, idle
		}
	}
	return best
}

// overShare reports whether tenant's workers hold its share of memory
// (TenantWorkerMemory) or more: their PSS as last measured, a worker not
// yet measured counted as newWorkerEstimate. pool.mu is held.
func (pool *Pool) overShare(tenant string) bool {
	var held int64
	for _, w := range pool.workers {
		if w == nil || !w.alive() || w.owner() != tenant {
			continue
		}
		if pss := w.mem.pss.Load(); pss > 0 {
			held += pss
		} else {
			held += newWorkerEstimate
		}
	}
	return held >= pool.cfg.TenantWorkerMemory
}

// othersWait reports whether a tenant other than tenant waits for a
// worker under its share. pool.mu is held.
func (pool *Pool) othersWait(tenant string) bool {
	for t := range pool.waiters {
		if t != tenant {
			return true
		}
	}
	return false
}

// idleFor answers how long the worker has had nothing in progress (no
// call, no open response stream, no waitUntil work, no run reserving a
// slot, no run a pick placed here: pool.go, reserve), and how many
// retained isolates it holds; ok is false while something is in
// progress.
func (p *process) idleFor(now time.Time) (idle time.Duration, retained int, ok bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.dead || p.retiring || len(p.running) > 0 || len(p.pending) > 0 || p.picks > 0 || len(p.streams) > 0 || now.Before(p.busyUntil) {
		return 0, 0, false
	}
	return now.Sub(p.lastActive), len(p.retained), true
}

// unroute takes a worker out of service before it is killed: its slot
// empties, its isolates are no longer routed to it (their next requests
// rebuild them elsewhere), and a call that reaches it after this is
// answered as never started (callOrdered), so it is sent again.
// pool.mu is held.
func (pool *Pool) unroute(p *process, why string) {
	if p.index < len(pool.workers) && pool.workers[p.index] == p {
		pool.workers[p.index] = nil
	}
	p.mu.Lock()
	p.retiring = true
	p.retired = why
	ids := make([]string, 0, len(p.retained))
	for id := range p.retained {
		ids = append(ids, id)
	}
	p.mu.Unlock()
	for _, id := range ids {
		if pool.where[id] == p {
			delete(pool.where, id)
		}
	}
}

// freeSlot is an empty slot not being started, or -1; with `workers auto`
// the slots grow as needed (canStart has said one more fits). pool.mu is
// held.
func (pool *Pool) freeSlot() int {
	for i, p := range pool.workers {
		if p == nil && !pool.starting[i] {
			return i
		}
	}
	if pool.auto() {
		pool.workers = append(pool.workers, nil)
		return len(pool.workers) - 1
	}
	return -1
}

// rss is a process's resident memory in bytes (0 when unknown).
func rss(pid int) int64 {
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/statm", pid))
	if err != nil {
		return 0
	}
	f := strings.Fields(string(data))
	if len(f) < 2 {
		return 0
	}
	pages, _ := strconv.ParseInt(f[1], 10, 64)
	return pages * int64(os.Getpagesize())
}
