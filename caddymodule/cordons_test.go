package caddymodule

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/caddyserver/caddy/v2/caddytest"
)

// Tenant cordons at a platform's scale (docs/architecture.md, "Tenant
// cordons"): each attack that once cost a tenant its state, its requests
// or its deployment, with bystanders whose state must survive.

// killWorkerOf kills the worker that holds handle id.
func killWorkerOf(t *testing.T, id string) {
	t.Helper()
	killed := false
	runtimes.Range(func(_, v any) bool {
		rt := v.(*runtime)
		if i := rt.pool.WorkerOf(id); i >= 0 {
			if err := rt.pool.KillWorker(i); err != nil {
				t.Fatal(err)
			}
			killed = true
		}
		return !killed
	})
	if !killed {
		t.Fatalf("no worker holds %s", id)
	}
}

// Fifty tenants, one counter each behind its own route, served round-robin
// by anonymous visitors (no token needed for this once): with `workers
// auto` each keeps its worker, and no counter ever starts over.
func TestManyTenantsKeepTheirState(t *testing.T) {
	store := filepath.Join(t.TempDir(), "registry.db")
	caddytest.NewTester(t).InitServer(gatewayConfig(store, "workers auto"), "caddyfile")
	const tenants, rounds = 50, 4
	routes := make([]string, tenants)
	for i := range routes {
		tok := token(t, fmt.Sprintf("tenant-%02d", i), allScopes)
		id := deployCounter(t, tok)
		routes[i] = fmt.Sprintf("shop-%02d", i)
		if a := do(t, "PUT", api("/routes/"+routes[i]), tok, mustJSON(map[string]any{"executionId": id})); a.status != 200 {
			t.Fatalf("route %d: %d %s", i, a.status, a.body)
		}
	}
	for round := 1; round <= rounds; round++ {
		var wg sync.WaitGroup
		errs := make(chan string, tenants)
		for i := range routes {
			wg.Add(1)
			go func() {
				defer wg.Done()
				a := do(t, "GET", site(routes[i]+".named.localhost", "/"), "", nil)
				if a.status != 200 {
					errs <- fmt.Sprintf("tenant %d, round %d: %d %s", i, round, a.status, a.body)
					return
				}
				if got := served(t, a); got != round {
					errs <- fmt.Sprintf("tenant %d, round %d: served %d (its closure state was lost)", i, round, got)
				}
			}()
		}
		wg.Wait()
		close(errs)
		for e := range errs {
			t.Error(e)
		}
		if t.Failed() {
			t.FailNow()
		}
	}
}

const busyTenant = `let served = 0;
export default { async fetch(request, env, ctx) {
	const url = new URL(request.url);
	if (url.pathname === '/wait') {
		await new Promise(r => setTimeout(r, 3000));
		return Response.json({ served: ++served });
	}
	if (url.pathname === '/sse') {
		let n = 0, timer;
		const body = new ReadableStream({
			start(c) {
				timer = setInterval(() => {
					c.enqueue('data: event ' + (n++) + '\n\n');
					if (n >= 20) { clearInterval(timer); c.close(); }
				}, 100);
			},
			cancel() { clearInterval(timer); },
		});
		return new Response(body.pipeThrough(new TextEncoderStream()), { headers: { 'content-type': 'text/event-stream' } });
	}
	if (url.pathname === '/later') {
		ctx.waitUntil(new Promise(r => setTimeout(r, 1500)).then(() => env.kv.put('later', 'written')));
		return new Response('accepted');
	}
	if (url.pathname === '/state') return Response.json({ served, later: await env.kv.get('later') });
	return Response.json({ served: ++served });
} };`

