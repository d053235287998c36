package handles

import (
	"bytes"
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

// stallsAfter stalls every connection to etcd (etcdtest.Stall, as a
// SIGSTOPped etcd) right after a commit that when picks was answered, so
// that what its writer reads next waits for etcd.
type stallsAfter struct {
	persist.Store
	stall   *etcdtest.Stall
	when    atomic.Pointer[func(persist.Txn, error) bool]
	stalled atomic.Bool
}

func (s *stallsAfter) Commit(ctx context.Context, txn persist.Txn) error {
	err := s.Store.Commit(ctx, txn)
	if when := s.when.Load(); when != nil && (*when)(txn, err) && s.when.CompareAndSwap(when, nil) {
		s.stall.Stall()
		s.stalled.Store(true)
	}
	return err
}

// The route writers' lock (routeMu) is never held across a read of etcd:
// a bind that finds its name in etcd though not in memory, and a domain's
// activation that ends the claims other gateways made, read etcd with no
// lock held. With etcd stalled right before such a read, another write
// that needs no read of etcd (an unbind of a name the tenant does not
// have) is answered its own answer, 404, within a generous deadline
// (before: it waited for the lock past the write bound and was answered
// 503), the activation is answered active (before: 503 "may still be
// applied" though it was applied), and a bystander tenant's route keeps
// serving its closure's count.
func TestNoEtcdReadUnderTheRouteLock(t *testing.T) {
	srv := etcdtest.Start(t)
	stall := etcdtest.StartStall(t, srv)
	var st *stallsAfter
	open := func() (persist.Store, error) {
		e, err := persist.OpenEtcd(context.Background(), persist.EtcdConfig{Endpoints: []string{stall.Endpoint}, Prefix: "/routelock"})
		st = &stallsAfter{Store: e, stall: stall}
		return st, err
	}
	clock := &fakeClock{now: time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)}
	clustered := func(o *Options) {
		o.Own = func(context.Context, string) error { return nil }
		o.WriteBound = 300 * time.Millisecond
		// No flush of invocation counts meanwhile: one stalled holds
		// metaMu, which a bind or unbind takes too, by design
		// (TestWritesRefusedBehindAStalledFlush).
		o.FlushEvery = time.Hour
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
	bystander := deployed("bob")
	if _, err := reg.BindRoute("bob", "bys", bystander); err != nil {
		t.Fatal(err)
	}
	served := 0
	visitBystander := func(when string) {
		t.Helper()
		out, err := reg.Serve(ctx, "bys", ResolveRoutes, program.WireRequest{Method: "GET", URL: "http://bys.apps.localhost/"})
		var n struct{ Served int }
		json.Unmarshal(out.Body, &n)
		if err != nil || out.Status != 200 || n.Served != served+1 {
			t.Fatalf("the bystander %s: %d %s %v, want 200 served %d", when, out.Status, out.Body, err, served+1)
		}
		served = n.Served
	}
	visitBystander("before")
	alice := deployed("alice")
	if _, err := reg.BindRoute("alice", "r", alice); err != nil {
		t.Fatal(err)
	}
	resume := func() {
		if st.stalled.CompareAndSwap(true, false) {
			stall.Resume()
		}
	}
	t.Cleanup(resume)
	needsNoRead := func(when string) {
		t.Helper()
		_, err := answeredWithin(t, "an unbind of a name alice does not have", func() (struct{}, error) { return struct{}{}, reg.UnbindRoute("alice", "nosuch") })
		if fault.CodeOf(err) != fault.NotFound {
			resume()
			t.Fatalf("an unbind of a name alice does not have, %s: %v, want NOT_FOUND at once", when, err)
		}
		visitBystander(when)
	}

	{
		// The bind: a name etcd holds that memory does not: left by an end that
		// stopped half done, it points at no record.
		if err := g.backing.Commit(ctx, persist.Txn{Then: []persist.Op{persist.Put(tableRoutes, key("apps", "left"), []byte("gone"))}}); err != nil {
			t.Fatal(err)
		}
		when := func(txn persist.Txn, err error) bool {
			return errors.Is(err, persist.ErrConflict) && len(txn.If) > 0 && bytes.Equal(txn.If[0].Key, key("apps", "left"))
		}
		st.when.Store(&when)
		bind := make(chan error, 1)
		go func() {
			_, err := reg.BindRoute("alice", "left", alice)
			bind <- err
		}()
		waitfor.Until(t, 10*time.Second, "etcd stalled after the bind's conflict", st.stalled.Load)
		needsNoRead("while the bind reads etcd")
		if _, err := answeredWithin(t, "the bind", func() (struct{}, error) { return struct{}{}, <-bind }); fault.CodeOf(err) != fault.Overloaded {
			resume()
			t.Fatalf("the bind while etcd stalls: %v, want OVERLOADED", err)
		}
		resume()
		// etcd back: the name left over is bound.
		if _, err := reg.BindRoute("alice", "left", alice); err != nil {
			t.Fatalf("binding the name left over once etcd answers: %v", err)
		}
		visitBystander("after the bind")
	}

	{
		// The activation.
		const host = "shop.example.com"
		d, _, err := reg.PutDomain("alice", host, "r", "")
		if err != nil {
			t.Fatal(err)
		}
		// Another tenant's pending claim of the host, made through another
		// gateway: in etcd only.
		other, _ := json.Marshal(domainRecord{Host: host, Tenant: "carol", Status: DomainPending, Challenge: "c", ClaimedAt: clock.Now()})
		if err := g.backing.Commit(ctx, persist.Txn{Then: []persist.Op{persist.Put(tableDomains, key("apps", host+"\x00carol"), other)}}); err != nil {
			t.Fatal(err)
		}
		when := func(txn persist.Txn, err error) bool {
			for _, op := range txn.Then {
				if err == nil && op.Table == tableDomains && bytes.Equal(op.Key, key("apps", host)) {
					return true
				}
			}
			return false
		}
		st.when.Store(&when)
		got, err := answeredWithin(t, "the activation", func() (Domain, error) {
			return reg.ActivateDomain("alice", host, []string{d.Challenge})
		})
		if !st.stalled.Load() {
			t.Fatalf("etcd was not stalled after the activation's commit (%+v %v)", got, err)
		}
		if err != nil || got.Status != DomainActive {
			resume()
			t.Fatalf("the activation, applied, while etcd stalls: %+v %v, want active", got, err)
		}
		needsNoRead("while the activation's follow-up reads etcd")
		resume()
		// etcd back: the other tenant's claim ends.
		waitfor.Until(t, 10*time.Second, "carol's claim, in etcd only, ended", func() bool {
			v, err := g.backing.Get(ctx, tableDomains, key("apps", host+"\x00carol"))
			return err == nil && v == nil
		})
		visitBystander("after the activation")
	}
}
