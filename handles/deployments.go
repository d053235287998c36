package handles

import (
	"time"
)

// Deployments (docs/deployments.md): a handle that a route points at (and
// so the domains that follow the route), that an active domain names by
// its id, or that is a route's kept version is a deployment. The idle
// bound never ends a deployment: past it the handle parks (its isolate is
// disposed; its record, routes, domains and grants stay) and its next
// request rebuilds it. The idle bound ends only the handles nothing points
// at, each under its own bound (a deploy's idleMs) or else the registry's.

// idleBound is rec's idle bound.
func idleBound(cfg RegistryConfig, rec *Record) time.Duration {
	if rec.IdleMs > 0 {
		return time.Duration(rec.IdleMs) * time.Millisecond
	}
	return cfg.IdleBound
}

// keptLocked answers the ids of registry's deployments at now: the
// handles its routes and splits point at, the handles active domains name
// by id, and the routes' kept versions (versions.go). s.mu is held.
func (s *Store) keptLocked(registry string, now time.Time, retention time.Duration) map[string]bool {
	kept := map[string]bool{}
	for _, id := range s.routes[registry] {
		kept[id] = true
	}
	for _, claims := range s.domains[registry] {
		if d := claims.active(); d != nil && d.ExecutionID != "" {
			if rec := s.records[d.ExecutionID]; rec != nil && rec.Tenant == d.Tenant {
				kept[d.ExecutionID] = true
			}
		}
	}
	s.keptVersionsLocked(registry, now, retention, kept)
	return kept
}

// parkIdle disposes the isolate of an idle deployment: the record stays
// and the next request rebuilds it (lifecycle.go's sweep calls it).
func (s *Store) parkIdle(reg *Registry, id string) {
	if !s.opts.Executor.Holds(id) {
		return
	}
	s.opts.Executor.Close(id)
	reg.systemLog(id, "Parked: idle past the idle bound; a deployment is rebuilt on its next request.")
}
