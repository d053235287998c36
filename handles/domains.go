package handles

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"net"
	"regexp"
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
	// A claim stays pending budgets.DomainClaimPending after its first
	// PUT.
	// claimMemosPerTenant bounds the withdrawn claims kept for a tenant:
	// a new claim past it answers QUOTA_EXCEEDED.
	claimMemosPerTenant = 10 * budgets.DomainsPerTenant
)

// ChallengeName is the TXT record that proves control of host.
func ChallengeName(host string) string { return "_retainer-challenge." + host }

var ldhLabel = regexp.MustCompile(`^[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?$`)

// ValidHost checks a domain's host name and answers it lower-cased: at
// least two LDH labels of 1–63 characters, 253 in all, no IP literal, no
// wildcard, and not in or under a zone of reserved (the operator's own
// zones; "*.apps.example.com" and "apps.example.com" both reserve that zone
// and every name under it).
func ValidHost(host string, reserved []string) (string, error) {
	h := strings.ToLower(strings.TrimSuffix(host, "."))
	bad := func(why string) (string, error) {
		return "", fault.New(fault.BadRequest, "%q is not a host a domain can have: %s", host, why)
	}
	if h == "" || len(h) > 253 {
		return bad("a host name has 1 to 253 characters.")
	}
	if net.ParseIP(h) != nil || strings.HasPrefix(h, "[") {
		return bad("an IP address is not a domain.")
	}
	if strings.Contains(h, "*") {
		return bad("a wildcard is not a domain; register each host.")
	}
	labels := strings.Split(h, ".")
	if len(labels) < 2 {
		return bad("a domain has at least two labels (shop.example.com).")
	}
	for _, l := range labels {
		if !ldhLabel.MatchString(l) {
			return bad("each label is 1 to 63 letters, digits or inner hyphens.")
		}
	}
	if ipv4Shaped(labels[len(labels)-1]) {
		return bad("a URL reads a host whose last label is a number as an IPv4 address.")
	}
	for _, zone := range reserved {
		z := strings.TrimPrefix(strings.ToLower(strings.TrimSuffix(zone, ".")), "*.")
		if z != "" && (h == z || strings.HasSuffix(h, "."+z)) {
			return "", fault.New(fault.BadRequest, "%q is under %s, a zone this gateway keeps for itself.", h, zone)
		}
	}
	return h, nil
}

// ipv4Shaped reports whether a URL parser reads a host ending in label as
// an IPv4 address (the WHATWG URL standard's "ends in a number" rule):
// `127.1`, `0x7f.1` and `foo.123` are addresses to a browser, so no domain
// may be one. label is lower case.
func ipv4Shaped(label string) bool {
	digits := strings.TrimLeft(label, "0123456789")
	if label != "" && digits == "" {
		return true
	}
	hex, ok := strings.CutPrefix(label, "0x")
	return ok && strings.Trim(hex, "0123456789abcdef") == ""
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
func (r *Registry) PutDomain(tenant, host, route, id string) (d Domain, created bool, err error) {
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
	if err := s.commit(r.name, tenant, nil, ops); err != nil {
		return Domain{}, false, fault.Wrap(fault.Internal, err, "The domain could not be saved.")
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

// current reports whether d is a claim its tenant sees: not withdrawn,
// and active or within its first PUT's week. s.mu is held.
func (s *Store) current(d *domainRecord) bool {
	return d.live() && (d.Status == DomainActive || s.opts.Now().Sub(d.ClaimedAt) < budgets.DomainClaimPending)
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
	s := r.store
	s.routeMu.Lock()
	defer s.routeMu.Unlock()
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
	err := s.commit(r.name, tenant, conds, ops)
	if errors.Is(err, store.ErrConflict) {
		return Domain{}, domainTakenFault(host)
	} else if err != nil {
		return Domain{}, fault.Wrap(fault.Internal, err, "The domain could not be saved.")
	}
	s.mu.Lock()
	s.setClaim(r.name, &next)
	s.mu.Unlock()
	if s.opts.Own != nil {
		// In a cluster, claims made through other gateways may be in
		// the store only.
		prefix := key(r.name, host+"\x00")
		s.w.Scan(context.Background(), tableDomains, store.Range{Prefix: prefix}, func(k, _ []byte) bool {
			others = append(others, store.Delete(tableDomains, append([]byte(nil), k...)))
			return true
		})
	}
	if len(others) > 0 {
		s.commitChunked(r.name, tenant, others)
	}
	return next.view(), nil
}

// DeleteDomain removes the tenant's domain at once: an active host is free
// for anyone (a delete the tenant asks for reserves nothing), a pending
// claim is withdrawn (a claim again keeps its first PUT's time), and a
// host reserved to the tenant is freed.
func (r *Registry) DeleteDomain(tenant, host string) error {
	s := r.store
	s.routeMu.Lock()
	defer s.routeMu.Unlock()
	s.mu.Lock()
	d := r.domainOf(tenant, host)
	if d == nil {
		s.mu.Unlock()
		if released, err := s.release(r.name, tenant, host); released {
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
	err := s.commit(r.name, tenant, nil, ops)
	s.domainsGone(r.name, gone)
	if err != nil {
		return fault.Wrap(fault.Internal, err, "The domain could not be removed.")
	}
	return nil
}

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

func newChallenge() string {
	b := make([]byte, 24)
	rand.Read(b)
	return hex.EncodeToString(b)
}

func quoteAll(vs []string) string {
	q := make([]string, 0, len(vs))
	for i, v := range vs {
		if i == 4 {
			q = append(q, "…")
			break
		}
		if len(v) > 80 {
			v = v[:80] + "…"
		}
		q = append(q, `"`+v+`"`)
	}
	return strings.Join(q, ", ")
}
