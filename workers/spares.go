package workers

import (
	"context"
	"time"

	"github.com/retainer-gw/retainer/budgets"
	"github.com/retainer-gw/retainer/fault"
)

// Spares (docs/architecture.md, "Tenant cordons"; docs/decisions.md,
// "Spares ahead of the newcomers"): a cordoned pool keeps workers started
// ahead that no tenant holds yet, so that a new tenant's first request
// finds its process up instead of waiting for one to start. A spare is
// taken by the first tenant that needs a worker (a newcomer, or a tenant
// whose own workers are full), and in the same hold of the lock the next
// one starts.
//
// One spare was enough for a handful of tenants; under 200 tenants' load a
// start took 0.5-2 s, and newcomers arriving a few at a time waited for
// it: their first deploys answered in 41-492 ms back to back and 756-2043
// ms eight at once (bench/tenants.sh). So with `workers auto`, once the
// pool holds spareEvery tenant workers, it keeps one more spare for every
// spareEvery of them, and more while newcomers outrun the spares (each
// pick in the last spareWindow that found none ready counts), up to
// budgets.SpareWorkers; a fixed `workers N`, and a smaller pool, keep one. Spares
// above the number wanted are retired one a second (trimSpares).
const (
	spareEvery  = 25
	spareWindow = 30 * time.Second
)

// sparesFor is how many spares a pool holding held tenant workers keeps
// when outran picks in the last spareWindow found none ready, with one
// more spare for every every tenant workers from every on.
func sparesFor(held, outran, every int) int {
	if every <= 0 || held < every {
		return 1
	}
	return min(budgets.SpareWorkers, 1+max(held/every, outran))
}

// sparesWanted is how many spares the pool keeps now (sparesFor);
// forgets the outran picks older than spareWindow. pool.mu is held.
func (pool *Pool) sparesWanted(now time.Time) int {
	if !pool.auto() {
		return 1
	}
	kept := pool.outran[:0]
	for _, at := range pool.outran {
		if now.Sub(at) < spareWindow {
			kept = append(kept, at)
		}
	}
	pool.outran = kept
	held := 0
	for _, w := range pool.workers {
		if w != nil && w.alive() && w.owner() != "" {
			held++
		}
	}
	return sparesFor(held, len(pool.outran), pool.spareEvery)
}

// noteOutran counts a pick that found no spare ready (it claimed one
// still starting, or started a process of its own). pool.mu is held.
func (pool *Pool) noteOutran() {
	if len(pool.outran) < budgets.SpareWorkers {
		pool.outran = append(pool.outran, time.Now())
		return
	}
	copy(pool.outran, pool.outran[1:])
	pool.outran[len(pool.outran)-1] = time.Now()
}

// readySpares lists the spares up. pool.mu is held.
func (pool *Pool) readySpares() []*process {
	var spares []*process
	for _, p := range pool.workers {
		if p != nil && p.alive() && p.owner() == "" {
			spares = append(spares, p)
		}
	}
	return spares
}

// spareStart is a spare worker being started; claim is the newcomer it
// is promised to once one claimed it.
//
// Measured back to back (bench/tenants.sh), a newcomer that found the
// spare still starting started a process of its own beside it, and the two
// starts shared the machine: 74–113 ms to its first answer, where the
// spare, whose start began earlier, was ready sooner. So a newcomer claims
// the starting spare that began first and waits for it, and the claim
// starts the next spare at once (room allowing): the next newcomer finds
// one on its way too, and a burst of newcomers starts as many processes
// side by side as before, never one after another.
type spareStart struct {
	claim *spareClaim
	// claimed is closed when a newcomer claims it (a deferred start then
	// begins at once).
	claimed chan struct{}
	// pid is its process's once it runs (0 before): a claimed start is
	// favoured by the scheduler (favour_linux.go, favourStart).
	pid int
}

// spareClaim is a newcomer tenant's claim on a starting spare.
type spareClaim struct {
	tenant string
	ready  chan struct{} // closed when the spare is the tenant's, or failed
}

// claimSpare promises the starting spare that began first to tenant,
// starts the next spare, and waits until the claimed one is up (or
// failed, or ctx ends); the caller then picks again and finds the worker
// its tenant's. The tenant's other requests wait for the same start
// (startingFor). pool.mu is held on entry and released.
func (pool *Pool) claimSpare(ctx context.Context, tenant string) error {
	claim := &spareClaim{tenant: tenant, ready: make(chan struct{})}
	s := pool.spareStarts[0]
	pool.spareStarts = pool.spareStarts[1:]
	s.claim = claim
	close(s.claimed)
	if s.pid != 0 {
		pool.favourStart(s.pid)
	}
	pool.startingFor[tenant] = claim.ready
	pool.noteOutran()
	pool.startSpare()
	pool.mu.Unlock()
	select {
	case <-claim.ready:
		return nil
	case <-ctx.Done():
		// The spare is still the tenant's when it comes up; like a worker
		// started for it, it is recyclable once idle.
		return fault.Overload()
	}
}

