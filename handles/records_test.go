package handles

import (
	"context"
	"encoding/json"
	"fmt"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/retainer-gw/retainer/internal/etcdtest"
	"github.com/retainer-gw/retainer/program"
	persist "github.com/retainer-gw/retainer/store"
	"github.com/retainer-gw/retainer/workers"
)

// tableCounts is a store that counts the operations committed to each
// table.
type tableCounts struct {
	persist.Store
	mu  sync.Mutex
	ops map[string]int
}

func (c *tableCounts) Commit(ctx context.Context, txn persist.Txn) error {
	c.mu.Lock()
	for _, o := range txn.Then {
		c.ops[o.Table]++
	}
	c.mu.Unlock()
	return c.Store.Commit(ctx, txn)
}

func (c *tableCounts) reset() map[string]int {
	c.mu.Lock()
	defer c.mu.Unlock()
	out := c.ops
	c.ops = map[string]int{}
	return out
}

// bigProgram is the counter with a comment that makes it size bytes.
func bigProgram(size int) string {
	return counterProgram + "\n//" + strings.Repeat("x", size-len(counterProgram)-3)
}

func bodyChunks(t *testing.T, s persist.Store, registry, id string) int {
	t.Helper()
	n := 0
	err := s.Scan(context.Background(), tableBodies, persist.Range{Prefix: append(key(registry, id), 0)}, func(k, v []byte) bool { n++; return true })
	if err != nil {
		t.Fatal(err)
	}
	return n
}

// checkSplitRecords deploys a handle whose program is larger than one
// etcd request, serves it, flushes its counters, restarts, serves it
// again through a route, and closes it, on the backend open opens.
func checkSplitRecords(t *testing.T, open func() (persist.Store, error), size int) {
	clock := &fakeClock{now: time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)}
	ends := &eventLog{}
	counts := &tableCounts{ops: map[string]int{}}
	counting := func() (persist.Store, error) {
		s, err := open()
		counts.Store = s
		return counts, err
	}
	g := startOn(t, counting, clock, ends, workers.Config{Workers: 1})
	reg := g.store.Registry("apps", RegistryConfig{IdleBound: time.Hour})
	res, err := reg.Execute(context.Background(), "alice", ExecRequest{Program: program.Program{Code: bigProgram(size)}, RetainHandles: true, Timeout: 2 * time.Second})
	if err != nil || res.ExecutionID == "" {
		t.Fatalf("deploying a %d-byte program: %v", size, err)
	}
	id := res.ExecutionID
	meta, err := g.backing.Get(context.Background(), tableHandles, key("apps", id))
	if err != nil || len(meta) == 0 || len(meta) > 4096 {
		t.Fatalf("the record's meta is %d bytes (%v); it should hold no program", len(meta), err)
	}
	if n, want := bodyChunks(t, g.backing, "apps", id), size/recordChunk+1; n < want {
		t.Fatalf("the program is in %d chunks, want at least %d", n, want)
	}
	if _, err := reg.BindRoute("alice", "shop", id); err != nil {
		t.Fatal(err)
	}
	counts.reset()
	mustCall(t, reg, "alice", id, `{"served":1}`)
	mustCall(t, reg, "alice", id, `{"served":2}`)
	g.store.flush()
	if got := counts.reset(); got[tableBodies] != 0 || got[tableHandles] == 0 {
		t.Fatalf("a counter flush wrote %v: the meta alone should change", got)
	}
	g.stop()

	g = startOn(t, counting, clock, ends, workers.Config{Workers: 1})
	reg = g.store.Registry("apps", RegistryConfig{IdleBound: time.Hour})
	res2, err := reg.Serve(context.Background(), "shop", ResolveRoutes, program.NewWireRequest("GET", "https://shop.test/", nil, nil))
	if err != nil || string(res2.BodyBytes()) != `{"served":1}` {
		t.Fatalf("after a restart, through the route: %q %v", res2.BodyBytes(), err)
	}
	if info, err := reg.Get("alice", id); err != nil || info.Invocations != 3 {
		t.Fatalf("after a restart: %+v %v", info, err)
	}
	if err := reg.Close("alice", id); err != nil {
		t.Fatal(err)
	}
	if n := bodyChunks(t, g.backing, "apps", id); n != 0 {
		t.Fatalf("a closed handle left %d chunks of its program", n)
	}
}

