package workers

import (
	"fmt"
	"testing"
	"time"

	"github.com/retainer-gw/retainer/internal/waitfor"
	"github.com/retainer-gw/retainer/workers/wire"
)

// modulesHandler uses every runtime module (url, streams, and tr46 for a
// host that is not plain ASCII): a worker that started from another's
// code caches must serve it as one that compiled them.
const modulesHandler = `async () => ({ async fetch() {
	const u = new URL('https://bücher.example/a?b=1');
	const body = await new Response(new ReadableStream({ start(c) { c.enqueue(new TextEncoder().encode('streamed')); c.close(); } })).text();
	return new Response(u.host + ' ' + u.searchParams.get('b') + ' ' + body);
} })`

const modulesAnswer = "xn--bcher-kva.example 1 streamed"

// fromStartupOf answers whether worker index started from the pool's
// startup, and whether it is up.
func fromStartupOf(pool *Pool, index int) (bool, bool) {
	pool.mu.Lock()
	defer pool.mu.Unlock()
	if index >= len(pool.workers) || pool.workers[index] == nil {
		return false, false
	}
	return pool.workers[index].fromStartup, true
}

// The pool's first worker makes the runtime's snapshot and module caches
// as it starts and answers them with its hello; the workers started after
// it start from them (startup.go) and serve every runtime module as it
// does. A startup whose bytes are not those its maker summed is not used:
// the worker makes its own and serves the same.
func TestWorkersStartFromTheFirstOnesSnapshot(t *testing.T) {
	pool := startPool(t, Config{Workers: 3})
	if pool.startup.Load() == nil {
		t.Fatal("the first worker answered no startup")
	}
	for i := range 3 {
		from, _ := fromStartupOf(pool, i)
		if from != (i > 0) {
			t.Errorf("worker %d started from the first one's startup: %v", i, from)
		}
		id := fmt.Sprintf("h%d", i)
		deploy(t, pool, id, modulesHandler)
	}
	seen := map[int]bool{}
	for i := range 3 {
		id := fmt.Sprintf("h%d", i)
		seen[pool.WorkerOf(id)] = true
		if body := getBody(t, pool, id, "https://x/"); body != modulesAnswer {
			t.Fatalf("%s in worker %d answered %q", id, pool.WorkerOf(id), body)
		}
	}
	if len(seen) != 3 {
		t.Fatalf("the handles went to workers %v, not one each", seen)
	}

	// A startup altered on its way (one byte of the snapshot, and a
	// module's cache): the replacement of a killed worker refuses it,
	// makes its own and serves the same.
	good := pool.startup.Load()
	size := len(good.Snapshot)
	for _, b := range good.Modules {
		size += len(b)
	}
	t.Logf("the startup: a %d KiB snapshot, %d KiB in all", len(good.Snapshot)>>10, size>>10)
	bad := &wire.Startup{Snapshot: append([]byte(nil), good.Snapshot...), Modules: map[string][]byte{}, Sum: good.Sum}
	bad.Snapshot[len(bad.Snapshot)/2] ^= 0xff
	for name, b := range good.Modules {
		bad.Modules[name] = append([]byte("garbage"), b...)
	}
	pool.startup.Store(bad)
	old := pool.Status()[1].PID
	if err := pool.KillWorker(1); err != nil {
		t.Fatal(err)
	}
	waitfor.Until(t, 20*time.Second, "worker 1 replaced", func() bool {
		s := pool.Status()[1]
		return s.State == "up" && s.PID != old
	})
	if from, _ := fromStartupOf(pool, 1); from {
		t.Fatal("the replacement started from an altered startup")
	}
	deploy(t, pool, "after", modulesHandler)
	for i := range 3 {
		id := fmt.Sprintf("again%d", i)
		deploy(t, pool, id, modulesHandler)
		if body := getBody(t, pool, id, "https://x/"); body != modulesAnswer {
			t.Fatalf("%s in worker %d answered %q", id, pool.WorkerOf(id), body)
		}
	}

	// A startup the pool forgot (as when a worker given it failed to
	// start: handshake) is made again by the next worker.
	pool.dropStartup(bad)
	if pool.startup.Load() != nil {
		t.Fatal("the pool kept a startup it dropped")
	}
	if err := pool.KillWorker(2); err != nil {
		t.Fatal(err)
	}
	waitfor.Until(t, 20*time.Second, "a new startup from the next worker", func() bool { return pool.startup.Load() != nil })
}
