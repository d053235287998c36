package handles

import (
	"context"
	"sync"
	"sync/atomic"

	"github.com/retainer-gw/retainer/fault"
	"github.com/retainer-gw/retainer/sandbox"
)

// maxHandleLogs is how many entries a handle's log keeps (SPEC §1).
const maxHandleLogs = 1000

// liveState is the in-memory side of a record: the invocation queue and the
// handle's log.
type liveState struct {
	queue    fifo         // exclusive: held while the isolate is rebuilt
	inflight atomic.Int64 // invocations under way or waiting

	mu   sync.Mutex // guards logs
	logs []sandbox.LogEntry
}

// idle reports that nothing is under way for the handle.
func (ls *liveState) idle() bool { return ls.inflight.Load() == 0 && ls.queue.idle() }

// liveFor returns id's live state, creating it; nil once the handle ended.
func (s *Store) liveFor(id string) *liveState {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.records[id] == nil {
		return nil
	}
	ls := s.live[id]
	if ls == nil {
		ls = &liveState{}
		s.live[id] = ls
	}
	return ls
}

func (r *Registry) appendLog(id string, e sandbox.LogEntry) {
	s := r.store
	ls := s.liveFor(id)
	if ls == nil {
		return
	}
	ls.mu.Lock()
	ls.logs = append(ls.logs, e)
	if len(ls.logs) > maxHandleLogs {
		ls.logs = append([]sandbox.LogEntry(nil), ls.logs[len(ls.logs)-maxHandleLogs:]...)
	}
	ls.mu.Unlock()
	if s.opts.OnLog != nil {
		s.mu.Lock()
		tenant := ""
		if rec := s.records[id]; rec != nil {
			tenant = rec.Tenant
		}
		s.mu.Unlock()
		s.opts.OnLog(r.name, id, tenant, e)
	}
}

// systemLog writes the gateway's own entry into a handle's log.
func (r *Registry) systemLog(id, msg string) {
	r.appendLog(id, sandbox.LogEntry{Time: r.store.opts.Now(), Level: "system", Message: msg})
}

// Logs is the tenant's handle's log, oldest first.
func (r *Registry) Logs(tenant, id string) ([]sandbox.LogEntry, error) {
	if _, err := r.owned(tenant, id); err != nil {
		return nil, err
	}
	ls := r.store.liveFor(id)
	if ls == nil {
		return nil, fault.Closed(id)
	}
	ls.mu.Lock()
	defer ls.mu.Unlock()
	return append([]sandbox.LogEntry{}, ls.logs...), nil
}

// fifo is a lock handed out in arrival order, with a bounded wait.
type fifo struct {
	mu      sync.Mutex // guards busy, waiters
	busy    bool
	waiters []chan struct{}
}

func (q *fifo) acquire(ctx context.Context, max int) error {
	q.mu.Lock()
	if !q.busy {
		q.busy = true
		q.mu.Unlock()
		return nil
	}
	if len(q.waiters) >= max {
		q.mu.Unlock()
		return fault.Overload()
	}
	ch := make(chan struct{})
	q.waiters = append(q.waiters, ch)
	q.mu.Unlock()
	select {
	case <-ch:
		return nil
	case <-ctx.Done():
		q.mu.Lock()
		for i, w := range q.waiters {
			if w == ch {
				q.waiters = append(q.waiters[:i], q.waiters[i+1:]...)
				q.mu.Unlock()
				return ctx.Err()
			}
		}
		q.mu.Unlock()
		// Handed the lock while giving up: pass it on.
		q.release()
		return ctx.Err()
	}
}

func (q *fifo) release() {
	q.mu.Lock()
	defer q.mu.Unlock()
	if len(q.waiters) > 0 {
		ch := q.waiters[0]
		q.waiters = q.waiters[1:]
		close(ch)
		return
	}
	q.busy = false
}

func (q *fifo) idle() bool {
	q.mu.Lock()
	defer q.mu.Unlock()
	return !q.busy && len(q.waiters) == 0
}
