package caddymodule

import (
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/caddyserver/caddy/v2/caddytest"
)

func capabilitiesConfig(store, toolURL string) string {
	return fmt.Sprintf(`{
	admin localhost:%d
	http_port %d
	https_port %d
	retainer {
		store %s
		workers 2
		timeout 2s
	}
}

http://api.localhost:%d {
	%s
	retainer_api apps {
		provider store {
			tool listProducts %s
		}
	}
}

http://private.localhost:%d {
	%s
	retainer_api private {
		outbound_allow_private
	}
}

http://other.localhost:%d {
	%s
	retainer_api other
}

http://*.apps.localhost:%d {
	retainer apps {
		key {labels.2}
	}
}
`, adminPort, httpPort, httpsPort, store, httpPort, testJWT, toolURL, httpPort, testJWT, httpPort, testJWT, httpPort)
}

func TestCapabilities(t *testing.T) {
	var toolHits atomic.Int64
	tool := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		toolHits.Add(1)
		if r.Header.Get("X-Retainer-Execution-Id") == "" || r.Header.Get("X-Retainer-Tenant") != "alice" {
			http.Error(w, "missing headers", 400)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		w.Write([]byte(`[{"sku":"a1","price":3},{"sku":"b2","price":5}]`))
	}))
	defer tool.Close()
	target := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/utf8" {
			w.Write([]byte("{\"name\":\"caf\u00e9 \u2603\"}"))
			return
		}
		if r.URL.Path == "/binary" {
			w.Write([]byte{0, 0xe9, 0xff, 'x'})
			return
		}
		if r.Method == "POST" { // echoes the body's bytes, as hex, and as JSON
			b, _ := io.ReadAll(r.Body)
			w.Header().Set("Content-Type", "application/json")
			fmt.Fprintf(w, `{"hex":"%x","len":%d}`, b, len(b))
			return
		}
		w.Write([]byte("from inside"))
	}))
	defer target.Close()
	tu, _ := url.Parse(target.URL)
	port := tu.Port()

	store := filepath.Join(t.TempDir(), "registry.db")
	tester := caddytest.NewTester(t)
	tester.InitServer(capabilitiesConfig(store, tool.URL+"/products"), "caddyfile")
	alice := token(t, "alice", allScopes)
	bob := token(t, "bob", allScopes)
	exec := func(host, tok string, body map[string]any) answer {
		return do(t, "POST", site(host, "/executions"), tok, mustJSON(body))
	}

	// Provider tools: called during setup, answered from the recording on a
	// rebuild, "already completed" from a handler.
	shop := `async () => {
		const products = await store.listProducts({page: 1});
		let visits = 0;
		return { async fetch(req, env) {
			visits++;
			if (req.url.endsWith('/tool')) { try { await env.store.listProducts({}); return new Response('called') } catch (e) { return new Response(e.message) } }
			return Response.json({products: products.length, visits});
		} };
	}`
	a := exec("api.localhost", alice, map[string]any{"code": shop, "retainHandles": true, "providers": []map[string]any{{"name": "store", "tools": []string{"listProducts"}}}})
	if a.status != 200 {
		t.Fatalf("deploy with a tool: %d %s", a.status, a.body)
	}
	id := a.json(t)["executionId"].(string)
	if toolHits.Load() != 1 {
		t.Fatalf("tool hits %d", toolHits.Load())
	}
	if b := do(t, "GET", site(id+".apps.localhost", "/"), "", nil); string(b.body) != `{"products":2,"visits":1}` {
		t.Fatalf("handler: %s", b.body)
	}
	if b := do(t, "GET", site(id+".apps.localhost", "/tool"), "", nil); string(b.body) != "Execution has already completed." {
		t.Fatalf("tool from a handler: %s", b.body)
	}
	// Restart: the handle is rebuilt, and the tool is answered from the
	// recording (the upstream is not called again).
	restart(tester, capabilitiesConfig(store, tool.URL+"/products"))
	if b := do(t, "GET", site(id+".apps.localhost", "/"), "", nil); string(b.body) != `{"products":2,"visits":1}` {
		t.Fatalf("after the rebuild: %s", b.body)
	}
	if toolHits.Load() != 1 {
		t.Fatalf("the rebuild called the tool's upstream again (%d hits)", toolHits.Load())
	}
	// An ungranted or unknown provider.
	if b := exec("api.localhost", alice, map[string]any{"code": "async () => 1", "providers": []map[string]any{{"name": "nope", "tools": []string{"x"}}}}); b.status != 400 {
		t.Fatalf("unknown provider: %d", b.status)
	}
	if b := exec("api.localhost", alice, map[string]any{"code": "async () => typeof store"}); string(b.json(t)["result"].(string)) != "undefined" {
		t.Fatalf("ungranted provider exists: %s", b.body)
	}

	// kv: counted in kv across a restart while the closure counter restarts.
	counterKV := `async () => { let closure = 0; return { async fetch(req, env) {
		closure++;
		const n = Number(await env.kv.get('visits') || 0) + 1;
		await env.kv.put('visits', String(n));
		return Response.json({kv: n, closure});
	} } }`
	a = exec("api.localhost", alice, map[string]any{"code": counterKV, "retainHandles": true, "capabilities": []string{"kvRead", "kvWrite"}})
	kvID := a.json(t)["executionId"].(string)
	do(t, "GET", site(kvID+".apps.localhost", "/"), "", nil)
	if b := do(t, "GET", site(kvID+".apps.localhost", "/"), "", nil); string(b.body) != `{"kv":2,"closure":2}` {
		t.Fatalf("kv counter: %s", b.body)
	}
	restart(tester, capabilitiesConfig(store, tool.URL+"/products"))
	if b := do(t, "GET", site(kvID+".apps.localhost", "/"), "", nil); string(b.body) != `{"kv":3,"closure":1}` {
		t.Fatalf("kv counter after a restart: %d %s", b.status, b.body)
	}
	// kv isolation: bob, and another registry, see nothing of alice's.
	read := map[string]any{"code": "async () => [await kv.get('visits'), (await kv.list()).keys]", "capabilities": []string{"kvRead"}}
	if b := exec("api.localhost", alice, read); fmt.Sprint(b.json(t)["result"]) != "[3 [visits]]" {
		t.Fatalf("alice's kv: %s", b.body)
	}
	if b := exec("api.localhost", bob, read); fmt.Sprint(b.json(t)["result"]) != "[<nil> []]" {
		t.Fatalf("bob's kv: %s", b.body)
	}
	if b := exec("other.localhost", alice, read); fmt.Sprint(b.json(t)["result"]) != "[<nil> []]" {
		t.Fatalf("another registry's kv: %s", b.body)
	}
	// No capability, no access; the denial names it and is in the receipt.
	b := exec("api.localhost", alice, map[string]any{"code": "async () => { try { await kv.get('visits') } catch (e) { return e.message } }"})
	msg, _ := b.json(t)["result"].(string)
	if !strings.Contains(msg, "kvRead") {
		t.Fatalf("ungranted kv: %s", b.body)
	}
	rid := b.json(t)["resultId"].(string)
	if r := do(t, "GET", api("/results/"+rid+".json"), alice, nil); !strings.Contains(string(r.body), `"denials":["`) {
		t.Fatalf("the denial is not in the receipt: %s", r.body)
	}
	if b := exec("api.localhost", alice, map[string]any{"code": "async () => { try { await kv.put('a', 'b') } catch (e) { return e.message } }", "capabilities": []string{"kvRead"}}); !strings.Contains(string(b.body), "kvWrite") {
		t.Fatalf("ungranted put: %s", b.body)
	}

	// fetch: only with the capability, the allow list and, for an internal
	// address, outbound_allow_private.
	allow := []string{"localhost:" + port, "127.0.0.1:" + port, "[::ffff:7f00:1]:" + port}
	fetchIt := func(host, u string, caps []string) string {
		b := exec(host, alice, map[string]any{
			"code":         fmt.Sprintf("async () => { try { const r = await fetch(%q); return r.status + ' ' + await r.text() } catch (e) { return 'refused: ' + e.message } }", u),
			"capabilities": caps, "outbound": map[string]any{"allow": allow},
		})
		s, _ := b.json(t)["result"].(string)
		return s
	}
	if got := fetchIt("private.localhost", "http://127.0.0.1:"+port+"/", []string{"fetch"}); got != "200 from inside" {
		t.Fatalf("allowed private fetch: %q", got)
	}
	// A string body leaves as its UTF-8 (a lone surrogate as U+FFFD), bytes
	// as they are; the JSON answer (all ASCII) reads as text and JSON.
	bodies := exec("private.localhost", alice, map[string]any{
		"code": fmt.Sprintf(`async () => {
			const text = await (await fetch(%q, {method: 'POST', body: 'caf\u00e9 \uD800!'})).json();
			const bytes = await (await fetch(%q, {method: 'POST', body: new Uint8Array([0, 255, 10])})).text();
			const utf8 = await (await fetch(%q)).json();
			const raw = [...new Uint8Array(await (await fetch(%q)).arrayBuffer())];
			const again = [...new Uint8Array(await (await fetch(%q)).arrayBuffer())].length;
			return [text, bytes, utf8, raw, again] }`, "http://127.0.0.1:"+port+"/", "http://127.0.0.1:"+port+"/", "http://127.0.0.1:"+port+"/utf8", "http://127.0.0.1:"+port+"/binary", "http://127.0.0.1:"+port+"/utf8"),
		"capabilities": []string{"fetch"}, "outbound": map[string]any{"allow": allow},
	})
	if got := string(bodies.body); !strings.Contains(got, "[{\"hex\":\"636166c3a920efbfbd21\",\"len\":10},\"{\\\"hex\\\":\\\"00ff0a\\\",\\\"len\\\":3}\",{\"name\":\"caf\u00e9 \u2603\"},[0,233,255,120],20]") {
		t.Fatalf("fetch bodies: %s", got)
	}
	if got := fetchIt("private.localhost", "http://127.0.0.1:"+port+"/", nil); !strings.Contains(got, "fetch capability") {
		t.Fatalf("fetch without the capability: %q", got)
	}
	for _, u := range []string{"http://localhost:" + port + "/", "http://127.1:" + port + "/", "http://2130706433:" + port + "/",
		"http://0x7f.0.0.1:" + port + "/", "http://[::ffff:127.0.0.1]:" + port + "/"} {
		if got := fetchIt("api.localhost", u, []string{"fetch"}); !strings.HasPrefix(got, "refused: ") {
			t.Fatalf("fetch %s without outbound_allow_private: %q", u, got)
		}
	}
	if got := fetchIt("private.localhost", "http://localhost:2/", []string{"fetch"}); !strings.Contains(got, "allow list") {
		t.Fatalf("fetch off the allow list: %q", got)
	}
}

