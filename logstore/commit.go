package logstore

// The writer's commits: each handle's waiting page written, the tenant's
// quota held by dropping its oldest, the retention sweep.

import (
	"context"
	"encoding/binary"
	"fmt"
	"time"

	"github.com/retainer-gw/retainer/budgets"
	"github.com/retainer-gw/retainer/store"
)

// lastFresh is how long the writer trusts the key it remembers of a
// handle's last stored entry; past it (or at its first commit) it reads
// it from the store, where another gateway or an earlier run may have
// written after it.
const lastFresh = 10 * time.Second

// dropChunk is how many order records a drop reads at a time.
const dropChunk = 128

// batchLocked is the handles waiting that have entries, each that lost
// entries with a system entry that says how many. s.mu is held.
func (s *Store) batchLocked(waiting map[string]*pendingHandle) []*pendingHandle {
	batch := make([]*pendingHandle, 0, len(waiting))
	for _, h := range waiting {
		if h.lost > 0 {
			e := Entry{Time: s.now(), Level: "system", Message: fmt.Sprintf("%d log entries of this handle were left out of the stored log: "+
				"more of them waited to be written at once than a handle may have waiting (%d KiB of console entries, %d KiB of request entries; its tails saw them). Log less, or less at a time.",
				h.lost, budgets.LogPendingPerHandle>>10, budgets.LogPendingRequestsPerHandle>>10)}
			s.seq++
			h.add(&e, unixNano(e.Time), s.seq)
		}
		if h.n > 0 {
			batch = append(batch, h)
		}
	}
	return batch
}

// commit writes each handle's page in one transaction (chunked when
// many), then drops the oldest entries of each tenant it touched that is
// over quota: of the kind, request or console, that holds more than half
// of it first. s.cmu is held.
func (s *Store) commit(batch []*pendingHandle, quota int64) {
	if len(batch) == 0 {
		return
	}
	ctx := context.Background()
	ops := make([]store.Op, 0, 3*len(batch))
	added := map[string]used{}
	for _, h := range batch {
		prefix := lp(lp(make([]byte, 0, 16+len(h.tenant)+len(h.id)), h.tenant), h.id)
		hk := h.tenant + "\x00" + h.id
		// Pages go after the handle's last stored entry: one ordered
		// stream of pages whose keys never overlap (page.go).
		last, ok := s.lastStored(ctx, hk, prefix)
		a := added[h.tenant]
		for _, p := range h.pages {
			if ok && !last.less(p.first) {
				p = p.after(last)
			}
			last, ok = p.last, true
			ops = s.put(ops, h.tenant, h.id, prefix, p, &a)
		}
		added[h.tenant] = a
		s.last[hk] = stored{last, time.Now()}
	}
	if err := store.CommitChunked(ctx, s.st, nil, ops); err != nil {
		return // lost, as entries not yet written are at a crash
	}
	for tenant, a := range added {
		u, ok := s.used[tenant]
		if !ok {
			// First touch: what is stored now, this batch included.
			u = s.countUsed(ctx, tenant)
		} else {
			u.console += a.console
			u.requests += a.requests
		}
		if over := u.console + u.requests - quota; over > 0 {
			// Request entries go first while they hold more than half.
			if extra := min(over, u.requests-quota/2); extra > 0 {
				over -= s.drop(ctx, tenant, &u, true, extra)
			}
			if over > 0 {
				over -= s.drop(ctx, tenant, &u, false, over)
			}
			if over > 0 {
				s.drop(ctx, tenant, &u, true, over)
			}
		}
		s.used[tenant] = u
	}
}

// put appends the operations that store a page of the handle whose keys
// begin with prefix, and adds its bytes to a.
func (s *Store) put(ops []store.Op, tenant, id string, prefix []byte, p *page, a *used) []store.Op {
	k := append(prefix[:len(prefix):len(prefix)], p.first.bytes()...)
	v := p.value()
	ops = append(ops, store.Put(pages, k, v))
	total := int64(len(k) + len(v))
	console, requests := p.sec[0], p.sec[1]
	mixed := console.count > 0 && requests.count > 0
	tk := tenantKey(tenant, p.first.when, p.first.seq)
	if console.count > 0 {
		size := total - int64(len(requests.buf))
		ops = append(ops, store.Put(pagesByTenant, tk, pageRecord(size, p.last.when, mixed, id)))
		a.console += size
	}
	if requests.count > 0 {
		size := int64(len(requests.buf))
		if !mixed {
			size = total
		}
		ops = append(ops, store.Put(pageRequestsByTenant, tk, pageRecord(size, p.last.when, mixed, id)))
		a.requests += size
	}
	return ops
}