// settle ends a spare's start (p nil: failed). A claimed spare becomes its
// tenant's, and the claim's channel is answered for the caller to close
// once it unlocks. pool.mu is held.
func (pool *Pool) settle(s *spareStart, p *process) (claimed chan struct{}) {
	for i, u := range pool.spareStarts {
		if u == s {
			pool.spareStarts = append(pool.spareStarts[:i], pool.spareStarts[i+1:]...)
			break
		}
	}
	claim := s.claim
	if claim == nil {
		return nil
	}
	if pool.startingFor[claim.tenant] == claim.ready {
		delete(pool.startingFor, claim.tenant)
	}
	if p != nil {
		p.mu.Lock()
		p.tenant = claim.tenant
		p.lastActive = time.Now()
		p.mu.Unlock()
		pool.logf("worker %d (pid %d) started as the spare, now hosts tenant %q", p.index, p.pid, claim.tenant)
	}
	return claim.ready
}

// spareDefer bounds how long a spare's start waits for the first runs
// of the spares just taken. Eight newcomers at once under 200 tenants'
// load took eight spares, and the eight starts that replaced them (each a
// process's start-up, and its hello's snapshot written by the gateway)
// took the two cores while the newcomers' answers made their way back
// through the gateway: p90 22 ms, up to 59 ms, for runs of 0.2 ms in
// their workers (traced, bench/newcomers.sh). So a spare's start that
// begins while a first run in a spare taken is under way waits until
// none is, or until a newcomer claims it, or spareDefer.
const spareDefer = 100 * time.Millisecond

// beginTakenRun counts a spare taken, whose first run is to come.
// pool.mu is held.
func (pool *Pool) beginTakenRun() {
	if pool.takenRuns == 0 {
		pool.takenIdle = make(chan struct{})
	}
	pool.takenRuns++
}

// endTakenRun ends one counted by beginTakenRun.
func (pool *Pool) endTakenRun() {
	pool.mu.Lock()
	defer pool.mu.Unlock()
	if pool.takenRuns--; pool.takenRuns == 0 {
		close(pool.takenIdle)
	}
}

// endTaken says whether p was taken as a spare and its first run not yet
// sent, and marks it sent.
func (p *process) endTaken() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	taken := p.takenFirst
	p.takenFirst = false
	return taken
}

// ensureSpare starts spare workers in the background until as many as
// wanted are up or starting, as far as room allows.
func (pool *Pool) ensureSpare() {
	pool.mu.Lock()
	defer pool.mu.Unlock()
	pool.startSpare()
}

// startSpare is ensureSpare with pool.mu held. The spares start side by
// side.
func (pool *Pool) startSpare() {
	if pool.closed {
		return
	}
	want := pool.sparesWanted(time.Now())
	for n := len(pool.readySpares()) + len(pool.spareStarts); n < want; n++ {
		if !pool.canStart() {
			return
		}
		slot := pool.freeSlot()
		if slot < 0 {
			return
		}
		pool.startSpareIn(slot)
	}
}

// startSpareIn starts a spare in slot in the background. pool.mu is held.
func (pool *Pool) startSpareIn(slot int) {
	pool.starting[slot] = true
	s := &spareStart{claimed: make(chan struct{})}
	pool.spareStarts = append(pool.spareStarts, s)
	taken := pool.takenIdle
	if pool.takenRuns == 0 {
		taken = nil
	}
	pool.wg.Add(1)
	go func() {
		defer pool.wg.Done()
		if taken != nil {
			// Deferred while a newcomer's first run in a spare just
			// taken is under way (spareDefer).
			t := time.NewTimer(pool.spareDefer)
			select {
			case <-taken:
			case <-s.claimed:
			case <-t.C:
			case <-pool.stop:
			}
			t.Stop()
		}
		p, err := pool.spawnThen(slot, func(pid int) {
			pool.mu.Lock()
			defer pool.mu.Unlock()
			s.pid = pid
			if s.claim != nil {
				pool.favourStart(pid) // claimed before it ran
			}
		})
		pool.mu.Lock()
		delete(pool.starting, slot)
		if s.pid != 0 {
			if err != nil {
				pool.forgetStart(s.pid)
			} else {
				pool.startUp(s.pid, p.exited)
			}
		}
		if err != nil || pool.closed || slot >= len(pool.workers) {
			claimed := pool.settle(s, nil)
			pool.mu.Unlock()
			if claimed != nil {
				close(claimed) // its newcomer picks again
			}
			if err != nil {
				pool.logf("worker %d: spare failed to start: %v", slot, err)
			} else {
				p.kill("pool closed")
			}
			return
		}
		pool.workers[slot] = p
		claimed := pool.settle(s, p)
		pool.mu.Unlock()
		if claimed != nil {
			close(claimed)
		}
	}()
}

// trimSpares retires one spare above the number wanted, once there have
// been more than wanted for spareLinger (spareWindow; tests lower it): the
// spares a burst of newcomers called for go one a second once the burst
// is that old, and a pool whose tenants come and go around a multiple of
// spareEvery does not start and retire spares in turn. The memory loop
// calls it.
func (pool *Pool) trimSpares() {
	pool.mu.Lock()
	now := time.Now()
	spares := pool.readySpares()
	if pool.closed || len(spares) <= pool.sparesWanted(now) {
		pool.surplusSince = time.Time{}
		pool.mu.Unlock()
		return
	}
	if pool.surplusSince.IsZero() {
		pool.surplusSince = now
	}
	if now.Sub(pool.surplusSince) < pool.spareLinger {
		pool.mu.Unlock()
		return
	}
	victim := spares[len(spares)-1]
	pool.unroute(victim, "retired: more spares than the pool keeps")
	pool.mu.Unlock()
	victim.kill("retired: more spares than the pool keeps")
}
