package receipts

import (
	"context"
	"encoding/json"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/retainer-gw/retainer/budgets"
	"github.com/retainer-gw/retainer/store"
)

// The Store: what it holds, its opening (the first layout's keys dropped),
// its quota and retention settings, the hourly sweep, and its close.

// Store keeps receipts in a store (package store) it does not own.
// Receipts are written without fences: each is a new key (a UUIDv7) that no
// other writer makes, so any gateway may write any tenant's.
//
// Put does not wait for the disk: a receipt is readable at once (from
// memory) and a writer goroutine commits every receipt waiting in one
// transaction, so a run's answer does not pay an fsync of its own and
// concurrent runs share one. Listings first commit what is waiting.
type Store struct {
	st        store.Store
	now       func() time.Time
	mu        sync.Mutex // guards retention, failed
	retention time.Duration
	failed    func(error) // told of each commit that failed (SetFailed)
	stop      chan struct{}
	done      chan struct{}

	pmu        sync.Mutex        // guards pending, committing, waitingBytes, order
	pending    map[string][]byte // key → receipt JSON, not yet written
	committing map[string][]byte // the batch being written now
	// The receipts waiting are held within budgets.ReceiptsWaitingBytes
	// (the store down: PostgreSQL unreachable); past it the oldest are
	// dropped, counted (dropped) and told (onDropped).
	waitingBytes int64
	order        []string // pending's keys, oldest first (some gone since)
	dropped      atomic.Int64
	onDropped    func(n int)
	cmu          sync.Mutex // serializes commits
	wake         chan struct{}
	written      chan struct{} // closed when the writer has stopped
	onCommit     func(n int)   // tests: called with each commit's size

	// tenantBytes is each tenant's quota of stored receipts (TenantBytes
	// unless SetTenantBytes said otherwise); used is what each tenant
	// stores, counted once per tenant the first time a commit touches it,
	// then kept by the commits (under cmu).
	tenantBytes int64
	used        map[string]int64
	waitingMax  int64 // tests: the bound of the receipts waiting (0: budgets.ReceiptsWaitingBytes)
}

// SetTenantBytes sets the per-tenant quota of stored receipts (at least
// one receipt's budgets.ReceiptBytes); the next commit of a tenant over it drops its
// oldest receipts.
func (s *Store) SetTenantBytes(n int64) {
	s.cmu.Lock()
	defer s.cmu.Unlock()
	s.tenantBytes = max(n, budgets.ReceiptBytes)
}

// Open drops the first layout's keys, sweeps once, and starts the hourly
// retention sweep. Close stops it; the store stays open.
func Open(st store.Store, retention time.Duration, now func() time.Time) (*Store, error) {
	if now == nil {
		now = time.Now
	}
	var old []store.Op
	if err := st.Scan(context.Background(), oldTable, store.Range{KeysOnly: true}, func(k, _ []byte) bool {
		old = append(old, store.Delete(oldTable, store.Copy(k)))
		return true
	}); err != nil {
		return nil, fmt.Errorf("receipts: %w", err)
	}
	if err := store.CommitChunked(context.Background(), st, nil, old); err != nil {
		return nil, fmt.Errorf("receipts: %w", err)
	}
	s := &Store{st: st, now: now, retention: retention, stop: make(chan struct{}), done: make(chan struct{}),
		pending: map[string][]byte{}, wake: make(chan struct{}, 1), written: make(chan struct{}),
		tenantBytes: TenantBytes, used: map[string]int64{}}
	s.Sweep()
	go s.sweepLoop()
	go s.writeLoop()
	return s, nil
}

// SetRetention changes the retention (a config reload).
func (s *Store) SetRetention(d time.Duration) {
	s.mu.Lock()
	s.retention = d
	s.mu.Unlock()
}

// Close stops the sweep and writes what is waiting.
func (s *Store) Close() {
	select {
	case <-s.stop:
	default:
		close(s.stop)
	}
	<-s.done
	<-s.written
}

func (s *Store) sweepLoop() {
	defer close(s.done)
	t := time.NewTicker(time.Hour)
	defer t.Stop()
	for {
		select {
		case <-s.stop:
			return
		case <-t.C:
		}
		func() {
			defer func() { recover() }()
			s.Sweep()
		}()
	}
}

// Sweep deletes receipts older than the retention.
func (s *Store) Sweep() int {
	s.flush() // what waits is swept like the rest
	s.mu.Lock()
	retention := s.retention
	s.mu.Unlock()
	if retention <= 0 {
		return 0
	}
	cutoff := s.now().Add(-retention)
	s.cmu.Lock()
	defer s.cmu.Unlock()
	s.used = map[string]int64{} // counted again from the store
	var gone []store.Op
	s.st.Scan(context.Background(), table, store.Range{}, func(k, v []byte) bool {
		var r struct {
			Timing Timing `json:"timing"`
		}
		if json.Unmarshal(v, &r) == nil && r.Timing.Received.Before(cutoff) {
			gone = append(gone, store.Delete(table, store.Copy(k)))
		}
		return true
	})
	// Chunked: a sweep stopped half done is done again by the next.
	if store.CommitChunked(context.Background(), s.st, nil, gone) != nil {
		return 0
	}
	return len(gone)
}
