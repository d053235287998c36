package caddymodule

import (
	"context"
	"errors"
	"net"
	"net/http"
	"sync"
	"time"

	"golang.org/x/time/rate"

	"github.com/retainer-gw/retainer/authz"
	"github.com/retainer-gw/retainer/budgets"
	"github.com/retainer-gw/retainer/fault"
	"github.com/retainer-gw/retainer/handles"
)

// DomainsConfig is retainer_api's `domains` block (docs/domains.md).
type DomainsConfig struct {
	// Resolver is the DNS server (host:port) asked for a claim's TXT
	// record. Default: the system's resolver.
	Resolver string `json:"resolver,omitempty"`
	// Target is the name tenants point their hosts at (a CNAME), shown in
	// every domain's answer.
	Target string `json:"target,omitempty"`
	// Reserved are zones of the operator's own ("*.apps.example.com"): no
	// tenant may claim a host in or under them.
	Reserved []string `json:"reserved,omitempty"`
}

// Verification attempts a tenant may make: a burst of
// budgets.DomainVerifyBurst, then one every budgets.DomainVerifyEvery
// (each is a DNS query the gateway sends for it).

// domainsAPI serves /domains for one retainer_api.
type domainsAPI struct {
	cfg      DomainsConfig
	resolver *net.Resolver
	limits   tenantLimits
}

func newDomainsAPI(cfg *DomainsConfig) *domainsAPI {
	d := &domainsAPI{resolver: net.DefaultResolver}
	if cfg != nil {
		d.cfg = *cfg
	}
	if addr := d.cfg.Resolver; addr != "" {
		d.resolver = &net.Resolver{PreferGo: true, Dial: func(ctx context.Context, network, _ string) (net.Conn, error) {
			return (&net.Dialer{}).DialContext(ctx, network, addr)
		}}
	}
	d.limits.every, d.limits.burst = budgets.DomainVerifyEvery, budgets.DomainVerifyBurst
	return d
}

// domainAnswer is one domain as the API shows it.
type domainAnswer struct {
	Host        string        `json:"host"`
	Status      string        `json:"status"`
	Route       string        `json:"route,omitempty"`
	ExecutionID string        `json:"executionId,omitempty"`
	Target      string        `json:"target,omitempty"`
	Verify      *domainVerify `json:"verify,omitempty"`
}

type domainVerify struct {
	TXT struct {
		Name  string `json:"name"`
		Value string `json:"value"`
	} `json:"txt"`
}

// answer shows d; a pending domain carries the TXT record that proves it
// when withVerify.
func (d *domainsAPI) answer(dom handles.Domain, withVerify, withTarget bool) domainAnswer {
	a := domainAnswer{Host: dom.Host, Status: dom.Status, Target: d.cfg.Target}
	if withTarget {
		a.Route, a.ExecutionID = dom.Route, dom.ExecutionID
	}
	if withVerify && dom.Status == handles.DomainPending {
		a.Verify = new(domainVerify)
		a.Verify.TXT.Name, a.Verify.TXT.Value = handles.ChallengeName(dom.Host), dom.Challenge
	}
	return a
}

// domainCaller authorizes a request about one domain: the caller, with
// scope, and the request's {host}, checked and lower-cased.
func (h *API) domainCaller(w http.ResponseWriter, r *http.Request, scope string) (caller, string, bool) {
	c, ok := h.authorize(w, r, scope)
	if !ok {
		return caller{}, "", false
	}
	host, err := handles.ValidHost(r.PathValue("host"), h.domains.cfg.Reserved)
	if err != nil {
		writeFault(w, err, "")
		return caller{}, "", false
	}
	return c, host, true
}

func (h *API) listDomains(w http.ResponseWriter, r *http.Request) {
	c, ok := h.authorize(w, r, authz.ScopeRead)
	if !ok {
		return
	}
	out := []domainAnswer{}
	for _, dom := range h.registry().Domains(c.tenant) {
		out = append(out, h.domains.answer(dom, false, true))
	}
	writeJSON(w, http.StatusOK, map[string]any{"domains": out})
}

