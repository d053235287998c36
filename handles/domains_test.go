package handles

import (
	"context"
	"fmt"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/retainer-gw/retainer/fault"
	"github.com/retainer-gw/retainer/sandbox"
	"github.com/retainer-gw/retainer/sandbox/worker"
)

func TestValidHost(t *testing.T) {
	reserved := []string{"*.apps.example.com", "example.net"}
	for in, want := range map[string]string{
		"Shop.Example.COM":   "shop.example.com",
		"shop.example.com.":  "shop.example.com",
		"a.b":                "a.b",
		"x-1.y2.example.org": "x-1.y2.example.org",
	} {
		if got, err := ValidHost(in, reserved); err != nil || got != want {
			t.Errorf("ValidHost(%q) = %q, %v; want %q", in, got, err, want)
		}
	}
	for _, bad := range []string{
		"", "localhost", "127.0.0.1", "[::1]", "::1", "*.example.com", "-a.example.com", "a-.example.com",
		"a..example.com", "a_b.example.com", strings.Repeat("a", 64) + ".example.com",
		strings.Repeat("abcdefghi.", 26) + "com", "x.apps.example.com", "apps.example.com", "example.net", "a.b.example.net",
		"shop.example.com/x", "shop example.com",
	} {
		if h, err := ValidHost(bad, reserved); fault.CodeOf(err) != fault.BadRequest {
			t.Errorf("ValidHost(%q) = %q, %v; want BAD_REQUEST", bad, h, err)
		}
	}
}

func serveHost(reg *Registry, host string) (string, error) {
	res, err := reg.Serve(context.Background(), host, ResolveRoutes|ResolveDomains, sandbox.NewWireRequest("GET", "https://"+host+"/", nil, nil))
	return string(res.BodyBytes()), err
}

