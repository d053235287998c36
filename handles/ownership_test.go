package handles

import (
	"context"
	"testing"
	"time"

	"github.com/retainer-gw/retainer/internal/etcdtest"
	"github.com/retainer-gw/retainer/sandbox"
	"github.com/retainer-gw/retainer/sandbox/worker"
	persist "github.com/retainer-gw/retainer/store"
)

// In a cluster a gateway acts only on the spaces it owns: its copy of any
// other may be stale, so its idle sweep leaves them alone. A space whose
// owner died is swept by the elected gateway's SweepUnowned, which owns
// (and so loads) a space with a handle idle past its bound and ends it;
// a space another live gateway owns is left to that gateway.
func TestUnownedSpacesAreSweptByOne(t *testing.T) {
	srv := etcdtest.Start(t)
	open := func() (persist.Store, error) {
		return persist.OpenEtcd(context.Background(), persist.EtcdConfig{Endpoints: []string{srv.Endpoint}, Prefix: "/sweep"})
	}
	clock := &fakeClock{now: time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)}
	clustered := func(o *Options) { o.Own = func(context.Context, string) error { return nil } }
	cfg := RegistryConfig{IdleBound: time.Hour}

	dead := startOn(t, open, clock, &eventLog{}, worker.Config{Workers: 1}, clustered)
	reg := dead.store.Registry("apps", cfg)
	ids := map[string]string{}
	for _, tenant := range []string{"alice", "bob"} {
		if err := reg.Own(context.Background(), tenant); err != nil {
			t.Fatal(err)
		}
		res, err := reg.Execute(context.Background(), tenant, ExecRequest{Program: sandbox.Program{Code: counterProgram}, RetainHandles: true, Timeout: 2 * time.Second})
		if err != nil {
			t.Fatal(err)
		}
		ids[tenant] = res.ExecutionID
	}
	dead.stop() // the owner dies

	ends := &eventLog{}
	g := startOn(t, open, clock, ends, worker.Config{Workers: 1}, clustered)
	g.store.Registry("apps", cfg)
	clock.Add(2 * time.Hour)
	stored := func(tenant string) bool {
		v, err := g.backing.Get(context.Background(), tableHandles, key("apps", ids[tenant]))
		if err != nil {
			t.Fatal(err)
		}
		return v != nil
	}
	g.store.SweepIdle()
	if !stored("alice") || !stored("bob") {
		t.Fatal("a gateway swept spaces it does not own")
	}
	bobOwned := func(_ context.Context, space string) (bool, error) { return space == persist.Space("apps", "bob"), nil }
	if err := g.store.SweepUnowned(context.Background(), bobOwned); err != nil {
		t.Fatal(err)
	}
	if stored("alice") {
		t.Fatal("the unowned space's idle handle was not ended")
	}
	if !stored("bob") {
		t.Fatal("a space another gateway owns was swept")
	}
}
