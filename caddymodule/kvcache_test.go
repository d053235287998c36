package caddymodule

import (
	"path/filepath"
	"strings"
	"testing"

	"github.com/caddyserver/caddy/v2/caddytest"
)

// The workers' kv read cache never answers an id without kvRead, and a
// write through the API's computation is read at once by a handle that had
// the old value cached.
func TestKVCacheKeepsGrantsAndCoherence(t *testing.T) {
	store := filepath.Join(t.TempDir(), "registry.db")
	tester := caddytest.NewTester(t)
	tester.InitServer(gatewayConfig(store, "isolation shared"), "caddyfile")
	alice := token(t, "alice", allScopes)
	writer := deploy(t, alice, `async () => ({ async fetch() {
		await kv.put('k', 'secret');
		await kv.put('k', 'secret2');
		try { return new Response('read ' + await kv.get('k')); } catch (e) { return new Response('denied: ' + e.message); }
	} })`, map[string]any{"capabilities": []string{"kvWrite"}})
	if a := do(t, "GET", site(writer+".apps.localhost", "/"), "", nil); !strings.Contains(string(a.body), "denied") || !strings.Contains(string(a.body), "kvRead") {
		t.Fatalf("a kvWrite-only handle read kv: %s", a.body)
	}
	reader := deploy(t, alice, `async () => ({ async fetch(req) {
		if (req.url.endsWith('/write')) {
			try { await kv.put('k', 'sneaky'); return new Response('wrote'); } catch (e) { return new Response('denied: ' + e.message); }
		}
		return new Response(String(await kv.get('k')));
	} })`, map[string]any{"capabilities": []string{"kvRead"}})
	for i := 0; i < 3; i++ {
		if a := do(t, "GET", site(reader+".apps.localhost", "/"), "", nil); string(a.body) != "secret2" {
			t.Fatalf("read %d: %s", i, a.body)
		}
	}
	// A kvRead-only handle whose space the worker knows still has its
	// write refused in the program (never answered from the worker).
	if a := do(t, "GET", site(reader+".apps.localhost", "/write"), "", nil); !strings.Contains(string(a.body), "denied") || !strings.Contains(string(a.body), "kvWrite") {
		t.Fatalf("a kvRead-only handle's write: %s", a.body)
	}
	for _, v := range []string{"a", "b", "c"} {
		a := execute(t, alice, map[string]any{"code": "async () => { await kv.put('k', '" + v + "') }", "capabilities": []string{"kvWrite"}})
		if a.status != 200 {
			t.Fatalf("write %s: %d %s", v, a.status, a.body)
		}
		if a := do(t, "GET", site(reader+".apps.localhost", "/"), "", nil); string(a.body) != v {
			t.Fatalf("after a computation wrote %q the handle read %s", v, a.body)
		}
	}
}
