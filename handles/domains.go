package handles

import (
	"context"
	"encoding/json"
	"errors"
	"sort"
	"strings"
	"time"

	"github.com/retainer-gw/retainer/budgets"
	"github.com/retainer-gw/retainer/fault"
	"github.com/retainer-gw/retainer/store"
)

// A tenant's own domains (docs/domains.md): a host name such as
// shop.example.com bound to one of the tenant's routes or handles. A claim
// is pending until its tenant proves control of the host's DNS (a TXT
// record with a value only this claim knows), then active: only active
// domains are served by the data plane and given certificates. A pending
// claim holds nothing: several tenants may have pending claims on one
// host, each with its own TXT value, and the first to verify takes the
// host (the others' claims end), so nobody can squat a host its real owner
// would verify. Domains are written under routeMu like routes, because a
// domain follows a route and ends with its handle.

// Domain statuses.
const (
	DomainPending = "pending"
	DomainActive  = "active"
)

// Domain is what the API shows of a tenant's domain.
type Domain struct {
	Host        string `json:"host"`
	Status      string `json:"status"`
	Route       string `json:"route,omitempty"`
	ExecutionID string `json:"executionId,omitempty"`
	// Challenge is the TXT value that proves control (a pending domain's
	// answers show it; the API never lists it for another tenant).
	Challenge string `json:"-"`
}

// domainTakenFault is the CONFLICT of a claim to a host another tenant
// holds, active or reserved: both answer alike.
func domainTakenFault(host string) error {
	return fault.New(fault.Conflict, "The host %q is claimed by another tenant.", host)
}

// PutDomain claims host (already checked by ValidHost) for the tenant,
// bound to one of its routes (route) or handles (id), exactly one of them.
// A new claim is pending, beside any other tenant's pending claim; the
// owner's later put of a claimed host moves it at once, keeping its
// status. created is true for a new claim.
func (r *Registry) PutDomain(tenant, host, route, id string) (Domain, bool, error) {
	type put struct {
		d       Domain
		created bool
	}
	p, err := bounded(r.store, func(ctx context.Context) (put, error) {
		d, created, err := r.putDomain(ctx, tenant, host, route, id)
		return put{d, created}, err
	})
	return p.d, p.created, err
}

func (r *Registry) putDomain(ctx context.Context, tenant, host, route, id string) (d Domain, created bool, err error) {
	if (route == "") == (id == "") {
		return Domain{}, false, fault.New(fault.BadRequest, "A domain names either a route or an executionId.")
	}
	s := r.store
	if id != "" {
		if _, err := r.owned(tenant, id); err != nil {
			return Domain{}, false, err
		}
	}
	if s.opts.Own != nil {
		// In a cluster another gateway may have activated the host for
		// its tenant: the store says.
		if v, _ := s.w.Get(context.Background(), tableDomains, key(r.name, host)); v != nil {
			var act domainRecord
			if json.Unmarshal(v, &act) == nil && act.Status == DomainActive && act.Tenant != tenant {
				return Domain{}, false, domainTakenFault(host)
			}
		}
	}
	s.routeMu.Lock()
	defer s.routeMu.Unlock()
	if !sending(ctx) {
		return Domain{}, false, errWriteDropped
	}
	now := s.opts.Now()
	s.mu.Lock()
	if route != "" {
		rec := s.records[s.routes[r.name][route]]
		if rec == nil || rec.Tenant != tenant {
			s.mu.Unlock()
			return Domain{}, false, fault.New(fault.NotFound, "No route named %q.", route)
		}
	} else if s.records[id] == nil {
		s.mu.Unlock()
		return Domain{}, false, fault.Closed(id)
	}
	claims := s.domains[r.name][host]
	if act := claims.active(); act != nil && act.Tenant != tenant {
		s.mu.Unlock()
		return Domain{}, false, domainTakenFault(host)
	}
	prev := claims.of(tenant)
	// A claim past its week (the sweep has not come by yet) is replaced
	// by a new one.
	lapsed := prev != nil && prev.Status == DomainPending && now.Sub(prev.ClaimedAt) >= budgets.DomainClaimPending
	live := prev.live() && !lapsed
	reservedHere := false
	if !live {
		switch owner := s.reservedTo(r.name, host); owner {
		case "":
		case tenant:
			reservedHere = true
		default:
			s.mu.Unlock()
			return Domain{}, false, domainTakenFault(host)
		}
		n := 0
		for _, hc := range s.domains[r.name] {
			if s.current(hc.of(tenant)) {
				n++
			}
		}
		reserved := s.reservedCount(r.name, tenant, true)
		if !reservedHere && n+reserved >= budgets.DomainsPerTenant {
			s.mu.Unlock()
			return Domain{}, false, fault.New(fault.QuotaExceeded, "The tenant claims %d domains and %d more stay reserved to it for a day after their handles ended, %d in all, the most this registry allows. Delete one first (DELETE /domains/{host} frees a reserved host too).", n, reserved, n+reserved)
		}
		if prev == nil || lapsed {
			if w := s.withdrawnCount(r.name, tenant); w >= claimMemosPerTenant {
				s.mu.Unlock()
				return Domain{}, false, fault.New(fault.QuotaExceeded, "The tenant withdrew %d pending claims in the past 7 days, the most this registry keeps (%d): a withdrawn claim is kept for 7 days after its first PUT so that a claim again keeps its time. Claim one of those hosts again, or wait until the oldest is 7 days old.", w, claimMemosPerTenant)
			}
		}
	}
	var next domainRecord
	switch {
	case live:
		next = *prev
	case prev != nil && !lapsed:
		// Withdrawn within its first PUT's week: claimed again, with the
		// time and the TXT value it had.
		next = *prev
		next.Withdrawn = false
	default:
		next = domainRecord{Host: host, Tenant: tenant, Status: DomainPending, Challenge: newChallenge(), ClaimedAt: now}
	}
	next.Route, next.ExecutionID, next.legacy = route, id, false
	s.mu.Unlock()
	ops := claimOps(r.name, prev, &next)
	if reservedHere {
		ops = append(ops, s.unreserve(r.name, host))
	}
	if err := s.commit(ctx, r.name, tenant, nil, ops); err != nil {
		return Domain{}, false, storeFault(err, "The domain could not be saved.")
	}
	s.mu.Lock()
	s.setClaim(r.name, &next)
	s.mu.Unlock()
	return next.view(), !live, nil
}

