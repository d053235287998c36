package handles

import (
	"context"
	"errors"
	"regexp"
	"sort"

	"github.com/retainer-gw/retainer/budgets"
	"github.com/retainer-gw/retainer/fault"
	"github.com/retainer-gw/retainer/store"
)

// routeName is a DNS label.
var routeName = regexp.MustCompile(`^[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?$`)

// uuidShaped matches any 8-4-4-4-12 hex string, whatever its version.
var uuidShaped = regexp.MustCompile(`^[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}$`)

// ValidRouteName checks a route name (docs/architecture.md).
func ValidRouteName(name string) error {
	if !routeName.MatchString(name) {
		return fault.New(fault.BadRequest, "A route name is a DNS label: lower-case letters, digits and inner hyphens, at most 63 characters.")
	}
	if uuidShaped.MatchString(name) {
		return fault.New(fault.BadRequest, "A route name may not be shaped like an executionId.")
	}
	return nil
}

// bindRoute points name at the tenant's handle id, or at a split whose
// first handle is id (split.go), and records the version (versions.go). A
// later bind moves the name atomically: requests resolve either to the old
// or to the new handle, never to nothing. Route writers are serialized by routeMu; mu is held
// only to read and to apply, never across the store commit.
func (r *Registry) bindRoute(ctx context.Context, tenant, name, id string, split []Share) (Route, error) {
	if err := ValidRouteName(name); err != nil {
		return Route{}, err
	}
	s := r.store
	if _, err := r.owned(tenant, id); err != nil {
		return Route{}, err
	}
	route, free, err := r.bindLocked(ctx, tenant, name, id, split, nil)
	if !free {
		return route, err
	}
	// The store holds the name though memory does not. A name left by an
	// end that stopped half done points at no record (load dropped it):
	// it is free, and bound again on the condition that it still points
	// there. The store is read with no lock held (an etcd that stalls
	// holds no other route writer up), and the bind takes the locks and
	// checks everything again.
	rctx, cancel := s.readBound()
	defer cancel()
	left, err := s.w.Get(rctx, tableRoutes, key(r.name, name))
	if err != nil {
		return Route{}, storeFault(err, "The route could not be saved.")
	}
	if left != nil {
		rec, err := s.w.Get(rctx, tableHandles, key(r.name, string(left)))
		if err != nil {
			return Route{}, storeFault(err, "The route could not be saved.")
		}
		if rec == nil {
			route, _, err = r.bindLocked(ctx, tenant, name, id, split, left)
			return route, err
		}
	}
	return Route{}, takenFault(name)
}

// bindLocked is bindRoute's write under routeMu. left, when not nil, is
// the id a name the store holds points at, found to name no record: the
// name is bound on the condition that it still does, and only while the
// bind's caller still waits (wanted). free answers that the store holds
// the name memory did not (a conflict on its absence): bindRoute reads
// the store and calls again.
func (r *Registry) bindLocked(ctx context.Context, tenant, name, id string, split []Share, left []byte) (_ Route, free bool, _ error) {
	s := r.store
	s.routeMu.Lock()
	defer s.routeMu.Unlock()
	// The record's meta is written with the route: the flusher of
	// invocation counts must not write a copy taken before this bind
	// after it (metaMu; TestFlushesNeverUndoABind).
	s.metaMu.Lock()
	defer s.metaMu.Unlock()
	if !sending(ctx) || left != nil && !wanted(ctx) {
		return Route{}, false, errWriteDropped
	}
	s.mu.Lock()
	rec := s.records[id]
	if rec == nil {
		s.mu.Unlock()
		return Route{}, false, fault.Closed(id)
	}
	var prev *Record
	if prevID, ok := s.routes[r.name][name]; ok {
		prev = s.records[prevID]
		if prev != nil && prev.Tenant != tenant {
			s.mu.Unlock()
			return Route{}, false, takenFault(name)
		}
	}
	reservedHere := false
	if prev == nil {
		switch owner := s.reservedTo(r.name, name); owner {
		case "":
		case tenant:
			reservedHere = true
		default:
			s.mu.Unlock()
			return Route{}, false, takenFault(name)
		}
		bound := 0
		for _, rid := range s.routes[r.name] {
			if other := s.records[rid]; other != nil && other.Tenant == tenant {
				bound++
			}
		}
		// Names reserved to the tenant count (reserve.go); binding one of
		// them adds nothing.
		reserved := s.reservedCount(r.name, tenant, false)
		if !reservedHere && bound+reserved >= budgets.RoutesPerTenant {
			s.mu.Unlock()
			if reserved == 0 {
				return Route{}, false, fault.New(fault.QuotaExceeded, "The tenant binds %d route names, the most this registry allows. Unbind one first.", bound)
			}
			return Route{}, false, fault.New(fault.QuotaExceeded, "The tenant binds %d route names and %d more stay reserved to it for a day after their handles ended, %d in all, the most this registry allows. Bind a reserved name again, or free one with DELETE /routes/{name}.", bound, reserved, bound+reserved)
		}
	}
	newRec := *rec
	newRec.Routes = appendUnique(rec.Routes, name)
	moving := prev != nil && prev.ID != id
	var newPrev Record
	if moving {
		newPrev = *prev
		newPrev.Routes = without(prev.Routes, name)
	}
	s.mu.Unlock()
	ops := []store.Op{store.Put(tableRoutes, key(r.name, name), []byte(id)), metaOp(&newRec)}
	prevID := ""
	if prev != nil {
		prevID = prev.ID
	}
	hist, histOps := s.nextHistory(r.name, tenant, name, prevID, Version{ExecutionID: id, BoundAt: s.opts.Now(), Split: split})
	ops = append(ops, histOps...)
	if reservedHere {
		ops = append(ops, s.unreserve(r.name, name))
	}
	if moving {
		ops = append(ops, metaOp(&newPrev))
	}
	// The name is taken in the store as it was seen here, so that
	// gateways sharing a store (docs/cluster.md) never both bind it.
	var conds []store.Cond
	switch {
	case prev == nil && left != nil:
		conds = append(conds, store.Holds(tableRoutes, key(r.name, name), left))
	case prev == nil:
		conds = append(conds, store.Absent(tableRoutes, key(r.name, name)))
	default:
		conds = append(conds, store.Holds(tableRoutes, key(r.name, name), []byte(prev.ID)))
	}
	if prev == nil && !reservedHere {
		conds = append(conds, store.Absent(tableReserved, key(r.name, name)))
	}
	err := s.commit(ctx, r.name, tenant, conds, ops)
	if errors.Is(err, store.ErrConflict) && prev == nil && left == nil {
		return Route{}, true, err
	}
	if errors.Is(err, store.ErrConflict) {
		return Route{}, false, takenFault(name)
	} else if err != nil {
		return Route{}, false, storeFault(err, "The route could not be saved.")
	}
	// Records only end under routeMu, which this holds: rec and prev are
	// still the live records.
	s.mu.Lock()
	rec.Routes = newRec.Routes
	if moving {
		prev.Routes = newPrev.Routes
	}
	s.routes[r.name][name] = id
	s.setHistoryLocked(r.name, name, hist)
	s.mu.Unlock()
	return Route{Name: name, ExecutionID: id, Split: split}, false, nil
}

