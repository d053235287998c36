package caddymodule

import (
	"fmt"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/caddyserver/caddy/v2/caddytest"
)

// An error names the author's own file and line wherever it is shown (API
// answers, handle logs, receipts), and never a frame of the runtime
// (docs/runtime.md, "Errors").
func TestErrorsPointAtTheAuthorsCode(t *testing.T) {
	tester := caddytest.NewTester(t)
	tester.InitServer(gatewayConfig(filepath.Join(t.TempDir(), "registry.db"), ""), "caddyfile")
	post := func(path string, v any) answer {
		t.Helper()
		return do(t, "POST", site("anon.localhost", path), "", mustJSON(v))
	}
	shows := func(what string, a answer, status int, want string) {
		t.Helper()
		if a.status != status || !strings.Contains(string(a.body), want) || strings.Contains(string(a.body), "runtime") {
			t.Errorf("%s: want %d naming %s, got %d %s", what, status, want, a.status, a.body)
		}
	}
	shows("a /run body", post("/run", map[string]any{"body": "const a = 1;\nnull.x;"}), 422, "at body:2:6")
	shows("a /run body's syntax error", post("/run", map[string]any{"body": "const a = 1;\nconst = 2;"}), 422, "(body:2:")
	chain := post("/run/chain", map[string]any{"input": map[string]any{"n": 1}, "steps": []map[string]any{
		{"name": "load", "body": "console.log('loading', input.n);\nreturn input.n + 1"},
		{"name": "sum", "body": "console.log('summing');\nconst x = input;\nreturn x.total.value"},
	}})
	shows("a chain step", chain, 422, `step \"sum\":3:`)
	shows("a spawn child", post("/run", map[string]any{"capabilities": []string{"spawn"},
		"body": "try { await spawn('const a = 1;\\nnull.x') } catch (e) { return e.message }"}), 200, "spawn:2:")
	mods := map[string]string{"lib/m.js": "export function f(request) {\n  return new Response(undefinedVar);\n}\n"}
	shows("an imported module's syntax error", post("/executions", map[string]any{"code": "import { f } from './lib/m.js';\nexport default { fetch: f }",
		"modules": map[string]string{"lib/m.js": "export function f() {\n  return = 1;\n}"}}), 422, "(./lib/m.js:2:")
	deploy := post("/executions", map[string]any{"code": "import { f } from './lib/m.js';\nexport default { fetch: f }", "modules": mods, "retainHandles": true})
	id, _ := deploy.json(t)["executionId"].(string)
	if id == "" {
		t.Fatalf("deploy: %d %s", deploy.status, deploy.body)
	}
	if a := do(t, "GET", site(id+".apps.localhost", "/"), "", nil); a.status != 500 || strings.Contains(string(a.body), "undefinedVar") {
		t.Fatalf("the handler's error: %d %s", a.status, a.body)
	}
	logs := do(t, "GET", site("anon.localhost", "/handles/"+id+"/logs"), "", nil)
	shows("a handler's log entry", logs, 200, "at Object.f [as fetch] (./lib/m.js:2:")

	// The chain's receipt page, in a real browser: each step's labeled
	// sections, the run's logs gathered from its steps, the error once.
	var env struct {
		ResultID string `json:"resultId"`
	}
	jsonUnmarshal(chain.body, &env)
	dom := dumpDOM(t, site("anon.localhost", "/results/"+env.ResultID), 2*time.Second)
	for _, want := range []string{
		"<h3>Code</h3>", "<h3>Input</h3>", "<h3>Output</h3>", "<h3>Error</h3>", "<h3>Logs</h3>", "<td>Duration</td>",
		`in step 2 "sum" (its error is below)`, `<span class="from">[load]</span> loading 1`, `<span class="from">[sum]</span> summing`,
	} {
		if !strings.Contains(dom, strings.ReplaceAll(want, `"`, "&quot;")) && !strings.Contains(dom, want) {
			t.Errorf("the receipt page lacks %s", want)
		}
	}
	if n := strings.Count(dom, "Cannot read properties"); n != 1 {
		t.Errorf("the step's error text shows %d times, not once", n)
	}
	if strings.Contains(dom, "No console output") {
		t.Errorf("the page says no console output for a chain whose steps logged")
	}
	if t.Failed() {
		fmt.Println(dom)
	}
}
