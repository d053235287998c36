package handles

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"time"

	"github.com/retainer-gw/retainer/fault"
	"github.com/retainer-gw/retainer/store"
)

// A route's versions (docs/deployments.md): every bind of a route name
// records a version, newest first, the last keptVersions kept, in table
// "versions" under key(registry, name), written in the bind's own
// transaction. The newest is the route's current one (its handle, or its
// split). A handle the route no longer points at stays, parked, as the
// route's kept version for the registry's VersionRetention from the time
// it was replaced, so a rollback finds it; then it ends unless something
// else points at it (reason version_retention). A version pushed out of
// the last keptVersions keeps only the idle bound of a handle nothing
// points at. A route's versions go with the route (an unbind, or its
// handle's end).

const (
	tableVersions = "versions"
	keptVersions  = 20
	// ReasonVersionRetention ends a replaced version past its retention.
	ReasonVersionRetention = "version_retention"
)

// Version is one bind of a route.
type Version struct {
	ExecutionID string    `json:"executionId"`
	BoundAt     time.Time `json:"boundAt"`
	// Split is the version's split, if it was one (split.go).
	Split []Share `json:"split,omitempty"`
}

// ids are the handles the version points at.
func (v Version) ids() []string {
	if len(v.Split) == 0 {
		return []string{v.ExecutionID}
	}
	out := make([]string, len(v.Split))
	for i, sh := range v.Split {
		out[i] = sh.ExecutionID
	}
	return out
}

func (v Version) same(o Version) bool {
	return v.ExecutionID == o.ExecutionID && slices.Equal(v.Split, o.Split)
}

// RouteDetail is what GET /routes/{name} answers.
type RouteDetail struct {
	Name        string    `json:"name"`
	ExecutionID string    `json:"executionId"`
	Split       []Share   `json:"split,omitempty"`
	Versions    []Version `json:"versions"`
}

// routeHistory is a route's versions as persisted.
type routeHistory struct {
	Tenant   string    `json:"tenant"`
	Versions []Version `json:"versions"`
}

// current is the route's split, or nil.
func (h *routeHistory) split() []Share {
	if h == nil || len(h.Versions) == 0 {
		return nil
	}
	return h.Versions[0].Split
}

// keptVersionsLocked adds to kept the handles registry's routes point at
// through a split, and their replaced versions within retention. s.mu is
// held.
func (s *Store) keptVersionsLocked(registry string, now time.Time, retention time.Duration, kept map[string]bool) {
	for _, h := range s.history[registry] {
		for i, v := range h.Versions {
			if i > 0 && now.Sub(h.Versions[i-1].BoundAt) >= retention {
				break
			}
			for _, id := range v.ids() {
				kept[id] = true
			}
		}
	}
}

// nextHistory answers route name's versions after a bind to v, and the
// write that stores them; nil when v is already the current version. The
// versions of a route bound before they were recorded start with the
// handle it pointed at (prevID). routeMu is held.
func (s *Store) nextHistory(registry, tenant, name, prevID string, v Version) (*routeHistory, []store.Op) {
	s.mu.Lock()
	defer s.mu.Unlock()
	old := s.history[registry][name]
	var versions []Version
	if old != nil {
		versions = old.Versions
	} else if prev := s.records[prevID]; prev != nil {
		versions = []Version{{ExecutionID: prevID, BoundAt: prev.CreatedAt}}
	}
	if len(versions) > 0 && versions[0].same(v) {
		return nil, nil
	}
	h := &routeHistory{Tenant: tenant, Versions: []Version{v}}
	for _, o := range versions {
		if len(h.Versions) == keptVersions {
			break
		}
		if s.allLiveLocked(tenant, o.ids()) {
			h.Versions = append(h.Versions, o)
		}
	}
	data, _ := json.Marshal(h)
	return h, []store.Op{store.Put(tableVersions, key(registry, name), data)}
}

// allLiveLocked reports whether every id is a live handle of tenant.
func (s *Store) allLiveLocked(tenant string, ids []string) bool {
	for _, id := range ids {
		if rec := s.records[id]; rec == nil || rec.Tenant != tenant {
			return false
		}
	}
	return true
}

// setHistoryLocked applies a bind's versions (nil: unchanged). s.mu is held.
func (s *Store) setHistoryLocked(registry, name string, h *routeHistory) {
	if h == nil {
		return
	}
	if s.history[registry] == nil {
		s.history[registry] = map[string]*routeHistory{}
	}
	s.history[registry][name] = h
}

// dropHistories forgets the versions of route names that are gone, and
// answers the writes that delete them. s.mu is not held.
func (s *Store) dropHistories(registry string, names []string) []store.Op {
	s.mu.Lock()
	defer s.mu.Unlock()
	var ops []store.Op
	for _, name := range names {
		if _, ok := s.history[registry][name]; ok {
			delete(s.history[registry], name)
			ops = append(ops, store.Delete(tableVersions, key(registry, name)))
		}
	}
	return ops
}

