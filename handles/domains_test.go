package handles

import (
	"context"
	"encoding/json"
	"fmt"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/retainer-gw/retainer/budgets"
	"github.com/retainer-gw/retainer/fault"
	"github.com/retainer-gw/retainer/program"
	persist "github.com/retainer-gw/retainer/store"
	"github.com/retainer-gw/retainer/workers"
)

func TestValidHost(t *testing.T) {
	reserved := []string{"*.apps.example.com", "example.net"}
	for in, want := range map[string]string{
		"Shop.Example.COM":   "shop.example.com",
		"shop.example.com.":  "shop.example.com",
		"a.b":                "a.b",
		"x-1.y2.example.org": "x-1.y2.example.org",
		"foo.0xg":            "foo.0xg",
		"a.123a":             "a.123a",
		"1.2.3.x1":           "1.2.3.x1",
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
		// A URL reads these as IPv4 addresses (the last label a number).
		"127.1", "0x7f.1", "foo.123", "foo.0x", "a.0xFF", "1.2.3.4.5", "x.0",
	} {
		if h, err := ValidHost(bad, reserved); fault.CodeOf(err) != fault.BadRequest {
			t.Errorf("ValidHost(%q) = %q, %v; want BAD_REQUEST", bad, h, err)
		}
	}
}

func serveHost(reg *Registry, host string) (string, error) {
	res, err := reg.Serve(context.Background(), host, ResolveRoutes|ResolveDomains, program.NewWireRequest("GET", "https://"+host+"/", nil, nil))
	return string(res.BodyBytes()), err
}

