package handles

import (
	"context"
	"encoding/json"
	"strings"
	"time"

	"github.com/retainer-gw/retainer/budgets"
	"github.com/retainer-gw/retainer/store"
)

// Domain claims as kept (domains.go): a tenant's claim of a host in
// memory and in table "domains", the several pending claims of one host
// beside at most one active, a withdrawn claim kept for its first PUT's
// week, and the sweep that forgets it after.

// domainRecord is one tenant's claim of a host as persisted, in table
// "domains": an active claim under key(registry, host) (the one claim of
// its host), a pending one under key(registry, host+"\x00"+tenant). A
// pending claim its tenant deleted, or whose handle ended, stays as a
// withdrawn one until budgets.DomainClaimPending after its first PUT, so that a claim
// again keeps that first time (a delete and re-claim never restarts the
// clock); a withdrawn claim is invisible and counts for nothing.
type domainRecord struct {
	Host        string    `json:"host"`
	Tenant      string    `json:"tenant"`
	Status      string    `json:"status"`
	Route       string    `json:"route,omitempty"`
	ExecutionID string    `json:"executionId,omitempty"`
	Challenge   string    `json:"challenge"`
	ClaimedAt   time.Time `json:"claimedAt"`
	Withdrawn   bool      `json:"withdrawn,omitempty"`
	// legacy: a pending claim stored under key(registry, host), as
	// before several claims of a host were kept; its next write moves it.
	legacy bool
}

func (d *domainRecord) view() Domain {
	return Domain{Host: d.Host, Status: d.Status, Route: d.Route, ExecutionID: d.ExecutionID, Challenge: d.Challenge}
}

// storeKey is where d is stored.
func (d *domainRecord) storeKey(registry string) []byte {
	if d.Status == DomainActive || d.legacy {
		return key(registry, d.Host)
	}
	return key(registry, d.Host+"\x00"+d.Tenant)
}

// live reports whether d is a claim its tenant sees (not withdrawn).
func (d *domainRecord) live() bool { return d != nil && !d.Withdrawn }

// hostClaimList are the claims of one host: one active claim alone, or the
// pending and withdrawn claims of tenants, at most one each. s.mu guards
// them.
type hostClaimList []*domainRecord

// of is the tenant's claim, withdrawn or not, or nil.
func (c hostClaimList) of(tenant string) *domainRecord {
	for _, d := range c {
		if d.Tenant == tenant {
			return d
		}
	}
	return nil
}

// active is the host's active claim, or nil.
func (c hostClaimList) active() *domainRecord {
	for _, d := range c {
		if d.Status == DomainActive {
			return d
		}
	}
	return nil
}

// setClaim puts d in place of its tenant's claim of its host; an active
// claim stands alone, and a claim beside another tenant's active one is
// stale (a cluster's copy) and left out. s.mu is held.
func (s *Store) setClaim(registry string, d *domainRecord) {
	if s.domains[registry] == nil {
		s.domains[registry] = map[string]hostClaimList{}
	}
	old := s.domains[registry][d.Host]
	if d.Status == DomainActive {
		s.domains[registry][d.Host] = hostClaimList{d}
		return
	}
	if a := old.active(); a != nil && a.Tenant != d.Tenant {
		return
	}
	next := make(hostClaimList, 0, len(old)+1)
	for _, c := range old {
		if c.Tenant != d.Tenant {
			next = append(next, c)
		}
	}
	s.domains[registry][d.Host] = append(next, d)
}

// dropClaim forgets the tenant's claim of host. s.mu is held.
func (s *Store) dropClaim(registry, host, tenant string) {
	old := s.domains[registry][host]
	next := make(hostClaimList, 0, len(old))
	for _, c := range old {
		if c.Tenant != tenant {
			next = append(next, c)
		}
	}
	if len(next) == 0 {
		delete(s.domains[registry], host)
	} else {
		s.domains[registry][host] = next
	}
}

