package handles

import (
	"context"
	"encoding/json"
	"strings"

	"github.com/retainer-gw/retainer/fault"
	"github.com/retainer-gw/retainer/store"
)

// Active domains at work: the data plane's and the TLS permission's
// lookups of a host (the store's in a cluster), the handle a domain
// serves, and a domain's end with its handle.

// DomainCounts is every registry's active and pending domains (metrics).
func (s *Store) DomainCounts() (active, pending int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, hosts := range s.domains {
		for _, claims := range hosts {
			for _, d := range claims {
				switch {
				case d.Status == DomainActive:
					active++
				case d.live():
					pending++
				}
			}
		}
	}
	return active, pending
}

// DomainActive reports whether host is an active domain of this registry,
// as this gateway's memory has it.
func (r *Registry) DomainActive(host string) bool {
	return r.ActiveDomainTenant(host) != ""
}

// ActiveDomainTenant answers the tenant whose active domain host is in
// this registry, or "" (the TLS permission asks it before a certificate
// is issued or loaded).
func (r *Registry) ActiveDomainTenant(host string) string {
	s := r.store
	s.mu.Lock()
	defer s.mu.Unlock()
	if d := s.domains[r.name][strings.ToLower(host)].active(); d != nil {
		return d.Tenant
	}
	return ""
}

// ActiveDomainTenantNow is ActiveDomainTenant in a cluster: memory
// answers for an active domain of a space this gateway owns, the store for
// any other (another gateway may have activated or deleted it since this
// one loaded it; the active claim is stored under the host alone), through
// gate as Locate's reads (a read that finds no active domain is a miss).
// On one machine it is ActiveDomainTenant.
func (r *Registry) ActiveDomainTenantNow(ctx context.Context, host string, gate StoreLookups) (string, error) {
	s := r.store
	host = strings.ToLower(host)
	if s.opts.Own == nil {
		return r.ActiveDomainTenant(host), nil
	}
	s.mu.Lock()
	d := s.domains[r.name][host].active()
	s.mu.Unlock()
	if d != nil && s.owns(r.name, d.Tenant) {
		return d.Tenant, nil
	}
	if gate.Allow != nil && !gate.Allow() {
		return "", fault.New(fault.QuotaExceeded, "Too many names this gateway has not seen were asked for; slow down.")
	}
	v, err := s.w.Get(ctx, tableDomains, key(r.name, host))
	if err != nil {
		return "", err
	}
	var stored domainRecord
	if v != nil && json.Unmarshal(v, &stored) == nil && stored.Status == DomainActive {
		return stored.Tenant, nil
	}
	if gate.Miss != nil {
		gate.Miss()
	}
	return "", nil
}

// domainTarget is the record an active domain serves, or nil; s.mu is
// held. A domain bound to a route follows it, but only to a handle of the
// domain's own tenant.
func (s *Store) domainTarget(registry, host string) *Record {
	claims, ok := s.domains[registry][host]
	if !ok && hasUpper(host) {
		claims = s.domains[registry][strings.ToLower(host)]
	}
	d := claims.active()
	if d == nil {
		return nil
	}
	id := d.ExecutionID
	if d.Route != "" {
		id = s.routes[registry][d.Route]
	}
	if rec := s.records[id]; rec != nil && rec.Registry == registry && rec.Tenant == d.Tenant {
		return rec
	}
	return nil
}

func hasUpper(s string) bool {
	for i := 0; i < len(s); i++ {
		if 'A' <= s[i] && s[i] <= 'Z' {
			return true
		}
	}
	return false
}

// endDomains ends the domains that end with rec (bound to its id, or to a
// route its end freed): an active one's host is reserved to the tenant
// like a freed route name; a pending one, never verified, reserves nothing
// and is withdrawn. It answers the active hosts gone and the writes for
// the end's commit. s.mu is not held.
func (s *Store) endDomains(rec *Record, freedRoutes []string) ([]string, []store.Op) {
	freed := map[string]bool{}
	for _, n := range freedRoutes {
		freed[n] = true
	}
	var hosts []string
	var ops []store.Op
	s.mu.Lock()
	for host, claims := range s.domains[rec.Registry] {
		d := claims.of(rec.Tenant)
		if !d.live() || !(d.ExecutionID == rec.ID || d.Route != "" && freed[d.Route]) {
			continue
		}
		if d.Status == DomainActive {
			s.dropClaim(rec.Registry, host, rec.Tenant)
			ops = append(ops, store.Delete(tableDomains, d.storeKey(rec.Registry)))
			hosts = append(hosts, host)
		} else {
			ops = append(ops, s.withdraw(rec.Registry, d)...)
		}
	}
	s.mu.Unlock()
	return hosts, append(ops, s.reserve(rec, hosts)...)
}

// domainsGone tells the owner of certificates that hosts no longer serve.
func (s *Store) domainsGone(registry string, hosts []string) {
	if len(hosts) > 0 && s.opts.OnDomainsGone != nil {
		s.opts.OnDomainsGone(registry, hosts)
	}
}
