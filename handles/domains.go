package handles

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
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
// shop.example.com bound to one of the tenant's routes or handles. It is
// pending until the tenant proves control of the host's DNS (a TXT record
// with a value only this claim knows), then active: only active domains are
// served by the data plane and given certificates. Domains are written
// under routeMu like routes, because a domain follows a route and ends with
// its handle.

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

// domainRecord is a domain as persisted, in table "domains" under
// key(registry, host).
type domainRecord struct {
	Host        string    `json:"host"`
	Tenant      string    `json:"tenant"`
	Status      string    `json:"status"`
	Route       string    `json:"route,omitempty"`
	ExecutionID string    `json:"executionId,omitempty"`
	Challenge   string    `json:"challenge"`
	ClaimedAt   time.Time `json:"claimedAt"`
}

func (d *domainRecord) view() Domain {
	return Domain{Host: d.Host, Status: d.Status, Route: d.Route, ExecutionID: d.ExecutionID, Challenge: d.Challenge}
}

const (
	// maxDomainsPerTenant bounds the hosts one tenant claims in a registry.
	maxDomainsPerTenant = budgets.DomainsPerTenant
	// pendingClaim is how long an unverified claim holds its host.
	pendingClaim = 7 * 24 * time.Hour
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
	for _, zone := range reserved {
		z := strings.TrimPrefix(strings.ToLower(strings.TrimSuffix(zone, ".")), "*.")
		if z != "" && (h == z || strings.HasSuffix(h, "."+z)) {
			return "", fault.New(fault.BadRequest, "%q is under %s, a zone this gateway keeps for itself.", h, zone)
		}
	}
	return h, nil
}

// domainTakenFault is the CONFLICT of a claim to a host another tenant
// holds, pending, active or reserved: all answer alike.
func domainTakenFault(host string) error {
	return fault.New(fault.Conflict, "The host %q is claimed by another tenant.", host)
}

// PutDomain claims host (already checked by ValidHost) for the tenant,
// bound to one of its routes (route) or handles (id), exactly one of them.
// A new claim is pending; the owner's later put of a claimed host moves it
// at once, keeping its status. created is true for a new claim.
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
	prev := s.domains[r.name][host]
	if prev != nil && prev.Tenant != tenant {
		if prev.Status == DomainActive || now.Sub(prev.ClaimedAt) < pendingClaim {
			s.mu.Unlock()
			return Domain{}, false, domainTakenFault(host)
		}
		prev = nil // an expired claim of another tenant's
	}
	reservedHere := false
	if prev == nil {
		switch owner := s.reservedTo(r.name, host); owner {
		case "":
		case tenant:
			reservedHere = true
		default:
			s.mu.Unlock()
			return Domain{}, false, domainTakenFault(host)
		}
		n := 0
		for _, other := range s.domains[r.name] {
			if other.Tenant == tenant {
				n++
			}
		}
		if n >= maxDomainsPerTenant {
			s.mu.Unlock()
			return Domain{}, false, fault.New(fault.QuotaExceeded, "The tenant claims %d domains, the most this registry allows. Delete one first.", n)
		}
	}
	var next domainRecord
	if prev != nil {
		next = *prev
	} else {
		next = domainRecord{Host: host, Tenant: tenant, Status: DomainPending, Challenge: newChallenge(), ClaimedAt: now}
	}
	next.Route, next.ExecutionID = route, id
	s.mu.Unlock()
	ops := []store.Op{domainOp(r.name, &next)}
	if reservedHere {
		ops = append(ops, s.unreserve(r.name, host))
	}
	if err := s.commit(r.name, tenant, nil, ops); err != nil {
		return Domain{}, false, fault.Wrap(fault.Internal, err, "The domain could not be saved.")
	}
	s.mu.Lock()
	if s.domains[r.name] == nil {
		s.domains[r.name] = map[string]*domainRecord{}
	}
	s.domains[r.name][host] = &next
	s.mu.Unlock()
	return next.view(), prev == nil, nil
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

// domainOf is the tenant's claim of host, or nil (none, or another
// tenant's: both answer alike). s.mu is held.
func (r *Registry) domainOf(tenant, host string) *domainRecord {
	if d := r.store.domains[r.name][host]; d != nil && d.Tenant == tenant {
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
	for _, d := range s.domains[r.name] {
		if d.Tenant == tenant {
			out = append(out, d.view())
		}
	}
	s.mu.Unlock()
	sort.Slice(out, func(i, j int) bool { return out[i].Host < out[j].Host })
	return out
}

// ActivateDomain makes the tenant's pending domain active when found (the
// TXT values published at ChallengeName(host)) holds its challenge, and
// answers CONFLICT naming what was found otherwise.
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
	next.Status = DomainActive
	s.mu.Unlock()
	if err := s.commit(r.name, tenant, nil, []store.Op{domainOp(r.name, &next)}); err != nil {
		return Domain{}, fault.Wrap(fault.Internal, err, "The domain could not be saved.")
	}
	s.mu.Lock()
	s.domains[r.name][host] = &next
	s.mu.Unlock()
	return next.view(), nil
}

