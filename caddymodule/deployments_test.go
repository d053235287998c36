package caddymodule

import (
	"encoding/json"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/caddyserver/caddy/v2/caddytest"
)

// handleRecord is GET /handles/{id}'s answer, or nil once it answers 404.
func handleRecord(t *testing.T, tok, id string) map[string]any {
	t.Helper()
	a := do(t, "GET", api("/handles/"+id), tok, nil)
	if a.status == 404 {
		return nil
	}
	if a.status != 200 {
		t.Fatalf("GET /handles/%s: %d %s", id, a.status, a.body)
	}
	return a.json(t)
}

// endsWithin waits for handle id to answer 404.
func endsWithin(t *testing.T, tok, id string, d time.Duration) time.Duration {
	t.Helper()
	start := time.Now()
	for handleRecord(t, tok, id) != nil {
		if time.Since(start) > d {
			t.Fatalf("handle %s still lives after %v", id, d)
		}
		time.Sleep(100 * time.Millisecond)
	}
	return time.Since(start)
}

func listedIDs(t *testing.T, tok string) map[string]map[string]any {
	t.Helper()
	a := do(t, "GET", api("/handles"), tok, nil)
	var l struct{ Handles []map[string]any }
	if err := json.Unmarshal(a.body, &l); err != nil || a.status != 200 {
		t.Fatalf("GET /handles: %d %s", a.status, a.body)
	}
	out := map[string]map[string]any{}
	for _, h := range l.Handles {
		out[h["executionId"].(string)] = h
	}
	return out
}

// A deployment (a handle a route points at) parks past the idle bound and
// serves again; a handle nothing points at ends at its own bound (idleMs)
// or the gateway's.
func TestDeploymentsParkInsteadOfEnding(t *testing.T) {
	tester := caddytest.NewTester(t)
	tester.InitServer(gatewayConfig(filepath.Join(t.TempDir(), "registry.db"), "idle 2s"), "caddyfile")
	tok := token(t, "alice", allScopes)

	routed := deployCounter(t, tok)
	if a := do(t, "PUT", api("/routes/shop"), tok, mustJSON(map[string]any{"executionId": routed})); a.status != 200 {
		t.Fatalf("route: %d %s", a.status, a.body)
	}
	loose := deployCounter(t, tok)
	short := deploy(t, tok, counter, map[string]any{"idleMs": 1500})
	long := deploy(t, tok, counter, map[string]any{"idleMs": 60000})
	if got := served(t, do(t, "GET", site("shop.apps.localhost", "/"), "", nil)); got != 1 {
		t.Fatalf("first visit served %d", got)
	}
	rec := handleRecord(t, tok, routed)
	if rec["deployment"] != true || rec["idleBoundMs"] != 2000.0 {
		t.Fatalf("the routed handle's record: %v", rec)
	}
	if rec := handleRecord(t, tok, loose); rec["deployment"] != nil {
		t.Fatalf("an unrouted handle is shown as a deployment: %v", rec)
	}
	if rec := handleRecord(t, tok, long); rec["idleBoundMs"] != 60000.0 {
		t.Fatalf("idleMs 60000 shows as %v", rec["idleBoundMs"])
	}

	took := endsWithin(t, tok, short, 6*time.Second)
	t.Logf("idleMs 1500 ended the handle after %v", took)
	endsWithin(t, tok, loose, 6*time.Second)
	time.Sleep(7*time.Second - took)

	listed := listedIDs(t, tok)
	if listed[routed] == nil || listed[routed]["deployment"] != true {
		t.Fatalf("the deployment is not listed after 7 s of silence: %v", listed)
	}
	if listed[long] == nil {
		t.Fatal("a handle with idleMs 60000 ended within 7 s")
	}
	// Parked, then rebuilt by the request: closure state starts afresh.
	a := do(t, "GET", site("shop.apps.localhost", "/"), "", nil)
	if got := served(t, a); got != 1 {
		t.Fatalf("the parked deployment answered served=%d, want 1 (rebuilt)", got)
	}
	logs := string(do(t, "GET", api("/handles/"+routed+"/logs"), tok, nil).body)
	if !strings.Contains(logs, "Parked") || !strings.Contains(logs, "Rebuilt") {
		t.Fatalf("the deployment's log does not tell its parking and rebuild: %s", logs)
	}

	for _, bad := range []any{999, 0, -5, 24*3600*1000 + 1, "2s"} {
		a := execute(t, tok, map[string]any{"code": counter, "retainHandles": true, "idleMs": bad})
		if a.status != 400 || a.code() != "BAD_REQUEST" {
			t.Fatalf("idleMs %v answered %d %s", bad, a.status, a.body)
		}
	}
}

