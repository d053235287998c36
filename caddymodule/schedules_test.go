package caddymodule

import (
	"encoding/json"
	"fmt"
	"path/filepath"
	goruntime "runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/caddyserver/caddy/v2/caddytest"
)

// scheduledKV counts its firings in kv; fetch reads the count.
const scheduledKV = `async () => ({
	async fetch(req, env) { return new Response(await env.kv.get('ticks') || '0') },
	async scheduled(c, env, ctx) {
		if (typeof c.scheduledTime !== 'number' || c.cron !== '*/5 * * * *') throw new Error('controller ' + JSON.stringify(c));
		await env.kv.put('ticks', String(Number(await env.kv.get('ticks') || 0) + 1));
	} })`

// nightly is docs/schedules.md's example.
const nightly = `export default {
  async fetch(request, env) {
    const n = Number(await env.kv.get('visits:today') ?? 0) + 1;
    await env.kv.put('visits:today', String(n));
    return Response.json({ today: n, yesterday: await env.kv.get('visits:yesterday') });
  },
  async scheduled(controller, env, ctx) {
    await env.kv.put('visits:yesterday', await env.kv.get('visits:today') ?? '0');
    await env.kv.delete('visits:today');
    console.log('cleaned up for', new Date(controller.scheduledTime).toISOString());
  },
};`

