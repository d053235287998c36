package logstore

// Tails: a handle's entries as they happen, to readers who may be slow
// (each tail holds at most its bound; what it drops is counted).

import (
	"sync/atomic"

	"github.com/retainer-gw/retainer/budgets"
	"github.com/retainer-gw/retainer/fault"
)

// Tail is a live follower of one handle's log.
type Tail struct {
	C    chan Entry    // entries as they are appended
	Done chan struct{} // closed when the store closes or the handle ends
	// Reason, once Done is closed, says why the tail ended ("" when the
	// store closed: the gateway stops or reloads).
	Reason  string
	held    atomic.Int64 // bytes of the entries in C
	s       *Store
	tenant  string
	key     string
	dropped int64 // under s.mu
	ended   bool
}

func (t *Tail) send(e Entry) {
	n := entrySize(e)
	if t.held.Load()+n > tailBytes {
		t.dropped++
		return
	}
	select {
	case t.C <- e:
		t.held.Add(n)
	default:
		t.dropped++
	}
}

// entrySize is what an entry waiting for a tail is counted as.
func entrySize(e Entry) int64 { return int64(len(e.Message) + len(e.Method) + len(e.URL) + 64) }

// Took says the reader has taken e from C (it no longer counts against
// the bytes the tail may be behind).
func (t *Tail) Took(e Entry) { t.held.Add(-entrySize(e)) }

func (t *Tail) end(reason string) {
	if !t.ended {
		t.ended, t.Reason = true, reason
		close(t.Done)
	}
}

// EndTails ends every tail of id's log, saying why (the handle ended), and
// frees their places in the tenant's count at once.
func (s *Store) EndTails(tenant, id, reason string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for t := range s.tails[tenant+"\x00"+id] {
		t.closeLocked()
		t.end(reason)
	}
}

// Dropped answers how many entries the tail lost since it was last asked.
func (t *Tail) Dropped() int64 {
	t.s.mu.Lock()
	defer t.s.mu.Unlock()
	n := t.dropped
	t.dropped = 0
	return n
}

// Close ends the tail.
func (t *Tail) Close() {
	t.s.mu.Lock()
	defer t.s.mu.Unlock()
	t.closeLocked()
	t.end("")
}

// closeLocked forgets the tail; s.mu is held.
func (t *Tail) closeLocked() {
	s := t.s
	if set := s.tails[t.key]; set[t] {
		delete(set, t)
		if len(set) == 0 {
			delete(s.tails, t.key)
		}
		if s.tailCount[t.tenant]--; s.tailCount[t.tenant] <= 0 {
			delete(s.tailCount, t.tenant)
		}
	}
}

// Tail follows id's log from now on; past budgets.LogTailsPerTenant tails of the
// tenant at once it answers QUOTA_EXCEEDED.
func (s *Store) Tail(tenant, id string) (*Tail, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return nil, fault.New(fault.Overloaded, "The gateway is stopping.")
	}
	if s.tailCount[tenant] >= budgets.LogTailsPerTenant {
		return nil, fault.New(fault.QuotaExceeded, "A tenant may hold %d tails at once; close one first.", budgets.LogTailsPerTenant)
	}
	t := &Tail{C: make(chan Entry, tailBuffer), Done: make(chan struct{}), s: s, tenant: tenant, key: tenant + "\x00" + id}
	if s.tails[t.key] == nil {
		s.tails[t.key] = map[*Tail]bool{}
	}
	s.tails[t.key][t] = true
	s.tailCount[tenant]++
	return t, nil
}
