package caddymodule

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/caddyserver/caddy/v2/caddytest"
)

func runConfig(store, model string) string {
	return fmt.Sprintf(`{
	admin localhost:%d
	http_port %d
	https_port %d
	grace_period 1s
	retainer {
		store %s
		workers 3
		timeout 500ms
	}
}

http://api.localhost:%d {
	%s
	retainer_api apps {
		spawn_children 50
		generate {
			endpoint %s
			model tiny-coder
			api_key {env.RETAINER_TEST_MODEL_KEY}
			timeout 5s
		}
	}
}

http://plain.localhost:%d {
	%s
	retainer_api apps
}
`, adminPort, httpPort, httpsPort, store, httpPort, testJWT, model, httpPort, testJWT)
}

// fakeModel is a real HTTP server speaking Chat Completions: it answers
// what the test sets, and records what it was sent.
type fakeModel struct {
	reply  atomic.Value // string: the assistant's text
	status atomic.Int32
	last   atomic.Value // the last request body
	auth   atomic.Value
}

func (m *fakeModel) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	body, _ := io.ReadAll(r.Body)
	m.last.Store(string(body))
	m.auth.Store(r.Header.Get("Authorization"))
	if s := m.status.Load(); s != 0 && s != 200 {
		w.WriteHeader(int(s))
		return
	}
	json.NewEncoder(w).Encode(map[string]any{"choices": []any{map[string]any{"message": map[string]any{"role": "assistant", "content": m.reply.Load()}}}})
}