// A tenant's domain: pending until its TXT value is shown, then served,
// following its route; nobody else can claim, see or serve it; it ends
// with its handle, its host reserved to its tenant, and survives restarts.
func TestDomains(t *testing.T) {
	path := filepath.Join(t.TempDir(), "registry.db")
	clock := &fakeClock{now: time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)}
	ends := &eventLog{}
	g := start(t, path, clock, ends, worker.Config{Workers: 1})
	defer func() { g.stop() }()
	var goneMu sync.Mutex
	var gone []string
	g.store.opts.OnDomainsGone = func(reg string, hosts []string) {
		goneMu.Lock()
		gone = append(gone, hosts...)
		goneMu.Unlock()
	}
	reg := g.store.Registry("apps", RegistryConfig{IdleBound: 30 * 24 * time.Hour})
	a1, a2 := deploy(t, reg, "alice"), deploy(t, reg, "alice")
	mallory := deploy(t, reg, "mallory")
	if _, err := reg.BindRoute("alice", "shop", a1); err != nil {
		t.Fatal(err)
	}
	if _, _, err := reg.PutDomain("alice", "shop.example.com", "nosuch", ""); fault.CodeOf(err) != fault.NotFound {
		t.Fatalf("a route the tenant does not bind: %v", err)
	}
	if _, _, err := reg.PutDomain("alice", "shop.example.com", "", mallory); fault.CodeOf(err) == "" {
		t.Fatal("a domain bound to another tenant's handle")
	}
	if _, _, err := reg.PutDomain("alice", "shop.example.com", "shop", a1); fault.CodeOf(err) != fault.BadRequest {
		t.Fatalf("both a route and an id: %v", err)
	}
	d, created, err := reg.PutDomain("alice", "shop.example.com", "shop", "")
	if err != nil || !created || d.Status != DomainPending || len(d.Challenge) < 32 {
		t.Fatalf("claim: %+v %v %v", d, created, err)
	}
	if _, err := serveHost(reg, "shop.example.com"); fault.CodeOf(err) != fault.NotFound {
		t.Fatalf("a pending domain was served: %v", err)
	}
	if reg.DomainActive("shop.example.com") {
		t.Fatal("a pending domain may have a certificate")
	}
	// Another tenant: 409 on a claim, 404 on a read, verify or delete.
	if _, _, err := reg.PutDomain("mallory", "shop.example.com", "", mallory); fault.CodeOf(err) != fault.Conflict {
		t.Fatalf("another tenant's claim of a pending host: %v", err)
	}
	if _, err := reg.Domain("mallory", "shop.example.com"); fault.CodeOf(err) != fault.NotFound {
		t.Fatalf("another tenant read the domain: %v", err)
	}
	if _, err := reg.ActivateDomain("mallory", "shop.example.com", []string{d.Challenge}); fault.CodeOf(err) != fault.NotFound {
		t.Fatalf("another tenant verified the domain: %v", err)
	}
	if err := reg.DeleteDomain("mallory", "shop.example.com"); fault.CodeOf(err) != fault.NotFound {
		t.Fatalf("another tenant deleted the domain: %v", err)
	}
	if len(reg.Domains("mallory")) != 0 {
		t.Fatal("another tenant lists the domain")
	}
	// Verification: nothing, the wrong value, then the right one.
	if _, err := reg.ActivateDomain("alice", "shop.example.com", nil); fault.CodeOf(err) != fault.Conflict || !strings.Contains(err.Error(), "_retainer-challenge.shop.example.com") {
		t.Fatalf("verified with no record: %v", err)
	}
	if _, err := reg.ActivateDomain("alice", "shop.example.com", []string{"stale-value"}); fault.CodeOf(err) != fault.Conflict || !strings.Contains(err.Error(), `"stale-value"`) {
		t.Fatalf("verified with the wrong value: %v", err)
	}
	if d, err := reg.ActivateDomain("alice", "shop.example.com", []string{"other", d.Challenge}); err != nil || d.Status != DomainActive {
		t.Fatalf("verify: %+v %v", d, err)
	}
	if !reg.DomainActive("SHOP.example.com") {
		t.Fatal("an active domain may not have a certificate")
	}
	if got, err := serveHost(reg, "shop.example.com"); err != nil || got != `{"served":1}` {
		t.Fatalf("served %q %v", got, err)
	}
	// The host follows its route, and an owner's put moves it at once.
	if _, err := reg.BindRoute("alice", "shop", a2); err != nil {
		t.Fatal(err)
	}
	if got, _ := serveHost(reg, "shop.example.com"); got != `{"served":1}` {
		t.Fatalf("after the route moved: %q (want a2's first)", got)
	}
	if d, created, err := reg.PutDomain("alice", "shop.example.com", "", a1); err != nil || created || d.Status != DomainActive || d.ExecutionID != a1 {
		t.Fatalf("move: %+v %v %v", d, created, err)
	}
	if got, _ := serveHost(reg, "shop.example.com"); got != `{"served":2}` {
		t.Fatalf("after the move: %q (want a1's second)", got)
	}
	// A route name never resolves as a host, nor a host as a route.
	if _, err := reg.Serve(context.Background(), "shop.example.com", ResolveBoth, sandbox.NewWireRequest("GET", "https://x/", nil, nil)); fault.CodeOf(err) != fault.NotFound {
		t.Fatalf("a domain served where domains are not resolved: %v", err)
	}
	// Deleting frees the host at once.
	if _, _, err := reg.PutDomain("alice", "www.example.com", "shop", ""); err != nil {
		t.Fatal(err)
	}
	if err := reg.DeleteDomain("alice", "www.example.com"); err != nil {
		t.Fatal(err)
	}
	if _, _, err := reg.PutDomain("mallory", "www.example.com", "", mallory); err != nil {
		t.Fatalf("a deleted host: %v", err)
	}
	// A pending claim holds its host for 7 days, then anyone may claim it.
	clock.Add(7*24*time.Hour - time.Minute)
	if _, _, err := reg.PutDomain("alice", "www.example.com", "shop", ""); fault.CodeOf(err) != fault.Conflict {
		t.Fatalf("a pending claim of 7 days less a minute: %v", err)
	}
	clock.Add(2 * time.Minute)
	if _, _, err := reg.PutDomain("alice", "www.example.com", "shop", ""); err != nil {
		t.Fatalf("an expired claim: %v", err)
	}
	// Persisted: a restart keeps the domains, active and pending.
	g.stop()
	g = start(t, path, clock, ends, worker.Config{Workers: 1})
	g.store.opts.OnDomainsGone = func(reg string, hosts []string) {
		goneMu.Lock()
		gone = append(gone, hosts...)
		goneMu.Unlock()
	}
	reg = g.store.Registry("apps", RegistryConfig{IdleBound: 30 * 24 * time.Hour})
	if ds := reg.Domains("alice"); fmt.Sprintf("%v", ds) != fmt.Sprintf("%v", []Domain{
		{Host: "shop.example.com", Status: DomainActive, ExecutionID: a1, Challenge: d.Challenge},
		{Host: "www.example.com", Status: DomainPending, Route: "shop", Challenge: ds[1].Challenge},
	}) {
		t.Fatalf("after a restart: %+v", ds)
	}
	if !reg.DomainActive("shop.example.com") {
		t.Fatal("the active domain was lost by a restart")
	}
	// The end of a1 ends shop.example.com; a2's end (the route's handle)
	// ends www.example.com; both hosts stay alice's for a day.
	if err := reg.Close("alice", a1); err != nil {
		t.Fatal(err)
	}
	if err := reg.Close("alice", a2); err != nil {
		t.Fatal(err)
	}
	if ds := reg.Domains("alice"); len(ds) != 0 {
		t.Fatalf("domains outlived their handles: %+v", ds)
	}
	goneMu.Lock()
	if fmt.Sprint(gone) != "[www.example.com shop.example.com www.example.com]" {
		t.Errorf("hosts reported gone: %v", gone)
	}
	goneMu.Unlock()
	if _, err := serveHost(reg, "shop.example.com"); fault.CodeOf(err) != fault.NotFound {
		t.Fatalf("an ended domain was served: %v", err)
	}
	if _, _, err := reg.PutDomain("mallory", "shop.example.com", "", mallory); fault.CodeOf(err) != fault.Conflict {
		t.Fatalf("another tenant took a host freed by an end: %v", err)
	}
	again := deploy(t, reg, "alice")
	if _, created, err := reg.PutDomain("alice", "shop.example.com", "", again); err != nil || !created {
		t.Fatalf("the owner's claim of its reserved host: %v", err)
	}
}

