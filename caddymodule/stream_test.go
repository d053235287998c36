package caddymodule

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/caddyserver/caddy/v2/caddytest"

	"github.com/retainer-gw/retainer/internal/waitfor"
)

// Streamed responses through a real gateway (README.md, API).

const sseHandler = `async () => {
	let cancelled = 0;
	return { async fetch(request) {
		const url = new URL(request.url);
		if (url.pathname === '/cancelled') return Response.json({ cancelled });
		if (url.pathname === '/quick') return new Response('quick');
		const every = +(url.searchParams.get('every') || 100);
		const count = +(url.searchParams.get('count') || 5);
		const size = +(url.searchParams.get('size') || 0);
		let timer, n = 0;
		const text = new ReadableStream({
			start(c) {
				timer = setInterval(() => {
					if (url.pathname === '/spin' && n === 2) { while (true) {} }
					c.enqueue(size ? 'x'.repeat(size) : 'data: event ' + (n++) + '\n\n');
					if (count > 0 && n >= count) { clearInterval(timer); c.close(); }
				}, every);
			},
			cancel() { clearInterval(timer); cancelled++; },
		});
		return new Response(text.pipeThrough(new TextEncoderStream()), { headers: { 'content-type': 'text/event-stream' } });
	} };
}`

func streamClientGet(t *testing.T, ctx context.Context, url string) *http.Response {
	t.Helper()
	req, _ := http.NewRequestWithContext(ctx, "GET", url, nil)
	res, err := client.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	return res
}

// readEvents reads a response's server-sent events to its end, with the
// time each arrived, and closes it.
func readEvents(res *http.Response) ([]string, []time.Time, error) {
	defer res.Body.Close()
	sc := bufio.NewScanner(res.Body)
	var events []string
	var arrivals []time.Time
	for sc.Scan() {
		if line := sc.Text(); strings.HasPrefix(line, "data: ") {
			events = append(events, line)
			arrivals = append(arrivals, time.Now())
		}
	}
	return events, arrivals, sc.Err()
}

