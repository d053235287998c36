package handles

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	"github.com/retainer-gw/retainer/fault"
	"github.com/retainer-gw/retainer/internal/etcdtest"
	"github.com/retainer-gw/retainer/program"
	persist "github.com/retainer-gw/retainer/store"
	"github.com/retainer-gw/retainer/workers"
)

// firingCounter counts its firings and its visits in its closure.
const firingCounter = `async () => { let fired = 0, served = 0; return {
	fetch() { return Response.json({fired, served: ++served}) },
	scheduled() { fired++ } } }`

// A firing's list waits in memory for the loop's flush, which reads and
// writes the store with no lock held: with etcd stalled, a fire-now of a
// handle whose list memory does not hold (after a restart) is answered,
// and so is a bystander tenant's, whose route keeps serving its closure
// (before: the first firing read the stored list under sched.mu, and
// every fire-now, the loop's look for due ticks and a handle's end, which
// holds routeMu, waited for etcd). Once etcd answers, no firing is lost:
// the list stored before the restart keeps its firing, and a list another
// gateway wrote after this one read it keeps that gateway's firing too.
func TestNoEtcdReadUnderTheSchedulesLock(t *testing.T) {
	srv := etcdtest.Start(t)
	stall := etcdtest.StartStall(t, srv)
	open := func() (persist.Store, error) {
		return persist.OpenEtcd(context.Background(), persist.EtcdConfig{Endpoints: []string{stall.Endpoint}, Prefix: "/schedlock"})
	}
	clock := &fakeClock{now: t0}
	clustered := func(o *Options) {
		o.Own = func(context.Context, string) error { return nil }
		o.WriteBound = 300 * time.Millisecond
		// The test flushes; the loop stays out of the way.
		o.ScheduleEvery = time.Hour
		o.FlushEvery = time.Hour
	}
	start := func() (*gateway, *Registry) {
		g := startOn(t, open, clock, &eventLog{}, workers.Config{Workers: 1}, clustered)
		return g, g.store.Registry("apps", RegistryConfig{IdleBound: time.Hour})
	}
	g, reg := start()
	ctx := context.Background()
	deployed := func(reg *Registry, tenant string) string {
		t.Helper()
		if err := reg.Own(ctx, tenant); err != nil {
			t.Fatal(err)
		}
		res, err := reg.Execute(ctx, tenant, ExecRequest{Program: program.Program{Code: firingCounter}, RetainHandles: true, Timeout: 2 * time.Second, Schedules: []string{"0 0 1 1 *"}})
		if err != nil {
			t.Fatal(err)
		}
		return res.ExecutionID
	}
	alice, bob := deployed(reg, "alice"), deployed(reg, "bob")
	if f, err := reg.FireNow(ctx, "alice", alice, ""); err != nil || f.Outcome != "ok" {
		t.Fatalf("alice's fire-now: %+v %v", f, err)
	}
	g.store.flushFirings()
	g.stop()

	// Restarted: no list in memory.
	g, reg = start()
	type counts struct{ Fired, Served int }
	visit := func(tenant, id string) counts {
		t.Helper()
		body, err := call(reg, tenant, id, "/")
		var c counts
		if err != nil || json.Unmarshal([]byte(body), &c) != nil {
			t.Fatalf("%s's handle: %q %v", tenant, body, err)
		}
		return c
	}
	for _, tenant := range []string{"alice", "bob"} {
		if err := reg.Own(ctx, tenant); err != nil {
			t.Fatal(err)
		}
	}
	visit("alice", alice)
	last := visit("bob", bob)
	// fired asks that f answer ok without waiting for etcd.
	fired := func(what string, f func() (Firing, error)) {
		t.Helper()
		if got, err := answeredWithin(t, what, f); err != nil || got.Outcome != "ok" {
			t.Fatalf("%s: %+v %v, want ok", what, got, err)
		}
	}

	stall.Stall()
	stalled := true
	resume := func() {
		if stalled {
			stalled = false
			stall.Resume()
		}
	}
	t.Cleanup(resume)
	fired("alice's fire-now while etcd stalls", func() (Firing, error) { return reg.FireNow(ctx, "alice", alice, "") })
	fired("bob's fire-now while etcd stalls", func() (Firing, error) { return reg.FireNow(ctx, "bob", bob, "") })
	if c := visit("bob", bob); c.Fired != last.Fired+1 || c.Served != last.Served+1 {
		t.Fatalf("bob's closure while etcd stalls: %+v, after %+v", c, last)
	}
	// A list memory does not hold is read within the write bound: the
	// listing answers OVERLOADED rather than waiting for etcd.
	listing := make(chan error, 1)
	go func() {
		_, err := reg.Schedules("alice", alice)
		listing <- err
	}()
	select {
	case err := <-listing:
		if fault.CodeOf(err) != fault.Overloaded {
			t.Fatalf("alice's schedules while etcd stalls: %v, want OVERLOADED", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("alice's schedules while etcd stalls: no answer within 10 s")
	}
	resume()

	g.store.flushFirings()
	listed := func(g *gateway, reg *Registry, tenant, id string) int {
		t.Helper()
		g.store.forgetFirings(id) // what the store holds, as another gateway reads it
		info, err := reg.Schedules(tenant, id)
		if err != nil {
			t.Fatal(err)
		}
		return len(info.Firings)
	}
	if n := listed(g, reg, "alice", alice); n != 2 {
		t.Fatalf("alice's firings once etcd answers: %d listed, want 2 (one before the restart, one while etcd stalled)", n)
	}
	if n := listed(g, reg, "bob", bob); n != 1 {
		t.Fatalf("bob's firings once etcd answers: %d listed, want 1", n)
	}

	// Another gateway writes alice's list (it owned her space meanwhile)
	// after this one read it: this one's next firing is added to that
	// list, not over it.
	if f, err := reg.FireNow(ctx, "alice", alice, ""); err != nil || f.Outcome != "ok" {
		t.Fatalf("alice's fire-now: %+v %v", f, err)
	}
	g.store.flushFirings() // memory now holds the list it wrote
	stored, err := g.store.readFirings(ctx, "apps", alice)
	if err != nil || len(stored.list) != 3 {
		t.Fatalf("alice's stored list: %d %v, want 3", len(stored.list), err)
	}
	other, _ := json.Marshal(append(stored.list, Firing{Cron: "0 0 1 1 *", StartedAt: stored.list[2].StartedAt, Outcome: "ok", Attempt: 1, Now: true, Error: "the other gateway's"}))
	if err := g.backing.Commit(ctx, persist.Txn{Then: []persist.Op{persist.Put(tableFirings, key("apps", alice), other)}}); err != nil {
		t.Fatal(err)
	}
	if f, err := reg.FireNow(ctx, "alice", alice, ""); err != nil || f.Outcome != "ok" {
		t.Fatalf("alice's fire-now: %+v %v", f, err)
	}
	g.store.flushFirings() // refused: the list changed since it was read
	g.store.flushFirings() // read again, and added to
	info, err := reg.Schedules("alice", alice)
	if err != nil {
		t.Fatal(err)
	}
	if len(info.Firings) != 5 || info.Firings[1].Error != "the other gateway's" {
		t.Fatalf("alice's firings after another gateway wrote her list: %d %+v, want 5, the other gateway's second newest", len(info.Firings), info.Firings)
	}
	if c := visit("bob", bob); c.Fired != last.Fired+1 || c.Served != last.Served+2 {
		t.Fatalf("bob's closure at the end: %+v", c)
	}
}
