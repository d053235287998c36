package caddymodule

import (
	"bytes"
	"context"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/caddyserver/caddy/v2/caddytest"

	"github.com/retainer-gw/retainer/internal/waitfor"
)

// bystander is a second tenant on the same gateway whose state must survive
// every attack: its counter keeps counting (closure state intact), its
// worker keeps its PID, its handle and route stay its own.
type bystander struct {
	t     *testing.T
	tok   string
	id    string
	route string
	count int
	pid   int // the worker that hosts bob's handle
}

// hostPID is the PID of the worker that holds handle id.
func hostPID(t *testing.T, id string) int {
	t.Helper()
	pid := 0
	runtimes.Range(func(_, v any) bool {
		rt := v.(*runtime)
		if i := rt.pool.WorkerOf(id); i >= 0 {
			pid = rt.pool.Status()[i].PID
		}
		return pid == 0
	})
	return pid
}

func newBystander(t *testing.T) *bystander {
	b := &bystander{t: t, tok: token(t, "bob", allScopes), route: "bobs-shop"}
	b.id = deployCounter(t, b.tok)
	if a := do(t, "PUT", api("/routes/"+b.route), b.tok, mustJSON(map[string]any{"executionId": b.id})); a.status != 200 {
		t.Fatalf("bob's route: %d %s", a.status, a.body)
	}
	b.check("before the attacks")
	b.pid = hostPID(t, b.id)
	return b
}

// attacked starts a gateway with the given options, bob's bystanding
// counter on it, and answers him and the attacker mallory's token.
func attacked(t *testing.T, options string) (*bystander, string) {
	t.Helper()
	store := filepath.Join(t.TempDir(), "registry.db")
	// Room for bob, the attacker and a spare unless options say otherwise.
	caddytest.NewTester(t).InitServer(gatewayConfig(store, "workers 4\n"+options), "caddyfile")
	return newBystander(t), token(t, "mallory", allScopes)
}

// check asserts that bob's handle still counts on from where it was.
func (b *bystander) check(after string) {
	b.t.Helper()
	a := do(b.t, "GET", site(b.route+".apps.localhost", "/"), "", nil)
	if a.status != 200 {
		b.t.Fatalf("after %s: bob's handle answered %d %s", after, a.status, a.body)
	}
	b.count++
	if got := served(b.t, a); got != b.count {
		b.t.Fatalf("after %s: bob's counter is %d, want %d: his closure state was lost", after, got, b.count)
	}
	if b.pid != 0 {
		if now := hostPID(b.t, b.id); now != b.pid {
			b.t.Fatalf("after %s: bob's handle is in worker %d, was in %d: his worker died", after, now, b.pid)
		}
	}
}

func execute(t *testing.T, tok string, req map[string]any) answer {
	t.Helper()
	return do(t, "POST", api("/executions"), tok, mustJSON(req))
}

func deploy(t *testing.T, tok, code string, extra map[string]any) string {
	t.Helper()
	req := map[string]any{"code": code, "retainHandles": true}
	for k, v := range extra {
		req[k] = v
	}
	// OVERLOADED is retryable: a tenant's first deploy waits for a worker
	// only within its bound, and on a busy machine a worker may take longer
	// to start; a client tries again, and so does this, for 30 s.
	a := execute(t, tok, req)
	for deadline := time.Now().Add(30 * time.Second); a.code() == "OVERLOADED" && time.Now().Before(deadline); a = execute(t, tok, req) {
		time.Sleep(250 * time.Millisecond)
	}
	id, _ := a.json(t)["executionId"].(string)
	if a.status != 200 || id == "" {
		t.Fatalf("deploy: %d %.300s", a.status, a.body)
	}
	return id
}

