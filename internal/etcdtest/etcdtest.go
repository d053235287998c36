// Package etcdtest starts a real etcd server inside a test (etcd's own
// embed package), on loopback ports of its own and a temporary data
// directory, for the store's contract suite and the cluster's tests. It is
// imported by tests only, so no gateway binary carries an etcd server.
package etcdtest

import (
	"net"
	"net/url"
	"strconv"
	"testing"
	"time"

	"go.etcd.io/etcd/server/v3/embed"

	"github.com/retainer-gw/retainer/internal/freeport"
)

// Server is an etcd started by a test.
type Server struct {
	etcd *embed.Etcd
	// Endpoint is the client URL, http://127.0.0.1:<port>.
	Endpoint string
}

// Start starts an etcd for t and stops it when t ends.
func Start(t testing.TB) *Server {
	t.Helper()
	cfg := embed.NewConfig()
	cfg.Dir = t.TempDir()
	cfg.LogLevel = "error"
	cfg.Name = "test"
	client, peer := freeURL(t), freeURL(t)
	cfg.ListenClientUrls = []url.URL{client}
	cfg.AdvertiseClientUrls = []url.URL{client}
	cfg.ListenPeerUrls = []url.URL{peer}
	cfg.AdvertisePeerUrls = []url.URL{peer}
	cfg.InitialCluster = cfg.InitialClusterFromName(cfg.Name)
	e, err := embed.StartEtcd(cfg)
	if err != nil {
		t.Fatalf("starting etcd: %v", err)
	}
	select {
	case <-e.Server.ReadyNotify():
	case <-time.After(30 * time.Second):
		e.Close()
		t.Fatal("etcd did not become ready in 30 s")
	}
	t.Cleanup(e.Close)
	return &Server{etcd: e, Endpoint: client.String()}
}

// freeURL is a loopback URL on a port nothing listens on now
// (internal/freeport).
func freeURL(t testing.TB) url.URL {
	return url.URL{Scheme: "http", Host: net.JoinHostPort("127.0.0.1", strconv.Itoa(freeport.Pick()))}
}
