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

// FinishTakeBacks ends every record a take-back mark names and clears the
// mark (docs/cluster.md, "Failures"): in a space this gateway owns and
// loaded before the mark landed (another gateway's deploy given up on,
// its mark applied after this gateway's load), the record leaves memory
// and the store while the tenant's other handle keeps its isolate; in a
// space nobody owns, owning it takes the record back; a mark whose record
// was never applied is cleared; a space another gateway owns is left to
// it.
func TestFinishTakeBacksEndsWhatMarksName(t *testing.T) {
	srv := etcdtest.Start(t)
	open := func() (persist.Store, error) {
		return persist.OpenEtcd(context.Background(), persist.EtcdConfig{Endpoints: []string{srv.Endpoint}, Prefix: "/finish"})
	}
	clock := &fakeClock{now: time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)}
	clustered := func(o *Options) {
		o.Own = func(context.Context, string) error { return nil }
		o.WriteBound = 2 * time.Second
	}
	g := startOn(t, open, clock, &eventLog{}, workers.Config{Workers: 1}, clustered)
	reg := g.store.Registry("apps", RegistryConfig{IdleBound: time.Hour})
	ctx := context.Background()
	deployed := func(tenant string) string {
		t.Helper()
		if err := reg.Own(ctx, tenant); err != nil {
			t.Fatal(err)
		}
		res, err := reg.Execute(ctx, tenant, ExecRequest{Program: program.Program{Code: counterProgram}, RetainHandles: true, Timeout: 2 * time.Second})
		if err != nil {
			t.Fatal(err)
		}
		return res.ExecutionID
	}
	mark := func(tenant, id string) {
		t.Helper()
		v, _ := json.Marshal(takeBackMark{Tenant: tenant, BodyChunks: 1})
		if err := g.backing.Commit(ctx, persist.Txn{Then: []persist.Op{persist.Put(tableTakeBacks, key("apps", id), v)}}); err != nil {
			t.Fatal(err)
		}
	}
	stored := func(table, id string) bool {
		t.Helper()
		v, err := g.backing.Get(ctx, table, key("apps", id))
		if err != nil {
			t.Fatal(err)
		}
		return v != nil
	}
	serve := func(id string) int {
		t.Helper()
		out, err := reg.Serve(ctx, id, ResolveIDs, program.WireRequest{Method: "GET", URL: "http://x.apps.localhost/"})
		var n struct{ Served int }
		json.Unmarshal(out.Body, &n)
		if err != nil || out.Status != 200 {
			t.Fatalf("serving %s: %d %v", id, out.Status, err)
		}
		return n.Served
	}

	// alice's space is owned and loaded here, with both handles.
	keep, marked := deployed("alice"), deployed("alice")
	if serve(keep) != 1 || serve(marked) != 1 {
		t.Fatal("first visits")
	}
	if _, err := reg.BindRoute("alice", "m", marked); err != nil {
		t.Fatal(err)
	}
	// carol's space nobody owns any more; dave's another gateway owns.
	carol, dave := deployed("carol"), deployed("dave")
	g.store.ownMu.Lock()
	delete(g.store.owned, persist.Space("apps", "carol"))
	delete(g.store.owned, persist.Space("apps", "dave"))
	g.store.ownMu.Unlock()
	for _, m := range [][2]string{{"alice", marked}, {"carol", carol}, {"dave", dave}, {"alice", "never-applied"}} {
		mark(m[0], m[1])
	}
	hasOwner := func(_ context.Context, space string) (bool, error) {
		return space == persist.Space("apps", "dave"), nil
	}
	if err := g.store.FinishTakeBacks(ctx, hasOwner); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		id   string
		gone bool
	}{{marked, true}, {carol, true}, {"never-applied", true}, {dave, false}} {
		if stored(tableHandles, c.id) == c.gone || stored(tableTakeBacks, c.id) == c.gone {
			t.Errorf("%s after FinishTakeBacks: record %v, mark %v; want both gone %v", c.id, stored(tableHandles, c.id), stored(tableTakeBacks, c.id), c.gone)
		}
	}
	if ids := reg.List("alice"); len(ids) != 1 || ids[0].ExecutionID != keep {
		t.Errorf("alice's handles: %+v, want %s alone", ids, keep)
	}
	if err := reg.Locate(ctx, "m", ResolveRoutes); fault.CodeOf(err) != fault.NotFound {
		t.Errorf("the route of the record taken back: %v, want NOT_FOUND", err)
	}
	if n := serve(keep); n != 2 {
		t.Errorf("alice's other handle served %d, want 2 (its isolate kept)", n)
	}
	if err := reg.Own(ctx, "carol"); err != nil {
		t.Fatal(err)
	}
	if ids := reg.List("carol"); len(ids) != 0 {
		t.Errorf("carol's handles: %+v, want none", ids)
	}
}
