package handles

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/retainer-gw/retainer/fault"
	"github.com/retainer-gw/retainer/internal/etcdtest"
	"github.com/retainer-gw/retainer/program"
	persist "github.com/retainer-gw/retainer/store"
	"github.com/retainer-gw/retainer/workers"
)

func deployAnswering(t *testing.T, reg *Registry, tenant, body string) string {
	t.Helper()
	res, err := reg.Execute(context.Background(), tenant, ExecRequest{Program: program.Program{
		Code: fmt.Sprintf("async () => ({ fetch() { return new Response(%q) } })", body)}, RetainHandles: true, Timeout: 2 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	return res.ExecutionID
}

// A replaced version ends after the retention unless something else points
// at it: another route, a domain by id, or another route's kept version.
func TestReplacedVersionsEndAfterTheirRetention(t *testing.T) {
	g := newGateway(t, workers.Config{Workers: 1})
	reg := g.store.Registry("apps", RegistryConfig{IdleBound: 10 * time.Minute, VersionRetention: time.Hour})
	a, b, c := deployAnswering(t, reg, "alice", "a"), deployAnswering(t, reg, "alice", "b"), deployAnswering(t, reg, "alice", "c")
	for _, id := range []string{a, b} {
		if _, err := reg.BindRoute("alice", "shop", id); err != nil {
			t.Fatal(err)
		}
	}
	reg.BindRoute("alice", "docs", c)
	reg.BindRoute("alice", "docs", b) // c is docs' kept version, b its current too
	d := deployAnswering(t, reg, "alice", "d")
	reg.BindRoute("alice", "x", d)
	reg.BindRoute("alice", "x", b)
	reg.BindRoute("alice", "y", d) // x's replaced version, y's current
	g.clock.Add(50 * time.Minute)
	g.store.SweepIdle()
	for _, id := range []string{a, b, c} {
		if info, err := reg.Get("alice", id); err != nil || !info.Deployment {
			t.Fatalf("within the retention %s: %+v %v", id, info, err)
		}
	}
	g.clock.Add(11 * time.Minute)
	g.store.SweepIdle()
	for _, id := range []string{a, c} {
		if _, err := reg.Get("alice", id); !errors.Is(err, fault.ErrHandlesClosed) {
			t.Fatalf("a version past its retention lives: %v", err)
		}
		if fmt.Sprint(g.ends.reasons(id)) != "["+ReasonVersionRetention+"]" {
			t.Fatalf("end events of %s: %v", id, g.ends.reasons(id))
		}
	}
	if info, err := reg.Get("alice", d); err != nil || !info.Deployment {
		t.Fatalf("a replaced version another route points at: %+v %v", info, err)
	}
	if r, err := reg.Route("alice", "shop"); err != nil || r.ExecutionID != b || len(r.Versions) != 1 {
		t.Fatalf("the route after its versions ended: %+v %v", r, err)
	}
	if _, err := reg.Rollback("alice", "shop", ""); fault.CodeOf(err) != fault.NoSuchHandle {
		t.Fatalf("a rollback with no kept version: %v", err)
	}
}

// In a cluster the versions and the split are the route's: a gateway that
// comes to own the tenant's space serves the split another one bound.
func TestSplitsCrossGateways(t *testing.T) {
	srv := etcdtest.Start(t)
	open := func() (persist.Store, error) {
		return persist.OpenEtcd(context.Background(), persist.EtcdConfig{Endpoints: []string{srv.Endpoint}, Prefix: "/splits"})
	}
	clock := &fakeClock{now: time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)}
	clustered := func(o *Options) { o.Own = func(context.Context, string) error { return nil } }
	cfg := RegistryConfig{IdleBound: time.Hour}
	first := startOn(t, open, clock, &eventLog{}, workers.Config{Workers: 1}, clustered)
	second := startOn(t, open, clock, &eventLog{}, workers.Config{Workers: 1}, clustered)
	reg := first.store.Registry("apps", cfg)
	other := second.store.Registry("apps", cfg)
	ctx := context.Background()
	if err := reg.Own(ctx, "alice"); err != nil {
		t.Fatal(err)
	}
	a, b := deployAnswering(t, reg, "alice", "a"), deployAnswering(t, reg, "alice", "b")
	reg.BindRoute("alice", "shop", a)
	if _, err := reg.BindSplit("alice", "shop", []Share{{a, 50}, {b, 50}}); err != nil {
		t.Fatal(err)
	}
	if rs := reg.Routes("alice"); len(rs) != 1 || len(rs[0].Split) != 2 {
		t.Fatalf("the routes listed: %+v", rs)
	}
	if err := other.Own(ctx, "alice"); err != nil {
		t.Fatal(err)
	}
	d, err := other.Route("alice", "shop")
	if err != nil || len(d.Split) != 2 || len(d.Versions) != 2 {
		t.Fatalf("the other gateway's view: %+v %v", d, err)
	}
	seen := map[string]bool{}
	for i := 0; i < 40 && len(seen) < 2; i++ {
		res, err := other.Serve(ctx, "shop", ResolveRoutes, program.NewWireRequest("GET", "https://shop.test/", nil, nil))
		if err != nil {
			t.Fatal(err)
		}
		seen[string(res.BodyBytes())] = true
	}
	if !seen["a"] || !seen["b"] {
		t.Fatalf("the other gateway served %v of the split", seen)
	}
	pinned := program.NewWireRequest("GET", "https://shop.test/", [][2]string{{"Cookie", VersionCookie + "=" + b}}, nil)
	for i := 0; i < 10; i++ {
		if res, err := other.Serve(ctx, "shop", ResolveRoutes, pinned); err != nil || string(res.BodyBytes()) != "b" {
			t.Fatalf("a pinned request: %q %v", res.BodyBytes(), err)
		}
	}
}

// A split's member that ends leaves the route's answer (docs/deployments.md):
// the others are listed; with one left the route shows no split and serves
// its executionId alone.
func TestEndedSplitMembersAreNotListed(t *testing.T) {
	g := newGateway(t, workers.Config{Workers: 1})
	reg := g.store.Registry("apps", RegistryConfig{IdleBound: time.Hour})
	a, b, c := deployAnswering(t, reg, "alice", "a"), deployAnswering(t, reg, "alice", "b"), deployAnswering(t, reg, "alice", "c")
	bystander := deployAnswering(t, reg, "bob", "bob")
	if _, err := reg.BindSplit("alice", "shop", []Share{{a, 50}, {b, 25}, {c, 25}}); err != nil {
		t.Fatal(err)
	}
	if err := reg.Close("alice", b); err != nil {
		t.Fatal(err)
	}
	if d, err := reg.Route("alice", "shop"); err != nil || fmt.Sprint(d.Split) != fmt.Sprint([]Share{{a, 50}, {c, 25}}) {
		t.Fatalf("the route after a member ended: %+v %v", d, err)
	}
	if rs := reg.Routes("alice"); len(rs) != 1 || fmt.Sprint(rs[0].Split) != fmt.Sprint([]Share{{a, 50}, {c, 25}}) {
		t.Fatalf("the routes listed: %+v", rs)
	}
	if err := reg.Close("alice", c); err != nil {
		t.Fatal(err)
	}
	d, err := reg.Route("alice", "shop")
	if err != nil || d.Split != nil || d.ExecutionID != a {
		t.Fatalf("the route with one member left: %+v %v", d, err)
	}
	for i := 0; i < 10; i++ {
		if res, err := reg.Serve(context.Background(), "shop", ResolveRoutes, program.NewWireRequest("GET", "https://shop.test/", nil, nil)); err != nil || string(res.BodyBytes()) != "a" {
			t.Fatalf("request %d: %q %v", i, res.BodyBytes(), err)
		}
	}
	if body, err := call(reg, "bob", bystander, "/"); err != nil || body != "bob" {
		t.Fatalf("the bystander: %q %v", body, err)
	}
}

// A handle an active domain names by id is a deployment, and a domain that
// follows a split route is split alike.
func TestDomainsAndDeployments(t *testing.T) {
	g := newGateway(t, workers.Config{Workers: 1})
	reg := g.store.Registry("apps", RegistryConfig{IdleBound: time.Hour})
	claim := func(host, route, id string) {
		t.Helper()
		d, _, err := reg.PutDomain("alice", host, route, id)
		if err == nil {
			_, err = reg.ActivateDomain("alice", host, []string{d.Challenge})
		}
		if err != nil {
			t.Fatal(err)
		}
	}
	h, loose := deployAnswering(t, reg, "alice", "h"), deployAnswering(t, reg, "alice", "loose")
	claim("h.example.com", "", h)
	a, b := deployAnswering(t, reg, "alice", "a"), deployAnswering(t, reg, "alice", "b")
	if _, err := reg.BindSplit("alice", "shop", []Share{{a, 50}, {b, 50}}); err != nil {
		t.Fatal(err)
	}
	claim("shop.example.com", "shop", "")
	seen := map[string]bool{}
	for i := 0; i < 40 && len(seen) < 2; i++ {
		got, err := serveHost(reg, "shop.example.com")
		if err != nil {
			t.Fatal(err)
		}
		seen[got] = true
	}
	if !seen["a"] || !seen["b"] {
		t.Fatalf("a domain following a split served %v", seen)
	}
	g.clock.Add(2 * time.Hour)
	g.store.SweepIdle()
	for _, id := range []string{h, a, b} {
		if info, err := reg.Get("alice", id); err != nil || !info.Deployment {
			t.Fatalf("%s: %+v %v", id, info, err)
		}
		if g.pool.Holds(id) {
			t.Fatalf("the idle deployment %s was not parked", id)
		}
	}
	if _, err := reg.Get("alice", loose); !errors.Is(err, fault.ErrHandlesClosed) {
		t.Fatalf("a handle nothing points at outlived the idle bound: %v", err)
	}
	if got, err := serveHost(reg, "h.example.com"); err != nil || got != "h" {
		t.Fatalf("the parked domain's handle: %q %v", got, err)
	}
}
