package handles

import (
	"fmt"
	"sync"
	"sync/atomic"
	"time"
	"unicode/utf8"

	"github.com/retainer-gw/retainer/budgets"
	"github.com/retainer-gw/retainer/fault"
	"github.com/retainer-gw/retainer/program"
)

// logEntryOverhead is what an entry holds besides its texts: its time and
// two string headers.
const logEntryOverhead = 64

func logEntryBytes(e program.LogEntry) int {
	return len(e.Message) + len(e.Level) + logEntryOverhead
}

// liveState is the in-memory side of a record: its invocations in flight,
// its one rebuild in flight, and the handle's log.
type liveState struct {
	inflight atomic.Int64 // invocations under way or waiting
	streams  atomic.Int64 // streamed responses being read (stream.go)
	// kvUnanswered is when (Unix ns) a kv call of the handle last failed
	// for want of the store (OVERLOADED): a handler that throws after it
	// answers 503, not 500 (invoke.go).
	kvUnanswered atomic.Int64

	mu         sync.Mutex // guards rebuilding, logs, logBytes
	rebuilding *rebuildFlight
	logs       logRing
}

// logRing is a handle's log in memory: its newest entries within
// budgets.HandleLogEntries and budgets.HandleLogBytes, the oldest dropped first and
// counted, for the note that takes their place.
type logRing struct {
	entries   []program.LogEntry // entries[head:] are kept
	head      int
	bytes     int // logEntryBytes of the kept entries
	dropped   int
	droppedAt time.Time // the newest dropped entry's
}

// add keeps e, dropping the oldest entries past the bounds; an entry over
// the byte bound on its own is cut to fit.
func (l *logRing) add(e program.LogEntry) {
	if logEntryBytes(e) > budgets.HandleLogBytes {
		e.Message = cutLogMessage(e.Message, budgets.HandleLogBytes-len(e.Level)-logEntryOverhead-128)
	}
	l.entries = append(l.entries, e)
	l.bytes += logEntryBytes(e)
	for len(l.entries)-l.head > budgets.HandleLogEntries || l.bytes > budgets.HandleLogBytes {
		old := l.entries[l.head]
		l.bytes -= logEntryBytes(old)
		l.dropped++
		l.droppedAt = old.Time
		l.entries[l.head] = program.LogEntry{} // its texts are let go
		l.head++
	}
	if l.head >= 64 && l.head >= len(l.entries)/2 {
		n := copy(l.entries, l.entries[l.head:])
		clear(l.entries[n:])
		l.entries, l.head = l.entries[:n], 0
	}
}

// list is the log, oldest first, after a note of the entries dropped.
func (l *logRing) list() []program.LogEntry {
	kept := l.entries[l.head:]
	out := make([]program.LogEntry, 0, len(kept)+1)
	if l.dropped > 0 {
		out = append(out, program.LogEntry{Time: l.droppedAt, Level: "system",
			Message: fmt.Sprintf("[log truncated: a handle's log keeps its newest %d entries or %d KiB; %d older entries were dropped]", budgets.HandleLogEntries, budgets.HandleLogBytes>>10, l.dropped)})
	}
	return append(out, kept...)
}

// cutLogMessage keeps the first n bytes of s (on a rune boundary) and
// says so.
func cutLogMessage(s string, n int) string {
	for n > 0 && !utf8.RuneStart(s[n]) {
		n--
	}
	return s[:n] + fmt.Sprintf("\n[entry cut: a handle's log keeps %d KiB; %d bytes in all]", budgets.HandleLogBytes>>10, len(s))
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

func (r *Registry) appendLog(id string, e program.LogEntry) {
	s := r.store
	ls := s.liveFor(id)
	if ls == nil {
		return
	}
	ls.mu.Lock()
	ls.logs.add(e)
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
	r.appendLog(id, program.LogEntry{Time: r.store.opts.Now(), Level: "system", Message: msg})
}

// Logs is the tenant's handle's log, oldest first.
func (r *Registry) Logs(tenant, id string) ([]program.LogEntry, error) {
	if _, err := r.owned(tenant, id); err != nil {
		return nil, err
	}
	ls := r.store.liveFor(id)
	if ls == nil {
		return nil, fault.Closed(id)
	}
	ls.mu.Lock()
	defer ls.mu.Unlock()
	return ls.logs.list(), nil
}

// Request is one invocation as a handle's stored log records it
// (docs/logs.md): the request's method and URL, the answer's status (a
// fault's HTTP status when it failed) and the wall time to the answer.
type Request struct {
	Time       time.Time
	Method     string
	URL        string
	Status     int
	DurationMs float64
	// Bytes is the answer's body when it came whole (a streamed one's is
	// counted by whoever relays it).
	Bytes int64
	// CPUMs is the isolate's CPU time the invocation was charged
	// (sandbox's threadhold.go), at most its DurationMs.
	CPUMs float64
}