// Work in progress survives newcomers: while bob's handle has a request
// awaiting 3 s, an SSE stream of 20 events and waitUntil work writing kv,
// twelve new tenants arrive on `workers 4`. None of them takes bob's
// worker (they wait for a slot within their own bound, then answer
// OVERLOADED); bob's request answers, his stream delivers every event, his
// write lands, and his worker is the same process throughout.
func TestWorkInProgressSurvivesNewcomers(t *testing.T) {
	bob, _ := attacked(t, "workers 4\nrecycle_idle 100ms")
	tok := token(t, "carl", allScopes)
	id := deploy(t, tok, busyTenant, map[string]any{"timeoutMs": 5000, "concurrency": 8, "capabilities": []string{"kvRead", "kvWrite"}})
	handle := func(path string) string { return site(id+".apps.localhost", path) }
	pid := hostPID(t, id)

	waited := make(chan answer, 1)
	go func() { waited <- do(t, "GET", handle("/wait"), "", nil) }()
	if a := do(t, "GET", handle("/later"), "", nil); a.status != 200 {
		t.Fatalf("/later: %d %s", a.status, a.body)
	}
	res := streamClientGet(t, context.Background(), handle("/sse"))
	time.Sleep(200 * time.Millisecond) // recycle_idle has passed for bob's worker, not for carl's

	var wg sync.WaitGroup
	for i := 0; i < 12; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			newcomer := token(t, fmt.Sprintf("newcomer-%d", i), allScopes)
			if a := execute(t, newcomer, map[string]any{"code": "async () => 1"}); a.status != 200 && a.code() != "OVERLOADED" {
				t.Errorf("newcomer %d: %d %s", i, a.status, a.body)
			}
		}()
	}
	events, _, err := readEvents(res)
	if len(events) != 20 || events[19] != "data: event 19" {
		t.Fatalf("carl's stream while newcomers arrived: %d events (%v)", len(events), err)
	}
	wg.Wait()
	if a := <-waited; a.status != 200 {
		t.Fatalf("carl's request in progress: %d %s", a.status, a.body)
	}
	a := do(t, "GET", handle("/state"), "", nil)
	if string(a.body) != `{"served":1,"later":"written"}` {
		t.Fatalf("carl's state after the newcomers: %s", a.body)
	}
	if now := hostPID(t, id); now != pid {
		t.Fatalf("carl's handle moved from worker %d to %d: his worker was recycled", pid, now)
	}
	_ = bob // bob's worker, idle past recycle_idle, was the one to give way
}

// A timeout the program did not cause is no strike (docs/architecture.md, Blame): a
// handle whose rebuild waits 800 ms (on a timer, using no CPU) under a
// 500 ms bound answers TIMEOUT each time its worker is lost, but is never
// ended, however often; a handle that spins through its bound is, at its
// second strike in a row, and a timeout in between that it did not cause
// (a wait) does not start the count over.
func TestTimeoutsTheProgramDidNotCauseAreNoStrikes(t *testing.T) {
	_, mallory := attacked(t, "bound_strikes 2")
	// Its rebuilds wait from armed on; its deploy must come before. On a
	// loaded machine a deploy (a tenant's first waits for a worker, and
	// deploy tries again past OVERLOADED) may come after 2 s and then
	// times out in that wait: it is made again, armed twice as late.
	var slow string
	var armed int64
	for margin := 2 * time.Second; slow == ""; margin *= 2 {
		armed = time.Now().Add(margin).UnixMilli()
		req := map[string]any{"code": fmt.Sprintf(`async () => {
			if (Date.now() > %d) await new Promise(r => setTimeout(r, 800));
			return { fetch(req) {
				if (req.url.endsWith('/spin')) for (;;) {}
				return new Response('ok');
			} };
		}`, armed), "retainHandles": true, "timeoutMs": 500}
		a := execute(t, mallory, req)
		for deadline := time.Now().Add(10 * time.Second); a.code() == "OVERLOADED" && time.Now().Before(deadline); a = execute(t, mallory, req) {
			time.Sleep(250 * time.Millisecond)
		}
		if a.status == 200 {
			slow = a.json(t)["executionId"].(string)
		} else if a.code() != "TIMEOUT" || time.Now().UnixMilli() < armed || margin >= 16*time.Second {
			t.Fatalf("deploy: %d %.300s", a.status, a.body)
		}
	}
	time.Sleep(time.Until(time.UnixMilli(armed)))
	// Its worker lost: each request rebuilds it, and each rebuild times
	// out waiting (the isolate is gone again, so the next one rebuilds).
	killWorkerOf(t, slow)
	for i := 0; i < 4; i++ {
		a := do(t, "GET", site(slow+".apps.localhost", "/"), "", nil)
		if a.code() != "TIMEOUT" {
			t.Fatalf("rebuild %d: %d %s", i+1, a.status, a.body)
		}
	}
	if a := do(t, "GET", api("/handles/"+slow), mallory, nil); a.status != 200 {
		t.Fatalf("the slow handle was ended by timeouts it did not cause: %d %s", a.status, a.body)
	}
	logs := do(t, "GET", api("/handles/"+slow+"/logs"), mallory, nil)
	if !strings.Contains(string(logs.body), "no strike") {
		t.Fatalf("the handle's log does not say why no strike was taken: %.500s", logs.body)
	}

	// Whether a spin is a strike is the isolate thread's CPU during it: on
	// a machine whose cores are busy with other work, a spinning isolate
	// may get less than half of its 300 ms, and that timeout is rightly no
	// strike. So it spins until it is ended, waiting out its bound once
	// after the first strike, and each timeout's log says which it was.
	// The workers' CPU during a spin (from /proc, an upper bound of the
	// isolate thread's) tells what it should say: a spin they spent under
	// 130 ms on is no strike; one they spent 270 ms of its 300 on is one.
	spinner := deploy(t, mallory, `async () => ({ fetch(request) {
		if (request.url.endsWith('/wait')) return new Promise((r) => setTimeout(() => r(new Response('late')), 5000));
		for (;;) {}
	} })`, map[string]any{"timeoutMs": 300})
	strikes, waited, fed := 0, false, 0
	for call := 1; ; call++ {
		if call > 30 {
			if fed == 0 {
				t.Skipf("in %d spins the workers never got 270 ms of CPU in 300: the machine is too busy to tell", call-1)
			}
			t.Fatalf("a handle that spins through its bound is still open after %d timeouts (%d struck)", call-1, strikes)
		}
		path := "/spin"
		if strikes == 1 && !waited {
			path, waited = "/wait", true
		}
		cpu := workersCPU()
		if a := do(t, "GET", site(spinner+".apps.localhost", path), "", nil); a.code() != "TIMEOUT" {
			t.Fatalf("%s (call %d): %d %s", path, call, a.status, a.body)
		}
		cpu = workersCPU() - cpu
		if cpu >= 270*time.Millisecond {
			fed++
		}
		if a := do(t, "GET", api("/handles/"+spinner), mallory, nil); a.status == 404 {
			if path == "/wait" || strikes != 1 || cpu < 130*time.Millisecond {
				t.Fatalf("ended at %s (call %d, the workers' CPU %v) after %d strikes", path, call, cpu, strikes)
			}
			return // its second strike in a row, across the wait
		}
		timeouts := timeoutLogs(t, mallory, spinner)
		if len(timeouts) != call {
			t.Fatalf("after %d timeouts the handle's log tells %d: %q", call, len(timeouts), timeouts)
		}
		last := timeouts[call-1]
		struck := strings.HasSuffix(last, fmt.Sprintf("(strike %d of 2)", strikes+1))
		switch {
		case !struck && !strings.Contains(last, "(no strike"):
			t.Fatalf("%s (call %d, %d strikes before) was logged %q", path, call, strikes, last)
		case struck && (path == "/wait" || cpu < 130*time.Millisecond):
			t.Fatalf("%s (call %d) was a strike with the workers' CPU at %v: %q", path, call, cpu, last)
		case !struck && path == "/spin" && cpu >= 270*time.Millisecond:
			t.Fatalf("spin %d was no strike with the workers' CPU at %v: %q", call, cpu, last)
		case struck:
			strikes++
		case path == "/spin":
			t.Logf("spin %d: no strike (the workers' CPU %v)", call, cpu)
		}
	}
}

