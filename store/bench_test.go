package store_test

import (
	"context"
	"fmt"
	"path/filepath"
	"testing"
	"time"

	"github.com/retainer-gw/retainer/internal/etcdtest"
	"github.com/retainer-gw/retainer/internal/pgtest"
	"github.com/retainer-gw/retainer/store"
)

// benchBackends opens each backend for a benchmark: bbolt in a temp file,
// a real etcd and a real PostgreSQL started here (docs/cluster.md quotes
// the numbers; the test's PostgreSQL runs with fsync off, etcd and bbolt
// sync every commit).
func benchBackends(b *testing.B) map[string]store.Store {
	ctx := context.Background()
	bolt, err := store.OpenBolt(filepath.Join(b.TempDir(), "bench.db"), time.Second)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { bolt.Close() })
	etcd, err := store.OpenEtcd(ctx, store.EtcdConfig{Endpoints: []string{etcdtest.Start(b).Endpoint}})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { etcd.Close() })
	pg, err := store.OpenPostgres(ctx, pgtest.Start(b).DSN)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { pg.Close() })
	return map[string]store.Store{"bolt": bolt, "etcd": etcd, "postgres": pg}
}

// One kv write as a handle's commit makes it: one fenced transaction of
// one 64-byte value; and a group commit of 50 tenants' writes.
func BenchmarkCommit(b *testing.B) {
	ctx := context.Background()
	backends := benchBackends(b)
	for _, name := range []string{"bolt", "etcd", "postgres"} {
		s := backends[name]
		w := store.NewWriter(s)
		value := make([]byte, 64)
		b.Run(name+"/one-write", func(b *testing.B) {
			for i := 0; i < b.N; i++ {
				if err := w.CommitIn(ctx, store.Space("apps", "alice"), nil, []store.Op{store.Put("kv", []byte(fmt.Sprintf("k%d", i%100)), value)}); err != nil {
					b.Fatal(err)
				}
			}
		})
		b.Run(name+"/50-tenants", func(b *testing.B) {
			for i := 0; i < b.N; i++ {
				by := map[string][]store.Op{}
				for t := 0; t < 50; t++ {
					by[store.Space("apps", fmt.Sprintf("t%02d", t))] = []store.Op{store.Put("kv", []byte(fmt.Sprintf("t%02d/k%d", t, i%100)), value)}
				}
				if err := w.CommitSpaces(ctx, by); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
