package workers

import (
	"context"
	"encoding/json"
	"sync"
	"testing"
	"time"

	"github.com/retainer-gw/retainer/fault"
	"github.com/retainer-gw/retainer/kv/cache"
	"github.com/retainer-gw/retainer/program"
)

// kvHost is a gateway's kv in memory for the cache tests, counting what
// reaches it.
type kvHost struct {
	mu      sync.Mutex
	values  map[string]string
	gets    int
	batches int
	gw      *cache.Gateway
}

func (h *kvHost) serve(_ context.Context, _, _, op string, args json.RawMessage) (json.RawMessage, error) {
	var a struct{ Key, Value string }
	json.Unmarshal(args, &a)
	h.mu.Lock()
	defer h.mu.Unlock()
	switch op {
	case "kv.get":
		h.gets++
		if v, ok := h.values[a.Key]; ok {
			return json.Marshal(v)
		}
		return json.RawMessage("null"), nil
	case "kv.put":
		h.values[a.Key] = a.Value
	case "kv.delete":
		delete(h.values, a.Key)
	}
	return json.RawMessage("null"), nil
}

// writes is the gateway's Store.KVWrites, in memory.
func (h *kvHost) writes(_ context.Context, _, _ string, _ time.Time, writes []cache.Write) error {
	h.mu.Lock()
	defer h.mu.Unlock()
	for _, w := range writes {
		if w.Key == "refused" {
			return fault.New(fault.QuotaExceeded, "over the quota")
		}
		if w.Op == "kv.put" {
			h.values[w.Key] = *w.Value
		} else {
			delete(h.values, w.Key)
		}
	}
	h.batches++
	return nil
}

// cache is the gateway's side of the workers' kv caches over this host,
// every run's space one space it may read and write.
func (h *kvHost) cache() *cache.Gateway {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.gw == nil {
		h.gw = cache.NewGateway(cache.GatewayConfig{Apply: h.writes, SpaceOf: func(string) (string, bool, bool) { return "space", true, true }})
	}
	return h.gw
}

func (h *kvHost) getCount() int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.gets
}

// handlesInTwoWorkers retains handles of code with kv until two of them
// are in different workers, and answers those two.
func handlesInTwoWorkers(t *testing.T, pool *Pool, prefix, code string) (string, string) {
	t.Helper()
	var ids []string
	for i := 0; len(ids) < 2 && i < 20; i++ {
		id := prefix + string(rune('a'+i))
		if _, err := pool.Run(context.Background(), program.Job{ID: id, RetainHandles: true, Program: program.Program{Code: code}, Bindings: program.Bindings{KV: true}}); err != nil {
			t.Fatal(err)
		}
		if len(ids) == 0 || pool.WorkerOf(id) != pool.WorkerOf(ids[0]) {
			ids = append(ids, id)
		}
	}
	if len(ids) < 2 {
		t.Fatal("no two handles in two workers")
	}
	return ids[0], ids[1]
}

// getBody invokes handle id with a GET of url and answers the body; an
// error fails the test.
func getBody(t *testing.T, pool *Pool, id, url string) string {
	t.Helper()
	res, err := get(pool, id, url)
	if err != nil {
		t.Fatal(err)
	}
	return string(res.BodyBytes())
}