// Every bound on what a program sends outward holds inside the worker: the
// attacker's run gets its own fault, and nobody else's worker dies.
func TestOutputBoundsAreMeasuredWhereBuilt(t *testing.T) {
	bob, mallory := attacked(t, "")

	// 3 MB of '<' is 18 MB once HTML-escaped; unescaped it is a result
	// well within the 8 MiB bound, and the API answers it as 3 MB.
	a := execute(t, mallory, map[string]any{"code": `async () => '<'.repeat(3e6)`, "timeoutMs": 10000})
	if a.status != 200 || len(a.body) < 3e6 || len(a.body) > 3e6+1024 || a.header.Get("X-Content-Type-Options") != "nosniff" {
		t.Fatalf("3 MB of '<': %d, %d bytes %v", a.status, len(a.body), a.header)
	}
	bob.check("a 3 MB result of '<'")

	a = execute(t, mallory, map[string]any{"code": `async () => 'x'.repeat(9e6)`, "memoryLimitMb": 128, "timeoutMs": 10000})
	if a.status != 422 || a.code() != "RUNTIME" || !strings.Contains(string(a.body), "The result is larger than its 8 MiB bound.") {
		t.Fatalf("9 MB result: %d %.300s", a.status, a.body)
	}
	bob.check("a 9 MB result")

	a = execute(t, mallory, map[string]any{"code": `async () => { throw new Error('<'.repeat(3e6)) }`, "timeoutMs": 10000})
	msg, _ := a.json(t)["error"].(map[string]any)["message"].(string)
	if a.status != 422 || a.code() != "RUNTIME" || len(msg) > 64<<10 || !strings.Contains(msg, "cut at the 64 KiB bound") {
		t.Fatalf("3 MB thrown text: %d, a message of %d bytes", a.status, len(msg))
	}
	bob.check("a 3 MB thrown text")

	a = execute(t, mallory, map[string]any{"code": `async () => { console.log('<'.repeat(5e6)); console.log('\x01'.repeat(1e6)); return 1 }`, "timeoutMs": 10000})
	total := 0
	for _, l := range a.json(t)["logs"].([]any) {
		total += len(l.(string))
	}
	if a.status != 200 || total > 65<<10 || !strings.Contains(string(a.body), "logs truncated") {
		t.Fatalf("5 MB log line: %d, %d bytes of logs %.200s", a.status, total, a.body)
	}
	bob.check("a 5 MB log line")

	// A handler's timer that logs 40 × 100 KB lines of control characters
	// (six bytes each once encoded): nothing is "running" for anyone.
	id := deploy(t, mallory, `async () => ({ fetch() {
		setTimeout(() => { for (let i = 0; i < 40; i++) console.log('\x01'.repeat(1e5)) }, 10);
		return new Response('armed');
	} })`, map[string]any{"timeoutMs": 10000})
	if a := do(t, "GET", site(id+".apps.localhost", "/"), "", nil); a.status != 200 {
		t.Fatalf("timer handler: %d %s", a.status, a.body)
	}
	var logs answer
	if !waitfor.Within(10*time.Second, func() bool {
		logs = do(t, "GET", api("/handles/"+id+"/logs"), mallory, nil)
		return logs.status == 200 && strings.Contains(string(logs.body), "logs truncated")
	}) {
		t.Fatalf("the timer's logs: %d %.300s", logs.status, logs.body)
	}
	bob.check("a timer that logs 4 MB")

	// Host-call arguments: a 1 MiB kv value of '<' and fetch bodies over
	// their bound.
	a = execute(t, mallory, map[string]any{"capabilities": []string{"kvWrite", "kvRead", "fetch"}, "timeoutMs": 10000,
		"outbound": map[string]any{"allow": []string{"example.com"}},
		"code": `async () => {
			await kv.put('k', '<'.repeat(1 << 20));
			const big = (await kv.get('k')).length;
			let over = 'no';
			try { await kv.put('k2', '\x01'.repeat(1 << 20)) } catch (e) { over = e.message }
			let fetchOver = 'no';
			try { await fetch('http://example.com/', {method: 'POST', body: '\x01'.repeat(2 << 20)}) } catch (e) { fetchOver = e.message }
			return {big, over, fetchOver};
		}`})
	m := a.json(t)
	res, _ := m["result"].(map[string]any)
	if a.status != 200 || res["big"] != float64(1<<20) || !strings.Contains(fmt.Sprint(res["over"]), "bound") || !strings.Contains(fmt.Sprint(res["fetchOver"]), "bound") {
		t.Fatalf("host-call arguments: %d %.400s", a.status, a.body)
	}
	bob.check("1 MiB host-call arguments")

	// Response heads: a 7 MB header answers 502.
	id = deploy(t, mallory, `async () => ({ fetch() { return new Response('x', {headers: {'x-big': 'a'.repeat(7e6)}}) } })`, map[string]any{"timeoutMs": 10000})
	if a := do(t, "GET", site(id+".apps.localhost", "/"), "", nil); a.status != 502 || a.code() != "BAD_RESPONSE" {
		t.Fatalf("7 MB header: %d %.200s", a.status, a.body)
	}
	bob.check("a 7 MB response header")
}