// A record's program lives apart from its counters (records.go): a 1.5
// MiB program is stored once in chunks, a counter flush rewrites a meta
// of a few hundred bytes, and the handle is rebuilt from the chunks after
// a restart.
func TestRecordsKeepTheirProgramApart(t *testing.T) {
	path := t.TempDir() + "/registry.db"
	checkSplitRecords(t, func() (persist.Store, error) { return persist.OpenBolt(path, 0) }, 1536<<10)
}

// The same on a real etcd, whose transactions hold at most 1.5 MiB: a
// 3 MiB program deploys, survives a restart and ends.
func TestRecordsOnEtcd(t *testing.T) {
	srv := etcdtest.Start(t)
	checkSplitRecords(t, func() (persist.Store, error) {
		return persist.OpenEtcd(context.Background(), persist.EtcdConfig{Endpoints: []string{srv.Endpoint}})
	}, 3<<20)
}

// A record an earlier release stored whole (its program in the meta) is
// served, and split into meta and chunks when the store is loaded.
func TestWholeRecordsAreSplitOnLoad(t *testing.T) {
	path := t.TempDir() + "/registry.db"
	b, err := persist.OpenBolt(path, 0)
	if err != nil {
		t.Fatal(err)
	}
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	whole, _ := json.Marshal(&Record{ID: "0190a1b2-c3d4-7e5f-8a9b-0c1d2e3f4a5b", Registry: "apps", Tenant: "alice",
		Program: program.Program{Code: counterProgram}, TimeoutMs: 2000, CreatedAt: now, LastInvokedAt: now})
	w := persist.NewWriter(b)
	if err := w.CommitIn(context.Background(), persist.Space("apps", "alice"), nil, []persist.Op{persist.Put(tableHandles, key("apps", "0190a1b2-c3d4-7e5f-8a9b-0c1d2e3f4a5b"), whole)}); err != nil {
		t.Fatal(err)
	}
	b.Close()

	g := start(t, path, &fakeClock{now: now}, &eventLog{}, workers.Config{Workers: 1})
	reg := g.store.Registry("apps", RegistryConfig{IdleBound: time.Hour})
	mustCall(t, reg, "alice", "0190a1b2-c3d4-7e5f-8a9b-0c1d2e3f4a5b", `{"served":1}`)
	meta, _ := g.backing.Get(context.Background(), tableHandles, key("apps", "0190a1b2-c3d4-7e5f-8a9b-0c1d2e3f4a5b"))
	if strings.Contains(string(meta), "served") {
		t.Fatalf("the meta still holds the program: %s", meta)
	}
	if n := bodyChunks(t, g.backing, "apps", "0190a1b2-c3d4-7e5f-8a9b-0c1d2e3f4a5b"); n != 1 {
		t.Fatalf("the program is in %d chunks, want 1", n)
	}
}

// gatedStore holds the first commit of a record's meta until released,
// as a slow store would.
type gatedStore struct {
	persist.Store
	armed   atomic.Bool
	held    chan struct{} // closed when the gated commit is waiting
	release chan struct{}
}

func (g *gatedStore) Commit(ctx context.Context, txn persist.Txn) error {
	for _, o := range txn.Then {
		if o.Table == tableHandles && g.armed.CompareAndSwap(true, false) {
			close(g.held)
			<-g.release
			break
		}
	}
	return g.Store.Commit(ctx, txn)
}

