package cluster_test

import (
	"math/rand/v2"
	"testing"
	"time"

	"github.com/retainer-gw/retainer/cluster"
	"github.com/retainer-gw/retainer/internal/etcdtest"
	"github.com/retainer-gw/retainer/store"
)

// etcd stalled for 60% of the lease, at any point of the renewal cycle,
// costs a member nothing: it stays serving by its own clock, its lease
// lives on at etcd, and its registration is still there (before, renewals
// every third of the lease, each waiting out its own timeout, left as
// little as 40% of the lease after a renewal, and a stall of 60% could
// lose the lease: every space dropped, every closure reset).
func TestEtcdStallShorterThanTheLeaseLosesNothing(t *testing.T) {
	srv := etcdtest.Start(t)
	p := etcdtest.StartStall(t, srv)
	e, err := store.OpenEtcd(ctx, store.EtcdConfig{Endpoints: []string{p.Endpoint}, Prefix: "/c"})
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close()
	m, err := cluster.Join(ctx, e, cluster.Config{Name: "gw-a", Address: "gw-a.internal:7946", Lease: lease, Logf: t.Logf})
	if err != nil {
		t.Fatal(err)
	}
	defer m.Leave(ctx)
	direct := join(t, srv, "gw-b")
	if _, err := m.Claim(ctx, "apps/alice"); err != nil {
		t.Fatal(err)
	}
	stall := lease * 6 / 10
	for i := range 6 {
		// A different point of the renewal cycle each time.
		time.Sleep(time.Duration(rand.Int64N(int64(lease / 3))))
		p.Stall()
		time.Sleep(stall)
		if !m.Serving() {
			p.Resume()
			t.Fatalf("stall %d of %v (lease %v): the member stopped serving by its own clock", i, stall, lease)
		}
		p.Resume()
		// Let a renewal through before the next stall.
		time.Sleep(lease / 3)
		select {
		case <-m.Lost():
			t.Fatalf("stall %d of %v (lease %v): the member lost its lease", i, stall, lease)
		default:
		}
		if name, _, err := direct.m.Owner(ctx, "apps/alice"); err != nil || name != "gw-a" {
			t.Fatalf("stall %d: the space's owner at etcd: %q %v, want gw-a", i, name, err)
		}
	}
}