// A slow handle hit by many visitors at once is not killed: the kill clock
// starts when its worker starts the call, not when the call was queued.
func TestQueuedInvocationsAreNotOverruns(t *testing.T) {
	bob, mallory := attacked(t, "")
	// 300 ms each, awaited rather than spun, under a 2 s bound: sixteen of
	// them queue for 4.8 s (past the old kill clock of bound + grace = 4 s
	// from the send) without a busy worker, and the first has 4 s, so a
	// loaded CI machine cannot starve one past its own clock.
	id := deploy(t, mallory, `async () => ({ async fetch() { await new Promise(r => setTimeout(r, 300)); return new Response('slow') } })`, map[string]any{"timeoutMs": 2000})
	var wg sync.WaitGroup
	answers := make(chan answer, 16)
	for i := 0; i < 16; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			answers <- do(t, "GET", site(id+".apps.localhost", "/"), "", nil)
		}()
	}
	wg.Wait()
	close(answers)
	for a := range answers {
		if a.status != 200 {
			t.Fatalf("a queued invocation of a 300 ms handler answered %d %s", a.status, a.body)
		}
	}
	bob.check("16 queued 300 ms invocations")
}

// A visitor who resets the connection during a lazy rebuild ends nothing:
// the handle, its state on the next request and its route stay; another
// tenant cannot take the route.
func TestRebuildOutlivesTheVisitor(t *testing.T) {
	store := filepath.Join(t.TempDir(), "registry.db")
	config := gatewayConfig(store, "")
	tester := caddytest.NewTester(t)
	tester.InitServer(config, "caddyfile")
	alice := token(t, "alice", allScopes)
	eve := token(t, "eve", allScopes)
	// The program takes 300 ms to start, so a rebuild is easy to abandon.
	id := deploy(t, alice, `async () => { const t = Date.now(); while (Date.now() - t < 300); let n = 0; return { fetch() { return Response.json({served: ++n}) } } }`, map[string]any{"timeoutMs": 5000})
	if a := do(t, "PUT", api("/routes/shop"), alice, mustJSON(map[string]any{"executionId": id})); a.status != 200 {
		t.Fatalf("route: %d %s", a.status, a.body)
	}
	for try := 0; try < 3; try++ {
		restart(tester, config)
		ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
		req, _ := http.NewRequestWithContext(ctx, "GET", site("shop.apps.localhost", "/"), nil)
		if res, err := client.Do(req); err == nil {
			res.Body.Close()
			t.Logf("try %d: the request finished before the reset", try)
		}
		cancel()
		if a := do(t, "GET", site("shop.apps.localhost", "/"), "", nil); served(t, a) != 1 {
			t.Fatalf("try %d: after a reset during the rebuild: %s", try, a.body)
		}
		if a := do(t, "PUT", api("/routes/shop"), eve, mustJSON(map[string]any{"executionId": deploy(t, eve, counter, nil)})); a.status != 409 || a.code() != "CONFLICT" {
			t.Fatalf("try %d: another tenant took the route: %d %s", try, a.status, a.body)
		}
	}
}