// A tenant's domain: pending until its TXT value is shown, then served,
// following its route; nobody else can claim, see or serve it; it ends
// with its handle, its host reserved to its tenant, and survives restarts.
func TestDomains(t *testing.T) {
	path := filepath.Join(t.TempDir(), "registry.db")
	clock := &fakeClock{now: time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)}
	ends := &eventLog{}
	g := start(t, path, clock, ends, workers.Config{Workers: 1})
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
	// Another tenant: a claim of its own beside alice's (a pending claim
	// holds nothing), with its own TXT value; alice's claim stays alice's
	// to read, verify and delete.
	md, created, err := reg.PutDomain("mallory", "shop.example.com", "", mallory)
	if err != nil || !created || md.Status != DomainPending || md.Challenge == d.Challenge {
		t.Fatalf("another tenant's claim of a pending host: %+v %v", md, err)
	}
	if got, err := reg.Domain("mallory", "shop.example.com"); err != nil || got.Challenge != md.Challenge {
		t.Fatalf("mallory reads its claim: %+v %v", got, err)
	}
	if _, err := reg.ActivateDomain("mallory", "shop.example.com", []string{d.Challenge}); fault.CodeOf(err) != fault.Conflict {
		t.Fatalf("another tenant verified with alice's value: %v", err)
	}
	if _, err := reg.Domain("alice", "shop.example.com"); err != nil {
		t.Fatalf("alice's claim after mallory's: %v", err)
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
	// The first to verify takes the host: mallory's claim ended, and a
	// claim now answers CONFLICT; alice's claim is not mallory's to see.
	if _, err := reg.Domain("mallory", "shop.example.com"); fault.CodeOf(err) != fault.NotFound {
		t.Fatalf("mallory's claim outlived alice's verification: %v", err)
	}
	if _, _, err := reg.PutDomain("mallory", "shop.example.com", "", mallory); fault.CodeOf(err) != fault.Conflict {
		t.Fatalf("another tenant's claim of an active host: %v", err)
	}
	if err := reg.DeleteDomain("mallory", "shop.example.com"); fault.CodeOf(err) != fault.NotFound {
		t.Fatalf("another tenant deleted the domain: %v", err)
	}
	if len(reg.Domains("mallory")) != 0 {
		t.Fatal("another tenant lists the domain")
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
	if _, err := reg.Serve(context.Background(), "shop.example.com", ResolveBoth, program.NewWireRequest("GET", "https://x/", nil, nil)); fault.CodeOf(err) != fault.NotFound {
		t.Fatalf("a domain served where domains are not resolved: %v", err)
	}
	// A pending claim lapses 7 days after its first PUT, whatever
	// deletes and re-claims came between.
	first, _, err := reg.PutDomain("alice", "www.example.com", "shop", "")
	if err != nil {
		t.Fatal(err)
	}
	clock.Add(3 * 24 * time.Hour)
	if err := reg.DeleteDomain("alice", "www.example.com"); err != nil {
		t.Fatal(err)
	}
	if _, err := reg.Domain("alice", "www.example.com"); fault.CodeOf(err) != fault.NotFound {
		t.Fatalf("a deleted claim: %v", err)
	}
	if _, _, err := reg.PutDomain("mallory", "www.example.com", "", mallory); err != nil {
		t.Fatalf("mallory's claim beside a deleted one: %v", err)
	}
	clock.Add(4*24*time.Hour - time.Minute)
	again, created, err := reg.PutDomain("alice", "www.example.com", "shop", "")
	if err != nil || !created || again.Challenge != first.Challenge {
		t.Fatalf("claimed again: %+v %v %v", again, created, err)
	}
	g.store.SweepIdle()
	if _, err := reg.Domain("alice", "www.example.com"); err != nil {
		t.Fatalf("a claim of 7 days less a minute: %v", err)
	}
	clock.Add(2 * time.Minute)
	g.store.SweepIdle()
	if _, err := reg.Domain("alice", "www.example.com"); fault.CodeOf(err) != fault.NotFound {
		t.Fatalf("a claim re-made after a delete outlived its first PUT's week: %v", err)
	}
	if _, err := reg.Domain("mallory", "www.example.com"); err != nil {
		t.Fatalf("mallory's claim of 4 days: %v", err)
	}
	if d, created, err := reg.PutDomain("alice", "www.example.com", "shop", ""); err != nil || !created || d.Challenge == first.Challenge {
		t.Fatalf("a claim after the first one lapsed: %+v %v", d, err)
	}
	// Persisted: a restart keeps the domains, active and pending.
	g.stop()
	g = start(t, path, clock, ends, workers.Config{Workers: 1})
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
	// The end of a1 ends shop.example.com, which stays alice's for a day;
	// a2's end (the route's handle) ends www.example.com, never verified,
	// which stays nobody's.
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
	if fmt.Sprint(gone) != "[shop.example.com]" {
		t.Errorf("hosts reported gone: %v", gone)
	}
	goneMu.Unlock()
	if _, err := serveHost(reg, "shop.example.com"); fault.CodeOf(err) != fault.NotFound {
		t.Fatalf("an ended domain was served: %v", err)
	}
	if _, _, err := reg.PutDomain("mallory", "shop.example.com", "", mallory); fault.CodeOf(err) != fault.Conflict {
		t.Fatalf("another tenant took a host freed by an end: %v", err)
	}
	// www.example.com was pending, never verified: its end reserves
	// nothing (mallory's own claim of it is there still).
	if _, err := reg.Domain("mallory", "www.example.com"); err != nil {
		t.Fatalf("mallory's claim after alice's pending one ended: %v", err)
	}
	if _, created, err := reg.PutDomain("alice", "shop.example.com", "", deploy(t, reg, "alice")); err != nil || !created {
		t.Fatalf("the owner's claim of its reserved host: %v", err)
	}
}

// A tenant claims at most 100 hosts; another tenant's route of the same
// name never receives a domain's traffic.
func TestDomainQuotaAndRouteOwnership(t *testing.T) {
	g := newGateway(t, workers.Config{Workers: 1})
	defer g.stop()
	reg := g.store.Registry("apps", RegistryConfig{})
	id := deploy(t, reg, "alice")
	for i := 0; i < budgets.DomainsPerTenant; i++ {
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

// Deploy, bind, claim and end, repeated: the names and hosts the ends
// reserve count against the tenant's 100, so the loop stops at 100 (it
// once reserved names without end); pending hosts are never reserved; an
// unbind or a delete of a reserved name frees it; another tenant binds as
// before.
func TestReservedNamesCountAgainstTheQuota(t *testing.T) {
	clock := &fakeClock{now: time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)}
	g := start(t, filepath.Join(t.TempDir(), "registry.db"), clock, &eventLog{}, workers.Config{Workers: 1})
	defer g.stop()
	reg := g.store.Registry("apps", RegistryConfig{IdleBound: 72 * time.Hour})
	bound, refused := 0, 0
	for i := 0; i < 130; i++ {
		id := deploy(t, reg, "mallory")
		_, err := reg.BindRoute("mallory", fmt.Sprintf("n%d", i), id)
		switch fault.CodeOf(err) {
		case "":
			bound++
		case fault.QuotaExceeded:
			refused++
		default:
			t.Fatalf("bind %d: %v", i, err)
		}
		if _, _, err := reg.PutDomain("mallory", fmt.Sprintf("p%d.example.com", i), "", id); err != nil {
			t.Fatalf("pending claim %d: %v", i, err)
		}
		if err := reg.Close("mallory", id); err != nil {
			t.Fatal(err)
		}
	}
	if bound != budgets.RoutesPerTenant || refused != 30 {
		t.Fatalf("bound %d, refused %d; want 100, 30", bound, refused)
	}
	t.Logf("130 deploy-bind-claim-end cycles: %d names reserved, %d binds refused", bound, refused)
	// Its reserved names are its own to bind again.
	id := deploy(t, reg, "mallory")
	if _, err := reg.BindRoute("mallory", "n7", id); err != nil {
		t.Fatalf("the tenant's bind of its reserved name: %v", err)
	}
	if _, err := reg.BindRoute("mallory", "fresh", id); fault.CodeOf(err) != fault.QuotaExceeded {
		t.Fatalf("a new name at 100: %v", err)
	}
	// An unbind of a reserved name frees it, and a slot with it.
	if err := reg.UnbindRoute("mallory", "n8"); err != nil {
		t.Fatalf("unbinding a reserved name: %v", err)
	}
	if _, err := reg.BindRoute("mallory", "fresh", id); err != nil {
		t.Fatalf("a new name after an unbind: %v", err)
	}
	// The pending hosts reserved nothing: another tenant claims them.
	bob := deploy(t, reg, "bob")
	if _, _, err := reg.PutDomain("bob", "p3.example.com", "", bob); err != nil {
		t.Fatalf("a pending host freed by an end: %v", err)
	}
	if _, err := reg.BindRoute("bob", "bobs", bob); err != nil {
		t.Fatalf("a bystander's bind: %v", err)
	}
	if _, err := reg.BindRoute("bob", "n120", bob); err != nil {
		t.Fatalf("a name the loop was refused: %v", err)
	}
	// Verified hosts freed by ends are reserved and count too.
	for i := 0; i < budgets.DomainsPerTenant; i++ {
		h := fmt.Sprintf("a%d.example.com", i)
		d, _, err := reg.PutDomain("mallory", h, "", id)
		if err != nil {
			t.Fatalf("claim %d: %v", i, err)
		}
		if _, err := reg.ActivateDomain("mallory", h, []string{d.Challenge}); err != nil {
			t.Fatal(err)
		}
	}
	if err := reg.Close("mallory", id); err != nil {
		t.Fatal(err)
	}
	id = deploy(t, reg, "mallory")
	if _, _, err := reg.PutDomain("mallory", "one-more.example.com", "", id); fault.CodeOf(err) != fault.QuotaExceeded {
		t.Fatalf("a claim past 100 reserved hosts: %v", err)
	}
	if _, _, err := reg.PutDomain("mallory", "a5.example.com", "", id); err != nil {
		t.Fatalf("a claim of its reserved host: %v", err)
	}
	if err := reg.DeleteDomain("mallory", "a6.example.com"); err != nil {
		t.Fatalf("deleting a reserved host: %v", err)
	}
	if _, _, err := reg.PutDomain("bob", "a6.example.com", "", bob); err != nil {
		t.Fatalf("a host its tenant freed: %v", err)
	}
	if _, _, err := reg.PutDomain("bob", "a7.example.com", "", bob); fault.CodeOf(err) != fault.Conflict {
		t.Fatalf("a reserved host: %v", err)
	}
	// A day later everything is free again.
	clock.Add(24*time.Hour + time.Second)
	g.store.SweepIdle()
	if _, err := reg.BindRoute("mallory", "later", id); err != nil {
		t.Fatalf("a day later: %v", err)
	}
}

// A pending claim stored as before several claims of a host were kept
// (under the host alone) loads as its tenant's pending claim, verifies
// into the host's one active claim, and a delete moves it aside.
func TestDomainsStoredBeforeSeveralClaims(t *testing.T) {
	path := filepath.Join(t.TempDir(), "registry.db")
	clock := &fakeClock{now: time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)}
	g := start(t, path, clock, &eventLog{}, workers.Config{Workers: 1})
	reg := g.store.Registry("apps", RegistryConfig{IdleBound: 30 * 24 * time.Hour})
	id := deploy(t, reg, "alice")
	var ops []persist.Op
	for _, h := range []string{"old.example.com", "gone.example.com"} {
		data, _ := json.Marshal(domainRecord{Host: h, Tenant: "alice", Status: DomainPending, ExecutionID: id, Challenge: "c-" + h, ClaimedAt: clock.Now()})
		ops = append(ops, persist.Put(tableDomains, key("apps", h), data))
	}
	if err := g.store.commit(context.Background(), "apps", "alice", nil, ops); err != nil {
		t.Fatal(err)
	}
	g.stop()
	g = start(t, path, clock, &eventLog{}, workers.Config{Workers: 1})
	defer g.stop()
	reg = g.store.Registry("apps", RegistryConfig{IdleBound: 30 * 24 * time.Hour})
	if ds := reg.Domains("alice"); len(ds) != 2 || ds[1].Host != "old.example.com" || ds[1].Status != DomainPending {
		t.Fatalf("loaded: %+v", ds)
	}
	if _, _, err := reg.PutDomain("bob", "old.example.com", "", deploy(t, reg, "bob")); err != nil {
		t.Fatalf("another tenant's claim beside an old one: %v", err)
	}
	if d, err := reg.ActivateDomain("alice", "old.example.com", []string{"c-old.example.com"}); err != nil || d.Status != DomainActive {
		t.Fatalf("verify: %+v %v", d, err)
	}
	if _, err := reg.Domain("bob", "old.example.com"); fault.CodeOf(err) != fault.NotFound {
		t.Fatalf("bob's claim after alice verified: %v", err)
	}
	if err := reg.DeleteDomain("alice", "gone.example.com"); err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	if v, _ := g.store.w.Get(ctx, tableDomains, key("apps", "gone.example.com")); v != nil {
		t.Fatalf("a deleted old claim is still under its host: %s", v)
	}
	g.stop()
	g = start(t, path, clock, &eventLog{}, workers.Config{Workers: 1})
	reg = g.store.Registry("apps", RegistryConfig{IdleBound: 30 * 24 * time.Hour})
	if ds := reg.Domains("alice"); len(ds) != 1 || ds[0].Host != "old.example.com" || ds[0].Status != DomainActive {
		t.Fatalf("after a restart: %+v", ds)
	}
	if !reg.DomainActive("old.example.com") || len(reg.Domains("bob")) != 0 {
		t.Fatal("the active claim or bob's ended one after a restart")
	}
}

// A withdrawn claim keeps its first PUT's time for its whole week: 1,000
// claims and deletes of other hosts never make it forgotten (it once was,
// oldest first, so the next claim of its host got a new TXT value and a new
// week); past 1,000 withdrawn claims within their week a new claim answers
// QUOTA_EXCEEDED, a claim again of a withdrawn host still succeeds with its
// first value, and another tenant claims as before. A week later the
// withdrawn claims have lapsed and new claims succeed.
func TestWithdrawnClaimsKeepTheirWeek(t *testing.T) {
	clock := &fakeClock{now: time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)}
	g := start(t, filepath.Join(t.TempDir(), "registry.db"), clock, &eventLog{}, workers.Config{Workers: 1})
	defer g.stop()
	reg := g.store.Registry("apps", RegistryConfig{IdleBound: 30 * 24 * time.Hour})
	id, bob := deploy(t, reg, "mallory"), deploy(t, reg, "bob")
	first, _, err := reg.PutDomain("mallory", "keep.example.com", "", id)
	if err != nil {
		t.Fatal(err)
	}
	if err := reg.DeleteDomain("mallory", "keep.example.com"); err != nil {
		t.Fatal(err)
	}
	refused := -1
	for i := 0; i < claimMemosPerTenant+5; i++ {
		h := fmt.Sprintf("churn%d.example.com", i)
		_, _, err := reg.PutDomain("mallory", h, "", id)
		if fault.CodeOf(err) == fault.QuotaExceeded {
			if !strings.Contains(err.Error(), "1000") {
				t.Fatalf("the refusal does not name the cap: %v", err)
			}
			refused = i
			break
		}
		if err != nil {
			t.Fatalf("claim %d: %v", i, err)
		}
		if err := reg.DeleteDomain("mallory", h); err != nil {
			t.Fatal(err)
		}
	}
	if refused != claimMemosPerTenant-1 {
		t.Fatalf("the claim refused after 1,000 withdrawn ones: %d (-1: none)", refused)
	}
	if d, _, err := reg.PutDomain("mallory", "keep.example.com", "", id); err != nil || d.Challenge != first.Challenge {
		t.Fatalf("claimed again after 1,000 withdrawn claims: %+v %v (want the first TXT value %s)", d, err, first.Challenge)
	}
	if _, _, err := reg.PutDomain("bob", "bob.example.com", "", bob); err != nil {
		t.Fatalf("another tenant's claim: %v", err)
	}
	clock.Add(budgets.DomainClaimPending + time.Minute)
	g.store.SweepIdle()
	if d, _, err := reg.PutDomain("mallory", "keep.example.com", "", id); err != nil || d.Challenge == first.Challenge {
		t.Fatalf("a claim after the first one's week: %+v %v", d, err)
	}
	if _, _, err := reg.PutDomain("mallory", "after.example.com", "", id); err != nil {
		t.Fatalf("a new claim after the withdrawn ones lapsed: %v", err)
	}
}
