package worker

import (
	"context"
	"fmt"
	"os"
	"strconv"
	"strings"

	"github.com/retainer-gw/retainer/fault"
)

// Isolation modes (SPEC §4, tenant cordons).
const (
	// IsolationShared lets every worker host every tenant's isolates: one
	// trust domain.
	IsolationShared = "shared"
	// IsolationTenant makes a worker host one tenant's isolates at a time,
	// so a crash, a memory bomb, a hard kill or a compromised V8 touches
	// only the tenant that caused it. Workers start as tenants need them
	// (up to Workers), one spare is kept started ahead, and when every
	// worker is held the least recently active tenant's worker is recycled:
	// its handles are parked and rebuilt on their next request.
	IsolationTenant = "tenant"
)

func (pool *Pool) cordoned() bool { return pool.cfg.Isolation == IsolationTenant }

// slots is how many processes a cordoned pool may run: Workers held by
// tenants plus the spare.
func (c *Config) slots() int {
	if c.Isolation == IsolationTenant {
		return c.Workers + 1
	}
	return c.Workers
}

// pickFor chooses a worker that hosts tenant alone: one it already holds
// with room, else the spare, else a new process in a free slot, else
// another tenant's worker, recycled, as recyclable allows. A retaining run
// that finds none answers ErrNoCapacity (the caller parks one of the
// tenant's idle handles and tries again); another run, OVERLOADED.
func (pool *Pool) pickFor(ctx context.Context, tenant string, retaining bool) (*process, error) {
	pool.mu.Lock()
	if pool.closed {
		pool.mu.Unlock()
		return nil, fault.New(fault.Overloaded, "The gateway is stopping.")
	}
	var best, spare *process
	var others []*process
	bestScore, held, mine := 0, 0, 0
	holds := map[string]int{} // workers held, per other tenant
	for _, p := range pool.workers {
		if p == nil || !p.alive() {
			continue
		}
		switch owner := p.owner(); owner {
		case "":
			spare = p
		case tenant:
			held++
			mine++
			retained, inflight := p.load()
			if retaining && retained >= pool.cfg.IsolatesPerWorker || inflight >= pool.callLimit() {
				continue
			}
			if score := retained + inflight; best == nil || score < bestScore {
				best, bestScore = p, score
			}
		default:
			held++
			holds[owner]++
			others = append(others, p)
		}
	}
	lru := recyclable(others, holds, mine)
	if wait := pool.startingFor[tenant]; best == nil && wait != nil {
		// A worker is being started for this tenant: a burst of its
		// first requests waits for that one start.
		pool.mu.Unlock()
		select {
		case <-wait:
			return pool.pickFor(ctx, tenant, retaining)
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
	switch {
	case best != nil:
		pool.mu.Unlock()
		return best, nil
	case spare != nil && (held < pool.cfg.Workers || lru != nil):
		if held >= pool.cfg.Workers {
			// Every worker is held: the least recently active tenant's is
			// recycled (its handles are parked, rebuilt on their next
			// request, without a strike), and the spare serves at once.
			pool.workers[lru.index] = nil
			lru.mu.Lock()
			lru.retired = "recycled for another tenant (every worker was held)"
			lru.mu.Unlock()
			go lru.kill("recycled for another tenant") // reap starts the next spare
		}
		spare.mu.Lock()
		spare.tenant = tenant
		spare.mu.Unlock()
		pool.mu.Unlock()
		pool.logf("worker %d (pid %d) now hosts tenant %q (held %d, recycled %v)", spare.index, spare.pid, tenant, held, lru != nil && held >= pool.cfg.Workers)
		pool.ensureSpare()
		return spare, nil
	}
	slot := -1
	if held < pool.cfg.Workers {
		slot = pool.freeSlot()
	}
	if slot < 0 && lru != nil {
		// Recycle: the other tenant's handles there are parked (rebuilt
		// on their next request, without a strike).
		slot = lru.index
		pool.workers[slot] = nil
		lru.mu.Lock()
		lru.retired = "recycled for another tenant (every worker was held)"
		lru.mu.Unlock()
	}
	if slot < 0 {
		pool.mu.Unlock()
		if retaining {
			return nil, ErrNoCapacity
		}
		return nil, fault.Overload()
	}
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
	if lru != nil && lru.index == slot {
		lru.kill("recycled for another tenant")
		<-lru.exited
	}
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
	pool.workers[slot] = p
	pool.restarts++
	pool.logf("worker %d (pid %d) started for tenant %q", slot, p.pid, tenant)
	pool.mu.Unlock()
	pool.ensureSpare()
	return p, nil
}

// recyclable is the other tenant's worker a tenant holding mine workers
// may have recycled for it when every worker is held, or nil. A tenant
// with no worker may take one: from a tenant holding more than one if
// there is such a tenant, else the least recently active tenant's. A
// tenant that holds one already grows only into a free slot, or at the
// expense of a tenant holding at least two more than it: its own load (a
// 65th handle, a full queue) must not cost a tenant with fewer workers
// its isolates. pool.mu is held.
func recyclable(others []*process, holds map[string]int, mine int) *process {
	most := 0
	for _, n := range holds {
		most = max(most, n)
	}
	if mine > 0 && most <= mine+1 {
		return nil
	}
	var lru *process
	for _, p := range others {
		if mine > 0 || most > 1 {
			if holds[p.owner()] != most {
				continue // the busiest tenant gives up a worker first
			}
		}
		if lru == nil || p.lastUsed() < lru.lastUsed() {
			lru = p
		}
	}
	return lru
}

// freeSlot is an empty slot not being started, or -1. pool.mu is held.
func (pool *Pool) freeSlot() int {
	for i, p := range pool.workers {
		if p == nil && !pool.starting[i] {
			return i
		}
	}
	return -1
}

// ensureSpare starts a spare worker in the background when none is up or
// starting and a slot is free.
func (pool *Pool) ensureSpare() {
	pool.mu.Lock()
	defer pool.mu.Unlock()
	if pool.closed || pool.spareStarting {
		return
	}
	for _, p := range pool.workers {
		if p != nil && p.alive() && p.owner() == "" {
			return
		}
	}
	slot := pool.freeSlot()
	if slot < 0 {
		return
	}
	pool.starting[slot] = true
	pool.spareStarting = true
	pool.wg.Add(1)
	go func() {
		defer pool.wg.Done()
		p, err := pool.spawn(slot)
		pool.mu.Lock()
		delete(pool.starting, slot)
		pool.spareStarting = false
		if err != nil || pool.closed || slot >= len(pool.workers) {
			pool.mu.Unlock()
			if err != nil {
				pool.logf("worker %d: spare failed to start: %v", slot, err)
			} else {
				p.kill("pool closed")
			}
			return
		}
		pool.workers[slot] = p
		pool.mu.Unlock()
	}()
}

func (p *process) lastUsed() (t int64) {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.lastActive.UnixNano()
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
