package handles

import (
	"context"
	"encoding/json"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/retainer-gw/retainer/fault"
	"github.com/retainer-gw/retainer/internal/etcdtest"
	"github.com/retainer-gw/retainer/internal/waitfor"
	"github.com/retainer-gw/retainer/program"
	persist "github.com/retainer-gw/retainer/store"
	"github.com/retainer-gw/retainer/workers"
)

// A space's reload reads etcd with ownMu free, which every request takes
// to ask whether its space is owned here: with etcd stalled while one
// tenant's space is loaded again (a commit's answer was lost), a
// bystander tenant's route, in a space this gateway owns, is served from
// its closure (before: every request of the gateway waited for ownMu
// until etcd answered), and a request for the space being loaded waits
// only within its own deadline. Once etcd answers, the reload ends and
// the space is served.
func TestNoEtcdReadUnderTheOwnershipLock(t *testing.T) {
	srv := etcdtest.Start(t)
	stall := etcdtest.StartStall(t, srv)
	open := func() (persist.Store, error) {
		return persist.OpenEtcd(context.Background(), persist.EtcdConfig{Endpoints: []string{stall.Endpoint}, Prefix: "/ownlock"})
	}
	clock := &fakeClock{now: time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)}
	var lost atomic.Bool // the lease lost: Own refuses
	clustered := func(o *Options) {
		o.Own = func(context.Context, string) error {
			if lost.Load() {
				return fault.New(fault.Overloaded, "the lease was lost")
			}
			return nil
		}
		o.WriteBound = 300 * time.Millisecond
		o.FlushEvery = time.Hour
	}
	g := startOn(t, open, clock, &eventLog{}, workers.Config{Workers: 1}, clustered)
	reg := g.store.Registry("apps", RegistryConfig{IdleBound: time.Hour})
	ctx := context.Background()
	routed := func(tenant, name string) {
		t.Helper()
		if err := reg.Own(ctx, tenant); err != nil {
			t.Fatal(err)
		}
		res, err := reg.Execute(ctx, tenant, ExecRequest{Program: program.Program{Code: counterProgram}, RetainHandles: true, Timeout: 2 * time.Second})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := reg.BindRoute(tenant, name, res.ExecutionID); err != nil {
			t.Fatal(err)
		}
	}
	routed("bob", "bys")
	routed("alice", "shop")
	served := 0
	visitBystander := func(when string) {
		t.Helper()
		out, err := answeredWithin(t, "the bystander "+when, func() (program.WireResponse, error) {
			return reg.Serve(ctx, "bys", ResolveRoutes, program.WireRequest{Method: "GET", URL: "http://bys.apps.localhost/"})
		})
		var n struct{ Served int }
		json.Unmarshal(out.Body, &n)
		if err != nil || out.Status != 200 || n.Served != served+1 {
			t.Fatalf("the bystander %s: %d %s %v, want 200 served %d", when, out.Status, out.Body, err, served+1)
		}
		served = n.Served
	}
	visitBystander("before")

	// alice's space is to be loaded again, as after a commit whose answer
	// was lost; its reload starts as etcd stalls.
	g.store.unsure("apps", "alice", errors.New("the connection to etcd was lost"))
	stall.Stall()
	stalled := true
	resume := func() {
		if stalled {
			stalled = false
			stall.Resume()
		}
	}
	t.Cleanup(resume)
	owned := make(chan error, 1)
	go func() { owned <- reg.Own(ctx, "alice") }()
	waitfor.Until(t, 10*time.Second, "alice's reload under way", func() bool {
		if !g.store.ownMu.TryLock() {
			return true // held across the reload (as before): the visit below waits
		}
		defer g.store.ownMu.Unlock()
		return g.store.loading[persist.Space("apps", "alice")] != nil
	})
	visitBystander("while alice's space loads and etcd stalls")
	_, err := answeredWithin(t, "alice's route while her space loads", func() (program.WireResponse, error) {
		sctx, cancel := context.WithTimeout(ctx, 300*time.Millisecond)
		defer cancel()
		return reg.Serve(sctx, "shop", ResolveRoutes, program.WireRequest{Method: "GET", URL: "http://shop.apps.localhost/"})
	})
	if fault.CodeOf(err) != fault.Overloaded {
		t.Fatalf("alice's route while her space loads and etcd stalls: %v, want OVERLOADED within its deadline", err)
	}
	visitBystander("still")
	resume()

	select {
	case err := <-owned:
		if err != nil {
			t.Fatalf("alice's reload once etcd answers: %v", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("alice's reload did not end within 10 s of etcd's return")
	}
	out, err := reg.Serve(ctx, "shop", ResolveRoutes, program.WireRequest{Method: "GET", URL: "http://shop.apps.localhost/"})
	if err != nil || out.Status != 200 {
		t.Fatalf("alice's route once her space loaded: %d %s %v", out.Status, out.Body, err)
	}
	visitBystander("after")

	// The lease lost while a reload reads etcd: the space is not taken as
	// owned when the reload ends (it read what may since be another
	// gateway's), and the next request is refused as the lease's.
	g.store.unsure("apps", "alice", errors.New("the connection to etcd was lost"))
	stall.Stall()
	stalled = true
	owned = make(chan error, 1)
	go func() { owned <- reg.Own(ctx, "alice") }()
	waitfor.Until(t, 10*time.Second, "alice's reload under way", func() bool {
		g.store.ownMu.Lock()
		defer g.store.ownMu.Unlock()
		return g.store.loading[persist.Space("apps", "alice")] != nil
	})
	lost.Store(true)
	g.store.Disowned()
	resume()
	select {
	case err := <-owned:
		if err == nil || g.store.owns("apps", "alice") {
			t.Fatalf("alice's reload across a lost lease: %v, owned %v; want refused, not owned", err, g.store.owns("apps", "alice"))
		}
	case <-time.After(10 * time.Second):
		t.Fatal("alice's reload did not end within 10 s of etcd's return")
	}
}