// A worker answers repeated kv reads from its cache, and a write from
// another worker is visible to it at once: the gateway drops the key from
// its cache before the write is acknowledged.
func TestKVCacheIsCoherentAcrossWorkers(t *testing.T) {
	host := &kvHost{values: map[string]string{}}
	pool := startPool(t, Config{Workers: 2, IsolatesPerWorker: 8, OnHostCall: host.serve, HostCache: host.cache()})
	code := `async () => ({ async fetch(req) {
		const url = new URL(req.url);
		const v = url.searchParams.get('v');
		if (url.pathname === '/put') { await kv.put('k', v); return new Response('ok'); }
		if (url.pathname === '/many') { kv.put('k2', v + '2'); kv.put('k', v + '0'); await kv.put('k2', v); return new Response('ok'); }
		if (url.pathname === '/both') return new Response(await kv.get('k') + ',' + await kv.get('k2'));
		return new Response(String(await kv.get('k')));
	} })`
	a, b := handlesInTwoWorkers(t, pool, "kv", code)
	body := func(id, path string) string {
		t.Helper()
		return getBody(t, pool, id, "https://x"+path)
	}
	read := func(id string) string { return body(id, "/get") }
	write := func(id, v string) {
		t.Helper()
		if _, err := get(pool, id, "https://x/put?v="+v); err != nil {
			t.Fatal(err)
		}
	}
	// The first read learns the space, the second fills the cache.
	for i := 0; i < 2; i++ {
		if got := read(a); got != "null" {
			t.Fatalf("first reads: %s", got)
		}
	}
	before := host.getCount()
	for i := 0; i < 5; i++ {
		if got := read(a); got != "null" {
			t.Fatalf("cached read: %s", got)
		}
	}
	if host.getCount() != before {
		t.Fatalf("5 repeated reads reached the gateway %d times", host.getCount()-before)
	}
	for i, v := range []string{"one", "two", "three"} {
		writer, reader := b, a
		if i%2 == 1 {
			writer, reader = a, b
		}
		write(writer, v)
		if got := read(reader); got != v {
			t.Fatalf("after %s wrote %q, %s read %q", writer, v, reader, got)
		}
		if got := read(writer); got != v {
			t.Fatalf("the writer %s read %q after writing %q", writer, got, v)
		}
	}
	// Several keys, one written twice, in one invocation's writes: each
	// leaves the other worker's cache.
	both := func(id string) string { return body(id, "/both") }
	for i := 0; i < 3; i++ {
		both(a)
	}
	if _, err := get(pool, b, "https://x/many?v=four"); err != nil {
		t.Fatal(err)
	}
	if got := both(a); got != "four0,four" {
		t.Fatalf("after %s wrote two keys, %s read %q", b, a, got)
	}
}

// A write is told only to the workers whose cache may hold its key: one
// that read it, or wrote it; a worker that used the space but never that
// key is not woken for it.
func TestKVWritesAreToldOnlyWhereTheKeyMayBeCached(t *testing.T) {
	host := &kvHost{values: map[string]string{}}
	pool := startPool(t, Config{Workers: 2, IsolatesPerWorker: 8, OnHostCall: host.serve, HostCache: host.cache()})
	code := `async () => ({ async fetch(req) {
		const url = new URL(req.url);
		const k = url.searchParams.get('k'), v = url.searchParams.get('v');
		if (v !== null) { await kv.put(k, v); return new Response('ok'); }
		return new Response(String(await kv.get(k)));
	} })`
	a, b := handlesInTwoWorkers(t, pool, "held", code)
	call := func(id, query string) string {
		t.Helper()
		return getBody(t, pool, id, "https://x/?"+query)
	}
	pool.mu.Lock()
	bw := pool.workers[pool.where[b].index]
	pool.mu.Unlock()
	for i := 0; i < 3; i++ { // both learn the space; b caches "shared"
		call(a, "k=shared")
		call(b, "k=shared")
	}
	told := host.gw.Told(bw)
	for i := 0; i < 5; i++ {
		call(a, "k=mine&v="+string(rune('0'+i)))
	}
	if n := host.gw.Told(bw) - told; n != 0 {
		t.Fatalf("5 writes of a key %s never read reached its worker %d times", b, n)
	}
	call(a, "k=shared&v=new")
	if host.gw.Told(bw) != told+1 {
		t.Fatalf("a write of a key %s cached was told to its worker %d times, want 1", b, host.gw.Told(bw)-told)
	}
	if got := call(b, "k=shared"); got != "new" {
		t.Fatalf("%s read %q after %s wrote \"new\"", b, got, a)
	}
	// A key b wrote is one its cache holds: a's later write reaches it.
	call(b, "k=theirs&v=b")
	if got := call(b, "k=theirs"); got != "b" {
		t.Fatalf("%s read back %q", b, got)
	}
	told = host.gw.Told(bw)
	call(a, "k=theirs&v=a")
	if host.gw.Told(bw) != told+1 {
		t.Fatalf("a write of a key %s wrote was told to its worker %d times, want 1", b, host.gw.Told(bw)-told)
	}
	if got := call(b, "k=theirs"); got != "a" {
		t.Fatalf("%s read %q after %s wrote \"a\"", b, got, a)
	}
}