// Domain answers the tenant's domain; another tenant's host answers like
// an unknown one.
func (r *Registry) Domain(tenant, host string) (Domain, error) {
	s := r.store
	s.mu.Lock()
	defer s.mu.Unlock()
	d := r.domainOf(tenant, host)
	if d == nil {
		return Domain{}, noDomain(host)
	}
	return d.view(), nil
}

// domainOf is the tenant's live claim of host, or nil (none, another
// tenant's, or a pending one past its week the sweep has not forgotten
// yet: all answer alike). s.mu is held.
func (r *Registry) domainOf(tenant, host string) *domainRecord {
	if d := r.store.domains[r.name][host].of(tenant); r.store.current(d) {
		return d
	}
	return nil
}

func noDomain(host string) error {
	return fault.New(fault.NotFound, "No domain %q.", host)
}

// Domains lists the tenant's domains, sorted by host.
func (r *Registry) Domains(tenant string) []Domain {
	s := r.store
	s.mu.Lock()
	out := []Domain{}
	for _, claims := range s.domains[r.name] {
		if d := claims.of(tenant); s.current(d) {
			out = append(out, d.view())
		}
	}
	s.mu.Unlock()
	sort.Slice(out, func(i, j int) bool { return out[i].Host < out[j].Host })
	return out
}

// ActivateDomain makes the tenant's pending domain active when found (the
// TXT values published at ChallengeName(host)) holds its challenge, and
// answers CONFLICT naming what was found otherwise. The first tenant to
// verify takes the host: every other claim of it ends.
func (r *Registry) ActivateDomain(tenant, host string, found []string) (Domain, error) {
	return bounded(r.store, func(ctx context.Context) (Domain, error) { return r.activateDomain(ctx, tenant, host, found) })
}

