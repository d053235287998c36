package caddymodule

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/caddyserver/caddy/v2/caddytest"
)

func TestReceipts(t *testing.T) {
	store := filepath.Join(t.TempDir(), "registry.db")
	tester := caddytest.NewTester(t)
	tester.InitServer(gatewayConfig(store, ""), "caddyfile")
	alice := token(t, "alice", allScopes)
	bob := token(t, "bob", allScopes)
	const secret = "hunter2-secret-value"

	run := func(body map[string]any) answer {
		return do(t, "POST", api("/executions"), alice, mustJSON(body))
	}
	receiptOf := func(a answer) (string, map[string]any) {
		t.Helper()
		var env struct {
			ResultID string `json:"resultId"`
		}
		if err := jsonUnmarshal(a.body, &env); err != nil || env.ResultID == "" {
			t.Fatalf("no resultId in %d %s", a.status, a.body)
		}
		r := do(t, "GET", api("/results/"+env.ResultID+".json"), alice, nil)
		if r.status != 200 {
			t.Fatalf("receipt %s: %d %s", env.ResultID, r.status, r.body)
		}
		if strings.Contains(string(r.body), secret) {
			t.Fatalf("the receipt holds an env value: %s", r.body)
		}
		page := do(t, "GET", api("/results/"+env.ResultID), alice, nil)
		if page.status != 200 || !strings.HasPrefix(page.header.Get("Content-Type"), "text/html") || strings.Contains(string(page.body), secret) {
			t.Fatalf("receipt page: %d %v", page.status, page.header)
		}
		if csp := page.header.Get("Content-Security-Policy"); !strings.Contains(csp, "default-src 'none'") {
			t.Fatalf("CSP %q", csp)
		}
		return env.ResultID, r.json(t)
	}

	okID, ok := receiptOf(run(map[string]any{"code": "async () => { console.log('hi'); return {n: 1} }", "env": map[string]string{"SECRET": secret}}))
	if o := ok["outcome"].(map[string]any); o["status"] != "ok" || fmt.Sprint(o["result"]) != "map[n:1]" || fmt.Sprint(ok["logs"]) != "[hi]" {
		t.Fatalf("success receipt %v", ok)
	}
	if g := ok["grants"].(map[string]any); fmt.Sprint(g["envKeys"]) != "[SECRET]" {
		t.Fatalf("grants %v", g)
	}
	if tm := ok["timing"].(map[string]any); tm["received"] == nil || tm["durationMs"] == nil {
		t.Fatalf("timing %v", tm)
	}
	a := run(map[string]any{"code": "async () => { throw new Error('nope') }"})
	if a.status != 422 {
		t.Fatalf("throw: %d", a.status)
	}
	_, thrown := receiptOf(a)
	if e := thrown["outcome"].(map[string]any)["error"].(map[string]any); e["code"] != "RUNTIME" || !strings.Contains(e["message"].(string), "nope") {
		t.Fatalf("thrown receipt %v", thrown)
	}
	_, timedOut := receiptOf(run(map[string]any{"code": "async () => { for(;;){} }", "timeoutMs": 50}))
	if e := timedOut["outcome"].(map[string]any)["error"].(map[string]any); e["code"] != "TIMEOUT" {
		t.Fatalf("timeout receipt %v", timedOut)
	}
	_, deployed := receiptOf(run(map[string]any{"code": counter, "retainHandles": true}))
	if deployed["executionId"] == "" || deployed["retainHandles"] != true {
		t.Fatalf("deploy receipt %v", deployed)
	}

	// Tenants: bob's view of alice's receipt equals an unknown id's.
	b := do(t, "GET", api("/results/"+okID+".json"), bob, nil)
	u := do(t, "GET", api("/results/01000000-0000-7000-8000-000000000000.json"), bob, nil)
	if b.status != 404 || b.code() != "NOT_FOUND" || strings.ReplaceAll(string(b.body), okID, "X") != strings.ReplaceAll(string(u.body), "01000000-0000-7000-8000-000000000000", "X") {
		t.Fatalf("bob reads alice's receipt: %d %s / %s", b.status, b.body, u.body)
	}
	list := do(t, "GET", api("/results?limit=2"), alice, nil)
	var page struct {
		Results []struct{ ResultID string }
		Cursor  *string
	}
	jsonUnmarshal(list.body, &page)
	if len(page.Results) != 2 || page.Cursor == nil {
		t.Fatalf("results page: %s", list.body)
	}

	// In a real browser the hostile code and logs render inert.
	chromium(t) // skips here, before the run, where there is none
	a = do(t, "POST", site("anon.localhost", "/executions"), "", mustJSON(map[string]any{
		"code": "async () => { console.log(\"<script>document.title='pwned'</script>\"); return '<img src=x onerror=\"document.title=1\">' } // <script>alert(1)</script>",
	}))
	var env struct {
		ResultID string `json:"resultId"`
	}
	jsonUnmarshal(a.body, &env)
	dom := dumpDOM(t, site("anon.localhost", "/results/"+env.ResultID), 2*time.Second)
	if !strings.Contains(dom, "&lt;script&gt;alert(1)&lt;/script&gt;") || !strings.Contains(dom, "document.title='pwned'") {
		t.Fatalf("the hostile text is not visible as text:\n%s", dom)
	}
	if strings.Contains(dom, "<title>pwned") || strings.Contains(dom, "<title>1<") || strings.Count(dom, "<script") > 0 || strings.Contains(dom, "<img") {
		t.Fatalf("hostile markup became live:\n%s", dom)
	}
}