// lastStored is the key of the last entry stored of the handle hk (tenant
// NUL id, whose keys begin with prefix): the one remembered when fresh,
// else the last page's last entry, else the last entry stored before
// pages. s.cmu is held.
func (s *Store) lastStored(ctx context.Context, hk string, prefix []byte) (key, bool) {
	if l, ok := s.last[hk]; ok && time.Since(l.at) < lastFresh {
		return l.last, true
	}
	var last key
	found := false
	s.st.Scan(ctx, pages, store.Range{Prefix: prefix, Reverse: true, Limit: 1}, func(k, v []byte) bool {
		w, q := handleKeyTime(k, len(prefix))
		last, found = key{w, q}, true
		if l, ok := lastKey(k, len(prefix), v); ok && last.less(l) {
			last = l
		}
		return false
	})
	if !found {
		s.st.Scan(ctx, handles, store.Range{Prefix: prefix, Reverse: true, Limit: 1, KeysOnly: true}, func(k, _ []byte) bool {
			w, q := handleKeyTime(k, len(prefix))
			last, found = key{w, q}, true
			return false
		})
	}
	return last, found
}

// count is what tenant stores.
func (s *Store) count(ctx context.Context, tenant string) int64 {
	u := s.countUsed(ctx, tenant)
	return u.console + u.requests
}

// countUsed is what tenant stores, by kind and form.
func (s *Store) countUsed(ctx context.Context, tenant string) used {
	u := used{oldConsole: s.countIn(ctx, byTenant, tenant), oldRequests: s.countIn(ctx, requestsByTenant, tenant)}
	u.console = u.oldConsole + s.countIn(ctx, pagesByTenant, tenant)
	u.requests = u.oldRequests + s.countIn(ctx, pageRequestsByTenant, tenant)
	return u
}

// countIn is what tenant stores of the kind order lists (each record's
// size comes first, in both forms).
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

// drop deletes tenant's oldest entries of one kind (request entries, or
// console and system entries) until at least n bytes went, those stored
// before pages first, and answers how many bytes went (of both kinds: a
// page whose console entries go takes its request entries with it). u is
// brought up to date.
func (s *Store) drop(ctx context.Context, tenant string, u *used, requests bool, n int64) int64 {
	var gone int64
	old, order, paged := &u.oldConsole, byTenant, pagesByTenant
	if requests {
		old, order, paged = &u.oldRequests, requestsByTenant, pageRequestsByTenant
	}
	if *old > 0 {
		g, all := s.dropOld(ctx, order, tenant, n)
		if all {
			g = max(g, *old)
		}
		*old -= min(g, *old)
		if requests {
			u.requests -= g
		} else {
			u.console -= g
		}
		gone += g
	}
	if gone >= n {
		return gone
	}
	c, r := s.dropPages(ctx, paged, tenant, requests, n-gone)
	u.console -= c
	u.requests -= r
	return gone + c + r
}

