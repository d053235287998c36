package main

import (
	"context"
	"fmt"
	"testing"

	"github.com/retainer-gw/retainer/internal/etcdtest"
	"github.com/retainer-gw/retainer/internal/pgtest"
)

// What a cluster must hold under faults (docs/cluster.md): each fault
// through three gateway processes on a real etcd and PostgreSQL.

// restartMember stops member i (it leaves the cluster) and starts it again
// on the same configuration: its memory is what the store held at start.
func restartMember(t *testing.T, ctx context.Context, gws map[int]*gateway, i int, etcd, dsn string) {
	t.Helper()
	gws[i].stop()
	gws[i] = startMember(t, ctx, i, etcd, dsn)
}

// visitKey is a visitor's GET of a route name or executionId through
// member i's public port.
func visitKey(t *testing.T, i int, key string) (int, string) {
	return clusterCall(t, "GET", fmt.Sprintf("http://%s.apps.localhost:%d/", key, 9280+i), "", "")
}

// A gateway serves a handle only while it owns the handle's space: one
// restarted while the handle existed (its memory holds the handle, it
// owns nothing) answers 404 by route and by id once the handle is deleted
// through the owner, and 404 by route once the route is unbound there;
// it never serves a second isolate from what it remembers.
func TestClusterServesOnlyWhatItOwns(t *testing.T) {
	srv := etcdtest.Start(t)
	pg := pgtest.Start(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	gws := map[int]*gateway{}
	for i := 1; i <= 3; i++ {
		gws[i] = startMember(t, ctx, i, srv.Endpoint, pg.DSN)
	}
	a := gws[1]
	deleted := deployThrough(t, a, fmt.Sprintf(`{"retainHandles": true, "capabilities": ["kvRead", "kvWrite"], "code": %q}`, shopHandler))
	bindThrough(t, a, "shop", deleted)
	unbound := deployThrough(t, a, `{"retainHandles": true, "code": "export default { fetch() { return new Response('kept') } }"}`)
	bindThrough(t, a, "kept", unbound)
	for i := 1; i <= 3; i++ {
		for _, key := range []string{"shop", deleted, "kept", unbound} {
			if status, body := visitKey(t, i, key); status != 200 {
				t.Fatalf("%s through gw-%d before the restart: %d %s", key, i, status, body)
			}
		}
	}
	// gw-2 restarts while both handles exist: it remembers them, owns
	// neither, and has not looked up their owner since.
	restartMember(t, ctx, gws, 2, srv.Endpoint, pg.DSN)
	if status, body := clusterCall(t, "DELETE", a.api+"/handles/"+deleted, a.token, ""); status != 204 {
		t.Fatalf("deleting through the owner: %d %s", status, body)
	}
	if status, body := clusterCall(t, "DELETE", a.api+"/routes/kept", a.token, ""); status != 204 {
		t.Fatalf("unbinding through the owner: %d %s", status, body)
	}
	for round := 0; round < 2; round++ {
		for i := 1; i <= 3; i++ {
			for _, key := range []string{"shop", deleted, "kept"} {
				if status, body := visitKey(t, i, key); status != 404 {
					t.Fatalf("%s through gw-%d after its end (round %d): %d %q, want 404", key, i, round, status, body)
				}
			}
			if status, body := visitKey(t, i, unbound); status != 200 || body != "kept" {
				t.Fatalf("the unbound handle by id through gw-%d: %d %q", i, status, body)
			}
		}
	}
	// Nothing was claimed or rebuilt at gw-2 for what it remembered.
	_, m2 := clusterCall(t, "GET", "http://localhost:3982/metrics", "", "")
	if owned, rebuilt := metricValue(m2, "retainer_cluster_spaces_owned"), metricValue(m2, "retainer_rebuilds_total"); owned != 0 || rebuilt > 0 {
		t.Fatalf("gw-2 owns %v spaces and rebuilt %v handles", owned, rebuilt)
	}
}