func TestRunService(t *testing.T) {
	t.Setenv("RETAINER_TEST_MODEL_KEY", "sk-test-never-stored")
	model := &fakeModel{}
	model.reply.Store("")
	srv := httptest.NewServer(model)
	defer srv.Close()
	store := filepath.Join(t.TempDir(), "registry.db")
	tester := caddytest.NewTester(t)
	tester.InitServer(runConfig(store, srv.URL+"/v1/chat/completions"), "caddyfile")
	alice := token(t, "alice", allScopes)
	post := func(path string, v any) answer {
		t.Helper()
		return do(t, "POST", api(path), alice, mustJSON(v))
	}

	// /run: a function body, kv granted.
	a := post("/run", map[string]any{"body": "await kv.put('user:1', 'ann'); return await kv.get('user:1') // a trailing comment", "capabilities": []string{"kvRead", "kvWrite"}})
	if m := a.json(t); a.status != 200 || m["result"] != "ann" || m["resultId"] == "" {
		t.Fatalf("/run: %d %s", a.status, a.body)
	}
	if a := post("/run", map[string]any{"body": "return 1", "retainHandles": true}); a.status != 400 {
		t.Fatalf("/run with retainHandles: %d %s", a.status, a.body)
	}
	if a := post("/run", map[string]any{"body": "throw new Error('nope')"}); a.status != 422 || a.code() != "RUNTIME" || a.json(t)["resultId"] == "" {
		t.Fatalf("/run that throws: %d %s", a.status, a.body)
	}

	// Chains: each step's result is the next one's input.
	a = post("/run/chain", map[string]any{"input": 1, "steps": []map[string]any{
		{"name": "inc", "body": "return input + 1"},
		{"name": "times", "body": "console.log('got', input); return input * 10"},
		{"name": "wrap", "body": "return {value: input}"},
	}})
	var chain struct {
		Result json.RawMessage
		Steps  []struct {
			Name   string
			Result json.RawMessage
			Logs   []string
			Error  *struct{ Code string }
		}
		ResultID string
	}
	json.Unmarshal(a.body, &chain)
	if a.status != 200 || string(chain.Result) != `{"value":20}` || len(chain.Steps) != 3 || string(chain.Steps[1].Result) != "20" || fmt.Sprint(chain.Steps[1].Logs) != "[got 2]" {
		t.Fatalf("chain: %d %s", a.status, a.body)
	}
	page := do(t, "GET", api("/results/"+chain.ResultID), alice, nil)
	for _, want := range []string{"Step 1: inc", "Step 2: times", "Step 3: wrap", "got 2"} {
		if !strings.Contains(string(page.body), want) {
			t.Fatalf("the chain's receipt page lacks %q", want)
		}
	}
	a = post("/run/chain", map[string]any{"steps": []map[string]any{
		{"name": "one", "body": "return 'a'"},
		{"name": "boom", "body": "throw new Error('step two broke')"},
		{"name": "never", "body": "return 'c'"},
	}})
	json.Unmarshal(a.body, &chain)
	if a.status != 422 || a.code() != "RUNTIME" || len(chain.Steps) != 2 || chain.Steps[1].Error == nil || chain.Steps[1].Error.Code != "RUNTIME" || chain.ResultID == "" {
		t.Fatalf("a failing chain: %d %s", a.status, a.body)
	}
	steps := make([]map[string]any, 33)
	for i := range steps {
		steps[i] = map[string]any{"name": "s", "body": "return 1"}
	}
	if a := post("/run/chain", map[string]any{"steps": steps}); a.status != 400 {
		t.Fatalf("33 steps: %d %s", a.status, a.body)
	}
	if a := post("/run/chain", map[string]any{"steps": []map[string]any{{"name": "x", "body": "return 1", "capabilities": []string{"root"}}}}); a.status != 400 {
		t.Fatalf("an unknown capability in a step: %d %s", a.status, a.body)
	}

	// Spawn: 50 children in parallel, then the budget.
	a = post("/run", map[string]any{"capabilities": []string{"spawn"}, "timeoutMs": 20000,
		"body": "const r = await Promise.all(Array.from({length: 50}, (_, i) => spawn('return ' + i + ' * 2'))); return r.reduce((x, y) => x + y, 0)"})
	if m := a.json(t); a.status != 200 || m["result"] != float64(2450) {
		t.Fatalf("50 children: %d %.300s", a.status, a.body)
	}
	rc := do(t, "GET", api("/results/"+a.json(t)["resultId"].(string)+".json"), alice, nil)
	var receipt struct {
		Kind     string
		Children []struct {
			Depth   int
			Outcome string
		}
	}
	json.Unmarshal(rc.body, &receipt)
	if receipt.Kind != "run" || len(receipt.Children) != 50 || receipt.Children[0].Depth != 1 || receipt.Children[0].Outcome != "ok" {
		t.Fatalf("the receipt's children: %s", rc.body)
	}
	a = post("/run", map[string]any{"capabilities": []string{"spawn"}, "timeoutMs": 20000,
		"body": "const r = await Promise.allSettled(Array.from({length: 51}, () => spawn('return 1'))); return r.filter(x => x.status === 'rejected').map(x => x.reason.message)"})
	if m := a.json(t); a.status != 200 || !strings.Contains(fmt.Sprint(m["result"]), "budget of 50 children") {
		t.Fatalf("the 51st child: %d %.300s", a.status, a.body)
	}
	a = post("/run", map[string]any{"capabilities": []string{"spawn"}, "timeoutMs": 20000,
		"body": "const deeper = (n) => `return await spawn(${JSON.stringify(n > 0 ? deeper(n - 1) : 'return \"bottom\"')}, ['spawn'])`; try { return await spawn(deeper(3), ['spawn']) } catch (e) { return e.message }"})
	if m := a.json(t); a.status != 200 || !strings.Contains(fmt.Sprint(m["result"]), "depth 3") {
		t.Fatalf("depth 4: %d %.300s", a.status, a.body)
	}
	a = post("/run", map[string]any{"capabilities": []string{"spawn"},
		"body": "try { await spawn('return 1', ['kvRead']); return 'escalated' } catch (e) { return e.message }"})
	if m := a.json(t); a.status != 200 || !strings.Contains(fmt.Sprint(m["result"]), "kvRead") {
		t.Fatalf("a child asking for more: %d %s", a.status, a.body)
	}
	a = post("/run", map[string]any{"capabilities": []string{"spawn"},
		"body": "try { await spawn('throw new Error(\"child broke\")') } catch (e) { return [e.code, e.message] }"})
	if m := a.json(t); a.status != 200 || !strings.Contains(fmt.Sprint(m["result"]), "RUNTIME") || !strings.Contains(fmt.Sprint(m["result"]), "child broke") {
		t.Fatalf("a failing child: %d %s", a.status, a.body)
	}
	a = post("/run", map[string]any{"body": "try { await spawn('return 1'); return 'spawned' } catch (e) { return e.message }"})
	if m := a.json(t); a.status != 200 || !strings.Contains(fmt.Sprint(m["result"]), "spawn capability") {
		t.Fatalf("spawn without the capability: %d %s", a.status, a.body)
	}

	// A child lives no longer than its parent's run (budgets): a parent
	// that answers at once leaves a child that would write kv every 50 ms
	// for 3 s; the child is cancelled with the parent, and its writes stop.
	a = post("/run", map[string]any{"capabilities": []string{"spawn", "kvWrite"}, "timeoutMs": 3000,
		"body": "spawn('for (let i = 1; ; i++) { await kv.put(\"orphan\", String(i)); await new Promise(r => setTimeout(r, 50)); }', ['kvWrite']).catch(() => {}); await new Promise(r => setTimeout(r, 200)); return 'left'"})
	if a.status != 200 || a.json(t)["result"] != "left" {
		t.Fatalf("a parent leaving its child: %d %s", a.status, a.body)
	}
	orphan := func() int {
		t.Helper()
		a := post("/run", map[string]any{"capabilities": []string{"kvRead"}, "body": "return Number(await kv.get('orphan') || 0)"})
		n, _ := a.json(t)["result"].(float64)
		return int(n)
	}
	time.Sleep(300 * time.Millisecond)
	before := orphan()
	time.Sleep(time.Second)
	if after := orphan(); after != before {
		t.Fatalf("the child went on writing after its parent's run ended: %d, then %d a second later", before, after)
	}

	// Generate: the model's first fenced block runs as a /run body.
	model.reply.Store("Here you go:\n```js\nconst n = await kv.get('user:1');\nreturn 'hello ' + n;\n```\nEnjoy.")
	a = post("/run/generate", map[string]any{"prompt": "greet user 1", "capabilities": []string{"kvRead"}})
	m := a.json(t)
	if a.status != 200 || m["result"] != "hello ann" || !strings.Contains(fmt.Sprint(m["code"]), "kv.get('user:1')") {
		t.Fatalf("generate: %d %s", a.status, a.body)
	}
	sent, _ := model.last.Load().(string)
	if !strings.Contains(sent, "kv.get(key)") || strings.Contains(sent, "fetch(url") || !strings.Contains(sent, "greet user 1") || model.auth.Load() != "Bearer sk-test-never-stored" {
		t.Fatalf("the model was sent %s (auth %v)", sent, model.auth.Load())
	}
	rc = do(t, "GET", api("/results/"+m["resultId"].(string)+".json"), alice, nil)
	if !strings.Contains(string(rc.body), `"prompt":"greet user 1"`) || !strings.Contains(string(rc.body), `"model":"tiny-coder"`) || strings.Contains(string(rc.body), "sk-test") {
		t.Fatalf("generate's receipt: %s", rc.body)
	}
	model.reply.Store("return 6 * 7")
	if a := post("/run/generate", map[string]any{"prompt": "answer"}); a.status != 200 || a.json(t)["result"] != float64(42) {
		t.Fatalf("generate without a fence: %d %s", a.status, a.body)
	}
	model.status.Store(500)
	if a := post("/run/generate", map[string]any{"prompt": "answer"}); a.status != 502 || a.code() != "BAD_RESPONSE" || !strings.Contains(string(a.body), "500") {
		t.Fatalf("a failing model: %d %s", a.status, a.body)
	}
	if a := do(t, "POST", fmt.Sprintf("http://plain.localhost:%d/run/generate", httpPort), alice, mustJSON(map[string]any{"prompt": "x"})); a.status != 400 || a.code() != "BAD_REQUEST" {
		t.Fatalf("generate without a generate block: %d %s", a.status, a.body)
	}
}