func TestStreamedResponses(t *testing.T) {
	store := filepath.Join(t.TempDir(), "registry.db")
	tester := caddytest.NewTester(t)
	tester.InitServer(gatewayConfig(store, "stream_timeout 2s\n\t\tmax_response_body 1MiB"), "caddyfile")
	alice := token(t, "alice", allScopes)
	a := do(t, "POST", api("/executions"), alice, mustJSON(map[string]any{"code": sseHandler, "retainHandles": true}))
	if a.status != 200 {
		t.Fatalf("deploy: %d %s", a.status, a.body)
	}
	id, _ := a.json(t)["executionId"].(string)
	handle := func(path string) string { return site(id+".apps.localhost", path) }

	// Events arrive spaced as the handler sends them, not all at the end:
	// the first is read while the handler has not yet sent the last.
	res := streamClientGet(t, context.Background(), handle("/sse?every=150&count=5"))
	if res.StatusCode != 200 || res.Header.Get("Content-Type") != "text/event-stream" {
		t.Fatalf("head: %d %v", res.StatusCode, res.Header)
	}
	// A second request to the same handle is served while the stream is open.
	if q := do(t, "GET", handle("/quick"), "", nil); q.status != 200 || string(q.body) != "quick" {
		t.Fatalf("a request during the stream: %d %s", q.status, q.body)
	}
	events, arrivals, err := readEvents(res)
	if len(events) != 5 || events[4] != "data: event 4" {
		t.Fatalf("events: %q (%v)", events, err)
	}
	if spread := arrivals[4].Sub(arrivals[0]); spread < 300*time.Millisecond {
		t.Fatalf("the 5 events, sent 150 ms apart, arrived within %v: buffered", spread)
	}

	// A visitor who disconnects cancels the stream: its cancel runs.
	ctx, cancel := context.WithCancel(context.Background())
	res = streamClientGet(t, ctx, handle("/sse?every=50&count=0"))
	br := bufio.NewReader(res.Body)
	if _, err := br.ReadString('\n'); err != nil {
		t.Fatal(err)
	}
	cancel()
	res.Body.Close()
	waitfor.Until(t, 5*time.Second, "the stream's cancel to run after the visitor left", func() bool {
		return strings.Contains(string(do(t, "GET", handle("/cancelled"), "", nil).body), `"cancelled":1`)
	})

	// Past the response bound (1 MiB here) the stream ends, cut.
	res = streamClientGet(t, context.Background(), handle("/big?every=1&count=0&size=65536"))
	n, err := io.Copy(io.Discard, res.Body)
	res.Body.Close()
	if err == nil || n > 1<<20 {
		t.Fatalf("a stream past the bound: %d bytes, err %v", n, err)
	}

	// Past stream_timeout (2 s here) the stream ends, cut.
	start := time.Now()
	res = streamClientGet(t, context.Background(), handle("/sse?every=100&count=0"))
	_, err = io.Copy(io.Discard, res.Body)
	res.Body.Close()
	if err == nil || time.Since(start) > 15*time.Second {
		t.Fatalf("a stream past stream_timeout: err %v after %v", err, time.Since(start))
	}

	// A stream callback that loops forever is the program's bound hit: the
	// stream ends, the handle's log says why, and its worker survives.
	before := workerPIDs(t)
	res = streamClientGet(t, context.Background(), handle("/spin?every=50&count=0"))
	_, err = io.Copy(io.Discard, res.Body)
	res.Body.Close()
	if err == nil {
		t.Fatal("a stream whose callback spins ended cleanly")
	}
	// The bound hit reaches the handle's log from the worker on its own
	// channel, possibly after the visitor's connection was cut.
	var logs answer
	waitfor.Within(10*time.Second, func() bool {
		logs = do(t, "GET", api("/handles/"+id+"/logs"), alice, nil)
		return strings.Contains(string(logs.body), "timed out")
	})
	if !strings.Contains(string(logs.body), "timed out at its 500 ms bound") {
		t.Fatalf("the handle's log after a spinning stream callback: %s", logs.body)
	}
	if after := workerPIDs(t); fmt.Sprint(after) != fmt.Sprint(before) {
		t.Fatalf("workers changed: %v → %v", before, after)
	}
	// The handle is rebuilt and serves again.
	if q := do(t, "GET", handle("/quick"), "", nil); q.status != 200 {
		t.Fatalf("after the spin: %d %s", q.status, q.body)
	}

	// The API's invoke reads a streamed body whole.
	inv := do(t, "POST", api("/handles/"+id+"/fetch"), alice, []byte(`{"method":"GET","url":"https://x/sse?every=10&count=3","headers":[],"body":null}`))
	if inv.status != 200 || !strings.Contains(string(inv.body), `"body":"`) {
		t.Fatalf("API invoke of a stream: %d %s", inv.status, inv.body)
	}
}

// Many streams at once on one handle each get their own events.
func TestConcurrentStreams(t *testing.T) {
	store := filepath.Join(t.TempDir(), "registry.db")
	tester := caddytest.NewTester(t)
	tester.InitServer(gatewayConfig(store, ""), "caddyfile")
	alice := token(t, "alice", allScopes)
	for _, concurrency := range []int{1, 8} {
		a := do(t, "POST", api("/executions"), alice, mustJSON(map[string]any{"code": sseHandler, "retainHandles": true, "concurrency": concurrency}))
		id, _ := a.json(t)["executionId"].(string)
		twentyStreams(t, id)
	}
}

