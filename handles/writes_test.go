package handles

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/retainer-gw/retainer/fault"
	"github.com/retainer-gw/retainer/internal/etcdtest"
	"github.com/retainer-gw/retainer/program"
	persist "github.com/retainer-gw/retainer/store"
	"github.com/retainer-gw/retainer/workers"
)

// lostAnswers applies a commit and then, while lose is set, answers an
// error, as an etcd that died with the transaction applied does (its
// answer lost).
type lostAnswers struct {
	persist.Store
	lose atomic.Bool
}

func (l *lostAnswers) Commit(ctx context.Context, txn persist.Txn) error {
	err := l.Store.Commit(ctx, txn)
	if err == nil && l.lose.Load() {
		return errors.New("the connection to etcd was lost")
	}
	return err
}

// A registry write whose answer was lost (etcd died with it in flight,
// having applied it) is answered 503 OVERLOADED, retryable, and the
// space is loaded again from the store before it is served next: the
// gateway then serves what etcd holds (the route bound, the other
// unbound), not what its memory held before the write.
func TestLostAnswerReloadsTheSpace(t *testing.T) {
	srv := etcdtest.Start(t)
	var lost *lostAnswers
	open := func() (persist.Store, error) {
		e, err := persist.OpenEtcd(context.Background(), persist.EtcdConfig{Endpoints: []string{srv.Endpoint}, Prefix: "/lost"})
		lost = &lostAnswers{Store: e}
		return lost, err
	}
	clock := &fakeClock{now: time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)}
	clustered := func(o *Options) {
		o.Own = func(context.Context, string) error { return nil }
		o.WriteBound = 2 * time.Second
	}
	g := startOn(t, open, clock, &eventLog{}, workers.Config{Workers: 1}, clustered)
	reg := g.store.Registry("apps", RegistryConfig{IdleBound: time.Hour})
	ctx := context.Background()
	if err := reg.Own(ctx, "alice"); err != nil {
		t.Fatal(err)
	}
	res, err := reg.Execute(ctx, "alice", ExecRequest{Program: program.Program{Code: counterProgram}, RetainHandles: true, Timeout: 2 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	id := res.ExecutionID
	if _, err := reg.BindRoute("alice", "old", id); err != nil {
		t.Fatal(err)
	}

	lost.lose.Store(true)
	if _, err := reg.BindRoute("alice", "shop", id); fault.CodeOf(err) != fault.Overloaded {
		t.Fatalf("a bind whose answer was lost: %v, want OVERLOADED", err)
	}
	if err := reg.UnbindRoute("alice", "old"); fault.CodeOf(err) != fault.Overloaded && err != nil {
		t.Fatalf("an unbind: %v", err)
	}
	lost.lose.Store(false)

	for _, name := range []string{"shop", "old"} {
		v, err := g.backing.Get(ctx, tableRoutes, key("apps", name))
		if err != nil {
			t.Fatal(err)
		}
		t.Logf("route %s in etcd: %q", name, v)
	}
	if err := reg.Locate(ctx, "shop", ResolveRoutes); err != nil {
		t.Fatalf("locating the route etcd holds: %v", err)
	}
	routes := reg.Routes("alice")
	if len(routes) != 1 || routes[0].Name != "shop" {
		t.Fatalf("alice's routes after the lost answers: %+v, want shop alone (as etcd holds them)", routes)
	}
	out, err := reg.Serve(ctx, "shop", ResolveRoutes, program.WireRequest{Method: "GET", URL: "http://shop.apps.localhost/"})
	if err != nil || out.Status != 200 {
		t.Fatalf("serving the route etcd holds: %d %v", out.Status, err)
	}
	if err := reg.Locate(ctx, "old", ResolveRoutes); fault.CodeOf(err) != fault.NotFound {
		t.Fatalf("the route etcd no longer holds: %v", err)
	}
}