// TestFlushesStoreTheNewestState: two flushes of a record's meta, the
// first slow to commit, store the newer state last: a flush takes its
// copies and commits them before another may (the store's metaMu), so a
// slow first flush cannot land over a newer second one.
func TestFlushesStoreTheNewestState(t *testing.T) {
	path := filepath.Join(t.TempDir(), "registry.db")
	clock := &fakeClock{now: time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)}
	gated := &gatedStore{held: make(chan struct{}), release: make(chan struct{})}
	open := func() (persist.Store, error) {
		s, err := persist.OpenBolt(path, 0)
		gated.Store = s
		return gated, err
	}
	// No periodic flush: the test makes the two.
	g := startOn(t, open, clock, &eventLog{}, workers.Config{Workers: 1}, func(o *Options) { o.FlushEvery = time.Hour })
	reg := g.store.Registry("apps", RegistryConfig{IdleBound: time.Hour})
	id := deploy(t, reg, "alice")
	mustCall(t, reg, "alice", id, `{"served":1}`)
	gated.armed.Store(true)
	first := make(chan struct{})
	go func() { g.store.flush(); close(first) }() // copies 1 invocation, then waits in its commit
	<-gated.held
	mustCall(t, reg, "alice", id, `{"served":2}`)
	second := make(chan struct{})
	go func() { g.store.flush(); close(second) }() // 2 invocations
	time.Sleep(50 * time.Millisecond)              // the second flush, unhindered, would commit now
	close(gated.release)
	<-first
	<-second
	g.stop()

	g = start(t, path, clock, &eventLog{}, workers.Config{Workers: 1})
	reg = g.store.Registry("apps", RegistryConfig{IdleBound: time.Hour})
	if info, err := reg.Get("alice", id); err != nil || info.Invocations != 2 {
		t.Fatalf("after a restart the record says %d invocations (%v), want 2: an older flush landed last", info.Invocations, err)
	}
}

// countingStore counts the commits that write handle records.
type countingStore struct {
	persist.Store
	metaCommits atomic.Int64
}

func (c *countingStore) Commit(ctx context.Context, txn persist.Txn) error {
	for _, o := range txn.Then {
		if o.Table == tableHandles {
			c.metaCommits.Add(1)
			break
		}
	}
	return c.Store.Commit(ctx, txn)
}

// A flush writes every tenant's invocation counts in one transaction, not
// one a tenant; when one record's handle ended meanwhile, the others are
// still written, each on its own.
func TestFlushPacksTenantsIntoOneCommit(t *testing.T) {
	path := filepath.Join(t.TempDir(), "registry.db")
	clock := &fakeClock{now: time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)}
	counting := &countingStore{}
	open := func() (persist.Store, error) {
		s, err := persist.OpenBolt(path, 0)
		counting.Store = s
		return counting, err
	}
	g := startOn(t, open, clock, &eventLog{}, workers.Config{Workers: 1}, func(o *Options) { o.FlushEvery = time.Hour })
	reg := g.store.Registry("apps", RegistryConfig{IdleBound: time.Hour})
	const tenants = 12
	ids := make([]string, tenants)
	for i := range ids {
		ids[i] = deploy(t, reg, fmt.Sprint("tenant-", i))
		mustCall(t, reg, fmt.Sprint("tenant-", i), ids[i], `{"served":1}`)
	}
	g.store.flush()
	before := counting.metaCommits.Load()
	for i := range ids {
		mustCall(t, reg, fmt.Sprint("tenant-", i), ids[i], `{"served":2}`)
	}
	g.store.flush()
	if n := counting.metaCommits.Load() - before; n != 1 {
		t.Fatalf("a flush of %d tenants' records took %d commits, want 1", tenants, n)
	}

	// Tenant 0's record goes from under the store: the packed commit fails
	// on it, and the other eleven are written one at a time.
	for i := range ids {
		mustCall(t, reg, fmt.Sprint("tenant-", i), ids[i], `{"served":3}`)
	}
	if err := counting.Store.Commit(context.Background(), persist.Txn{Then: []persist.Op{persist.Delete(tableHandles, key("apps", ids[0]))}}); err != nil {
		t.Fatal(err)
	}
	before = counting.metaCommits.Load()
	g.store.flush()
	if n := counting.metaCommits.Load() - before; n != 1+tenants {
		t.Fatalf("a flush whose packed commit failed took %d commits, want the packed one and %d alone", n, tenants)
	}
	g.stop()

	g = start(t, path, clock, &eventLog{}, workers.Config{Workers: 1})
	reg = g.store.Registry("apps", RegistryConfig{IdleBound: time.Hour})
	for i, id := range ids[1:] {
		if info, err := reg.Get(fmt.Sprint("tenant-", i+1), id); err != nil || info.Invocations != 3 {
			t.Fatalf("tenant-%d's record says %d invocations (%v) after a restart, want 3", i+1, info.Invocations, err)
		}
	}
	if _, err := reg.Get("tenant-0", ids[0]); err == nil {
		t.Fatal("the flush wrote back a record that had gone from the store")
	}
}