func twentyStreams(t *testing.T, id string) {
	var wg sync.WaitGroup
	errs := make(chan error, 20)
	for i := 0; i < 20; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			res := streamClientGet(t, context.Background(), site(id+".apps.localhost", "/sse?every=20&count=10"))
			body, err := io.ReadAll(res.Body)
			res.Body.Close()
			if err != nil || strings.Count(string(body), "data: event") != 10 {
				errs <- fmt.Errorf("%v: %q", err, body)
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
}

// A worker crash ends its open streams: the visitor's connection closes
// instead of hanging, and the handle serves again after its rebuild.
func TestWorkerCrashEndsOpenStreams(t *testing.T) {
	store := filepath.Join(t.TempDir(), "registry.db")
	tester := caddytest.NewTester(t)
	tester.InitServer(gatewayConfig(store, ""), "caddyfile")
	alice := token(t, "alice", allScopes)
	a := do(t, "POST", api("/executions"), alice, mustJSON(map[string]any{"code": sseHandler, "retainHandles": true}))
	id, _ := a.json(t)["executionId"].(string)
	res := streamClientGet(t, context.Background(), site(id+".apps.localhost", "/sse?every=50&count=0"))
	br := bufio.NewReader(res.Body)
	if _, err := br.ReadString('\n'); err != nil {
		t.Fatal(err)
	}
	for _, pid := range workerPIDs(t) {
		if pid != 0 {
			syscall.Kill(pid, syscall.SIGKILL)
		}
	}
	ended := make(chan error, 1)
	go func() {
		_, err := io.Copy(io.Discard, br)
		ended <- err
	}()
	select {
	case err := <-ended:
		if err == nil {
			t.Fatal("the stream of a killed worker ended as if complete")
		}
	case <-time.After(20 * time.Second):
		t.Fatal("the stream of a killed worker hangs")
	}
	res.Body.Close()
	var q answer
	if !waitfor.Within(20*time.Second, func() bool { q = do(t, "GET", site(id+".apps.localhost", "/quick"), "", nil); return q.status == 200 }) {
		t.Fatalf("the handle after its worker was killed: %d %s", q.status, q.body)
	}
}

// A chunked upload over 1 MiB streams into request.body while the visitor
// sends it: the handler has read the first part before the second is
// sent; a body past max_request_body fails the handler's read. (One of up
// to 1 MiB is read whole before the handler is called: bodies_test.go.)
func TestStreamedUpload(t *testing.T) {
	store := filepath.Join(t.TempDir(), "registry.db")
	tester := caddytest.NewTester(t)
	tester.InitServer(gatewayConfig(store, "max_request_body 2MiB"), "caddyfile")
	alice := token(t, "alice", allScopes)
	code := `async () => { let seen = 0; return { async fetch(request) {
		const path = new URL(request.url).pathname;
		if (path === '/progress') return Response.json({ seen });
		if (path === '/upload') {
			seen = 0;
			const reader = request.body.getReader();
			let total = 0;
			for (;;) { const { value, done } = await reader.read(); if (done) break; total += value.length; seen = total; }
			return Response.json({ total });
		}
		return new Response((await request.text()).toUpperCase());
	} } }`
	a := do(t, "POST", api("/executions"), alice, mustJSON(map[string]any{"code": code, "retainHandles": true, "concurrency": 4, "timeoutMs": 10000}))
	id, _ := a.json(t)["executionId"].(string)
	handle := func(path string) string { return site(id+".apps.localhost", path) }

	pr, pw := io.Pipe()
	req, _ := http.NewRequest("POST", handle("/upload"), pr)
	done := make(chan answer, 1)
	go func() {
		res, err := client.Do(req)
		if err != nil {
			done <- answer{status: -1, body: []byte(err.Error())}
			return
		}
		body, _ := io.ReadAll(res.Body)
		res.Body.Close()
		done <- answer{status: res.StatusCode, body: body}
	}()
	first := strings.Repeat("hello ", 200000) // 1.2 MB
	go pw.Write([]byte(first))
	var p answer
	if !waitfor.Within(8*time.Second, func() bool {
		p = do(t, "GET", handle("/progress"), "", nil)
		return strings.Contains(string(p.body), fmt.Sprintf(`"seen":%d`, len(first)))
	}) {
		t.Fatalf("the handler did not see the first part while the upload went on: %s", p.body)
	}
	pw.Write([]byte("world"))
	pw.Close()
	if got := <-done; got.status != 200 || string(got.body) != fmt.Sprintf(`{"total":%d}`, len(first)+5) {
		t.Fatalf("upload: %d %s", got.status, got.body)
	}

	// request.text() of a chunked body keeps working.
	pr, pw = io.Pipe()
	go func() {
		for i := 0; i < 5; i++ {
			pw.Write([]byte(strings.Repeat("ab", 40000)))
		}
		pw.Close()
	}()
	req, _ = http.NewRequest("POST", handle("/text"), pr)
	res, err := client.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(res.Body)
	res.Body.Close()
	if res.StatusCode != 200 || string(body) != strings.Repeat("AB", 200000) {
		t.Fatalf("text of a chunked body: %d %.100s (%d bytes)", res.StatusCode, body, len(body))
	}

	// Past max_request_body (2 MiB here) the handler's read fails.
	pr, pw = io.Pipe()
	go func() {
		for i := 0; i < 48; i++ {
			if _, err := pw.Write(make([]byte, 64<<10)); err != nil {
				break
			}
		}
		pw.Close()
	}()
	req, _ = http.NewRequest("POST", handle("/text"), pr)
	res, err = client.Do(req)
	if err == nil {
		io.Copy(io.Discard, res.Body)
		res.Body.Close()
		if res.StatusCode != 500 {
			t.Fatalf("a body past the bound: %d", res.StatusCode)
		}
	}
	logs := do(t, "GET", api("/handles/"+id+"/logs"), alice, nil)
	if !strings.Contains(string(logs.body), "over the 2097152 byte bound") {
		t.Fatalf("the handle's log after a body past the bound: %s", logs.body)
	}
}

// An upstream's SSE is relayed through a handle with the fetch capability
// as it arrives (the handler returns the fetch answer unread); a handler
// that reads a long chunked answer itself gets it whole.
func TestRelayedUpstreamStream(t *testing.T) {
	upstream := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/big" {
			for i := 0; i < 40; i++ {
				w.Write([]byte(strings.Repeat("0123456789abcdef", 4096))) // 64 KiB
			}
			return
		}
		w.Header().Set("Content-Type", "text/event-stream")
		for i := 0; i < 5; i++ {
			fmt.Fprintf(w, "data: upstream %d\n\n", i)
			w.(http.Flusher).Flush()
			time.Sleep(150 * time.Millisecond)
		}
	}))
	defer upstream.Close()
	store := filepath.Join(t.TempDir(), "registry.db")
	tester := caddytest.NewTester(t)
	tester.InitServer(upstreamGatewayConfig(store, "2s"), "caddyfile")
	host := strings.TrimPrefix(upstream.URL, "http://")
	code := fmt.Sprintf(`async () => ({ async fetch(request) {
		const path = new URL(request.url).pathname;
		if (path === '/relay') return fetch('%[1]s/sse');
		if (path === '/wrapped') { const up = await fetch('%[1]s/sse'); return new Response(up.body, { headers: { 'content-type': 'text/event-stream', 'x-relayed': 'yes' } }); }
		const text = await (await fetch('%[1]s/big')).text();
		return Response.json({ length: text.length });
	} })`, upstream.URL)
	a := do(t, "POST", site("anon.localhost", "/executions"), "", mustJSON(map[string]any{"code": code, "retainHandles": true,
		"capabilities": []string{"fetch"}, "outbound": map[string]any{"allow": []string{host}}}))
	id, _ := a.json(t)["executionId"].(string)
	if id == "" {
		t.Fatalf("deploy: %d %s", a.status, a.body)
	}
	for _, path := range []string{"/relay", "/wrapped"} {
		res := streamClientGet(t, context.Background(), site(id+".apps.localhost", path))
		if res.StatusCode != 200 || res.Header.Get("Content-Type") != "text/event-stream" {
			t.Fatalf("%s head: %d %v", path, res.StatusCode, res.Header)
		}
		events, arrivals, err := readEvents(res)
		if len(events) != 5 || events[4] != "data: upstream 4" {
			t.Fatalf("%s events: %q (%v)", path, events, err)
		}
		if spread := arrivals[4].Sub(arrivals[0]); spread < 300*time.Millisecond {
			t.Fatalf("%s: the upstream's events, 150 ms apart, arrived within %v: buffered", path, spread)
		}
	}
	if b := do(t, "GET", site(id+".apps.localhost", "/big"), "", nil); b.status != 200 || string(b.body) != `{"length":2621440}` {
		t.Fatalf("a long chunked answer read by the handler: %d %s", b.status, b.body)
	}
}