// claimOps writes next in place of prev (nil: none), moving a claim whose
// key changes.
func claimOps(registry string, prev, next *domainRecord) []store.Op {
	var ops []store.Op
	if prev != nil && string(prev.storeKey(registry)) != string(next.storeKey(registry)) {
		ops = append(ops, store.Delete(tableDomains, prev.storeKey(registry)))
	}
	return append(ops, domainOp(registry, next))
}

// withdraw turns the tenant's pending claim d into a withdrawn one kept
// until its first PUT's week is over, and answers the writes. One is never
// forgotten sooner (a re-claim would start a new week): PutDomain refuses
// a new claim past claimMemosPerTenant of them instead. s.mu is held.
func (s *Store) withdraw(registry string, d *domainRecord) []store.Op {
	next := *d
	next.Withdrawn, next.legacy = true, false
	ops := claimOps(registry, d, &next)
	s.setClaim(registry, &next)
	return ops
}

// withdrawnCount is how many withdrawn claims of the tenant are within
// their first PUT's week. s.mu is held.
func (s *Store) withdrawnCount(registry, tenant string) int {
	now := s.opts.Now()
	n := 0
	for _, claims := range s.domains[registry] {
		if c := claims.of(tenant); c != nil && c.Withdrawn && now.Sub(c.ClaimedAt) < budgets.DomainClaimPending {
			n++
		}
	}
	return n
}

const (
	// (A claim stays pending budgets.DomainClaimPending after its first
	// PUT.)
	// claimMemosPerTenant bounds the withdrawn claims kept for a tenant:
	// a new claim past it answers QUOTA_EXCEEDED.
	claimMemosPerTenant = 10 * budgets.DomainsPerTenant
)

// current reports whether d is a claim its tenant sees: not withdrawn,
// and active or within its first PUT's week. s.mu is held.
func (s *Store) current(d *domainRecord) bool {
	return d.live() && (d.Status == DomainActive || s.opts.Now().Sub(d.ClaimedAt) < budgets.DomainClaimPending)
}

// sweepDomains forgets pending and withdrawn claims budgets.DomainClaimPending after
// their first PUT.
func (s *Store) sweepDomains() {
	now := s.opts.Now()
	gone := spaceOps{}
	served := s.servedFilter()
	s.routeMu.Lock()
	defer s.routeMu.Unlock()
	s.mu.Lock()
	for reg, hosts := range s.domains {
		for host, claims := range hosts {
			for _, d := range claims {
				if d.Status != DomainActive && now.Sub(d.ClaimedAt) >= budgets.DomainClaimPending && served(reg, d.Tenant) {
					s.dropClaim(reg, host, d.Tenant)
					gone.add(reg, d.Tenant, store.Delete(tableDomains, d.storeKey(reg)))
				}
			}
		}
	}
	s.mu.Unlock()
	gone.commit(s)
}

// domainOp writes a domain's claim.
func domainOp(registry string, d *domainRecord) store.Op {
	data, _ := json.Marshal(d)
	return store.Put(tableDomains, d.storeKey(registry), data)
}

// loadDomains reads the domains at Open.
func (s *Store) loadDomains(ctx context.Context) error {
	return s.scanDomains(ctx, store.Range{}, func(reg string, d *domainRecord) {
		s.setClaim(reg, d)
	})
}

// scanDomains calls each with every stored domain claim in rng (an active
// host's first: its key sorts first); a corrupt claim serves nothing and
// is skipped.
func (s *Store) scanDomains(ctx context.Context, rng store.Range, each func(registry string, d *domainRecord)) error {
	return s.w.Scan(ctx, tableDomains, rng, func(k, v []byte) bool {
		reg, name, ok := splitKey(k)
		host, tenant, _ := strings.Cut(name, "\x00")
		var d domainRecord
		if ok && json.Unmarshal(v, &d) == nil && d.Host == host && (tenant == "" || d.Tenant == tenant && d.Status != DomainActive) {
			d.legacy = tenant == "" && d.Status != DomainActive
			each(reg, &d)
		}
		return true
	})
}
