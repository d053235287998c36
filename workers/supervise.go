package workers

// Supervision: a worker that died is accounted for and replaced; the pool
// is resized when the operator's configuration changes.

import (
	"time"
)

// died handles a worker's death: its records go, the handles layer hears
// what was lost, and a replacement starts with backoff.
func (pool *Pool) died(p *process, c Crash) {
	pool.cpus.forget(p)
	if hc := pool.cfg.HostCache; hc != nil {
		hc.Gone(p)
	}
	pool.mu.Lock()
	for _, id := range c.Lost {
		if pool.where[id] == p {
			delete(pool.where, id)
		}
	}
	closed := pool.closed
	current := p.index < len(pool.workers) && pool.workers[p.index] == p
	if current {
		pool.workers[p.index] = nil
	}
	pool.mu.Unlock()
	if closed {
		return
	}
	if !current {
		// Retired by Resize: its isolates are rebuilt elsewhere on their
		// next request; nobody was at fault, so nobody is a suspect.
		p.mu.Lock()
		why := p.retired
		p.mu.Unlock()
		if why == "" {
			why = "retired"
		}
		pool.logf("worker %d (pid %d) %s; %d isolates will be rebuilt on their next request", c.Worker, c.PID, why, len(c.Lost))
		if f := pool.cfg.OnCrash; f != nil {
			f(Crash{Worker: c.Worker, PID: c.PID, Lost: c.Lost, Reason: why})
		}
		if pool.cordoned() {
			pool.ensureSpare()
		}
		return
	}
	pool.logf("worker %d (pid %d) died (%s); %d isolates lost, %d running", c.Worker, c.PID, c.Reason, len(c.Lost), len(c.Suspects))
	if f := pool.cfg.OnCrash; f != nil {
		f(c)
	}
	if pool.cordoned() {
		// The slot stays empty until a tenant needs it; the spare is kept.
		pool.ensureSpare()
		return
	}
	// The replacement is counted under the lock that Shutdown sets closed
	// under, so Shutdown's Wait can never start before this Add (the race
	// detector caught a worker dying while the pool shut down).
	pool.mu.Lock()
	if pool.closed {
		pool.mu.Unlock()
		return
	}
	pool.wg.Add(1)
	pool.mu.Unlock()
	go pool.replace(p.index)
}

func (pool *Pool) replace(index int) {
	defer pool.wg.Done()
	backoff := 50 * time.Millisecond
	for {
		p, err := pool.spawn(index)
		if err == nil {
			pool.mu.Lock()
			if pool.closed || index >= len(pool.workers) {
				pool.mu.Unlock()
				p.kill("pool closed or resized")
				return
			}
			pool.workers[index] = p
			pool.restarts++
			pool.mu.Unlock()
			return
		}
		pool.logf("worker %d: replacement failed: %v (next try in %v)", index, err, backoff)
		select {
		case <-pool.stop:
			return
		case <-time.After(backoff):
		}
		if backoff *= 2; backoff > 5*time.Second {
			backoff = 5 * time.Second
		}
	}
}

// initialSlots is how many worker slots a pool starts with: every worker
// of a shared pool, the spare of a cordoned one (its slots fill, and with
// `workers auto` grow, as tenants need them).
func initialSlots(cfg Config) int {
	if cfg.Isolation == IsolationTenant && cfg.Workers == 0 {
		return 1
	}
	return cfg.Workers
}

// Resize applies a changed number of workers or isolates per worker (a
// config reload): extra workers start; surplus ones are retired one at a
// time, and the isolates they held are rebuilt lazily elsewhere. A
// cordoned pool takes 0 for `workers auto`.
func (pool *Pool) Resize(workers, isolatesPerWorker int) {
	if workers < 0 || isolatesPerWorker <= 0 || workers == 0 && !pool.cordoned() {
		return
	}
	pool.mu.Lock()
	if pool.closed {
		pool.mu.Unlock()
		return
	}
	pool.cfg.IsolatesPerWorker = isolatesPerWorker
	pool.cfg.Workers = workers
	old, target := len(pool.workers), workers
	if workers == 0 {
		target = old // auto: slots grow as needed, never retired here
	}
	var retire []*process
	if target > old {
		for i := old; i < target; i++ {
			pool.workers = append(pool.workers, nil)
			if !pool.cordoned() { // cordoned slots fill as tenants need them
				pool.wg.Add(1)
				go pool.replace(i)
			}
		}
	} else if target < old {
		for i, p := range pool.workers[target:] {
			if p != nil {
				retire = append(retire, p)
			}
			delete(pool.starting, target+i)
		}
		pool.workers = pool.workers[:target]
	}
	pool.mu.Unlock()
	for _, p := range retire {
		p.kill("retired: the configuration has fewer workers")
		<-p.exited
	}
}