// Through the API: a deploy with schedules lists scheduled, fires now
// (its kv write seen afterwards), lists its schedules and firings with a
// readable receipt; bad schedules are refused; another tenant's handle
// and its schedules are out of reach.
func TestSchedulesAPI(t *testing.T) {
	tester := caddytest.NewTester(t)
	tester.InitServer(gatewayConfig(filepath.Join(t.TempDir(), "registry.db"), ""), "caddyfile")
	tok, other := token(t, "alice", allScopes), token(t, "bob", allScopes)

	a := execute(t, tok, map[string]any{"code": scheduledKV, "retainHandles": true, "schedules": []string{"*/5 * * * *"}, "capabilities": []string{"kvRead", "kvWrite"}})
	m := a.json(t)
	id, _ := m["executionId"].(string)
	if a.status != 200 || id == "" || fmt.Sprint(m["handles"]) != "[fetch scheduled]" {
		t.Fatalf("deploy: %d %s", a.status, a.body)
	}
	bystander := deployCounter(t, other)

	f := do(t, "POST", api("/handles/"+id+"/scheduled"), tok, nil)
	fm := f.json(t)
	if f.status != 200 || fm["outcome"] != "ok" || fm["cron"] != "*/5 * * * *" || fm["resultId"] == "" {
		t.Fatalf("fire now: %d %s", f.status, f.body)
	}
	if got := do(t, "POST", api("/handles/"+id+"/fetch"), tok, mustJSON(map[string]any{"method": "GET", "url": "https://x.test/"})); !strings.Contains(string(got.body), `"MQ=="`) {
		t.Fatalf("the firing's kv write: %s", got.body)
	}
	s := do(t, "GET", api("/handles/"+id+"/schedules"), tok, nil)
	sm := s.json(t)
	scheds, _ := sm["schedules"].([]any)
	firings, _ := sm["firings"].([]any)
	if s.status != 200 || len(scheds) != 1 || len(firings) != 1 || scheds[0].(map[string]any)["next"] == nil {
		t.Fatalf("schedules: %d %s", s.status, s.body)
	}
	rid := firings[0].(map[string]any)["resultId"].(string)
	if r := do(t, "GET", api("/results/"+rid), tok, nil, "Accept", "application/json"); r.status != 200 || !strings.Contains(string(r.body), id) {
		t.Fatalf("the firing's receipt: %d %s", r.status, r.body)
	}

	// The module form of docs/schedules.md's example.
	mod := execute(t, tok, map[string]any{"code": nightly, "retainHandles": true, "schedules": []string{"0 3 * * *"}, "capabilities": []string{"kvRead", "kvWrite"}})
	modID, _ := mod.json(t)["executionId"].(string)
	if mod.status != 200 || fmt.Sprint(mod.json(t)["handles"]) != "[fetch scheduled]" {
		t.Fatalf("the module form: %d %s", mod.status, mod.body)
	}
	do(t, "POST", api("/handles/"+modID+"/fetch"), tok, mustJSON(map[string]any{"method": "GET", "url": "https://x.test/"}))
	if f := do(t, "POST", api("/handles/"+modID+"/scheduled"), tok, mustJSON(map[string]any{"cron": "0 3 * * *"})); f.status != 200 || f.json(t)["outcome"] != "ok" {
		t.Fatalf("the module form's firing: %d %s", f.status, f.body)
	}
	// {"today":1,"yesterday":"1"}
	if got := do(t, "POST", api("/handles/"+modID+"/fetch"), tok, mustJSON(map[string]any{"method": "GET", "url": "https://x.test/"})); !strings.Contains(string(got.body), "eyJ0b2RheSI6MSwieWVzdGVyZGF5IjoiMSJ9") {
		t.Fatalf("after the nightly cleanup: %s", got.body)
	}

	for _, c := range []struct {
		req  map[string]any
		want string
	}{
		{map[string]any{"code": scheduledKV, "retainHandles": true, "schedules": []string{"61 * * * *"}}, "not a valid cron"},
		{map[string]any{"code": scheduledKV, "retainHandles": true, "schedules": []string{"* * * * * *"}}, "five fields"},
		{map[string]any{"code": scheduledKV, "retainHandles": true, "schedules": []string{"1 * * * *", "2 * * * *", "3 * * * *", "4 * * * *", "5 * * * *", "6 * * * *"}}, "at most 5"},
		{map[string]any{"code": counter, "retainHandles": true, "schedules": []string{"* * * * *"}}, "scheduled(controller"},
		{map[string]any{"code": `async () => 1`, "retainHandles": true, "schedules": []string{"* * * * *"}}, "scheduled(controller"},
		{map[string]any{"code": scheduledKV, "schedules": []string{"* * * * *"}}, "retainHandles"},
	} {
		if a := execute(t, tok, c.req); a.status != 400 || !strings.Contains(string(a.body), c.want) {
			t.Errorf("%v: %d %s", c.req["schedules"], a.status, a.body)
		}
	}
	// Another tenant: neither the schedules nor fire-now.
	if a := do(t, "GET", api("/handles/"+id+"/schedules"), other, nil); a.status != 404 {
		t.Fatalf("another tenant's schedules: %d %s", a.status, a.body)
	}
	if a := do(t, "POST", api("/handles/"+id+"/scheduled"), other, nil); a.status != 404 {
		t.Fatalf("another tenant fired: %d %s", a.status, a.body)
	}
	// A handle without schedules has no handle named scheduled.
	if a := do(t, "POST", api("/handles/"+bystander+"/scheduled"), other, nil); a.status != 404 || a.code() != "NO_SUCH_HANDLE" {
		t.Fatalf("fire now without schedules: %d %s", a.status, a.body)
	}
	if a := do(t, "POST", api("/handles/"+bystander+"/fetch"), other, mustJSON(map[string]any{"method": "GET", "url": "https://x.test/"})); a.status != 200 || !strings.Contains(string(a.body), "eyJzZXJ2ZWQiOjF9") {
		t.Fatalf("the bystander: %d %s", a.status, a.body)
	}
}

// slowThrow waits a second in scheduled() and throws; fetch shows how
// many firings started.
const slowThrow = `async () => { let tries = 0; return {
	fetch() { return Response.json({tries}) },
	async scheduled(c) { tries++; if (c.cron === '0 0 1 1 *') await new Promise(r => setTimeout(r, 1000)); throw new Error('always') } } }`

