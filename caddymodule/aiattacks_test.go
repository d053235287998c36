package caddymodule

import (
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/caddyserver/caddy/v2/caddytest"

	"github.com/retainer-gw/retainer/internal/waitfor"
)

// aiAttackConfig is aiConfig's gateway with the attack endpoint's models,
// `extra` added to the global retainer block.
func aiAttackConfig(store, endpoint, extra string) string {
	return appsGatewayConfig(store, "timeout 5s\n\t\t"+extra, fmt.Sprintf(`ai {
			endpoint %s/v1
			api_key %s
			model serial serial
			model sleep sleep
			model redir redir
			timeout 20s
		}`, endpoint, aiTestKey))
}

// attackEndpoint is a chat completions endpoint whose behaviour is the
// upstream model's name: serial serves one call at a time (100 ms each, as
// one GPU would), sleep answers after 1.5 s, redir redirects to `other`
// (the same host name, another port). most is the most calls it held at
// once for a prompt.
type attackEndpoint struct {
	mu       sync.Mutex
	inFlight map[string]int
	most     map[string]int
	gpu      sync.Mutex
}

func (e *attackEndpoint) mostOf(prompt string) int {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.most[prompt]
}

func newAttackEndpoint(t *testing.T, other string) (*attackEndpoint, *httptest.Server) {
	e := &attackEndpoint{inFlight: map[string]int{}, most: map[string]int{}}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var body struct {
			Model    string `json:"model"`
			Messages []struct {
				Content string `json:"content"`
			} `json:"messages"`
		}
		json.NewDecoder(r.Body).Decode(&body)
		prompt := ""
		if len(body.Messages) > 0 {
			prompt = body.Messages[len(body.Messages)-1].Content
		}
		e.mu.Lock()
		e.inFlight[prompt]++
		e.most[prompt] = max(e.most[prompt], e.inFlight[prompt])
		e.mu.Unlock()
		defer func() {
			e.mu.Lock()
			e.inFlight[prompt]--
			e.mu.Unlock()
		}()
		switch body.Model {
		case "serial":
			e.gpu.Lock()
			time.Sleep(100 * time.Millisecond)
			e.gpu.Unlock()
		case "sleep":
			select {
			case <-time.After(1500 * time.Millisecond):
			case <-r.Context().Done():
				return
			}
		case "redir":
			http.Redirect(w, r, other+"/v1/chat/completions", http.StatusTemporaryRedirect)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		json.NewEncoder(w).Encode(map[string]any{"choices": []any{map[string]any{"message": map[string]any{"role": "assistant", "content": "echo: " + prompt}}},
			"usage": map[string]any{"prompt_tokens": 1, "completion_tokens": 1}})
	}))
	t.Cleanup(srv.Close)
	return e, srv
}

// counterHandler is a bystander's deployment: a closure counter, and on
// /ai one model call.
const counterHandler = `async () => { let n = 0; return { async fetch(req, env) {
	n++;
	if (new URL(req.url).pathname === '/ai') {
		const r = await env.ai.run('serial', {prompt: 'bob'});
		return Response.json({n, r: r.response});
	}
	return Response.json({n});
} }; }`

// TestAICallsCappedPerTenant: alice asks a model that serves one call at
// a time for 64 answers at once (an isolate's most host calls); bob's one
// call, asked while hers wait, is answered within his 5 s bound (before
// the cap, it queued behind all 64 at the endpoint, 6.4 s, and timed out),
// the endpoint never holds more than 16 of hers, and bob's closure counter
// is intact. The model
// endpoint's redirect to another port of the same host is not followed:
// the key never reaches it.
func TestAICallsCappedPerTenant(t *testing.T) {
	var otherAuth atomic.Value
	other := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		otherAuth.Store(r.Header.Get("Authorization") + " ")
		w.Header().Set("Content-Type", "application/json")
		fmt.Fprint(w, `{"choices":[{"message":{"role":"assistant","content":"from the other port"}}]}`)
	}))
	defer other.Close()
	ep, model := newAttackEndpoint(t, other.URL)
	store := filepath.Join(t.TempDir(), "registry.db")
	caddytest.NewTester(t).InitServer(aiAttackConfig(store, model.URL, "workers 2"), "caddyfile")
	alice, bob := token(t, "alice", allScopes), token(t, "bob", allScopes)

	dep := do(t, "POST", api("/executions"), bob, mustJSON(map[string]any{"code": counterHandler, "retainHandles": true, "capabilities": []string{"ai"}}))
	if dep.status != 200 {
		t.Fatalf("bob's deploy: %d %s", dep.status, dep.body)
	}
	host := dep.json(t)["executionId"].(string) + ".apps.localhost"
	if v := do(t, "GET", site(host, "/"), "", nil); v.status != 200 || string(v.body) != `{"n":1}` {
		t.Fatalf("bob's first visit: %d %s", v.status, v.body)
	}

	var flood answer
	done := make(chan struct{})
	go func() {
		defer close(done)
		flood = do(t, "POST", api("/executions"), alice, mustJSON(map[string]any{"capabilities": []string{"ai"},
			"code": `async () => { const ps = []; for (let i = 0; i < 64; i++) ps.push(ai.run('serial', {prompt: 'alice'}).then(() => 'ok', (e) => e.code || e.message)); const r = await Promise.all(ps); return r.filter(x => x === 'ok').length; }`}))
	}()
	waitfor.Until(t, 10*time.Second, "alice's calls to reach the endpoint", func() bool { return ep.mostOf("alice") >= 10 })
	time.Sleep(100 * time.Millisecond) // all 64 asked
	v := do(t, "GET", site(host, "/ai"), "", nil)
	if v.status != 200 || string(v.body) != `{"n":2,"r":"echo: bob"}` {
		t.Fatalf("bob's model call while alice floods: %d %s", v.status, v.body)
	}
	<-done
	if strings.Contains(string(flood.body), "WORKER_CRASHED") {
		t.Fatalf("alice's flood: %d %s", flood.status, flood.body)
	}
	if m := ep.mostOf("alice"); m > 16 {
		t.Fatalf("the endpoint held %d of alice's calls at once, past her 16", m)
	}
	if v := do(t, "GET", site(host, "/"), "", nil); v.status != 200 || string(v.body) != `{"n":3}` {
		t.Fatalf("bob's counter after: %d %s", v.status, v.body)
	}
	// Her calls end with her run: their places come back.
	held := 0
	if !waitfor.Within(10*time.Second, func() bool {
		held = 0
		for _, rt := range runtimesOf() {
			_, all := rt.ai.InFlight("alice")
			held += all
		}
		return held == 0
	}) {
		t.Fatalf("%d calls still counted in flight", held)
	}

	// A redirect is the endpoint's answer, never followed with the key.
	r := do(t, "POST", api("/executions"), bob, mustJSON(map[string]any{"capabilities": []string{"ai"},
		"code": `async () => { try { return (await ai.run('redir', {prompt: 'x'})).response; } catch (e) { return e.message; } }`}))
	if r.status != 200 || !strings.Contains(string(r.body), "answered 307") {
		t.Fatalf("a redirected model call: %d %s", r.status, r.body)
	}
	if a := otherAuth.Load(); a != nil {
		t.Fatalf("the redirect was followed (Authorization %q)", a)
	}
}

