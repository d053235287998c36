package handles

import (
	"context"
	"encoding/json"
	"strings"
	"time"

	"github.com/retainer-gw/retainer/budgets"
	"github.com/retainer-gw/retainer/fault"
	"github.com/retainer-gw/retainer/store"
)

// Route names and domain hosts freed by their handle's end stay reserved
// to their tenant for routeReservation (docs/architecture.md, "Budgets"): a
// deployment ended by a bound, an idle sweep or a crash must never hand its
// customers' traffic (webhooks with their credentials, say) to whichever
// tenant binds the name next. Only the tenant it was reserved to may bind
// it meanwhile; an unbind the tenant asks for frees the name at once, a
// reserved one too (DELETE /routes/{name}, DELETE /domains/{host}).
// Reservations are kept in the store, so a restart does not release them.
// Route names and hosts share one table: a route name is one DNS label and
// a host at least two, so they never collide. A tenant's reserved names
// count against its 100 route names (and its reserved hosts against its
// 100 domains): deploy, bind and end, repeated, reserves no more than a
// tenant could bind (measured before: one tenant reserved 13,900 names and
// 15,079 hosts in 20 s). A host that was never verified is not reserved.

// routeReservation is how long a freed route name stays its tenant's.
const routeReservation = budgets.NameReservation

// reservation is a freed route name's owner and how long it stays so.
type reservation struct {
	Tenant string    `json:"tenant"`
	Until  time.Time `json:"until"`
}

// reservedTo answers the tenant a free route name is reserved to, or "".
// s.mu is held.
func (s *Store) reservedTo(registry, name string) string {
	res, ok := s.reserved[registry][name]
	if !ok || !s.opts.Now().Before(res.Until) {
		return ""
	}
	return res.Tenant
}

// reservedCount answers how many route names (hosts false) or domain
// hosts (hosts true) of the registry are reserved to the tenant now. s.mu
// is held.
func (s *Store) reservedCount(registry, tenant string, hosts bool) int {
	now := s.opts.Now()
	n := 0
	for name, res := range s.reserved[registry] {
		if res.Tenant == tenant && now.Before(res.Until) && strings.Contains(name, ".") == hosts {
			n++
		}
	}
	return n
}

// release frees a name reserved to the tenant (its own unbind or delete),
// answering false when none is.
func (s *Store) release(ctx context.Context, registry, tenant, name string) (bool, error) {
	s.mu.Lock()
	mine := s.reservedTo(registry, name) == tenant
	s.mu.Unlock()
	if !mine {
		return false, nil
	}
	if err := s.commit(ctx, registry, tenant, nil, []store.Op{s.unreserve(registry, name)}); err != nil {
		return true, storeFault(err, "The reservation could not be removed.")
	}
	return true, nil
}

// reserve records that names of rec, freed by its end, are its tenant's
// for routeReservation, and answers the writes for the end's commit; s.mu
// is not held (the caller's records already dropped the names).
func (s *Store) reserve(rec *Record, names []string) []store.Op {
	until := s.opts.Now().Add(routeReservation)
	res := reservation{Tenant: rec.Tenant, Until: until}
	data, _ := json.Marshal(res)
	s.mu.Lock()
	if s.reserved[rec.Registry] == nil {
		s.reserved[rec.Registry] = map[string]reservation{}
	}
	for _, name := range names {
		s.reserved[rec.Registry][name] = res
	}
	s.mu.Unlock()
	ops := make([]store.Op, 0, len(names))
	for _, name := range names {
		ops = append(ops, store.Put(tableReserved, key(rec.Registry, name), data))
	}
	return ops
}

// unreserve drops a reservation its tenant has used (a bind) and answers
// the write for the bind's commit; s.mu is not held.
func (s *Store) unreserve(registry, name string) store.Op {
	s.mu.Lock()
	delete(s.reserved[registry], name)
	s.mu.Unlock()
	return store.Delete(tableReserved, key(registry, name))
}

// sweepReservations forgets the reservations that have run out.
func (s *Store) sweepReservations() {
	now := s.opts.Now()
	gone := spaceOps{}
	served := s.servedFilter()
	s.mu.Lock()
	for reg, names := range s.reserved {
		for name, res := range names {
			if !now.Before(res.Until) && served(reg, res.Tenant) {
				delete(names, name)
				gone.add(reg, res.Tenant, store.Delete(tableReserved, key(reg, name)))
			}
		}
	}
	s.mu.Unlock()
	gone.commit(s)
}

// spaceOps gathers a sweep's writes by the space they are in.
type spaceOps map[[2]string][]store.Op

func (g spaceOps) add(registry, tenant string, op store.Op) {
	k := [2]string{registry, tenant}
	g[k] = append(g[k], op)
}

// commit applies each space's writes (chunked: a sweep may stop half done
// and be done again).
func (g spaceOps) commit(s *Store) {
	for k, ops := range g {
		s.commitChunked(context.Background(), k[0], k[1], ops)
	}
}

// loadReservations reads the reservations at Open.
func (s *Store) loadReservations(ctx context.Context) error {
	return s.scanReservations(ctx, store.Range{}, func(reg, name string, res reservation) {
		if s.reserved[reg] == nil {
			s.reserved[reg] = map[string]reservation{}
		}
		s.reserved[reg][name] = res
	})
}

// scanReservations calls each with every stored reservation in rng; a
// corrupt one reserves nothing and is skipped.
func (s *Store) scanReservations(ctx context.Context, rng store.Range, each func(registry, name string, res reservation)) error {
	return s.w.Scan(ctx, tableReserved, rng, func(k, v []byte) bool {
		reg, name, ok := splitKey(k)
		var res reservation
		if ok && json.Unmarshal(v, &res) == nil {
			each(reg, name, res)
		}
		return true
	})
}

// takenFault is the CONFLICT of a bind to a name another tenant holds,
// bound or reserved: both answer alike.
func takenFault(name string) error {
	return fault.New(fault.Conflict, "The route name %q is taken.", name)
}
