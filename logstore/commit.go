package logstore

// The writer's commits: a batch of waiting entries written, the tenant's
// quota held by dropping its oldest, the retention sweep.

import (
	"context"
	"encoding/binary"
	"fmt"

	"github.com/retainer-gw/retainer/budgets"
	"github.com/retainer-gw/retainer/store"
)

// batchLocked is the entries of the handles waiting, each handle that lost
// entries followed by a system entry that says how many. s.mu is held.
func (s *Store) batchLocked(waiting map[string]*pendingHandle) []pendingEntry {
	var batch []pendingEntry
	for _, h := range waiting {
		batch = append(batch, h.entries...)
		if h.lost > 0 {
			e := Entry{Level: "system", Message: fmt.Sprintf("%d log entries of this handle were left out of the stored log: "+
				"more than %d KiB of them waited to be written at once (its tails saw them). Log less, or less at a time.", h.lost, budgets.LogPendingPerHandle>>10)}
			if v, err := encodeStored(e); err == nil {
				s.seq++
				batch = append(batch, pendingEntry{tenant: h.tenant, id: h.id, when: unixNano(s.now()), seq: s.seq, value: v})
			}
		}
	}
	return batch
}

// commit writes batch in one transaction (chunked when large), then drops
// the oldest entries of each tenant it touched that is over quota: of
// the kind, request or console, that holds more than half of it first.
func (s *Store) commit(batch []pendingEntry, quota int64) {
	if len(batch) == 0 {
		return
	}
	ctx := context.Background()
	ops := make([]store.Op, 0, 2*len(batch))
	added := map[string]used{}
	for _, p := range batch {
		hk := handleKey(p.tenant, p.id, p.when, p.seq)
		size := int64(len(hk) + len(p.value))
		order := byTenant
		a := added[p.tenant]
		if p.request {
			order = requestsByTenant
			a.requests += size
		} else {
			a.console += size
		}
		added[p.tenant] = a
		ops = append(ops, store.Put(handles, hk, p.value), store.Put(order, tenantKey(p.tenant, p.when, p.seq), tenantValue(size, p.id)))
	}
	if err := store.CommitChunked(ctx, s.st, nil, ops); err != nil {
		return // lost, as entries not yet written are at a crash
	}
	for tenant, a := range added {
		u, ok := s.used[tenant]
		if !ok {
			// First touch: what is stored now, this batch included.
			u = used{s.countIn(ctx, byTenant, tenant), s.countIn(ctx, requestsByTenant, tenant)}
		} else {
			u.console += a.console
			u.requests += a.requests
		}
		if over := u.console + u.requests - quota; over > 0 {
			// Request entries go first while they hold more than half.
			if extra := min(over, u.requests-quota/2); extra > 0 {
				gone := s.drop(ctx, requestsByTenant, tenant, extra)
				u.requests -= gone
				over -= gone
			}
			if over > 0 {
				gone := s.drop(ctx, byTenant, tenant, over)
				u.console -= gone
				over -= gone
			}
			if over > 0 {
				u.requests -= s.drop(ctx, requestsByTenant, tenant, over)
			}
		}
		s.used[tenant] = u
	}
}

// count is what tenant stores.
func (s *Store) count(ctx context.Context, tenant string) int64 {
	return s.countIn(ctx, byTenant, tenant) + s.countIn(ctx, requestsByTenant, tenant)
}

// countIn is what tenant stores of the kind order lists.
func (s *Store) countIn(ctx context.Context, order, tenant string) int64 {
	var n int64
	s.st.Scan(ctx, order, store.Range{Prefix: lp(nil, tenant)}, func(_, v []byte) bool {
		if size, _, ok := parseTenantValue(v); ok {
			n += size
		}
		return true
	})
	return n
}

// drop deletes tenant's oldest entries of the kind order lists until at
// least n bytes went, and answers how many did.
func (s *Store) drop(ctx context.Context, order, tenant string, n int64) int64 {
	var ops []store.Op
	var gone int64
	s.st.Scan(ctx, order, store.Range{Prefix: lp(nil, tenant)}, func(k, v []byte) bool {
		size, id, ok := parseTenantValue(v)
		ops = append(ops, store.Delete(order, store.Copy(k)))
		if ok {
			when, seq := tenantKeyTime(k)
			ops = append(ops, store.Delete(handles, handleKey(tenant, id, when, seq)))
			gone += size
		}
		return gone < n
	})
	if store.CommitChunked(ctx, s.st, nil, ops) != nil {
		return 0
	}
	return gone
}

// Sweep deletes every entry older than the retention.
func (s *Store) Sweep() {
	s.cmu.Lock()
	defer s.cmu.Unlock()
	s.mu.Lock()
	cutoff := unixNano(s.now().Add(-s.retention))
	s.mu.Unlock()
	for _, order := range []string{byTenant, requestsByTenant} {
		s.sweep(order, cutoff)
	}
}

// sweep deletes the entries order lists that are older than cutoff.
func (s *Store) sweep(order string, cutoff uint64) {
	ctx := context.Background()
	var from []byte
	for {
		// The next tenant with entries, then its entries before the cutoff.
		var tenant string
		found := false
		s.st.Scan(ctx, order, store.Range{From: from, Limit: 1}, func(k, _ []byte) bool {
			tenant, found = parseTenant(k)
			return false
		})
		if !found {
			return
		}
		prefix := lp(nil, tenant)
		var ops []store.Op
		var gone int64
		s.st.Scan(ctx, order, store.Range{Prefix: prefix, To: binary.BigEndian.AppendUint64(append([]byte{}, prefix...), cutoff)}, func(k, v []byte) bool {
			ops = append(ops, store.Delete(order, store.Copy(k)))
			if size, id, ok := parseTenantValue(v); ok {
				when, seq := tenantKeyTime(k)
				ops = append(ops, store.Delete(handles, handleKey(tenant, id, when, seq)))
				gone += size
			}
			return true
		})
		if store.CommitChunked(ctx, s.st, nil, ops) == nil {
			if u, ok := s.used[tenant]; ok {
				if order == requestsByTenant {
					u.requests = max(u.requests-gone, 0)
				} else {
					u.console = max(u.console-gone, 0)
				}
				s.used[tenant] = u
			}
		}
		from = append(prefix, 0xff)
	}
}