// runtimesOf answers the gateway's runtimes.
func runtimesOf() []*runtime {
	var out []*runtime
	runtimes.Range(func(_, v any) bool {
		out = append(out, v.(*runtime))
		return true
	})
	return out
}

// TestHostCallFloodKillsNoWorker: plain JavaScript, two runs of 50 spawned
// children each making 64 model calls at once (6,400 host calls, more than
// the 4,096 the gateway serves for one worker), in the one worker a shared
// gateway has: the worker holds the calls past its bound (the calls wait,
// or end with their runs), nothing is killed, and bob's handle in the same
// worker keeps its closure counter (before, the gateway killed the worker
// as a protocol violator, and bob's handle was reset).
func TestHostCallFloodKillsNoWorker(t *testing.T) {
	_, model := newAttackEndpoint(t, "http://127.0.0.1:1")
	store := filepath.Join(t.TempDir(), "registry.db")
	caddytest.NewTester(t).InitServer(aiAttackConfig(store, model.URL, "workers 1\n\t\tisolation shared"), "caddyfile")
	alice, bob := token(t, "alice", allScopes), token(t, "bob", allScopes)

	dep := do(t, "POST", api("/executions"), bob, mustJSON(map[string]any{"code": counterHandler, "retainHandles": true, "capabilities": []string{"ai"}}))
	if dep.status != 200 {
		t.Fatalf("bob's deploy: %d %s", dep.status, dep.body)
	}
	host := dep.json(t)["executionId"].(string) + ".apps.localhost"
	if v := do(t, "GET", site(host, "/"), "", nil); v.status != 200 || string(v.body) != `{"n":1}` {
		t.Fatalf("bob's first visit: %d %s", v.status, v.body)
	}
	child := `const ps = []; for (let i = 0; i < 64; i++) ps.push(ai.run('sleep', {prompt: 'x'}).then(() => 1, (e) => 0)); return (await Promise.all(ps)).length;`
	body := fmt.Sprintf(`const kids = []; for (let k = 0; k < 50; k++) kids.push(spawn(%q, ['ai']).catch(e => e.code)); return await Promise.all(kids);`, child)
	var wg sync.WaitGroup
	runs := make([]answer, 2)
	for i := range runs {
		wg.Add(1)
		go func(i int) {
			defer wg.Done()
			runs[i] = do(t, "POST", api("/run"), alice, mustJSON(map[string]any{"body": body, "capabilities": []string{"spawn", "ai"}}))
		}(i)
	}
	wg.Wait()
	for i, r := range runs {
		if strings.Contains(string(r.body), "WORKER_CRASHED") {
			t.Fatalf("alice's run %d: %d %s", i, r.status, r.body)
		}
	}
	if v := do(t, "GET", site(host, "/"), "", nil); v.status != 200 || string(v.body) != `{"n":2}` {
		t.Fatalf("bob's counter after the flood: %d %s", v.status, v.body)
	}
	if l := do(t, "GET", api("/handles/"+dep.json(t)["executionId"].(string)+"/logs"), bob, nil); strings.Contains(string(l.body), "killed") {
		t.Fatalf("bob's handle saw its worker killed: %s", l.body)
	}
}
