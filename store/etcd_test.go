package store_test

import (
	"context"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/retainer-gw/retainer/internal/etcdtest"
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