// TypeScript programs and modules run with their types stripped, and their
// errors name the TypeScript source's lines (docs/runtime.md).
func TestTypeScriptPrograms(t *testing.T) {
	tester := caddytest.NewTester(t)
	tester.InitServer(gatewayConfig(filepath.Join(t.TempDir(), "registry.db"), ""), "caddyfile")
	tok := token(t, "alice", allScopes)

	a := execute(t, tok, map[string]any{"language": "typescript",
		"code": "async (): Promise<number> => {\n  const xs: Array<number> = [1, 2, 3];\n  return xs.map((x: number): number => x * x).reduce((a, b) => a + b, 0);\n}"})
	if a.status != 200 || string(mustJSON(a.json(t)["result"])) != "14" {
		t.Fatalf("a TypeScript computation: %d %s", a.status, a.body)
	}
	geo := map[string]string{"lib/geo.ts": "export interface Rect { w: number; h: number }\nexport function area(r: Rect): number {\n  return r.w * r.h;\n}\n"}
	a = execute(t, tok, map[string]any{"code": "import { area } from './lib/geo.ts';\nasync () => area({ w: 6, h: 7 })", "modules": geo})
	if a.status != 200 || string(mustJSON(a.json(t)["result"])) != "42" {
		t.Fatalf("a .ts module from JavaScript: %d %s", a.status, a.body)
	}
	bad := map[string]string{"bad.ts": "type Order = { id: string; total: number };\n\nexport function check(o: Order): Order {\n  if (o.total >= 0) return o;\n  throw new RangeError(`order ${o.id} has a negative total`);\n}\n"}
	a = execute(t, tok, map[string]any{"language": "typescript", "modules": bad,
		"code": "import { check } from './bad';\nasync () => check({ id: 'a1', total: -1 } as const)"})
	if a.status != 422 || a.code() != "RUNTIME" || !strings.Contains(string(a.body), "bad.ts:5") {
		t.Fatalf("an error on line 5 of bad.ts: %d %s", a.status, a.body)
	}

	handler := `import { check } from './bad.ts';
interface Counter { served: number }
const state: Counter = { served: 0 };
export default {
	async fetch(request: Request): Promise<Response> {
		const url = new URL(request.url);
		if (url.pathname === '/bad') check({ id: 'b2', total: -5 });
		state.served++;
		return Response.json(state satisfies Counter);
	},
};`
	id := deploy(t, tok, handler, map[string]any{"language": "typescript", "modules": bad})
	host := id + ".apps.localhost"
	for want := 1; want <= 2; want++ {
		if got := served(t, do(t, "GET", site(host, "/"), "", nil)); got != want {
			t.Fatalf("the TypeScript handler served %d, want %d", got, want)
		}
	}
	if a := do(t, "GET", site(host, "/bad"), "", nil); a.status != 500 {
		t.Fatalf("a throwing TypeScript handler answered %d %s", a.status, a.body)
	}
	logs := string(do(t, "GET", api("/handles/"+id+"/logs"), tok, nil).body)
	if !strings.Contains(logs, "negative total") || !strings.Contains(logs, "bad.ts:5") {
		t.Fatalf("the handler's log does not name bad.ts:5: %s", logs)
	}
	if a := execute(t, tok, map[string]any{"language": "coffeescript", "code": "async () => 1"}); a.status != 400 || a.code() != "BAD_REQUEST" {
		t.Fatalf("an unknown language answered %d %s", a.status, a.body)
	}
	// The receipt keeps the TypeScript source.
	a = execute(t, tok, map[string]any{"language": "typescript", "code": "async () => {\n  const n: number = 2;\n  return n;\n}"})
	var env struct{ ResultID string }
	json.Unmarshal(a.body, &env)
	if rc := do(t, "GET", api("/results/"+env.ResultID+".json"), tok, nil); !strings.Contains(string(rc.body), "const n: number") {
		t.Fatalf("the receipt: %d %s", rc.status, rc.body)
	}
}