// Route answers a tenant's route with its versions; another tenant's route
// answers NOT_FOUND like an unknown one.
func (r *Registry) Route(tenant, name string) (RouteDetail, error) {
	s := r.store
	s.mu.Lock()
	defer s.mu.Unlock()
	return r.routeLocked(tenant, name)
}

func (r *Registry) routeLocked(tenant, name string) (RouteDetail, error) {
	s := r.store
	id, ok := s.routes[r.name][name]
	rec := s.records[id]
	if !ok || rec == nil || rec.Tenant != tenant {
		return RouteDetail{}, fault.New(fault.NotFound, "No route named %q.", name)
	}
	d := RouteDetail{Name: name, ExecutionID: id, Versions: []Version{}}
	h := s.history[r.name][name]
	if h == nil {
		return d, nil
	}
	d.Split = s.liveSplitLocked(r.name, tenant, h.split())
	for _, v := range h.Versions {
		if s.allLiveLocked(tenant, v.ids()) {
			d.Versions = append(d.Versions, v)
		}
	}
	return d, nil
}

// Rollback moves a tenant's route back to one of its kept versions: to id,
// or with id "" to the newest version unlike the current one. It is a bind
// like any other (atomic, a new version itself). A version's split comes
// back with it.
func (r *Registry) Rollback(tenant, name, id string) (RouteDetail, error) {
	s := r.store
	s.mu.Lock()
	d, err := r.routeLocked(tenant, name)
	s.mu.Unlock()
	if err != nil {
		return d, err
	}
	var to *Version
	for i := range d.Versions {
		v := &d.Versions[i]
		if id == "" && i > 0 && !v.same(d.Versions[0]) || id != "" && v.ExecutionID == id {
			to = v
			break
		}
	}
	if to == nil && id == "" {
		return RouteDetail{}, fault.New(fault.NoSuchHandle, "Route %q has no earlier version to roll back to.", name)
	}
	if to == nil {
		return RouteDetail{}, fault.New(fault.NoSuchHandle, "Route %q has no kept version %q.", name, id)
	}
	if _, err := r.bindBounded(tenant, name, to.ExecutionID, to.Split); err != nil {
		return RouteDetail{}, err
	}
	return r.Route(tenant, name)
}

// sweepVersions ends the replaced versions past their retention that
// nothing else points at.
func (s *Store) sweepVersions() {
	now := s.opts.Now()
	served := s.servedFilter()
	type victim struct {
		reg *Registry
		id  string
	}
	var victims []victim
	s.mu.Lock()
	for registry, routes := range s.history {
		reg := s.registries[registry]
		if reg == nil || len(routes) == 0 {
			continue
		}
		kept := s.keptLocked(registry, now, reg.config().VersionRetention)
		seen := map[string]bool{}
		for _, h := range routes {
			for _, v := range h.Versions {
				for _, id := range v.ids() {
					rec := s.records[id]
					if seen[id] || kept[id] || rec == nil || !served(registry, rec.Tenant) {
						continue
					}
					seen[id] = true
					victims = append(victims, victim{reg, id})
				}
			}
		}
	}
	s.mu.Unlock()
	for _, v := range victims {
		v.reg.end(v.id, ReasonVersionRetention, "A replaced version past the version retention.")
	}
}

// loadHistories reads the routes' versions at Open; those of a route that
// is gone are skipped.
func (s *Store) loadHistories(ctx context.Context) error {
	hs, err := s.scanHistories(ctx, store.Range{}, "")
	if err != nil {
		return err
	}
	for reg, byName := range hs {
		for name, h := range byName {
			if _, ok := s.routes[reg][name]; ok {
				s.setHistoryLocked(reg, name, h)
			}
		}
	}
	return nil
}

// scanHistories reads the versions in rng, only tenant's unless tenant is
// "".
func (s *Store) scanHistories(ctx context.Context, rng store.Range, tenant string) (map[string]map[string]*routeHistory, error) {
	out := map[string]map[string]*routeHistory{}
	var corrupt error
	err := s.w.Scan(ctx, tableVersions, rng, func(k, v []byte) bool {
		reg, name, ok := splitKey(k)
		var h routeHistory
		if !ok || json.Unmarshal(v, &h) != nil {
			corrupt = fmt.Errorf("the versions of route %q are corrupt", k)
			return false
		}
		if tenant == "" || h.Tenant == tenant {
			if out[reg] == nil {
				out[reg] = map[string]*routeHistory{}
			}
			out[reg][name] = &h
		}
		return true
	})
	if err == nil {
		err = corrupt
	}
	return out, err
}

// replaceHistoriesLocked replaces what memory holds of a tenant's route
// versions in registry (ownership.go's reload of a space). s.mu is held.
func (s *Store) replaceHistoriesLocked(registry, tenant string, fresh map[string]*routeHistory) {
	for name, h := range s.history[registry] {
		if h.Tenant == tenant {
			delete(s.history[registry], name)
		}
	}
	for name, h := range fresh {
		if _, ok := s.routes[registry][name]; ok {
			s.setHistoryLocked(registry, name, h)
		}
	}
}