// bindBounded is bindRoute within the store's write bound (writes.go).
func (r *Registry) bindBounded(tenant, name, id string, split []Share) (Route, error) {
	return bounded(r.store, func(ctx context.Context) (Route, error) { return r.bindRoute(ctx, tenant, name, id, split) })
}

// UnbindRoute removes the tenant's route name, or frees a name reserved
// to the tenant (reserve.go), within the store's write bound (writes.go).
func (r *Registry) UnbindRoute(tenant, name string) error {
	_, err := bounded(r.store, func(ctx context.Context) (struct{}, error) { return struct{}{}, r.unbindRoute(ctx, tenant, name) })
	return err
}

func (r *Registry) unbindRoute(ctx context.Context, tenant, name string) error {
	s := r.store
	s.routeMu.Lock()
	defer s.routeMu.Unlock()
	s.metaMu.Lock() // as bindRoute
	defer s.metaMu.Unlock()
	if !sending(ctx) {
		return errWriteDropped
	}
	s.mu.Lock()
	id, ok := s.routes[r.name][name]
	rec := s.records[id]
	if !ok || rec == nil || rec.Tenant != tenant {
		s.mu.Unlock()
		// A name its handle's end reserved to the tenant is freed.
		if released, err := s.release(ctx, r.name, tenant, name); released {
			return err
		}
		return fault.New(fault.NotFound, "No route named %q.", name)
	}
	newRec := *rec
	newRec.Routes = without(rec.Routes, name)
	s.mu.Unlock()
	// The route's versions go with it (versions.go).
	ops := []store.Op{store.Delete(tableRoutes, key(r.name, name)), metaOp(&newRec), store.Delete(tableVersions, key(r.name, name))}
	if err := s.commit(ctx, r.name, tenant, nil, ops); err != nil {
		return storeFault(err, "The route could not be removed.")
	}
	s.mu.Lock()
	rec.Routes = newRec.Routes
	delete(s.routes[r.name], name)
	delete(s.history[r.name], name)
	s.mu.Unlock()
	return nil
}

// Routes lists the tenant's routes.
func (r *Registry) Routes(tenant string) []Route {
	s := r.store
	s.mu.Lock()
	defer s.mu.Unlock()
	out := []Route{}
	for name, id := range s.routes[r.name] {
		if rec := s.records[id]; rec != nil && rec.Tenant == tenant {
			out = append(out, Route{Name: name, ExecutionID: id, Split: s.liveSplitLocked(r.name, tenant, s.history[r.name][name].split())})
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out
}

func appendUnique(list []string, s string) []string {
	for _, x := range list {
		if x == s {
			return append([]string{}, list...)
		}
	}
	return append(append([]string{}, list...), s)
}

func without(list []string, s string) []string {
	out := []string{}
	for _, x := range list {
		if x != s {
			out = append(out, x)
		}
	}
	return out
}