// A browser's EventSource reads a handler's server-sent events.
func TestEventSourceInABrowser(t *testing.T) {
	chromium(t) // skips here, before the deploy, where there is none
	store := filepath.Join(t.TempDir(), "registry.db")
	tester := caddytest.NewTester(t)
	tester.InitServer(gatewayConfig(store, ""), "caddyfile")
	alice := token(t, "alice", allScopes)
	code := `async () => ({ async fetch(request) {
		if (new URL(request.url).pathname === '/') return new Response('<!doctype html><body>waiting<script>' +
			'const es = new EventSource("/sse"); const got = [];' +
			'es.onmessage = (e) => { got.push(e.data); if (got.length === 3) { es.close(); document.body.textContent = "got:" + got.join(","); } };' +
			'</script></body>', { headers: { 'content-type': 'text/html' } });
		let n = 0, timer;
		const body = new ReadableStream({
			start(c) { timer = setInterval(() => { c.enqueue('data: event ' + (n++) + '\n\n'); if (n === 3) { clearInterval(timer); c.close(); } }, 100); },
			cancel() { clearInterval(timer); },
		});
		return new Response(body.pipeThrough(new TextEncoderStream()), { headers: { 'content-type': 'text/event-stream' } });
	} })`
	id := deploy(t, alice, code, nil)
	out := dumpDOM(t, site(id+".apps.localhost", "/"), 5*time.Second)
	if !strings.Contains(string(out), "got:event 0,event 1,event 2") {
		t.Fatalf("the page's EventSource did not get the events:\n%s", out)
	}
}

