package workers

// What the pool tells an operator about its workers (GET /retainer/workers)
// and the operator's hand on them: a worker's kill, a handle's worker.

import (
	"fmt"
)

// WorkerStatus is one worker's state for health checks.
type WorkerStatus struct {
	Index    int    `json:"index"`
	PID      int    `json:"pid,omitempty"`
	State    string `json:"state"` // "up", "starting" or (cordoned) "empty"
	Isolates int    `json:"isolates"`
	Queue    int    `json:"queue"`
	// Tenant is the tenant a cordoned worker hosts ("" for the spare). It
	// is shown on Caddy's admin endpoint only, never on /health.
	Tenant string `json:"-"`
	// RSS is the worker's resident memory in bytes (admin endpoint only).
	RSS int64 `json:"-"`
	// CPU is the CPU a pinned worker runs on, -1 when it is not pinned
	// (admin endpoint only).
	CPU int `json:"-"`
	// PSS and Private are its own memory as last measured, in bytes
	// (cordoned pools only; admin endpoint only).
	PSS, Private int64 `json:"-"`
}

// Status reports every configured worker.
func (pool *Pool) Status() []WorkerStatus {
	pool.mu.Lock()
	workers := append([]*process(nil), pool.workers...)
	starting := map[int]bool{}
	for i := range pool.starting {
		starting[i] = true
	}
	pool.mu.Unlock()
	out := make([]WorkerStatus, len(workers))
	for i, p := range workers {
		out[i] = WorkerStatus{Index: i, State: "starting", CPU: -1}
		if pool.cordoned() && p == nil && !starting[i] {
			out[i].State = "empty"
		}
		if p != nil && p.alive() {
			retained, inflight := p.load()
			out[i] = WorkerStatus{Index: i, PID: p.pid, State: "up", Isolates: retained, Queue: inflight, Tenant: p.owner(), RSS: rss(p.pid), CPU: pool.cpus.cpuOf(p),
				PSS: p.mem.pss.Load(), Private: p.mem.private.Load()}
		}
	}
	return out
}

// Restarts counts replacement workers started so far.
func (pool *Pool) Restarts() int {
	pool.mu.Lock()
	defer pool.mu.Unlock()
	return pool.restarts
}

// KillWorker kills worker index (operations and tests).
func (pool *Pool) KillWorker(index int) error {
	pool.mu.Lock()
	var p *process
	if index >= 0 && index < len(pool.workers) {
		p = pool.workers[index]
	}
	pool.mu.Unlock()
	if p == nil {
		return fmt.Errorf("worker %d is not up", index)
	}
	p.mu.Lock()
	p.operatorKill = true
	p.mu.Unlock()
	p.kill("asked to")
	<-p.exited
	return nil
}

// WorkerOf is the index of the worker holding id, or -1.
func (pool *Pool) WorkerOf(id string) int {
	pool.mu.Lock()
	defer pool.mu.Unlock()
	if p := pool.where[id]; p != nil {
		return p.index
	}
	return -1
}