func (r *Registry) activateDomain(ctx context.Context, tenant, host string, found []string) (Domain, error) {
	s := r.store
	s.routeMu.Lock()
	defer s.routeMu.Unlock()
	if !sending(ctx) {
		return Domain{}, errWriteDropped
	}
	s.mu.Lock()
	d := r.domainOf(tenant, host)
	if d == nil {
		s.mu.Unlock()
		return Domain{}, noDomain(host)
	}
	if d.Status == DomainActive {
		s.mu.Unlock()
		return d.view(), nil
	}
	if act := s.domains[r.name][host].active(); act != nil {
		s.mu.Unlock()
		return Domain{}, domainTakenFault(host)
	}
	proven := false
	for _, v := range found {
		if strings.TrimSpace(v) == d.Challenge {
			proven = true
		}
	}
	if !proven {
		s.mu.Unlock()
		if len(found) == 0 {
			return Domain{}, fault.New(fault.Conflict, "No TXT record was found at %s; publish one with the value the claim gave.", ChallengeName(host))
		}
		return Domain{}, fault.New(fault.Conflict, "The TXT record at %s holds %s, not the value the claim gave.", ChallengeName(host), quoteAll(found))
	}
	next := *d
	next.Status, next.legacy = DomainActive, false
	ops := claimOps(r.name, d, &next)
	// The others' claims end after the host is taken (there may be more
	// of them than one transaction holds); one left by a failed write is
	// stale beside the active claim and never loaded.
	var others []store.Op
	for _, c := range s.domains[r.name][host] {
		if c.Tenant != tenant {
			others = append(others, store.Delete(tableDomains, c.storeKey(r.name)))
		}
	}
	var conds []store.Cond
	if !d.legacy {
		// The host is taken in the store as it was seen here, so that
		// two gateways of a cluster never both activate it.
		conds = append(conds, store.Absent(tableDomains, key(r.name, host)))
	}
	s.mu.Unlock()
	err := s.commit(ctx, r.name, tenant, conds, ops)
	if errors.Is(err, store.ErrConflict) {
		return Domain{}, domainTakenFault(host)
	} else if err != nil {
		return Domain{}, storeFault(err, "The domain could not be saved.")
	}
	s.mu.Lock()
	s.setClaim(r.name, &next)
	s.mu.Unlock()
	if len(others) > 0 {
		s.commitChunked(ctx, r.name, tenant, others)
	}
	if s.opts.Own != nil {
		// In a cluster, claims made through other gateways may be in
		// the store only.
		go s.dropStoredClaims(r.name, tenant, host, domainOp(r.name, &next).Value)
	}
	return next.view(), nil
}

// dropStoredClaims ends the other tenants' claims of a host the tenant has
// just activated that are in the store only (made through other gateways
// of a cluster). It runs after the activation was answered, with no lock
// held, so an etcd that stalls holds no route writer up (a claim left
// meanwhile is stale beside the active one and never loaded: setClaim);
// each delete holds only while the host's active claim is still the one
// activated, so a claim made after the host changed hands is left alone.
func (s *Store) dropStoredClaims(registry, tenant, host string, active []byte) {
	ctx, cancel := context.WithTimeout(context.Background(), storedClaimsBound)
	defer cancel()
	var ops []store.Op
	err := s.w.Scan(ctx, tableDomains, store.Range{Prefix: key(registry, host+"\x00"), KeysOnly: true}, func(k, _ []byte) bool {
		ops = append(ops, store.Delete(tableDomains, store.Copy(k)))
		return true
	})
	if err != nil {
		return
	}
	conds := []store.Cond{store.Holds(tableDomains, key(registry, host), active)}
	room := max(1, s.w.Store.Limits().Ops-len(conds)-1)
	for len(ops) > 0 {
		n := min(room, len(ops))
		if s.commit(ctx, registry, tenant, conds, ops[:n]) != nil {
			return
		}
		ops = ops[n:]
	}
}

// storedClaimsBound is how long dropStoredClaims waits for the store.
const storedClaimsBound = 10 * time.Second

// DeleteDomain removes the tenant's domain at once: an active host is free
// for anyone (a delete the tenant asks for reserves nothing), a pending
// claim is withdrawn (a claim again keeps its first PUT's time), and a
// host reserved to the tenant is freed.
func (r *Registry) DeleteDomain(tenant, host string) error {
	_, err := bounded(r.store, func(ctx context.Context) (struct{}, error) { return struct{}{}, r.deleteDomain(ctx, tenant, host) })
	return err
}

func (r *Registry) deleteDomain(ctx context.Context, tenant, host string) error {
	s := r.store
	s.routeMu.Lock()
	defer s.routeMu.Unlock()
	if !sending(ctx) {
		return errWriteDropped
	}
	s.mu.Lock()
	d := r.domainOf(tenant, host)
	if d == nil {
		s.mu.Unlock()
		if released, err := s.release(ctx, r.name, tenant, host); released {
			return err
		}
		return noDomain(host)
	}
	var ops []store.Op
	var gone []string
	if d.Status == DomainActive {
		s.dropClaim(r.name, host, tenant)
		ops = append(ops, store.Delete(tableDomains, d.storeKey(r.name)))
		gone = append(gone, host)
	} else {
		ops = s.withdraw(r.name, d)
	}
	s.mu.Unlock()
	err := s.commit(ctx, r.name, tenant, nil, ops)
	s.domainsGone(r.name, gone)
	if err != nil {
		return storeFault(err, "The domain could not be removed.")
	}
	return nil
}
