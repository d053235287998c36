package caddymodule

import (
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/caddyserver/caddy/v2/caddytest"
)

const aiTestKey = "sk-ai-KEY-never-seen-4f2d"

func aiConfig(store, endpoint string) string {
	return appsGatewayConfig(store, "workers 2\n\t\ttimeout 5s", fmt.Sprintf(`ai {
			endpoint %s/v1
			api_key %s
			model chat upstream-chat-7b
			model small tiny-1b
			timeout 10s
		}`, endpoint, aiTestKey))
}

// modelCall is what the test's model endpoint received.
type modelCall struct {
	path, auth string
	body       map[string]any
}

// aiEndpoint is a real HTTP server speaking OpenAI's chat completions: a
// whole answer echoing the last message, or, streamed, three pieces and
// the usage.
func aiEndpoint(t *testing.T) (*httptest.Server, func() []modelCall) {
	var mu sync.Mutex
	var calls []modelCall
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var body map[string]any
		json.NewDecoder(r.Body).Decode(&body)
		mu.Lock()
		calls = append(calls, modelCall{path: r.URL.Path, auth: r.Header.Get("Authorization"), body: body})
		mu.Unlock()
		if body["stream"] == true {
			w.Header().Set("Content-Type", "text/event-stream")
			for _, piece := range []string{"Hel", "lo", " world"} {
				fmt.Fprintf(w, "data: {\"id\":\"c1\",\"object\":\"chat.completion.chunk\",\"choices\":[{\"index\":0,\"delta\":{\"content\":%q}}]}\n\n", piece)
				w.(http.Flusher).Flush()
			}
			fmt.Fprint(w, "data: {\"id\":\"c1\",\"choices\":[],\"usage\":{\"prompt_tokens\":7,\"completion_tokens\":3,\"total_tokens\":10}}\n\n")
			fmt.Fprint(w, "data: [DONE]\n\n")
			return
		}
		msgs, _ := body["messages"].([]any)
		last := ""
		if len(msgs) > 0 {
			last, _ = msgs[len(msgs)-1].(map[string]any)["content"].(string)
		}
		w.Header().Set("Content-Type", "application/json")
		json.NewEncoder(w).Encode(map[string]any{"id": "c0", "object": "chat.completion",
			"choices": []any{map[string]any{"index": 0, "message": map[string]any{"role": "assistant", "content": "echo: " + last}, "finish_reason": "stop"}},
			"usage":   map[string]any{"prompt_tokens": 3, "completion_tokens": 5, "total_tokens": 8}})
	}))
	t.Cleanup(srv.Close)
	return srv, func() []modelCall {
		mu.Lock()
		defer mu.Unlock()
		return append([]modelCall(nil), calls...)
	}
}