// A tenant claims at most 100 hosts; another tenant's route of the same
// name never receives a domain's traffic.
func TestDomainQuotaAndRouteOwnership(t *testing.T) {
	g := newGateway(t, worker.Config{Workers: 1})
	defer g.stop()
	reg := g.store.Registry("apps", RegistryConfig{})
	id := deploy(t, reg, "alice")
	for i := 0; i < maxDomainsPerTenant; i++ {
		if _, _, err := reg.PutDomain("alice", fmt.Sprintf("h%d.example.com", i), "", id); err != nil {
			t.Fatal(err)
		}
	}
	if _, _, err := reg.PutDomain("alice", "one-more.example.com", "", id); fault.CodeOf(err) != fault.QuotaExceeded {
		t.Fatalf("claim 101: %v", err)
	}
	if _, _, err := reg.PutDomain("alice", "h3.example.com", "", id); err != nil {
		t.Fatalf("the owner's put of a host it has, at the quota: %v", err)
	}
	if _, err := reg.BindRoute("alice", "web", id); err != nil {
		t.Fatal(err)
	}
	d, _, err := reg.PutDomain("alice", "h0.example.com", "web", "")
	if err != nil {
		t.Fatal(err)
	}
	reg.ActivateDomain("alice", "h0.example.com", []string{d.Challenge})
	if err := reg.UnbindRoute("alice", "web"); err != nil {
		t.Fatal(err)
	}
	mallory := deploy(t, reg, "mallory")
	if _, err := reg.BindRoute("mallory", "web", mallory); err != nil {
		t.Fatal(err)
	}
	if got, err := serveHost(reg, "h0.example.com"); fault.CodeOf(err) != fault.NotFound {
		t.Fatalf("alice's domain served mallory's route: %q %v", got, err)
	}
}