// workersCPU is the CPU time the workers of every runtime have used so far.
func workersCPU() time.Duration {
	var total int64
	runtimes.Range(func(_, v any) bool {
		for _, w := range v.(*runtime).pool.Status() {
			if w.PID > 0 {
				total += processCPUOf(w.PID)
			}
		}
		return true
	})
	return time.Duration(total)
}

// timeoutLogs is what a handle's log says of each of its timeouts.
func timeoutLogs(t *testing.T, tok, id string) []string {
	t.Helper()
	var logs struct{ Logs []struct{ Message string } }
	if a := do(t, "GET", api("/handles/"+id+"/logs"), tok, nil); a.status != 200 || json.Unmarshal(a.body, &logs) != nil {
		t.Fatalf("logs: %d %s", a.status, a.body)
	}
	var out []string
	for _, l := range logs.Logs {
		if strings.Contains(l.Message, "timed out") {
			out = append(out, l.Message)
		}
	}
	return out
}

const uploads = `let served = 0;
export default { async fetch(request) {
	const url = new URL(request.url);
	if (url.pathname === '/upload') {
		const text = await request.text();
		return Response.json({ served: ++served, length: text.length });
	}
	if (url.pathname === '/caught') {
		try { await request.text(); } catch (e) { return Response.json({ caught: e.name, code: e.code }); }
		return new Response('not caught');
	}
	if (url.pathname === '/slow') await new Promise(r => setTimeout(r, 300));
	return Response.json({ served: ++served });
} };`