// Data-plane response hygiene (README.md, API) and the module form decided by
// parsing (docs/runtime.md).
func TestResponseHygieneAndModuleForm(t *testing.T) {
	store := filepath.Join(t.TempDir(), "registry.db")
	tester := caddytest.NewTester(t)
	tester.InitServer(gatewayConfig(store, ""), "caddyfile")
	alice := token(t, "alice", allScopes)
	id := deploy(t, alice, `let n = 0; export default { fetch() { return new Response('m' + (++n), {headers: [
		['set-cookie', 'a=1; Domain=apps.localhost; Path=/; HttpOnly'],
		['set-cookie', 'b=2;domain=.localhost'],
		['connection', 'x-secret-hop'], ['x-secret-hop', 'leaked'], ['x-kept', 'yes']]}) } }`, nil)
	a := do(t, "GET", site(id+".apps.localhost", "/"), "", nil)
	if a.status != 200 || string(a.body) != "m1" {
		t.Fatalf("one-line module: %d %s", a.status, a.body)
	}
	cookies := a.header.Values("Set-Cookie")
	if len(cookies) != 2 || strings.Contains(strings.ToLower(strings.Join(cookies, "|")), "domain") || !strings.Contains(cookies[0], "HttpOnly") {
		t.Fatalf("cookies kept a Domain: %q", cookies)
	}
	if a.header.Get("X-Secret-Hop") != "" || a.header.Get("X-Kept") != "yes" {
		t.Fatalf("Connection-named header: %v", a.header)
	}
	// A buffered body goes with its true length, never chunked, whatever
	// length the handler claimed; a 204 has none.
	sized := deploy(t, alice, `export default { fetch(r) {
		if (r.url.endsWith('/none')) return new Response(null, {status: 204});
		if (r.url.endsWith('/empty')) return new Response('');
		return new Response('x'.repeat(5000), {headers: {'content-length': '3'}}) } }`, nil)
	if a := do(t, "GET", site(sized+".apps.localhost", "/"), "", nil); a.status != 200 || len(a.body) != 5000 || a.header.Get("Content-Length") != "5000" || len(a.te) != 0 {
		t.Fatalf("a 5,000 byte body: %d, %d bytes, Content-Length %q, transfer encoding %v", a.status, len(a.body), a.header.Get("Content-Length"), a.te)
	}
	if a := do(t, "GET", site(sized+".apps.localhost", "/empty"), "", nil); a.status != 200 || a.header.Get("Content-Length") != "0" {
		t.Fatalf("an empty body: %d, Content-Length %q", a.status, a.header.Get("Content-Length"))
	}
	if a := do(t, "GET", site(sized+".apps.localhost", "/none"), "", nil); a.status != 204 || a.header.Get("Content-Length") != "" {
		t.Fatalf("a 204: %d, Content-Length %q", a.status, a.header.Get("Content-Length"))
	}
}

// Address checks (docs/threat-model.md): zoned IPv6 is refused in URLs and allow lists,
// and fetch takes only real Requests.
func TestZonedAddressesAndForgedRequests(t *testing.T) {
	store := filepath.Join(t.TempDir(), "registry.db")
	tester := caddytest.NewTester(t)
	tester.InitServer(gatewayConfig(store, ""), "caddyfile")
	alice := token(t, "alice", allScopes)
	// The gateway's own port, reached through a zone.
	port := strconv.Itoa(httpPort)
	a := execute(t, alice, map[string]any{"code": `async () => 1`, "capabilities": []string{"fetch"},
		"outbound": map[string]any{"allow": []string{"[::1%251]:" + port}}})
	if a.status != 400 || a.code() != "BAD_REQUEST" {
		t.Fatalf("zoned allow list: %d %s", a.status, a.body)
	}
	a = execute(t, alice, map[string]any{"capabilities": []string{"fetch"},
		"outbound": map[string]any{"allow": []string{"[::1]:" + port, "example.com"}},
		"code": `async () => {
			const out = {}, zoned = 'http://[::1%251]:` + port + `/';
			try { await fetch(zoned) ; out.zoned = 'fetched' } catch (e) { out.zoned = e.message }
			const forged = Object.create(Request.prototype, {url: {value: zoned}, method: {value: 'GET'}, headers: {value: new Headers()}});
			try { await fetch(forged); out.forged = 'fetched' } catch (e) { out.forged = e.constructor.name + ': ' + e.message }
			return out;
		}`})
	m := a.json(t)
	res, _ := m["result"].(map[string]any)
	if a.status != 200 || res["zoned"] == "fetched" || !strings.HasPrefix(fmt.Sprint(res["forged"]), "TypeError") {
		t.Fatalf("zoned fetches: %d %s", a.status, a.body)
	}
}

