package handles

import (
	"context"
	"testing"
	"time"

	"github.com/retainer-gw/retainer/fault"
	"github.com/retainer-gw/retainer/internal/etcdtest"
	"github.com/retainer-gw/retainer/program"
	persist "github.com/retainer-gw/retainer/store"
	"github.com/retainer-gw/retainer/workers"
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

	dead := startOn(t, open, clock, &eventLog{}, workers.Config{Workers: 1}, clustered)
	reg := dead.store.Registry("apps", cfg)
	ids := map[string]string{}
	for _, tenant := range []string{"alice", "bob"} {
		if err := reg.Own(context.Background(), tenant); err != nil {
			t.Fatal(err)
		}
		res, err := reg.Execute(context.Background(), tenant, ExecRequest{Program: program.Program{Code: counterProgram}, RetainHandles: true, Timeout: 2 * time.Second})
		if err != nil {
			t.Fatal(err)
		}
		ids[tenant] = res.ExecutionID
	}
	dead.stop() // the owner dies

	ends := &eventLog{}
	g := startOn(t, open, clock, ends, workers.Config{Workers: 1}, clustered)
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

// In a cluster, whether a host may have a certificate is asked of the
// store for any space this gateway does not own: a domain activated
// after it loaded (its memory: pending) is active, one deleted since
// (its memory: active) is not, and every read that finds nothing is a
// miss charged to the gate.
func TestDomainActiveAskedOfTheStore(t *testing.T) {
	srv := etcdtest.Start(t)
	open := func() (persist.Store, error) {
		return persist.OpenEtcd(context.Background(), persist.EtcdConfig{Endpoints: []string{srv.Endpoint}, Prefix: "/domains"})
	}
	clock := &fakeClock{now: time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)}
	clustered := func(o *Options) { o.Own = func(context.Context, string) error { return nil } }
	cfg := RegistryConfig{IdleBound: time.Hour}
	owner := startOn(t, open, clock, &eventLog{}, workers.Config{Workers: 1}, clustered)
	reg := owner.store.Registry("apps", cfg)
	if err := reg.Own(context.Background(), "alice"); err != nil {
		t.Fatal(err)
	}
	id := deploy(t, reg, "alice")
	d, _, err := reg.PutDomain("alice", "shop.example.com", "", id)
	if err != nil {
		t.Fatal(err)
	}
	other := startOn(t, open, clock, &eventLog{}, workers.Config{Workers: 1}, clustered)
	stale := other.store.Registry("apps", cfg)
	misses := 0
	gate := StoreLookups{Allow: func() bool { return true }, Miss: func() { misses++ }}
	active := func() bool {
		t.Helper()
		tenant, err := stale.ActiveDomainTenantNow(context.Background(), "SHOP.example.com", gate)
		if err != nil {
			t.Fatal(err)
		}
		if tenant != "" && tenant != "alice" {
			t.Fatalf("the active domain's tenant: %q", tenant)
		}
		return tenant != ""
	}
	if active() || misses != 1 {
		t.Fatalf("a pending domain may have a certificate (misses %d)", misses)
	}
	if _, err := reg.ActivateDomain("alice", "shop.example.com", []string{d.Challenge}); err != nil {
		t.Fatal(err)
	}
	if stale.DomainActive("shop.example.com") || !active() || misses != 1 {
		t.Fatalf("a domain activated through its owner, at a gateway that loaded it pending (misses %d)", misses)
	}
	third := startOn(t, open, clock, &eventLog{}, workers.Config{Workers: 1}, clustered)
	loaded := third.store.Registry("apps", cfg)
	if err := reg.DeleteDomain("alice", "shop.example.com"); err != nil {
		t.Fatal(err)
	}
	if !loaded.DomainActive("shop.example.com") {
		t.Fatal("the third gateway did not load the domain active")
	}
	if tenant, err := loaded.ActiveDomainTenantNow(context.Background(), "shop.example.com", gate); err != nil || tenant != "" || misses != 2 {
		t.Fatalf("a deleted domain, at a gateway that loaded it active: %q %v (misses %d)", tenant, err, misses)
	}
	refuse := StoreLookups{Allow: func() bool { return false }, Miss: func() {}}
	if _, err := loaded.ActiveDomainTenantNow(context.Background(), "made-up.example.com", refuse); fault.CodeOf(err) != fault.QuotaExceeded {
		t.Fatalf("a read past the gate: %v", err)
	}
}
