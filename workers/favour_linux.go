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
	favourNice = 5
	favourFor  = 250 * time.Millisecond
)

// favours are the worker processes favoured now.
type favours struct {
	mu     sync.Mutex
	on     map[*process]*time.Timer // each with the timer that ends it
	denied bool                     // the kernel refused: nothing is tried again
	max    int                      // budgets.FavouredFirstRuns; tests change it
	bound  time.Duration            // favourFor; tests change it
	// base is the nice a worker goes back to: the gateway's own.
	base int
}

func newFavours() *favours {
	f := &favours{on: map[*process]*time.Timer{}, max: budgets.FavouredFirstRuns, bound: favourFor}
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

// favour favours p, when the kernel allows it and fewer than max are;
// the caller unfavours it once its run is answered.
func (pool *Pool) favour(p *process) {
	f := pool.favours
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.denied || len(f.on) >= f.max || f.on[p] != nil {
		return
	}
	err := unix.Setpriority(unix.PRIO_PGRP, p.pid, max(f.base-favourNice, -20))
	if errors.Is(err, unix.EPERM) || errors.Is(err, unix.EACCES) {
		f.denied = true
		pool.logf("a worker's first run is not favoured by the scheduler: the kernel refuses a nice below the gateway's (%v); CAP_SYS_NICE allows it", err)
		return
	}
	if err != nil {
		return // gone already (ESRCH)
	}
	f.on[p] = time.AfterFunc(f.bound, func() { pool.unfavour(p) })
}

// unfavour puts p back at the gateway's nice, if it is favoured.
func (pool *Pool) unfavour(p *process) {
	f := pool.favours
	f.mu.Lock()
	defer f.mu.Unlock()
	t := f.on[p]
	if t == nil {
		return
	}
	t.Stop()
	delete(f.on, p)
	select {
	case <-p.exited:
		// Reaped: its pid may be another's by now.
	default:
		unix.Setpriority(unix.PRIO_PGRP, p.pid, f.base)
	}
}