// dropOld deletes tenant's oldest entries stored before pages of the kind
// order lists until at least n bytes went, and answers how many did and
// whether none is left.
func (s *Store) dropOld(ctx context.Context, order, tenant string, n int64) (int64, bool) {
	var gone int64
	from := lp(nil, tenant)
	for gone < n {
		var ops []store.Op
		seen := 0
		s.st.Scan(ctx, order, store.Range{Prefix: lp(nil, tenant), From: from, Limit: dropChunk}, func(k, v []byte) bool {
			seen++
			from = append(store.Copy(k), 0)
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
			return 0, false
		}
		if seen < dropChunk && gone < n {
			return gone, true
		}
	}
	return gone, false
}

// dropPages deletes tenant's oldest pages' entries of one kind until at
// least n bytes went: a page's request entries are cut off it (the page
// keeps its console entries), its console entries go with the page. It
// answers the console and request bytes that went.
func (s *Store) dropPages(ctx context.Context, order, tenant string, requests bool, n int64) (console, reqs int64) {
	type record struct {
		k     []byte
		size  int64
		mixed bool
		id    string
	}
	var gone int64
	from := lp(nil, tenant)
	for gone < n {
		var recs []record
		s.st.Scan(ctx, order, store.Range{Prefix: lp(nil, tenant), From: from, Limit: dropChunk}, func(k, v []byte) bool {
			from = append(store.Copy(k), 0)
			size, _, mixed, id, ok := parsePageRecord(v)
			if !ok {
				size, mixed, id = 0, false, ""
			}
			recs = append(recs, record{store.Copy(k), size, mixed, id})
			gone += size
			return gone < n
		})
		if len(recs) == 0 {
			return
		}
		// Pages are read after the scan: a bbolt read inside another
		// could wait behind a writer that waits for the first.
		var ops []store.Op
		var c, r int64
		for _, rec := range recs {
			ops = append(ops, store.Delete(order, rec.k))
			if rec.id == "" {
				continue
			}
			when, seq := tenantKeyTime(rec.k)
			pk := handleKey(tenant, rec.id, when, seq)
			switch {
			case requests && rec.mixed:
				// Keep the page's console section: the bytes before
				// its request section, with no request entries counted.
				v, err := s.st.Get(ctx, pages, pk)
				if err != nil {
					return console, reqs
				}
				if h, ok := parseHead(v); ok {
					kept := append([]byte{}, v[:pageHeader+h.clen]...)
					binary.BigEndian.PutUint32(kept[9:], 0)
					ops = append(ops, store.Put(pages, pk, kept))
				}
				r += rec.size
			case requests:
				ops = append(ops, store.Delete(pages, pk))
				r += rec.size
			default:
				ops = append(ops, store.Delete(pages, pk))
				c += rec.size
				if rec.mixed {
					v, err := s.st.Get(ctx, pageRequestsByTenant, rec.k)
					if err != nil {
						return console, reqs
					}
					if size, _, _, _, ok := parsePageRecord(v); ok {
						ops = append(ops, store.Delete(pageRequestsByTenant, rec.k))
						r += size
					}
				}
			}
		}
		if store.CommitChunked(ctx, s.st, nil, ops) != nil {
			return console, reqs
		}
		console += c
		reqs += r
		if len(recs) < dropChunk && gone < n {
			return
		}
	}
	return
}

// Sweep deletes every entry older than the retention.
func (s *Store) Sweep() {
	s.cmu.Lock()
	defer s.cmu.Unlock()
	s.mu.Lock()
	cutoff := unixNano(s.now().Add(-s.retention))
	s.mu.Unlock()
	for _, order := range []string{byTenant, requestsByTenant, pagesByTenant, pageRequestsByTenant} {
		s.sweep(order, cutoff)
	}
	for hk, l := range s.last {
		if time.Since(l.at) >= lastFresh {
			delete(s.last, hk)
		}
	}
}

// sweep deletes the entries order lists that are older than cutoff: of a
// page, when its last entry is.
func (s *Store) sweep(order string, cutoff uint64) {
	ctx := context.Background()
	paged := order == pagesByTenant || order == pageRequestsByTenant
	var from []byte
	for {
		// The next tenant with entries, then its entries before the cutoff.
		var tenant string
		found := false
		s.st.Scan(ctx, order, store.Range{From: from, Limit: 1, KeysOnly: true}, func(k, _ []byte) bool {
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
			when, seq := tenantKeyTime(k)
			if paged {
				size, last, _, id, ok := parsePageRecord(v)
				switch {
				case !ok:
					ops = append(ops, store.Delete(order, store.Copy(k)))
				case last < cutoff:
					ops = append(ops, store.Delete(order, store.Copy(k)), store.Delete(pages, handleKey(tenant, id, when, seq)))
					gone += size
				}
				return true
			}
			ops = append(ops, store.Delete(order, store.Copy(k)))
			if size, id, ok := parseTenantValue(v); ok {
				ops = append(ops, store.Delete(handles, handleKey(tenant, id, when, seq)))
				gone += size
			}
			return true
		})
		if store.CommitChunked(ctx, s.st, nil, ops) == nil {
			if u, ok := s.used[tenant]; ok {
				switch order {
				case requestsByTenant:
					u.oldRequests = max(u.oldRequests-gone, 0)
					u.requests = max(u.requests-gone, 0)
				case byTenant:
					u.oldConsole = max(u.oldConsole-gone, 0)
					u.console = max(u.console-gone, 0)
				case pageRequestsByTenant:
					u.requests = max(u.requests-gone, 0)
				default:
					u.console = max(u.console-gone, 0)
				}
				s.used[tenant] = u
			}
		}
		from = append(prefix, 0xff)
	}
}