// A run's first kv call may be a write, before its worker knows the run's
// space: the write still drops the key other runs of the worker cached.
func TestKVCacheFirstWriteOfARunDropsTheKey(t *testing.T) {
	host := &kvHost{values: map[string]string{}}
	pool := startPool(t, Config{Workers: 1, IsolatesPerWorker: 8, OnHostCall: host.serve, HostCache: host.cache()})
	code := `async () => ({ async fetch() { return new Response(String(await kv.get('k'))); } })`
	if _, err := pool.Run(context.Background(), program.Job{ID: "reader", RetainHandles: true, Program: program.Program{Code: code}, Bindings: program.Bindings{KV: true}}); err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 3; i++ {
		if res, err := get(pool, "reader", "https://x/"); err != nil || string(res.BodyBytes()) != "null" {
			t.Fatalf("read: %v %s", err, res.BodyBytes())
		}
	}
	if _, err := pool.Run(context.Background(), program.Job{ID: "writer", Program: program.Program{Code: `async () => { await kv.put('k', 'new') }`}, Bindings: program.Bindings{KV: true}}); err != nil {
		t.Fatal(err)
	}
	if res, err := get(pool, "reader", "https://x/"); err != nil || string(res.BodyBytes()) != "new" {
		t.Fatalf("after another run's first call wrote the key: %v %s", err, res.BodyBytes())
	}
}

// A write answered at once but refused by the gateway fails the invocation
// that made it: its response never leaves. The handle serves on.
func TestKVQueuedWriteRefusedFailsItsInvocation(t *testing.T) {
	host := &kvHost{values: map[string]string{}}
	pool := startPool(t, Config{Workers: 1, IsolatesPerWorker: 8, OnHostCall: host.serve, HostCache: host.cache()})
	code := `async () => ({ async fetch(req) {
		const key = new URL(req.url).pathname.slice(1);
		await kv.get(key);
		await kv.put(key, 'v');
		return new Response('wrote ' + key);
	} })`
	if _, err := pool.Run(context.Background(), program.Job{ID: "w", RetainHandles: true, Program: program.Program{Code: code}, Bindings: program.Bindings{KV: true}}); err != nil {
		t.Fatal(err)
	}
	if res, err := get(pool, "w", "https://x/ok"); err != nil || string(res.BodyBytes()) != "wrote ok" {
		t.Fatalf("a write: %v %s", err, res.BodyBytes())
	}
	if res, err := get(pool, "w", "https://x/refused"); fault.CodeOf(err) != fault.QuotaExceeded {
		t.Fatalf("a refused queued write answered %v %s", err, res.BodyBytes())
	}
	if res, err := get(pool, "w", "https://x/again"); err != nil || string(res.BodyBytes()) != "wrote again" {
		t.Fatalf("after a refused write: %v %s", err, res.BodyBytes())
	}
	host.mu.Lock()
	defer host.mu.Unlock()
	if host.values["ok"] != "v" || host.values["again"] != "v" || host.batches == 0 {
		t.Fatalf("the gateway holds %v after %d batches", host.values, host.batches)
	}
}

// A value one handle wrote is read from the worker's cache by that handle
// only; another handle of the worker reads it through the gateway, which
// answers it once it is durable (no phantom reads, kv/kv.go).
func TestKVCacheServesAWriteOnlyToItsWriter(t *testing.T) {
	host := &kvHost{values: map[string]string{}}
	pool := startPool(t, Config{Workers: 1, IsolatesPerWorker: 8, OnHostCall: host.serve, HostCache: host.cache()})
	code := `async () => ({ async fetch(req) {
		const url = new URL(req.url);
		if (url.pathname === '/put') { await kv.put('k', url.searchParams.get('v')); return new Response('ok'); }
		return new Response(String(await kv.get('k')));
	} })`
	for _, id := range []string{"writer", "reader"} {
		if _, err := pool.Run(context.Background(), program.Job{ID: id, RetainHandles: true, Program: program.Program{Code: code}, Bindings: program.Bindings{KV: true}}); err != nil {
			t.Fatal(err)
		}
	}
	if pool.WorkerOf("writer") != pool.WorkerOf("reader") {
		t.Fatal("the handles are in two workers")
	}
	getBody(t, pool, "writer", "https://x/get") // the worker learns their space
	getBody(t, pool, "reader", "https://x/get")
	getBody(t, pool, "writer", "https://x/put?v=1")
	gets := func() int { host.mu.Lock(); defer host.mu.Unlock(); return host.gets }
	before := gets()
	if got := getBody(t, pool, "writer", "https://x/get"); got != "1" || gets() != before {
		t.Fatalf("the writer's own read: %q, %d gets to the gateway", got, gets()-before)
	}
	if got := getBody(t, pool, "reader", "https://x/get"); got != "1" || gets() != before+1 {
		t.Fatalf("another handle's read: %q, %d gets to the gateway (want 1)", got, gets()-before)
	}
	// Once the gateway answered it, the value is everyone's from the cache.
	if got := getBody(t, pool, "reader", "https://x/get"); got != "1" || gets() != before+1 {
		t.Fatalf("a read after the gateway's answer: %q, %d gets", got, gets()-before)
	}
}