// The fetch-stream budget is checked before the dial (docs/architecture.md,
// Budgets): a handler that opens 40 fetches at once to an upstream that
// answers a head and holds its body open gets 16 answers and 24
// QUOTA_EXCEEDED thrown, and the upstream never sees more than the 16
// (it once saw 276 open requests against a tenant's cap of 256). A
// bystander handle's counter goes on.
func TestFetchStreamsPastTheCapAreRefusedBeforeTheDial(t *testing.T) {
	var mu sync.Mutex
	open, most := 0, 0
	upstream := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		open++
		most = max(most, open)
		mu.Unlock()
		defer func() {
			mu.Lock()
			open--
			mu.Unlock()
		}()
		w.Write([]byte("head")) // no length: streamed
		w.(http.Flusher).Flush()
		<-r.Context().Done()
	}))
	defer upstream.Close()
	defer upstream.CloseClientConnections()
	store := filepath.Join(t.TempDir(), "registry.db")
	tester := caddytest.NewTester(t)
	tester.InitServer(upstreamGatewayConfig(store, "5s"), "caddyfile")
	host := strings.TrimPrefix(upstream.URL, "http://")
	code := fmt.Sprintf(`async () => ({ async fetch(request) {
		const all = await Promise.allSettled(Array.from({length: 40}, () => fetch('%s/hold')));
		const codes = {};
		for (const r of all) { const k = r.status === 'fulfilled' ? 'opened' : String(r.reason && r.reason.code); codes[k] = (codes[k] || 0) + 1; }
		return Response.json(codes);
	} })`, upstream.URL)
	deploy := func(code string, extra map[string]any) string {
		body := map[string]any{"code": code, "retainHandles": true, "timeoutMs": 5000}
		for k, v := range extra {
			body[k] = v
		}
		a := do(t, "POST", site("anon.localhost", "/executions"), "", mustJSON(body))
		id, _ := a.json(t)["executionId"].(string)
		if id == "" {
			t.Fatalf("deploy: %d %s", a.status, a.body)
		}
		return id
	}
	opener := deploy(code, map[string]any{"capabilities": []string{"fetch"}, "outbound": map[string]any{"allow": []string{host}}})
	bystander := deploy(counter, nil)
	if n := served(t, do(t, "GET", site(bystander+".apps.localhost", "/"), "", nil)); n != 1 {
		t.Fatalf("bystander: %d", n)
	}
	b := do(t, "GET", site(opener+".apps.localhost", "/open"), "", nil)
	mu.Lock()
	seen := most
	mu.Unlock()
	t.Logf("40 fetches at once: %s; the upstream saw at most %d open requests", b.body, seen)
	// The keys come in the order the outcomes do (the first fetch may be
	// one of those refused): the counts are what is asked.
	var codes map[string]int
	if b.status != 200 || json.Unmarshal(b.body, &codes) != nil || len(codes) != 2 || codes["opened"] != 16 || codes["QUOTA_EXCEEDED"] != 24 {
		t.Fatalf("40 fetches at once: %d %s", b.status, b.body)
	}
	if seen > 16 {
		t.Fatalf("the upstream saw %d open requests of one handle, past its cap of 16", seen)
	}
	if n := served(t, do(t, "GET", site(bystander+".apps.localhost", "/"), "", nil)); n != 2 {
		t.Fatalf("bystander after: %d", n)
	}
}

// upstreamGatewayConfig is a gateway whose anonymous API may fetch from
// private addresses (the tests' own upstreams), with the given run bound.
func upstreamGatewayConfig(store, timeout string) string {
	return fmt.Sprintf(`{
	admin localhost:%d
	http_port %d
	https_port %d
	grace_period 1s
	retainer {
		store %s
		workers 2
		timeout %s
	}
}

http://anon.localhost:%d {
	retainer_api apps {
		allow_anonymous
		outbound_allow_private
	}
}

http://*.apps.localhost:%d {
	retainer apps {
		key {labels.2}
	}
}
`, adminPort, httpPort, httpsPort, store, timeout, httpPort, httpPort)
}
