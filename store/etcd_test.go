package store_test

import (
	"context"
	"fmt"
	"runtime"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/retainer-gw/retainer/internal/etcdtest"
	"github.com/retainer-gw/retainer/internal/waitfor"
	"github.com/retainer-gw/retainer/store"
	"github.com/retainer-gw/retainer/store/storetest"
)

// The contract against a real etcd: each case under its own prefix of one
// server, and every handle the suite opens a client of its own.
func TestEtcdContract(t *testing.T) {
	srv := etcdtest.Start(t)
	var n atomic.Int64
	storetest.Run(t, func(t *testing.T) func() store.Store {
		prefix := fmt.Sprintf("/contract/%d", n.Add(1))
		return func() store.Store {
			e, err := store.OpenEtcd(context.Background(), store.EtcdConfig{Endpoints: []string{srv.Endpoint}, Prefix: prefix})
			if err != nil {
				t.Fatal(err)
			}
			return e
		}
	})
}

// Keys under the prefix that another application wrote, or a newer
// schema, are refused; a gateway that cannot reach etcd fails naming the
// endpoint and never the password.
func TestEtcdRefusesOtherKeysAndNamesTheEndpoint(t *testing.T) {
	srv := etcdtest.Start(t)
	ctx := context.Background()
	cli, err := clientv3.New(clientv3.Config{Endpoints: []string{srv.Endpoint}, DialTimeout: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer cli.Close()
	cli.Put(ctx, "/other/meta/app", "kubernetes")
	cli.Put(ctx, "/newer/meta/app", "retainer")
	cli.Put(ctx, "/newer/meta/schema", "99")
	for prefix, want := range map[string]string{
		"/other": "another application",
		"/newer": `schema version "99"`,
	} {
		_, err := store.OpenEtcd(ctx, store.EtcdConfig{Endpoints: []string{srv.Endpoint}, Prefix: prefix})
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("prefix %s: %v, want an error saying %q", prefix, err, want)
		}
	}
	if e, err := store.OpenEtcd(ctx, store.EtcdConfig{Endpoints: []string{srv.Endpoint}, Prefix: "/fresh/"}); err != nil {
		t.Fatalf("an empty prefix: %v", err)
	} else {
		e.Close()
	}

	start := time.Now()
	_, err = store.OpenEtcd(ctx, store.EtcdConfig{
		Endpoints:   []string{"http://127.0.0.1:1"},
		Password:    "hunter2-secret",
		Username:    "retainer",
		DialTimeout: time.Second,
	})
	if err == nil || !strings.Contains(err.Error(), "127.0.0.1:1") || strings.Contains(err.Error(), "hunter2") {
		t.Fatalf("an unreachable etcd: %v", err)
	}
	if d := time.Since(start); d > 10*time.Second {
		t.Fatalf("an unreachable etcd took %v to fail", d)
	}
}

// DBSize answers etcd's database size in use, which grows with what is
// written (a cluster's kv_budget is measured against it).
func TestEtcdDBSizeGrowsWithWrites(t *testing.T) {
	srv := etcdtest.Start(t)
	ctx := context.Background()
	e, err := store.OpenEtcd(ctx, store.EtcdConfig{Endpoints: []string{srv.Endpoint}, Prefix: "/size"})
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close()
	before, err := e.DBSize(ctx)
	if err != nil || before <= 0 {
		t.Fatalf("DBSize: %d, %v", before, err)
	}
	value := []byte(strings.Repeat("v", 512<<10))
	for i := 0; i < 8; i++ {
		if err := e.Commit(ctx, store.Txn{Then: []store.Op{{Table: "kv", Key: []byte(fmt.Sprint(i)), Value: value}}}); err != nil {
			t.Fatal(err)
		}
	}
	// etcd's backend commits its batch within 100 ms; the size follows.
	var after int64
	waitfor.Within(30*time.Second, func() bool {
		after, err = e.DBSize(ctx)
		return err != nil || after >= before+4<<20
	})
	if err != nil || after < before+4<<20 {
		t.Fatalf("4 MiB written: DBSize %d → %d (%v)", before, after, err)
	}
}

// A scan that reads values reads them in pages bounded by bytes, not only
// by keys: one that stops at its first key over values of 1 MiB reads a
// page of 16 keys, not 256 (before, all 48 here, and up to 256;
// docs/cluster.md, "Listing keys"). The test process allocates about 5
// times what a page holds: the server (in process) reads, marshals and
// sends it, the client receives and unmarshals it.
func TestEtcdScanPagesByBytes(t *testing.T) {
	srv := etcdtest.Start(t)
	ctx := context.Background()
	e, err := store.OpenEtcd(ctx, store.EtcdConfig{Endpoints: []string{srv.Endpoint}, Prefix: "/bytes"})
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close()
	value := []byte(strings.Repeat("v", 1<<20))
	const n = 48
	for i := 0; i < n; i++ {
		if err := e.Commit(ctx, store.Txn{Then: []store.Op{store.Put("kv", []byte(fmt.Sprintf("k%02d", i)), value)}}); err != nil {
			t.Fatal(err)
		}
	}
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	if err := e.Scan(ctx, "kv", store.Range{}, func(k, v []byte) bool { return false }); err != nil {
		t.Fatal(err)
	}
	runtime.ReadMemStats(&after)
	got := after.TotalAlloc - before.TotalAlloc
	t.Logf("a scan stopped at its first value allocated %d MiB", got>>20)
	if got > 160<<20 {
		t.Errorf("a scan that stopped at its first value of 1 MiB allocated %d MiB: it read many more", got>>20)
	}
	// The whole scan still reads every value, in order.
	i := 0
	if err := e.Scan(ctx, "kv", store.Range{}, func(k, v []byte) bool {
		if string(k) != fmt.Sprintf("k%02d", i) || len(v) != len(value) {
			t.Errorf("key %d: %q with %d bytes", i, k, len(v))
		}
		i++
		return true
	}); err != nil || i != n {
		t.Fatalf("a whole scan: %d keys of %d, %v", i, n, err)
	}
}