// DeleteDomain removes the tenant's domain at once; its host is free for
// anyone (a delete the tenant asks for reserves nothing).
func (r *Registry) DeleteDomain(tenant, host string) error {
	s := r.store
	s.routeMu.Lock()
	defer s.routeMu.Unlock()
	s.mu.Lock()
	d := r.domainOf(tenant, host)
	if d == nil {
		s.mu.Unlock()
		return noDomain(host)
	}
	delete(s.domains[r.name], host)
	s.mu.Unlock()
	err := s.commit(r.name, tenant, nil, []store.Op{store.Delete(tableDomains, key(r.name, host))})
	s.domainsGone(r.name, []string{host})
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
		for _, d := range hosts {
			if d.Status == DomainActive {
				active++
			} else {
				pending++
			}
		}
	}
	return active, pending
}

// DomainActive reports whether host is an active domain of this registry
// (the TLS permission asks it before a certificate is issued or loaded),
// as this gateway's memory has it.
func (r *Registry) DomainActive(host string) bool {
	s := r.store
	s.mu.Lock()
	defer s.mu.Unlock()
	d := s.domains[r.name][strings.ToLower(host)]
	return d != nil && d.Status == DomainActive
}

// DomainActiveNow is DomainActive in a cluster: memory answers for the
// domains of spaces this gateway owns, the store for any other (another
// gateway may have activated or deleted it since this one loaded it),
// through gate as Locate's reads (a read that finds no active domain is a
// miss). On one machine it is DomainActive.
func (r *Registry) DomainActiveNow(ctx context.Context, host string, gate StoreLookups) (bool, error) {
	s := r.store
	host = strings.ToLower(host)
	if s.opts.Own == nil {
		return r.DomainActive(host), nil
	}
	s.mu.Lock()
	d := s.domains[r.name][host]
	s.mu.Unlock()
	if d != nil && s.owns(r.name, d.Tenant) {
		return d.Status == DomainActive, nil
	}
	if gate.Allow != nil && !gate.Allow() {
		return false, fault.New(fault.QuotaExceeded, "Too many names this gateway has not seen were asked for; slow down.")
	}
	v, err := s.w.Get(ctx, tableDomains, key(r.name, host))
	if err != nil {
		return false, err
	}
	var stored domainRecord
	active := v != nil && json.Unmarshal(v, &stored) == nil && stored.Status == DomainActive
	if !active && gate.Miss != nil {
		gate.Miss()
	}
	return active, nil
}

// domainTarget is the record an active domain serves, or nil; s.mu is
// held. A domain bound to a route follows it, but only to a handle of the
// domain's own tenant.
func (s *Store) domainTarget(registry, host string) *Record {
	d := s.domains[registry][host]
	if d == nil && hasUpper(host) {
		d = s.domains[registry][strings.ToLower(host)]
	}
	if d == nil || d.Status != DomainActive {
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

// endDomains drops the domains that end with rec (bound to its id, or to
// a route its end freed), reserves their hosts to the tenant like freed
// route names, and answers the hosts and the writes for the end's commit.
// s.mu is not held.
func (s *Store) endDomains(rec *Record, freedRoutes []string) ([]string, []store.Op) {
	freed := map[string]bool{}
	for _, n := range freedRoutes {
		freed[n] = true
	}
	var hosts []string
	s.mu.Lock()
	for host, d := range s.domains[rec.Registry] {
		if d.Tenant == rec.Tenant && (d.ExecutionID == rec.ID || d.Route != "" && freed[d.Route]) {
			delete(s.domains[rec.Registry], host)
			hosts = append(hosts, host)
		}
	}
	s.mu.Unlock()
	ops := make([]store.Op, 0, 2*len(hosts))
	for _, h := range hosts {
		ops = append(ops, store.Delete(tableDomains, key(rec.Registry, h)))
	}
	return hosts, append(ops, s.reserve(rec, hosts)...)
}

// domainsGone tells the owner of certificates that hosts no longer serve.
func (s *Store) domainsGone(registry string, hosts []string) {
	if len(hosts) > 0 && s.opts.OnDomainsGone != nil {
		s.opts.OnDomainsGone(registry, hosts)
	}
}

// sweepDomains forgets pending claims older than pendingClaim.
func (s *Store) sweepDomains() {
	now := s.opts.Now()
	gone := spaceOps{}
	served := s.servedFilter()
	s.routeMu.Lock()
	defer s.routeMu.Unlock()
	s.mu.Lock()
	for reg, hosts := range s.domains {
		for host, d := range hosts {
			if d.Status == DomainPending && now.Sub(d.ClaimedAt) >= pendingClaim && served(reg, d.Tenant) {
				delete(hosts, host)
				gone.add(reg, d.Tenant, store.Delete(tableDomains, key(reg, host)))
			}
		}
	}
	s.mu.Unlock()
	gone.commit(s)
}

// domainOp writes a domain's claim.
func domainOp(registry string, d *domainRecord) store.Op {
	data, _ := json.Marshal(d)
	return store.Put(tableDomains, key(registry, d.Host), data)
}

// loadDomains reads the domains at Open.
func (s *Store) loadDomains(ctx context.Context) error {
	return s.scanDomains(ctx, store.Range{}, func(reg string, d *domainRecord) {
		if s.domains[reg] == nil {
			s.domains[reg] = map[string]*domainRecord{}
		}
		s.domains[reg][d.Host] = d
	})
}

// scanDomains calls each with every stored domain claim in rng; a
// corrupt claim serves nothing and is skipped.
func (s *Store) scanDomains(ctx context.Context, rng store.Range, each func(registry string, d *domainRecord)) error {
	return s.w.Scan(ctx, tableDomains, rng, func(k, v []byte) bool {
		reg, host, ok := splitKey(k)
		var d domainRecord
		if ok && json.Unmarshal(v, &d) == nil && d.Host == host {
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
