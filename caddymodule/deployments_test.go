package caddymodule

import (
	"encoding/json"
	"fmt"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/caddyserver/caddy/v2/caddytest"

	"github.com/retainer-gw/retainer/internal/waitfor"
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
	waitfor.Until(t, d, "handle "+id+" to end", func() bool { return handleRecord(t, tok, id) == nil })
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

// versionCode is a handler that answers its version's name.
func versionCode(v string) string {
	return fmt.Sprintf("async () => ({ async fetch() { return new Response(%q) } })", v)
}

type routeView struct {
	Name        string
	ExecutionID string
	Split       []struct {
		ExecutionID string
		Percent     int
	}
	Versions []struct {
		ExecutionID string
		BoundAt     time.Time
	}
}

func getRoute(t *testing.T, tok, name string) routeView {
	t.Helper()
	a := do(t, "GET", api("/routes/"+name), tok, nil)
	var v routeView
	if a.status != 200 || json.Unmarshal(a.body, &v) != nil {
		t.Fatalf("GET /routes/%s: %d %s", name, a.status, a.body)
	}
	return v
}

func (v routeView) ids() []string {
	var out []string
	for _, x := range v.Versions {
		out = append(out, x.ExecutionID)
	}
	return out
}

// Every bind of a route is a version; a rollback moves the route back to
// one (by default the one before), atomically, as a new version; the
// versions survive a restart; a replaced version ends after
// version_retention unless something else points at it.
func TestRouteVersionsAndRollback(t *testing.T) {
	tester := caddytest.NewTester(t)
	store := filepath.Join(t.TempDir(), "registry.db")
	config := gatewayConfig(store, "")
	tester.InitServer(config, "caddyfile")
	alice, bob := token(t, "alice", allScopes), token(t, "bob", allScopes)
	visit := func(want string) {
		t.Helper()
		if a := do(t, "GET", site("shop.apps.localhost", "/"), "", nil); a.status != 200 || string(a.body) != want {
			t.Fatalf("the route answered %d %q, want %q", a.status, a.body, want)
		}
	}
	put := func(tok, name, id string) answer {
		return do(t, "PUT", api("/routes/"+name), tok, mustJSON(map[string]any{"executionId": id}))
	}
	rollback := func(tok, name string, body any) answer {
		return do(t, "POST", api("/routes/"+name+"/rollback"), tok, mustJSON(body))
	}
	v1, v2, v3 := deploy(t, alice, versionCode("v1"), nil), deploy(t, alice, versionCode("v2"), nil), deploy(t, alice, versionCode("v3"), nil)
	put(alice, "shop", v1)
	if a := put(alice, "shop", v2); a.status != 200 {
		t.Fatalf("PUT: %d %s", a.status, a.body)
	}
	visit("v2")
	r := getRoute(t, alice, "shop")
	if r.ExecutionID != v2 || fmt.Sprint(r.ids()) != fmt.Sprint([]string{v2, v1}) || r.Versions[0].BoundAt.Before(r.Versions[1].BoundAt) || r.Split != nil {
		t.Fatalf("the route after two PUTs: %+v", r)
	}
	if a := rollback(alice, "shop", map[string]any{}); a.status != 200 {
		t.Fatalf("rollback: %d %s", a.status, a.body)
	}
	visit("v1")
	put(alice, "shop", v3)
	visit("v3")
	if a := rollback(alice, "shop", map[string]any{"executionId": v2}); a.status != 200 {
		t.Fatalf("rollback to v2: %d %s", a.status, a.body)
	}
	visit("v2")
	r = getRoute(t, alice, "shop")
	if want := []string{v2, v3, v1, v2, v1}; r.ExecutionID != v2 || fmt.Sprint(r.ids()) != fmt.Sprint(want) {
		t.Fatalf("versions %v, want %v", r.ids(), want)
	}
	listed := listedIDs(t, alice)
	for _, id := range []string{v1, v2, v3} {
		if listed[id]["deployment"] != true {
			t.Fatalf("a kept version is not a deployment: %v", listed[id])
		}
	}

	// Another tenant's route answers as an unknown one; its ids, and ids
	// that are no kept version, are refused.
	b1 := deploy(t, bob, versionCode("b1"), nil)
	if a := put(bob, "bobs", b1); a.status != 200 {
		t.Fatalf("bob's PUT: %d %s", a.status, a.body)
	}
	for _, a := range []answer{do(t, "GET", api("/routes/shop"), bob, nil), rollback(bob, "shop", map[string]any{}), do(t, "GET", api("/routes/nothing"), alice, nil)} {
		if a.status != 404 || a.code() != "NOT_FOUND" {
			t.Fatalf("another tenant's or no route: %d %s", a.status, a.body)
		}
	}
	for _, a := range []answer{
		rollback(bob, "bobs", map[string]any{"executionId": v1}),
		rollback(alice, "shop", map[string]any{"executionId": b1}),
		rollback(alice, "shop", map[string]any{"executionId": "6f1c2a4e-0000-4000-8000-000000000000"}),
		rollback(bob, "bobs", map[string]any{}),
	} {
		if a.status != 404 || a.code() != "NO_SUCH_HANDLE" {
			t.Fatalf("a version that is not kept: %d %s", a.status, a.body)
		}
	}
	visit("v2")

	// A restart keeps the versions.
	restart(tester, config)
	if r2 := getRoute(t, alice, "shop"); fmt.Sprint(r2.ids()) != fmt.Sprint(r.ids()) {
		t.Fatalf("versions after a restart: %v, want %v", r2.ids(), r.ids())
	}
	visit("v2")
	if a := do(t, "POST", api("/routes/shop/rollback"), alice, nil); a.status != 200 {
		t.Fatalf("a rollback with no body: %d %s", a.status, a.body)
	}
	visit("v3")

	// With version_retention 3s, the replaced versions end; the current
	// one and bob's stay.
	tester.InitServer(gatewayConfig(store, "version_retention 3s"), "caddyfile")
	took := endsWithin(t, alice, v1, 12*time.Second)
	endsWithin(t, alice, v2, 6*time.Second)
	t.Logf("the replaced versions ended %v after the reload", took)
	visit("v3")
	if r := getRoute(t, alice, "shop"); fmt.Sprint(r.ids()) != fmt.Sprint([]string{v3, v3}) {
		t.Fatalf("versions after the retention: %v", r.ids())
	}
	if handleRecord(t, bob, b1) == nil {
		t.Fatal("bob's routed handle ended")
	}
}

// A split sends each new request to one of its handles at its weights; the
// cookie pins a visitor; a plain PUT ends it; invalid splits are refused.
func TestRouteSplits(t *testing.T) {
	tester := caddytest.NewTester(t)
	store := filepath.Join(t.TempDir(), "registry.db")
	config := gatewayConfig(store, "")
	tester.InitServer(config, "caddyfile")
	alice, bob := token(t, "alice", allScopes), token(t, "bob", allScopes)
	a, b := deploy(t, alice, versionCode("A"), nil), deploy(t, alice, versionCode("B"), nil)
	c := deploy(t, alice, versionCode("C"), nil)
	theirs := deploy(t, bob, versionCode("bob"), nil)
	split := func(shares ...any) answer {
		var s []map[string]any
		for i := 0; i+1 < len(shares); i += 2 {
			s = append(s, map[string]any{"executionId": shares[i], "percent": shares[i+1]})
		}
		return do(t, "PUT", api("/routes/shop"), alice, mustJSON(map[string]any{"split": s}))
	}
	if r := split(a, 70, b, 30); r.status != 200 || !strings.Contains(string(r.body), `"split"`) {
		t.Fatalf("PUT a split: %d %s", r.status, r.body)
	}
	counts := map[string]int{}
	var cookies []string
	for i := 0; i < 300; i++ {
		r := do(t, "GET", site("shop.apps.localhost", "/"), "", nil)
		if r.status != 200 {
			t.Fatalf("request %d: %d %s", i, r.status, r.body)
		}
		counts[string(r.body)]++
		if i < 2 {
			cookies = append(cookies, r.header.Get("Set-Cookie"))
		}
	}
	t.Logf("70/30 over 300 requests: %v", counts)
	// 300 draws at p=0.7: mean 210, sd 7.9; 170..250 is five sd each way.
	if counts["A"] < 170 || counts["A"] > 250 || counts["A"]+counts["B"] != 300 {
		t.Fatalf("a 70/30 split answered %v", counts)
	}
	if !strings.HasPrefix(cookies[0], "retainer-version=") {
		t.Fatalf("a visitor without a pin was given no cookie: %q", cookies)
	}
	for _, pin := range []struct{ id, want string }{{b, "B"}, {a, "A"}} {
		for i := 0; i < 20; i++ {
			r := do(t, "GET", site("shop.apps.localhost", "/"), "", nil, "Cookie", "theme=dark; retainer-version="+pin.id)
			if string(r.body) != pin.want || r.header.Get("Set-Cookie") != "" {
				t.Fatalf("pinned to %s, request %d answered %q (set-cookie %q)", pin.want, i, r.body, r.header.Get("Set-Cookie"))
			}
		}
	}
	v := getRoute(t, alice, "shop")
	if v.ExecutionID != a || len(v.Split) != 2 || v.Split[1].ExecutionID != b || v.Split[1].Percent != 30 {
		t.Fatalf("GET /routes/shop: %+v", v)
	}
	if listedIDs(t, alice)[b]["deployment"] != true {
		t.Fatal("a split's second handle is not a deployment")
	}

	for name, r := range map[string]answer{
		"one handle":       split(a, 100),
		"five handles":     split(a, 20, b, 20, c, 20, theirs, 20, "x", 20),
		"not 100":          split(a, 70, b, 20),
		"a fraction":       split(a, 70.5, b, 29.5),
		"a zero":           split(a, 100, b, 0),
		"twice the same":   split(a, 50, a, 50),
		"another tenant's": split(a, 50, theirs, 50),
		"an unknown id":    split(a, 50, "6f1c2a4e-0000-4000-8000-000000000000", 50),
		"both forms": do(t, "PUT", api("/routes/shop"), alice, mustJSON(map[string]any{"executionId": a,
			"split": []map[string]any{{"executionId": a, "percent": 50}, {"executionId": b, "percent": 50}}})),
	} {
		if r.status != 400 || r.code() != "BAD_REQUEST" {
			t.Fatalf("%s: %d %s", name, r.status, r.body)
		}
	}

	// A restart keeps the split, three ways now.
	split(a, 34, b, 33, c, 33)
	restart(tester, config)
	seen := map[string]bool{}
	for i := 0; i < 60 && len(seen) < 3; i++ {
		seen[string(do(t, "GET", site("shop.apps.localhost", "/"), "", nil).body)] = true
	}
	if len(seen) != 3 {
		t.Fatalf("after a restart the split served only %v", seen)
	}
	// A plain PUT ends the split, and a rollback brings it back.
	if r := do(t, "PUT", api("/routes/shop"), alice, mustJSON(map[string]any{"executionId": c})); r.status != 200 || strings.Contains(string(r.body), "split") {
		t.Fatalf("a plain PUT: %d %s", r.status, r.body)
	}
	for i := 0; i < 20; i++ {
		if r := do(t, "GET", site("shop.apps.localhost", "/"), "", nil, "Cookie", "retainer-version="+a); string(r.body) != "C" {
			t.Fatalf("after the split ended the route answered %q", r.body)
		}
	}
	if r := do(t, "POST", api("/routes/shop/rollback"), alice, mustJSON(map[string]any{})); r.status != 200 || len(getRoute(t, alice, "shop").Split) != 3 {
		t.Fatalf("a rollback to the split: %d %s", r.status, r.body)
	}
}