// Fire-now cannot pile up work (docs/schedules.md): concurrent fire-nows
// of a handle run one and answer the rest 429; a throwing fire-now is not
// tried again; many fire-nows leave no goroutines behind; a route's kept
// version answers 409 and shows no next tick. A bystander is served.
func TestFireNowSpam(t *testing.T) {
	tester := caddytest.NewTester(t)
	tester.InitServer(gatewayConfig(filepath.Join(t.TempDir(), "registry.db"), ""), "caddyfile")
	tok, other := token(t, "alice", allScopes), token(t, "bob", allScopes)
	slow := deploy(t, tok, slowThrow, map[string]any{"schedules": []string{"0 0 1 1 *"}, "timeoutMs": 5000})
	fast := deploy(t, tok, slowThrow, map[string]any{"schedules": []string{"0 0 2 1 *"}})
	bystander := deployCounter(t, other)
	tries := func(id string) string {
		var res struct{ Body []byte }
		json.Unmarshal(do(t, "POST", api("/handles/"+id+"/fetch"), tok, mustJSON(map[string]any{"method": "GET", "url": "https://x.test/"})).body, &res)
		return string(res.Body)
	}

	const n = 10
	codes := make(chan string, n)
	var wg sync.WaitGroup
	for i := 0; i < n; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			a := do(t, "POST", api("/handles/"+slow+"/scheduled"), tok, nil)
			if a.status == 200 {
				m := a.json(t)
				codes <- fmt.Sprintf("200 %v %v", m["outcome"], m["attempt"])
				return
			}
			codes <- fmt.Sprintf("%d %s", a.status, a.code())
		}()
	}
	wg.Wait()
	close(codes)
	got := map[string]int{}
	for c := range codes {
		got[c]++
	}
	if got["200 error 1"] != 1 || got["429 QUOTA_EXCEEDED"] != n-1 {
		t.Fatalf("%d concurrent fire-nows answered %v", n, got)
	}

	base := goruntime.NumGoroutine()
	for i := 0; i < 30; i++ {
		if a := do(t, "POST", api("/handles/"+fast+"/scheduled"), tok, nil); a.status != 200 || a.json(t)["outcome"] != "error" {
			t.Fatalf("fire-now %d: %d %s", i, a.status, a.body)
		}
	}
	// Past the first retry's delay (1 s): nothing was tried again.
	time.Sleep(1500 * time.Millisecond)
	g := goruntime.NumGoroutine()
	t.Logf("goroutines before and after 30 fire-nows: %d -> %d; %d concurrent answered %v", base, g, n, got)
	if g > base+15 {
		t.Fatalf("30 fire-nows left goroutines behind: %d -> %d", base, g)
	}
	if got := tries(slow); got != `{"tries":1}` {
		t.Fatalf("the slow handle's tries: %s", got)
	}
	if got := tries(fast); got != `{"tries":30}` {
		t.Fatalf("the fast handle's tries: %s", got)
	}
	s := do(t, "GET", api("/handles/"+fast+"/schedules"), tok, nil)
	var info struct {
		Firings []struct{ Attempt int }
	}
	json.Unmarshal(s.body, &info)
	for _, f := range info.Firings {
		if f.Attempt != 1 {
			t.Fatalf("a fire-now was retried: %s", s.body)
		}
	}

	// A route's kept version is silent.
	for _, id := range []string{slow, fast} {
		if r := do(t, "PUT", api("/routes/cron"), tok, mustJSON(map[string]any{"executionId": id})); r.status != 200 {
			t.Fatalf("PUT /routes/cron: %d %s", r.status, r.body)
		}
	}
	if a := do(t, "POST", api("/handles/"+slow+"/scheduled"), tok, nil); a.status != 409 || a.code() != "CONFLICT" {
		t.Fatalf("fire-now of a kept version: %d %s", a.status, a.body)
	}
	if s := do(t, "GET", api("/handles/"+slow+"/schedules"), tok, nil); s.status != 200 || !strings.Contains(string(s.body), `"next":null`) {
		t.Fatalf("a kept version's schedules: %d %s", s.status, s.body)
	}
	if a := do(t, "POST", api("/handles/"+bystander+"/fetch"), other, mustJSON(map[string]any{"method": "GET", "url": "https://x.test/"})); a.status != 200 || !strings.Contains(string(a.body), "eyJzZXJ2ZWQiOjF9") {
		t.Fatalf("the bystander: %d %s", a.status, a.body)
	}
}