// Tenant cordons (docs/architecture.md): a worker hosts one tenant; a tenant that
// crashes its worker costs nobody else anything; when every worker is held,
// an idle tenant's worker (idle for recycle_idle) is recycled and its
// handles come back on their next request, without a strike.
func TestTenantCordons(t *testing.T) {
	bob, mallory := attacked(t, "workers 2\nisolation tenant\nrecycle_idle 200ms")
	// The deploy may wait for the spare worker bob's deploy set starting
	// (a newcomer waits within its own timeout): on a loaded machine a
	// worker's start can take longer than the default 500 ms.
	evil := deploy(t, mallory, `async () => ({ fetch(req) {
		if (req.url.endsWith('/crash')) return new Response('x'.repeat(2**29 - 32).toLowerCase());
		return new Response('ok');
	} })`, map[string]any{"timeoutMs": 5000})
	if hostPID(t, evil) == bob.pid || hostPID(t, evil) == 0 {
		t.Fatalf("mallory's handle shares bob's worker %d", bob.pid)
	}
	// A native crash of V8 in mallory's worker.
	if a := do(t, "GET", site(evil+".apps.localhost", "/crash"), "", nil); a.status != 503 && a.status != 504 {
		t.Fatalf("the crash answered %d %s", a.status, a.body)
	}
	bob.check("mallory crashed her worker")

	// Both slots are held (bob, mallory); carol's first run recycles the
	// worker idle for recycle_idle, mallory's, not bob's (just active).
	mallory2 := deploy(t, mallory, counter, nil)
	if a := do(t, "GET", site(mallory2+".apps.localhost", "/"), "", nil); served(t, a) != 1 {
		t.Fatalf("mallory's counter: %s", a.body)
	}
	time.Sleep(300 * time.Millisecond)
	bob.check("mallory deployed again")
	carol := token(t, "carol", allScopes)
	if a := execute(t, carol, map[string]any{"code": "async () => 7"}); a.status != 200 {
		t.Fatalf("carol's first run: %d %s", a.status, a.body)
	}
	bob.check("carol took a worker")
	// Mallory's handle was parked with her recycled worker: it comes back,
	// closure state afresh, without a strike.
	if a := do(t, "GET", site(mallory2+".apps.localhost", "/"), "", nil); a.status != 200 {
		t.Fatalf("mallory's handle after the recycling: %d %s", a.status, a.body)
	}
	bob.check("mallory came back")
}

// A tenant that deploys more handles than its worker holds parks its own
// idle handles; it never takes a worker another tenant holds alone, whose
// handles would lose their state (found by this test: mallory's third
// handle recycled bob's worker).
func TestTenantGrowthStaysInItsOwnWorker(t *testing.T) {
	bob, mallory := attacked(t, "workers 2\nisolation tenant\nisolates_per_worker 2")
	var hers []string
	for i := 0; i < 5; i++ {
		hers = append(hers, deploy(t, mallory, counter, nil))
		bob.check(fmt.Sprintf("mallory's handle %d", i+1))
	}
	for i, id := range hers {
		// Parked ones are rebuilt in her own worker, closure state afresh.
		if a := do(t, "GET", site(id+".apps.localhost", "/"), "", nil); a.status != 200 {
			t.Fatalf("mallory's handle %d: %d %s", i+1, a.status, a.body)
		}
		bob.check(fmt.Sprintf("mallory's handle %d answered", i+1))
	}
}