// TestAI is docs/ai.md through a real gateway and a real model endpoint
// started here: ai.run answers {response, usage} under the ai grant (and
// not without it); the registry's key reaches the endpoint and never the
// program, its answer or its receipt; a model outside the block is refused
// naming the configured ones; a handler returns a streamed answer to its
// visitor as Server-Sent Events; the tokens are counted to the tenant.
func TestAI(t *testing.T) {
	model, calls := aiEndpoint(t)
	store := filepath.Join(t.TempDir(), "registry.db")
	caddytest.NewTester(t).InitServer(aiConfig(store, model.URL), "caddyfile")
	alice := token(t, "alice", allScopes)

	prog := `async () => {
		const r = await ai.run('chat', {prompt: 'hi there', max_tokens: 20, temperature: 0.5});
		const m = await ai.run('small', {messages: [{role: 'system', content: 'be brief'}, {role: 'user', content: 'second'}]});
		let refused;
		try { await ai.run('gpt-4', {prompt: 'x'}); } catch (e) { refused = e.message; }
		const read = await new Response(await ai.run('chat', {prompt: 'read it here', stream: true})).text();
		return {r, m: m.response, refused, read};
	}`
	a := do(t, "POST", api("/executions"), alice, mustJSON(map[string]any{"code": prog, "capabilities": []string{"ai"}}))
	if a.status != 200 {
		t.Fatalf("ai.run: %d %s", a.status, a.body)
	}
	if strings.Contains(string(a.body), aiTestKey) {
		t.Fatalf("the answer holds the key: %s", a.body)
	}
	res := a.json(t)["result"].(map[string]any)
	if b, _ := json.Marshal(res["r"]); string(b) != `{"response":"echo: hi there","usage":{"completion_tokens":5,"prompt_tokens":3}}` {
		t.Fatalf("ai.run's answer: %s", b)
	}
	if res["m"] != "echo: second" {
		t.Fatalf("ai.run with messages: %v", res["m"])
	}
	if r, _ := res["refused"].(string); !strings.Contains(r, `"gpt-4"`) || !strings.Contains(r, "chat, small") {
		t.Fatalf("an unknown model: %q", r)
	}
	if res["read"] != "data: {\"response\":\"Hel\"}\n\ndata: {\"response\":\"lo\"}\n\ndata: {\"response\":\" world\"}\n\ndata: [DONE]\n\n" {
		t.Fatalf("a stream read by the program: %q", res["read"])
	}
	cs := calls()
	if len(cs) != 3 {
		t.Fatalf("the endpoint saw %d calls, want 3 (the unknown model never leaves)", len(cs))
	}
	if cs[0].path != "/v1/chat/completions" || cs[0].auth != "Bearer "+aiTestKey || cs[0].body["model"] != "upstream-chat-7b" ||
		cs[0].body["max_tokens"] != float64(20) || cs[0].body["temperature"] != 0.5 || cs[1].body["model"] != "tiny-1b" {
		t.Fatalf("the endpoint saw %+v", cs[0])
	}
	rec := do(t, "GET", api("/results/"+a.json(t)["resultId"].(string)), alice, nil)
	if rec.status != 200 || strings.Contains(string(rec.body), aiTestKey) {
		t.Fatalf("the receipt: %d %s", rec.status, rec.body)
	}

	// No grant, no ai.
	if a := do(t, "POST", api("/executions"), alice, mustJSON(map[string]any{"code": `async () => typeof ai`})); a.status != 200 || a.json(t)["result"] != "undefined" {
		t.Fatalf("ai without the grant: %d %s", a.status, a.body)
	}

	// A handler streams the model's answer to its visitor.
	handler := `async () => ({ async fetch(req, env) {
		const stream = await env.ai.run('chat', {messages: [{role: 'user', content: 'stream please'}], stream: true});
		return new Response(stream, {headers: {'content-type': 'text/event-stream'}});
	} })`
	dep := do(t, "POST", api("/executions"), alice, mustJSON(map[string]any{"code": handler, "retainHandles": true, "capabilities": []string{"ai"}}))
	if dep.status != 200 {
		t.Fatalf("deploy: %d %s", dep.status, dep.body)
	}
	visit := do(t, "GET", site(dep.json(t)["executionId"].(string)+".apps.localhost", "/"), "", nil)
	want := "data: {\"response\":\"Hel\"}\n\ndata: {\"response\":\"lo\"}\n\ndata: {\"response\":\" world\"}\n\ndata: [DONE]\n\n"
	if visit.status != 200 || string(visit.body) != want || !strings.HasPrefix(visit.header.Get("Content-Type"), "text/event-stream") {
		t.Fatalf("the streamed answer: %d %q %v", visit.status, visit.body, visit.header)
	}
	if cs := calls(); cs[len(cs)-1].body["stream"] != true || cs[len(cs)-1].auth != "Bearer "+aiTestKey {
		t.Fatalf("the streamed call upstream: %+v", cs[len(cs)-1])
	}

	// Tokens counted to the tenant: 8 + 8 whole, 10 + 10 streamed.
	var tokens int64
	runtimes.Range(func(_, v any) bool {
		tokens += v.(*runtime).ai.Tokens("alice")
		return true
	})
	if tokens != 36 {
		t.Fatalf("alice's tokens: %d, want 36", tokens)
	}
}