// A deploy's recorded tool answers are a budget (docs/architecture.md,
// Budgets): 1 MiB and 1,000
// calls in all. A deploy that asks for more sees its tool call throw
// QUOTA_EXCEEDED and fails with it even when it catches the error (its
// handle could not be rebuilt); a deploy within the bound deploys; a
// computation records nothing and calls as often as it likes.
func TestRecordedToolAnswersAreBounded(t *testing.T) {
	tool := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		args, _ := io.ReadAll(r.Body)
		w.Header().Set("Content-Type", "application/json")
		if strings.Contains(string(args), "small") {
			fmt.Fprint(w, `{}`)
			return
		}
		fmt.Fprintf(w, `{"blob":"%s"}`, strings.Repeat("z", 100<<10))
	}))
	defer tool.Close()
	store := filepath.Join(t.TempDir(), "registry.db")
	caddytest.NewTester(t).InitServer(capabilitiesConfig(store, tool.URL+"/products"), "caddyfile")
	alice := token(t, "alice", allScopes)
	deploy := func(code string, retain bool) answer {
		return do(t, "POST", site("api.localhost", "/executions"), alice, mustJSON(map[string]any{"code": code, "retainHandles": retain, "timeoutMs": 10000,
			"providers": []map[string]any{{"name": "store", "tools": []string{"listProducts"}}}}))
	}
	run := func(calls int, retain bool) answer {
		code := fmt.Sprintf(`async () => {
			let n = 0, caught = '';
			for (let i = 0; i < %d; i++) {
				try { await store.listProducts({i}); n++; } catch (e) { caught = e.code; }
			}
			return { fetch() { return Response.json({n, caught}); } };
		}`, calls)
		if !retain {
			code = strings.Replace(code, "return { fetch() { return Response.json({n, caught}); } };", "return {n, caught};", 1)
		}
		return deploy(code, retain)
	}
	if a := run(20, true); a.status != 429 || a.code() != "QUOTA_EXCEEDED" {
		t.Fatalf("a deploy recording 2 MB of tool answers: %d %s", a.status, a.body)
	}
	// Past the 1,000 calls: the 1,001st throws QUOTA_EXCEEDED in the
	// program, and the deploy fails with it whatever the program then does
	// (catches it and answers a handler, throws its own error, answers a
	// value that is no handler).
	calls := func(end string) string {
		return `async () => {
			let n = 0, caught = '';
			for (let i = 0; i < 1001; i++) {
				try { await store.listProducts({small: i}); n++; } catch (e) { caught = e.code; }
			}
			if (caught !== 'QUOTA_EXCEEDED' || n !== 1000) throw new Error('the 1,001st call: n ' + n + ', caught ' + caught);
			` + end + `
		}`
	}
	for what, end := range map[string]string{
		"answers a handler":     `return { fetch() { return new Response('kept'); } };`,
		"throws its own error":  `throw new Error('mine');`,
		"answers a plain value": `return {n};`,
		"throws a non-error":    `throw 'quota? what quota';`,
	} {
		if a := deploy(calls(end), true); a.status != 429 || a.code() != "QUOTA_EXCEEDED" {
			t.Fatalf("a deploy calling a tool 1,001 times that %s: %d %.400s", what, a.status, a.body)
		}
	}
	if a := run(5, true); a.status != 200 || a.json(t)["executionId"] == nil {
		t.Fatalf("a deploy recording 500 KB: %d %.300s", a.status, a.body)
	}
	if a := run(20, false); a.status != 200 || !strings.Contains(string(a.body), `"n":20`) {
		t.Fatalf("a computation calling the tool 20 times: %d %.300s", a.status, a.body)
	}
}

// A program's fetch to a host that does not resolve throws that the host
// could not be resolved, without the gateway machine's resolver in the text
// (it was "lookup x on 127.0.0.53:53: no such host").
func TestFetchToAnUnresolvableHost(t *testing.T) {
	store := filepath.Join(t.TempDir(), "registry.db")
	caddytest.NewTester(t).InitServer(capabilitiesConfig(store, "http://127.0.0.1:1/"), "caddyfile")
	alice := token(t, "alice", allScopes)
	a := do(t, "POST", site("api.localhost", "/executions"), alice, mustJSON(map[string]any{
		"code":         "async () => { try { await fetch('http://no-such-host.invalid/'); return 'fetched' } catch (e) { return e.message } }",
		"capabilities": []string{"fetch"}, "outbound": map[string]any{"allow": []string{"no-such-host.invalid"}}}))
	msg, _ := a.json(t)["result"].(string)
	if a.status != 200 || !strings.Contains(msg, "the host no-such-host.invalid could not be resolved") || strings.Contains(msg, "lookup") || strings.Contains(msg, ":53") {
		t.Fatalf("fetch to an unresolvable host: %d %s", a.status, a.body)
	}
}