// dumpDOM loads url in headless Chromium and answers the page's DOM once
// the page has had budget of virtual time, or with budget 0 once it has
// loaded.
func dumpDOM(t *testing.T, url string, budget time.Duration) string {
	t.Helper()
	browser := chromium(t)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	args := []string{"--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
		"--disable-background-networking", "--disable-component-update", "--disable-sync",
		"--host-resolver-rules=MAP *.localhost 127.0.0.1", "--user-data-dir=" + t.TempDir()}
	if budget > 0 {
		args = append(args, fmt.Sprintf("--virtual-time-budget=%d", budget.Milliseconds()))
	}
	out, err := exec.CommandContext(ctx, browser, append(args, "--dump-dom", url)...).Output()
	if err != nil {
		t.Fatalf("chromium: %v", err)
	}
	return string(out)
}

// chromium finds Debian's browser. CI installs it (.ci/run); elsewhere the
// test says how to get it.
func chromium(t *testing.T) string {
	for _, name := range []string{"chromium", "chromium-browser", "google-chrome"} {
		if p, err := exec.LookPath(name); err == nil {
			return p
		}
	}
	if os.Getenv("CI") != "" {
		t.Fatal("chromium is missing in CI: .ci/run installs it")
	}
	t.Skip("chromium is not installed (apt-get install chromium); CI runs this part")
	return ""
}

// JSON answers of the API and receipts' JSON are written without HTML
// escaping (docs/architecture.md, Budgets): a run whose result and logs
// hold "<script>&" shows them as themselves in the /executions answer and
// in its receipt's JSON, not as \u003c.
func TestReceiptAndAnswerJSONNotHTMLEscaped(t *testing.T) {
	store := filepath.Join(t.TempDir(), "registry.db")
	tester := caddytest.NewTester(t)
	tester.InitServer(gatewayConfig(store, ""), "caddyfile")
	alice := token(t, "alice", allScopes)
	a := do(t, "POST", api("/executions"), alice, mustJSON(map[string]any{
		"code": `async () => { console.log("<script>&</script>"); return {html: "<script>&"} }`,
	}))
	if a.status != 200 {
		t.Fatalf("run: %d %s", a.status, a.body)
	}
	escaped := func(what string, body []byte) {
		t.Helper()
		if strings.Contains(string(body), `\u003c`) || strings.Contains(string(body), `\u0026`) || !strings.Contains(string(body), `"<script>&"`) {
			t.Fatalf("%s is HTML-escaped: %s", what, body)
		}
	}
	escaped("the /executions answer", a.body)
	var env struct {
		ResultID string `json:"resultId"`
	}
	if err := jsonUnmarshal(a.body, &env); err != nil || env.ResultID == "" {
		t.Fatalf("no resultId in %s", a.body)
	}
	r := do(t, "GET", api("/results/"+env.ResultID+".json"), alice, nil)
	if r.status != 200 {
		t.Fatalf("receipt: %d %s", r.status, r.body)
	}
	escaped("the receipt's JSON", r.body)
	if !strings.Contains(string(r.body), `"<script>&</script>"`) || !strings.Contains(string(r.body), `async () => {`) {
		t.Fatalf("the receipt's logs or code are HTML-escaped: %s", r.body)
	}
}
