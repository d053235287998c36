package workers

import (
	"errors"
	"sync"
	"time"

	"golang.org/x/sys/unix"

	"github.com/retainer-gw/retainer/budgets"
)

// A worker's first run is favoured by the scheduler (docs/decisions.md,
// "A worker's first run is favoured"). Under 200 tenants' load, with both
// cores saturated by the workers serving them, a new tenant's first deploy
// waited in its worker behind them: its bundle, its run and the wakes of
// the frames each way took 10-30 ms of wall time for ~3 ms of CPU. So
// while a cordoned worker serves its first run, its process group (the
// worker's every thread: it is a group of its own, spawn.go) runs
// favourNice nice steps ahead of the gateway's own, and goes back when the
// run is answered, or after the pool's favourFor, whichever is first.
//
// What a tenant can get of it: a worker's first run happens once in the
// worker's life, and a tenant's next deploys go to the workers it holds,
// so deploying again and again never favours anything; a new worker is
// the pool's to give (a newcomer's spare, a worker past a full one, within
// the tenant's share, or after its last was recycled idle). A run favoured
// that spins keeps it favourFor at most, and at most
// budgets.FavouredFirstRuns are favoured at once: past them a first run
// runs as every other. Nothing of it is the worker's to change (its seccomp
// filter refuses setpriority).
//
// Favouring asks the kernel for a lower nice than the gateway's, which
// takes CAP_SYS_NICE (or an RLIMIT_NICE that allows it); where the
// kernel refuses, the pool says so once in its log and favours nothing.
const (
	favourNice     = 5
	favourFor      = 250 * time.Millisecond
	favourStartFor = 2 * time.Second
)

// favours are the worker processes favoured now, by pid.
type favours struct {
	mu     sync.Mutex
	on     map[int]*favoured
	denied bool          // the kernel refused: nothing is tried again
	max    int           // budgets.FavouredFirstRuns; tests change it
	bound  time.Duration // favourFor; tests change it
	// base is the nice a worker goes back to: the gateway's own.
	base int
}

// favoured is one process favoured: the timer that ends it, and the
// channel closed once the process is reaped (nil while it starts).
type favoured struct {
	timer  *time.Timer
	exited <-chan struct{}
}

func newFavours() *favours {
	f := &favours{on: map[int]*favoured{}, max: budgets.FavouredFirstRuns, bound: favourFor}
	// The raw system call answers 20 - nice.
	if raw, err := unix.Getpriority(unix.PRIO_PROCESS, 0); err == nil {
		f.base = 20 - raw
	}
	return f
}

// firstRun marks that p was sent a run, and says whether it was its
// first.
func (p *process) firstRun() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	first := !p.ranOnce
	p.ranOnce = true
	return first
}

// favour favours p for the pool's bound, when the kernel allows it and
// fewer than max are; the caller unfavours it once its run is answered.
// A spare favoured while it started (favourStart) keeps its favour, for
// the bound from now.
func (pool *Pool) favour(p *process) {
	pool.favourPID(p.pid, p.exited, pool.favours.bound)
}

// favourPID favours process pid for bound (exited: closed once it is
// reaped; nil while it starts).
func (pool *Pool) favourPID(pid int, exited <-chan struct{}, bound time.Duration) {
	f := pool.favours
	f.mu.Lock()
	defer f.mu.Unlock()
	if on := f.on[pid]; on != nil {
		on.timer.Stop()
		on.timer = time.AfterFunc(bound, func() { pool.unfavourPID(pid) })
		if exited != nil {
			on.exited = exited
		}
		return
	}
	if f.denied || len(f.on) >= f.max {
		return
	}
	err := unix.Setpriority(unix.PRIO_PGRP, pid, max(f.base-favourNice, -20))
	if errors.Is(err, unix.EPERM) || errors.Is(err, unix.EACCES) {
		f.denied = true
		pool.logf("a worker's first run is not favoured by the scheduler: the kernel refuses a nice below the gateway's (%v); CAP_SYS_NICE allows it", err)
		return
	}
	if err != nil {
		return // gone already (ESRCH)
	}
	f.on[pid] = &favoured{timer: time.AfterFunc(bound, func() { pool.unfavourPID(pid) }), exited: exited}
}

// unfavour puts p back at the gateway's nice, if it is favoured.
func (pool *Pool) unfavour(p *process) { pool.unfavourPID(p.pid) }

func (pool *Pool) unfavourPID(pid int) {
	f := pool.favours
	f.mu.Lock()
	defer f.mu.Unlock()
	on := f.on[pid]
	if on == nil {
		return
	}
	on.timer.Stop()
	delete(f.on, pid)
	if on.exited == nil {
		return // a start that failed: the process is gone (forgetStart)
	}
	select {
	case <-on.exited:
		// Reaped: its pid may be another's by now.
	default:
		unix.Setpriority(unix.PRIO_PGRP, pid, f.base)
	}
}

// favourStart favours a spare being started, pid, that a newcomer has
// claimed and waits for (spares.go): under 200 tenants' load a start took
// 0.5-1.4 s, and a burst of newcomers past the spares kept waited for it.
// What runs is the gateway's worker code, never a tenant's, until the
// newcomer's first run, which then has its own bound (favour). pool.mu
// may be held.
func (pool *Pool) favourStart(pid int) {
	pool.favourPID(pid, nil, favourStartFor)
}

// startUp says a spare favoured while it started is up (exited: its
// process's), so that its favour ends as any other's.
func (pool *Pool) startUp(pid int, exited <-chan struct{}) {
	f := pool.favours
	f.mu.Lock()
	defer f.mu.Unlock()
	if on := f.on[pid]; on != nil {
		on.exited = exited
	}
}

// forgetStart drops the favour of a start that failed (its process is
// gone; nothing is asked of the kernel).
func (pool *Pool) forgetStart(pid int) {
	f := pool.favours
	f.mu.Lock()
	defer f.mu.Unlock()
	if on := f.on[pid]; on != nil && on.exited == nil {
		on.timer.Stop()
		delete(f.on, pid)
	}
}
