package handles

import (
	"sync"
	"sync/atomic"

	"github.com/retainer-gw/retainer/fault"
	"github.com/retainer-gw/retainer/sandbox"
)

// maxHandleLogs is how many entries a handle's log keeps (docs/runtime.md).
const maxHandleLogs = 1000

// maxHandleLogBytes bounds a handle's log ring in message bytes (README.md, Caddyfile).
const maxHandleLogBytes = 1 << 20

// liveState is the in-memory side of a record: its invocations in flight,
// its one rebuild in flight, and the handle's log.
type liveState struct {
	inflight atomic.Int64 // invocations under way or waiting
	streams  atomic.Int64 // streamed responses being read (stream.go)

	mu         sync.Mutex // guards rebuilding, logs, logBytes
	rebuilding *rebuildFlight
	logs       []sandbox.LogEntry
	logBytes   int
}

// rebuildFlight is one detached rebuild; done closes when err is set.
type rebuildFlight struct {
	done chan struct{}
	err  error
}

// idle reports that nothing is under way for the handle.
func (ls *liveState) idle() bool {
	ls.mu.Lock()
	defer ls.mu.Unlock()
	return ls.inflight.Load() == 0 && ls.streams.Load() == 0 && ls.rebuilding == nil
}

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

// InProgress is every handle's invocations under way or waiting.
func (s *Store) InProgress() int64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	var n int64
	for _, ls := range s.live {
		n += ls.inflight.Load()
	}
	return n
}

// inProgress is a handle's invocations under way or waiting. s.mu is held.
func (s *Store) inProgress(id string) int64 {
	if ls := s.live[id]; ls != nil {
		return ls.inflight.Load()
	}
	return 0
}

func (r *Registry) appendLog(id string, e sandbox.LogEntry) {
	s := r.store
	ls := s.liveFor(id)
	if ls == nil {
		return
	}
	ls.mu.Lock()
	ls.logs = append(ls.logs, e)
	ls.logBytes += len(e.Message)
	drop := 0
	for len(ls.logs)-drop > maxHandleLogs || ls.logBytes > maxHandleLogBytes && len(ls.logs)-drop > 1 {
		ls.logBytes -= len(ls.logs[drop].Message)
		drop++
	}
	if drop > 0 {
		ls.logs = append([]sandbox.LogEntry(nil), ls.logs[drop:]...)
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