// stalledUpload sends a chunked POST whose body stops after one chunk, and
// answers the status line the gateway writes.
func stalledUpload(t *testing.T, host, path string) string {
	t.Helper()
	conn, err := net.Dial("tcp", fmt.Sprintf("127.0.0.1:%d", httpPort))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	fmt.Fprintf(conn, "POST %s HTTP/1.1\r\nHost: %s:%d\r\nTransfer-Encoding: chunked\r\nContent-Type: text/plain\r\n\r\n5\r\nhello\r\n", path, host, httpPort)
	conn.SetReadDeadline(time.Now().Add(20 * time.Second))
	line, err := bufio.NewReader(conn).ReadString('\n')
	if err != nil {
		t.Fatalf("no answer to a stalled upload: %v", err)
	}
	return strings.TrimSpace(line)
}

// Waiting for the visitor's body is the visitor's time: three uploads that
// stall answer 408 after request_body_idle, although the wait is longer
// than the handle's 500 ms bound; no strike is taken, the isolate and its
// state stay, the route stays its tenant's, the visitors in progress at
// the same time are served. (A small body is read whole before the
// handler is called, so even a handler that would catch the error never
// sees it; a large one's handler does: bodies_test.go.)
func TestStalledUploadsAreTheVisitorsTime(t *testing.T) {
	bob, mallory := attacked(t, "request_body_idle 1s\nbound_strikes 3")
	id := deploy(t, mallory, uploads, map[string]any{"timeoutMs": 500, "concurrency": 20})
	if a := do(t, "PUT", api("/routes/webhooks"), mallory, mustJSON(map[string]any{"executionId": id})); a.status != 200 {
		t.Fatalf("route: %d %s", a.status, a.body)
	}
	host := "webhooks.named.localhost"
	if a := do(t, "POST", site(host, "/upload"), "", []byte("whole body")); string(a.body) != `{"served":1,"length":10}` {
		t.Fatalf("an upload: %d %s", a.status, a.body)
	}
	var wg sync.WaitGroup
	statuses := make(chan string, 3)
	for i := 0; i < 3; i++ {
		wg.Add(1)
		go func() { defer wg.Done(); statuses <- stalledUpload(t, host, "/upload") }()
	}
	visitors := make(chan answer, 5)
	for i := 0; i < 5; i++ {
		wg.Add(1)
		go func() { defer wg.Done(); visitors <- do(t, "GET", site(host, "/slow"), "", nil) }()
	}
	wg.Wait()
	close(statuses)
	close(visitors)
	for s := range statuses {
		if !strings.Contains(s, " 408 ") {
			t.Fatalf("a stalled upload answered %q, want 408", s)
		}
	}
	for a := range visitors {
		if a.status != 200 {
			t.Fatalf("a visitor in progress during the stalls: %d %s", a.status, a.body)
		}
	}
	if s := stalledUpload(t, host, "/caught"); !strings.Contains(s, " 408 ") {
		t.Fatalf("a small stalled body to a handler that would catch the error answered %q, want 408", s)
	}
	// Six increments so far (one upload, five visitors): the isolate and
	// its closure state survived the stalls.
	if a := do(t, "GET", site(host, "/"), "", nil); string(a.body) != `{"served":7}` {
		t.Fatalf("after the stalls: %d %s", a.status, a.body)
	}
	if a := do(t, "GET", api("/handles/"+id), mallory, nil); a.status != 200 || !strings.Contains(string(a.body), "webhooks") {
		t.Fatalf("the handle or its route after the stalls: %d %s", a.status, a.body)
	}
	bob.check("mallory's visitors stalled")
}

// When a worker is killed under load, the calls it never started are sent
// again to the rebuilt isolate: of 48 requests to a handle that awaits 20
// ms each, only the one in progress answers WORKER_CRASHED (a handle that
// slow keeps none queued in its worker: README.md, "Blame").
func TestKilledWorkerRetriesWhatItNeverStarted(t *testing.T) {
	_, mallory := attacked(t, "")
	id := deploy(t, mallory, `async () => ({ async fetch() { await new Promise(r => setTimeout(r, 20)); return new Response('ok'); } })`, map[string]any{"timeoutMs": 2000})
	const n = 48
	answers := make(chan answer, n)
	for i := 0; i < n; i++ {
		go func() { answers <- do(t, "GET", site(id+".apps.localhost", "/"), "", nil) }()
	}
	time.Sleep(60 * time.Millisecond)
	killWorkerOf(t, id)
	ok, failed := 0, 0
	for i := 0; i < n; i++ {
		a := <-answers
		switch {
		case a.status == http.StatusOK:
			ok++
		case a.code() == "WORKER_CRASHED":
			failed++
		default:
			t.Fatalf("a request: %d %s", a.status, a.body)
		}
	}
	if failed > 1 {
		t.Fatalf("%d of %d requests failed with the killed worker (%d answered): the ones it never started should have been sent again", failed, n, ok)
	}
}
