package receipts

import (
	"context"
	"fmt"
	"sort"
	"time"

	"github.com/retainer-gw/retainer/budgets"
	"github.com/retainer-gw/retainer/store"
)

// Put and the writer: a receipt is readable from memory at once and
// committed in a batch shared with the receipts that came meanwhile,
// each tenant kept within its quota (oldest first), the receipts waiting
// on a store that is down held within a bound.

// commitEvery paces the writer: after a commit it waits out the rest of
// this interval before the next, so receipts that come meanwhile share one
// transaction. A lone receipt is written at once; under a stream of runs
// the writer commits at most 50 times a second instead of once per run.
// Why: each bbolt commit costs two fdatasyncs, ~0.4 ms of CPU here
// (capability's BenchmarkKVGroupCommit), and receipts share the file, and
// its one writer, with kv commits that visitors' responses wait for. With
// sequential computations, committing receipts one by one was half of the
// gateway's CPU (docs/history/performance-log.md). A crash loses at most the receipts
// of the last interval, as it could always lose those not yet written.
const commitEvery = 20 * time.Millisecond

// retryEvery is how soon the writer tries again after a failed commit
// (the store down): the waiting receipts are written once it is back,
// whether or not another receipt comes.
const retryEvery = time.Second

// writeLoop commits waiting receipts as they come, paced by commitEvery,
// and what is left when the store closes.
func (s *Store) writeLoop() {
	defer close(s.written)
	var retry <-chan time.Time
	for {
		select {
		case <-s.stop:
			s.flush()
			return
		case <-s.wake:
		case <-retry:
		}
		started := time.Now()
		retry = nil
		if !s.commit() {
			retry = time.After(retryEvery)
		}
		if rest := commitEvery - time.Since(started); rest > 0 {
			select {
			case <-s.stop:
				s.flush()
				return
			case <-time.After(rest):
			}
		}
	}
}

// flush writes every waiting receipt, with the deletes that keep each
// tenant within its quota, in one transaction (or as few as the store's
// limits allow). On failure they wait for the next one (a newer Put of
// the same key wins).
func (s *Store) flush() error {
	s.cmu.Lock()
	defer s.cmu.Unlock()
	return s.flushLocked(context.Background())
}

// flushLocked is flush, each store call within ctx; cmu is held.
func (s *Store) flushLocked(ctx context.Context) error {
	s.pmu.Lock()
	batch := s.pending
	if len(batch) == 0 {
		s.pmu.Unlock()
		return nil
	}
	s.pending, s.committing = map[string][]byte{}, batch
	s.order, s.waitingBytes = nil, 0
	s.pmu.Unlock()
	if s.onCommit != nil {
		s.onCommit(len(batch))
	}
	err := func() (err error) {
		defer func() {
			if r := recover(); r != nil {
				err = fmt.Errorf("receipts: commit failed: %v", r)
			}
		}()
		byTenant := map[string][]string{}
		for k := range batch {
			prefix := prefixOf([]byte(k))
			byTenant[prefix] = append(byTenant[prefix], k)
		}
		var ops []store.Op
		for prefix, keys := range byTenant {
			if err := s.countTenant(ctx, prefix); err != nil {
				return err
			}
			sort.Strings(keys) // oldest first
			for _, k := range keys {
				old, err := s.st.Get(ctx, table, []byte(k))
				if err != nil {
					return err
				}
				s.used[prefix] += int64(len(batch[k]) - len(old))
			}
			drop, err := s.overQuota(ctx, prefix, keys, batch)
			if err != nil {
				return err
			}
			for _, k := range keys {
				if !drop[k] {
					ops = append(ops, store.Put(table, []byte(k), batch[k]))
				}
			}
			for k := range drop {
				if _, new := batch[k]; !new {
					ops = append(ops, store.Delete(table, []byte(k)))
				}
			}
		}
		return store.CommitChunked(ctx, s.st, nil, ops)
	}()
	if err != nil {
		s.used = map[string]int64{} // counted again from the store
	}
	dropped := 0
	s.pmu.Lock()
	if err != nil {
		// Back to waiting, older than what came meanwhile.
		var back []string
		for k, v := range batch {
			if _, newer := s.pending[k]; !newer {
				s.pending[k] = v
				s.waitingBytes += int64(len(v))
				back = append(back, k)
			}
		}
		sort.Slice(back, func(i, j int) bool {
			return back[i][len(prefixOf([]byte(back[i]))):] < back[j][len(prefixOf([]byte(back[j]))):]
		})
		s.order = append(back, s.order...)
		dropped = s.trimLocked()
	}
	s.committing = nil
	s.pmu.Unlock()
	s.toldDropped(dropped)
	return err
}