// Concurrency (docs/architecture.md) through a real gateway: 32 visitors of a handle that
// awaits 300 ms are in progress at once with `concurrency: 32`; the value
// is checked, shown, and kept across a rebuild.
func TestHandleConcurrency(t *testing.T) {
	store := filepath.Join(t.TempDir(), "registry.db")
	config := gatewayConfig(store, "")
	tester := caddytest.NewTester(t)
	tester.InitServer(config, "caddyfile")
	alice := token(t, "alice", allScopes)
	code := `async () => { let now = 0, most = 0; return { async fetch() {
		now++; most = Math.max(most, now);
		await new Promise(r => setTimeout(r, 300));
		now--;
		return Response.json({most});
	} } }`
	for _, bad := range []int{0, 1001} {
		if a := execute(t, alice, map[string]any{"code": code, "retainHandles": true, "concurrency": bad}); a.status != 400 || a.code() != "BAD_REQUEST" {
			t.Fatalf("concurrency %d: %d %s", bad, a.status, a.body)
		}
	}
	id := deploy(t, alice, code, map[string]any{"concurrency": 32, "timeoutMs": 5000})
	most := func() int {
		var wg sync.WaitGroup
		top := make(chan int, 32)
		for i := 0; i < 32; i++ {
			wg.Add(1)
			go func() {
				defer wg.Done()
				a := do(t, "GET", site(id+".apps.localhost", "/"), "", nil)
				var m struct{ Most int }
				jsonUnmarshal(a.body, &m)
				if a.status != 200 {
					t.Errorf("an invocation answered %d %s", a.status, a.body)
				}
				top <- m.Most
			}()
		}
		wg.Wait()
		close(top)
		best := 0
		for m := range top {
			best = max(best, m)
		}
		return best
	}
	if n := most(); n < 16 {
		t.Fatalf("with concurrency 32, at most %d of 32 were in progress at once", n)
	}
	a := do(t, "GET", api("/handles/"+id), alice, nil)
	if m := a.json(t); m["concurrency"] != float64(32) {
		t.Fatalf("the handle's record: %s", a.body)
	}
	restart(tester, config)
	if n := most(); n < 16 {
		t.Fatalf("after a rebuild, at most %d of 32 were in progress at once", n)
	}
}

// Children that spin outlive nothing: a run that spawns 50 of them and
// answers at once leaves no CPU burning in its worker (the cancel frame
// ends each where it runs), and a bystander's counter goes on.
func TestSpawnedChildrenStopWithTheirParent(t *testing.T) {
	bob, mallory := attacked(t, "")
	a := execute(t, mallory, map[string]any{"capabilities": []string{"spawn"}, "timeoutMs": 10000,
		"code": "async () => { for (let i = 0; i < 50; i++) spawn('for (;;) {}').catch(() => {}); await new Promise(r => setTimeout(r, 500)); return 'left' }"})
	if a.status != 200 {
		t.Fatalf("the attack run: %d %s", a.status, a.body)
	}
	answered := time.Now()
	cpu := func() time.Duration {
		total := time.Duration(0)
		for _, pid := range workerPIDs(t) {
			if pid != 0 {
				total += time.Duration(processCPUOf(pid))
			}
		}
		return total
	}
	// Children left running would spin until the run's 10 s bound; ended
	// ones stop within moments (longer on a loaded machine), so a quiet
	// second must come well before that.
	for {
		before := cpu()
		time.Sleep(time.Second)
		spent := cpu() - before
		if spent <= 500*time.Millisecond {
			break
		}
		if time.Since(answered) > 6*time.Second {
			t.Fatalf("the workers still spent %v of CPU a second, %v after the run answered: its children went on", spent, time.Since(answered).Round(time.Second))
		}
	}
	bob.check("50 spinning children")
}

// processCPUOf is process pid's CPU time in nanoseconds (user and system,
// from /proc; clock ticks of 10 ms).
func processCPUOf(pid int) int64 {
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0
	}
	i := bytes.LastIndexByte(data, ')')
	f := strings.Fields(string(data[i+1:]))
	if len(f) < 13 {
		return 0
	}
	u, _ := strconv.ParseInt(f[11], 10, 64)
	s, _ := strconv.ParseInt(f[12], 10, 64)
	return (u + s) * int64(10*time.Millisecond)
}

// untilStopped does do again and again on a goroutine of wg until stop
// is closed (a flood's visitor).
func untilStopped(wg *sync.WaitGroup, stop <-chan struct{}, do func()) {
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			select {
			case <-stop:
				return
			default:
			}
			do()
		}
	}()
}
