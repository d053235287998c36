package workers

import (
	"context"
	"fmt"
	"sort"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/retainer-gw/retainer/fault"
	"github.com/retainer-gw/retainer/internal/hostcache"
	"github.com/retainer-gw/retainer/kv/cache"
	"github.com/retainer-gw/retainer/program"
)

// carryCounter is the gateway's side of the kv cache, counting the frames
// that came with answers carried along (Carry) and the answers released.
type carryCounter struct {
	*cache.Gateway
	frames, released atomic.Int64
	mu               sync.Mutex
	mixed            int // frames carrying answers of more than one handle
}

func (c *carryCounter) Carry(ctx context.Context, p hostcache.Peer, body []byte, ids []string) ([]byte, []bool, error) {
	reply, release, err := c.Gateway.Carry(ctx, p, body, ids)
	c.frames.Add(1)
	seen := map[string]bool{}
	for i, ok := range release {
		seen[ids[i]] = true
		if ok {
			c.released.Add(1)
		}
	}
	c.mu.Lock()
	if len(seen) > 1 {
		c.mixed++
	}
	c.mu.Unlock()
	return reply, release, err
}

const kvCounter = `async () => ({ async fetch(req) {
	const key = new URL(req.url).pathname.slice(1);
	const n = Number(await kv.get(key) || 0) + 1;
	await kv.put(key, String(n));
	return new Response(String(n));
} })`

// A kv counter's answers ride to the gateway with their writes (one frame,
// no round trip of their own), and many visitors at once lose nothing:
// every answer is a distinct count, the count stored is the answers', and
// no answer was released before the gateway held its write.
func TestKVAnswersRideWithTheirWrites(t *testing.T) {
	host := &kvHost{values: map[string]string{}}
	counted := &carryCounter{Gateway: host.cache()}
	pool := startPool(t, Config{Workers: 1, IsolatesPerWorker: 8, OnHostCall: host.serve, HostCache: counted})
	if _, err := pool.Run(context.Background(), program.Job{ID: "c", RetainHandles: true, Program: program.Program{Code: kvCounter}, Bindings: program.Bindings{KV: true}}); err != nil {
		t.Fatal(err)
	}
	for i := 1; i <= 10; i++ {
		if got := getBody(t, pool, "c", "https://x/n"); got != strconv.Itoa(i) {
			t.Fatalf("visit %d answered %s", i, got)
		}
	}
	const visitors, each = 16, 20
	var mu sync.Mutex
	var seen []int
	var wg sync.WaitGroup
	for v := 0; v < visitors; v++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; i < each; i++ {
				res, err := get(pool, "c", "https://x/n")
				if err != nil {
					t.Error(err)
					return
				}
				n, _ := strconv.Atoi(string(res.BodyBytes()))
				// The gateway held the write before the answer came back.
				host.mu.Lock()
				stored, _ := strconv.Atoi(host.values["n"])
				host.mu.Unlock()
				if stored < n {
					t.Errorf("answer %d came back while the gateway held %d", n, stored)
				}
				mu.Lock()
				seen = append(seen, n)
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	sort.Ints(seen)
	for i, n := range seen {
		if n != 11+i {
			t.Fatalf("the answers are not 11..%d: %v", 10+visitors*each, seen)
		}
	}
	host.mu.Lock()
	final := host.values["n"]
	host.mu.Unlock()
	if final != strconv.Itoa(10+visitors*each) {
		t.Fatalf("the gateway holds %s after %d increments", final, 10+visitors*each)
	}
	if counted.released.Load() == 0 {
		t.Fatalf("no answer rode with its writes (%d frames)", counted.frames.Load())
	}
	t.Logf("%d answers of %d released from %d frames that carried them", counted.released.Load(), 10+visitors*each, counted.frames.Load())
}

// Two handles' writes in the same worker, one always refused (over its
// quota), the other's counter at once: the refusal fails only its own
// invocations, whatever frame the two shared; the other's answers all
// leave with their writes applied, and its count is whole.
func TestKVRefusedWriteFailsOnlyItsOwnAnswer(t *testing.T) {
	host := &kvHost{values: map[string]string{}}
	counted := &carryCounter{Gateway: host.cache()}
	pool := startPool(t, Config{Workers: 1, IsolatesPerWorker: 8, OnHostCall: host.serve, HostCache: counted})
	for _, id := range []string{"refused", "ok"} {
		if _, err := pool.Run(context.Background(), program.Job{ID: id, RetainHandles: true, Program: program.Program{Code: kvCounter}, Bindings: program.Bindings{KV: true}}); err != nil {
			t.Fatal(err)
		}
	}
	const rounds = 40
	var wg sync.WaitGroup
	errs := make(chan error, 2*rounds)
	var oks sync.Map
	for i := 0; i < rounds; i++ {
		wg.Add(2)
		go func() {
			defer wg.Done()
			if res, err := get(pool, "refused", "https://x/refused"); fault.CodeOf(err) != fault.QuotaExceeded {
				errs <- fmt.Errorf("a refused write answered %v %s", err, res.BodyBytes())
			}
		}()
		go func() {
			defer wg.Done()
			res, err := get(pool, "ok", "https://x/k")
			if err != nil {
				errs <- fmt.Errorf("the bystander's visit: %v", err)
				return
			}
			if _, dup := oks.LoadOrStore(string(res.BodyBytes()), true); dup {
				errs <- fmt.Errorf("the count %s answered twice", res.BodyBytes())
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	host.mu.Lock()
	defer host.mu.Unlock()
	if host.values["k"] != strconv.Itoa(rounds) {
		t.Fatalf("the bystander's count is %s after %d visits", host.values["k"], rounds)
	}
	if _, ok := host.values["refused"]; ok {
		t.Fatal("the refused write was stored")
	}
	counted.mu.Lock()
	t.Logf("%d frames carried answers, %d of them of both handles", counted.frames.Load(), counted.mixed)
	counted.mu.Unlock()
}