// SetFailed sets what is told of each failed commit of waiting receipts
// (they wait for the next): the gateway logs it.
func (s *Store) SetFailed(f func(error)) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.failed = f
}

// commit is the writer's flush; a failure is told to SetFailed's function
// and answers false.
func (s *Store) commit() bool {
	err := s.flush()
	if err == nil {
		return true
	}
	s.mu.Lock()
	f := s.failed
	s.mu.Unlock()
	if f != nil {
		f(err)
	}
	return false
}

// countTenant counts what the tenant of prefix stores, once. cmu is held.
func (s *Store) countTenant(ctx context.Context, prefix string) error {
	if _, ok := s.used[prefix]; ok {
		return nil
	}
	var n int64
	err := s.st.Scan(ctx, table, store.Range{Prefix: []byte(prefix)}, func(_, v []byte) bool {
		n += int64(len(v))
		return true
	})
	if err == nil {
		s.used[prefix] = n
	}
	return err
}

// overQuota answers the receipts to drop, oldest first (ids are UUIDv7s:
// key order is time order), so that the tenant of prefix is within its
// quota once the batch's keys (sorted) are written: stored ones first,
// then the batch's own. cmu is held.
func (s *Store) overQuota(ctx context.Context, prefix string, keys []string, batch map[string][]byte) (map[string]bool, error) {
	drop := map[string]bool{}
	if s.used[prefix] <= s.tenantBytes {
		return drop, nil
	}
	err := s.st.Scan(ctx, table, store.Range{Prefix: []byte(prefix)}, func(k, v []byte) bool {
		if _, new := batch[string(k)]; !new {
			drop[string(k)] = true
			s.used[prefix] -= int64(len(v))
		}
		return s.used[prefix] > s.tenantBytes
	})
	for _, k := range keys {
		if s.used[prefix] <= s.tenantBytes {
			break
		}
		drop[k] = true
		s.used[prefix] -= int64(len(batch[k]))
	}
	return drop, err
}

// Put stores a receipt, cutting what does not fit the size bound. It is
// readable at once; the disk write follows (see Store).
func (s *Store) Put(r Receipt) error {
	data, err := fit(&r)
	if err != nil {
		return err
	}
	k := string(key(r.Tenant, r.ID))
	s.pmu.Lock()
	if old, ok := s.pending[k]; ok {
		s.waitingBytes -= int64(len(old))
	} else {
		s.order = append(s.order, k)
	}
	s.pending[k] = data
	s.waitingBytes += int64(len(data))
	n := s.trimLocked()
	s.pmu.Unlock()
	s.toldDropped(n)
	select {
	case s.wake <- struct{}{}:
	default:
	}
	return nil
}

// trimLocked drops the oldest waiting receipts while they are past
// budgets.ReceiptsWaitingBytes, and answers how many it dropped: with
// PostgreSQL unreachable, runs go on and their receipts wait in memory,
// which they would fill. pmu is held.
func (s *Store) trimLocked() int {
	n := 0
	for s.waitingBytes > s.waitingCap() && len(s.order) > 0 {
		k := s.order[0]
		s.order = s.order[1:]
		if v, ok := s.pending[k]; ok {
			delete(s.pending, k)
			s.waitingBytes -= int64(len(v))
			n++
		}
	}
	if len(s.order) > 2*len(s.pending)+64 {
		// Keys written or dropped meanwhile: the order is built again.
		kept := s.order[:0]
		for _, k := range s.order {
			if _, ok := s.pending[k]; ok {
				kept = append(kept, k)
			}
		}
		s.order = kept
	}
	return n
}

// waitingCap is the bound of the receipts waiting (tests lower it).
func (s *Store) waitingCap() int64 {
	if s.waitingMax > 0 {
		return s.waitingMax
	}
	return budgets.ReceiptsWaitingBytes
}

// toldDropped counts n dropped receipts and tells onDropped.
func (s *Store) toldDropped(n int) {
	if n == 0 {
		return
	}
	s.dropped.Add(int64(n))
	s.mu.Lock()
	f := s.onDropped
	s.mu.Unlock()
	if f != nil {
		f(n)
	}
}

// SetDropped sets what is told when waiting receipts are dropped past
// budgets.ReceiptsWaitingBytes: the gateway counts and logs them.
func (s *Store) SetDropped(f func(n int)) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.onDropped = f
}

// Dropped is how many waiting receipts were dropped so far.
func (s *Store) Dropped() int64 { return s.dropped.Load() }

// waiting is a receipt not yet on disk, if any.
func (s *Store) waiting(k []byte) ([]byte, bool) {
	s.pmu.Lock()
	defer s.pmu.Unlock()
	if v, ok := s.pending[string(k)]; ok {
		return v, true
	}
	v, ok := s.committing[string(k)]
	return v, ok
}