func (h *API) getDomain(w http.ResponseWriter, r *http.Request) {
	c, host, ok := h.domainCaller(w, r, authz.ScopeRead)
	if !ok {
		return
	}
	dom, err := h.registry().Domain(c.tenant, host)
	if err != nil {
		writeFault(w, err, "")
		return
	}
	writeJSON(w, http.StatusOK, h.domains.answer(dom, true, true))
}

func (h *API) putDomain(w http.ResponseWriter, r *http.Request) {
	c, host, ok := h.domainCaller(w, r, authz.ScopeDeploy)
	if !ok {
		return
	}
	var req struct {
		Route       string `json:"route"`
		ExecutionID string `json:"executionId"`
	}
	if !decodeBody(w, r, 64<<10, &req) {
		return
	}
	dom, _, err := h.registry().PutDomain(c.tenant, host, req.Route, req.ExecutionID)
	if err != nil {
		writeFault(w, err, "")
		return
	}
	if dom.Status == handles.DomainActive {
		writeJSON(w, http.StatusOK, h.domains.answer(dom, false, false))
		return
	}
	writeJSON(w, http.StatusAccepted, h.domains.answer(dom, true, false))
}

func (h *API) deleteDomain(w http.ResponseWriter, r *http.Request) {
	c, host, ok := h.domainCaller(w, r, authz.ScopeDeploy)
	if !ok {
		return
	}
	if err := h.registry().DeleteDomain(c.tenant, host); err != nil {
		writeFault(w, err, "")
		return
	}
	w.WriteHeader(http.StatusNoContent)
}

func (h *API) verifyDomain(w http.ResponseWriter, r *http.Request) {
	c, host, ok := h.domainCaller(w, r, authz.ScopeDeploy)
	if !ok {
		return
	}
	reg := h.registry()
	dom, err := reg.Domain(c.tenant, host)
	if err != nil {
		writeFault(w, err, "")
		return
	}
	if dom.Status == handles.DomainPending {
		if !h.domains.limits.allow(c.tenant) {
			writeFault(w, fault.New(fault.QuotaExceeded, "Too many verifications by this tenant; try again in a few seconds."), "")
			return
		}
		found, err := h.domains.lookupTXT(r.Context(), handles.ChallengeName(host))
		if err != nil {
			writeFault(w, fault.New(fault.Conflict, "The TXT lookup of %s failed: %v.", handles.ChallengeName(host), err), "")
			return
		}
		if dom, err = reg.ActivateDomain(c.tenant, host, found); err != nil {
			writeFault(w, err, "")
			return
		}
	}
	writeJSON(w, http.StatusOK, h.domains.answer(dom, false, false))
}

// lookupTXT answers the TXT values at name; a name with no records
// answers none, without error.
func (d *domainsAPI) lookupTXT(ctx context.Context, name string) ([]string, error) {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	txt, err := d.resolver.LookupTXT(ctx, name)
	var dnsErr *net.DNSError
	if errors.As(err, &dnsErr) && dnsErr.IsNotFound {
		return nil, nil
	}
	return txt, err
}

// tenantLimits is a rate limit per tenant; tenants idle for a minute are
// forgotten, so the table holds only those that asked lately.
type tenantLimits struct {
	every time.Duration
	burst int

	mu    sync.Mutex
	by    map[string]*tenantLimit
	swept time.Time
}

type tenantLimit struct {
	lim  *rate.Limiter
	last time.Time
}

func (l *tenantLimits) allow(tenant string) bool {
	now := time.Now()
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.by == nil {
		l.by = map[string]*tenantLimit{}
	}
	if now.Sub(l.swept) > time.Minute {
		for t, e := range l.by {
			if now.Sub(e.last) > time.Duration(l.burst)*l.every {
				delete(l.by, t)
			}
		}
		l.swept = now
	}
	e := l.by[tenant]
	if e == nil {
		e = &tenantLimit{lim: rate.NewLimiter(rate.Every(l.every), l.burst)}
		l.by[tenant] = e
	}
	e.last = now
	return e.lim.AllowN(now, 1)
}
