package kv

import (
	"context"
	"encoding/json"
	"fmt"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/retainer-gw/retainer/internal/etcdtest"
	"github.com/retainer-gw/retainer/store"
)

// A list reads keys only, through a real etcd: a tenant holding 40 values
// of 1 MB lists them 8 at a time (the red team's F3, whose gateway grew by
// GBs) while a bystander tenant counts, and the whole test process (client
// and etcd server alike) allocates ~100-250 KiB a list (the bystander's
// visits included), not the values. On
// main, before Range.KeysOnly, each list allocated more than the 40 MB it
// pulled, every list was refused OVERLOADED and so were half of the
// bystander's visits (the lists' reads set the store's stall mark:
// docs/cluster.md, "Listing keys").
func TestListReadsNoValuesFromEtcd(t *testing.T) {
	srv := etcdtest.Start(t)
	ctx := context.Background()
	e, err := store.OpenEtcd(ctx, store.EtcdConfig{Endpoints: []string{srv.Endpoint}, Prefix: "/list"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { e.Close() })
	kv, err := NewKV(store.NewWriter(e), 0)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(kv.Close)
	call := func(tenant, op string, args map[string]any) (string, error) {
		raw, _ := json.Marshal(args)
		res, err := kv.Serve("apps", tenant, "run-"+tenant, "kv."+op, raw)
		return string(res), err
	}
	const values = 40
	big := strings.Repeat("x", 1_000_000)
	for i := range values {
		if _, err := call("lister", "put", map[string]any{"key": fmt.Sprintf("big%02d", i), "value": big}); err != nil {
			t.Fatal(err)
		}
	}
	if err := kv.Barrier(ctx, "run-lister"); err != nil {
		t.Fatal(err)
	}
	// What the visits saw: a cluster's bound on every read.
	kv.Bound = 250 * time.Millisecond

	stop := make(chan struct{})
	var bystander sync.WaitGroup
	var visits int
	var refused []error
	bystander.Add(1)
	go func() {
		defer bystander.Done()
		for n := 0; ; n++ {
			select {
			case <-stop:
				return
			default:
			}
			_, errGet := call("bystander", "get", map[string]any{"key": "count"})
			_, errPut := call("bystander", "put", map[string]any{"key": "count", "value": fmt.Sprint(n)})
			visits++
			if errGet != nil || errPut != nil {
				refused = append(refused, fmt.Errorf("get: %v, put: %v", errGet, errPut))
			}
		}
	}()

	const rounds, parallel = 3, 8
	var failed []error
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	for range rounds {
		var wg sync.WaitGroup
		errs := make([]error, parallel)
		for i := range parallel {
			wg.Add(1)
			go func() {
				defer wg.Done()
				res, err := call("lister", "list", map[string]any{})
				if err == nil && strings.Count(res, `"big`) != values {
					err = fmt.Errorf("answered %.200s, want %d keys", res, values)
				}
				errs[i] = err
			}()
		}
		wg.Wait()
		for _, err := range errs {
			if err != nil {
				failed = append(failed, err)
			}
		}
	}
	runtime.ReadMemStats(&after)
	close(stop)
	bystander.Wait()

	lists := rounds * parallel
	perList := (after.TotalAlloc - before.TotalAlloc) / uint64(lists)
	t.Logf("%d lists of %d keys over %d MB of values: %d KiB allocated a list (the bystander's %d visits included)", lists, values, values, perList>>10, visits)
	if perList > 2<<20 {
		t.Errorf("each list allocated %d KiB: it read the values (%d MB)", perList>>10, values)
	}
	// The refusals are the store's answers in time (the stall rule's
	// 250 ms), so a machine loaded enough may refuse one now and then;
	// on main, most lists and half the bystander's visits were refused.
	if len(failed) > lists/4 {
		t.Errorf("%d lists of %d failed: %v", len(failed), lists, failed[0])
	}
	if len(refused) > visits/20 {
		t.Errorf("the bystander's kv visits were refused %d times of %d during the lists: %v", len(refused), visits, refused[0])
	}
}
