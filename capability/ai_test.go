package capability

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/retainer-gw/retainer/budgets"
	"github.com/retainer-gw/retainer/fault"
)

// TestAIUpstreamFailuresSayNoMore: an endpoint's failure is its status,
// never its body (which may quote the request, key and all); no ai block
// and an unknown model are refused before anything leaves.
func TestAIUpstreamFailuresSayNoMore(t *testing.T) {
	hits := 0
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		hits++
		http.Error(w, "bad key: "+r.Header.Get("Authorization"), http.StatusUnauthorized)
	}))
	defer srv.Close()
	a := &AI{}
	call := func(registry, args string) error {
		_, err := a.run(context.Background(), nil, Call{Tenant: "alice", Registry: registry, Args: json.RawMessage(args)})
		return err
	}
	if err := call("apps", `{"model":"chat","inputs":{"prompt":"x"}}`); err == nil || !strings.Contains(err.Error(), "no ai block") {
		t.Fatalf("no block: %v", err)
	}
	a.Set("apps", &AIConfig{Endpoint: srv.URL + "/v1/chat/completions", APIKey: "sk-SECRET", Models: map[string]string{"chat": "m", "b": "n"}, Timeout: 5 * time.Second})
	if err := call("apps", `{"model":"nope","inputs":{"prompt":"x"}}`); err == nil || !strings.Contains(err.Error(), "b, chat") {
		t.Fatalf("an unknown model: %v", err)
	}
	if err := call("apps", `{"model":"chat","inputs":{}}`); err == nil || !strings.Contains(err.Error(), "messages") {
		t.Fatalf("no inputs: %v", err)
	}
	if hits != 0 {
		t.Fatalf("refused calls reached the endpoint %d times", hits)
	}
	err := call("apps", `{"model":"chat","inputs":{"prompt":"x"}}`)
	if err == nil || !strings.Contains(err.Error(), "401") || strings.Contains(err.Error(), "sk-SECRET") {
		t.Fatalf("a failing endpoint: %v", err)
	}
	if a.Tokens("alice") != 0 {
		t.Fatalf("tokens counted for failures: %d", a.Tokens("alice"))
	}
}

// TestAIStreamEvents: chat completion chunks become data: {"response"}
// events and data: [DONE]; the usage chunk is counted, not sent.
func TestAIStreamEvents(t *testing.T) {
	up := io.NopCloser(strings.NewReader(": keep-alive\n\n" +
		`data: {"choices":[{"delta":{"role":"assistant"}}]}` + "\n\n" +
		`data: {"choices":[{"delta":{"content":"a\"b"}}]}` + "\n\n" +
		`data: {"choices":[],"usage":{"prompt_tokens":4,"completion_tokens":2}}` + "\n\n" +
		"data: [DONE]\n\n"))
	a := &AI{}
	pr, pw := io.Pipe()
	go a.relaySSE("default", "bob", up, pw)
	out, err := io.ReadAll(pr)
	if err != nil || string(out) != "data: {\"response\":\"a\\\"b\"}\n\ndata: [DONE]\n\n" {
		t.Fatalf("%q %v", out, err)
	}
	if a.Tokens("bob") != 6 {
		t.Fatalf("bob's tokens: %d", a.Tokens("bob"))
	}
}

// TestAICallsInFlight: a tenant's 17th call waits for one of its own and,
// still waiting when its run ends, is QUOTA_EXCEEDED; it goes once one
// ends; another tenant's call never waits for them; past the gateway's
// 256 a call is OVERLOADED at once; every place comes back.
func TestAICallsInFlight(t *testing.T) {
	a := &AI{}
	var releases []func()
	take := func(ctx context.Context, tenant string) error {
		r, err := a.take(ctx, tenant)
		if err == nil {
			releases = append(releases, r)
		}
		return err
	}
	for i := 0; i < budgets.AICallsPerTenant; i++ {
		if err := take(context.Background(), "alice"); err != nil {
			t.Fatal(err)
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	if f := fault.As(take(ctx, "alice")); f == nil || f.Code != fault.QuotaExceeded {
		t.Fatalf("alice's 17th call when her run ended: %v", f)
	}
	if err := take(context.Background(), "bob"); err != nil {
		t.Fatalf("bob's call: %v", err)
	}
	waited := make(chan error, 1)
	go func() { _, err := a.take(context.Background(), "alice"); waited <- err }()
	time.Sleep(20 * time.Millisecond)
	releases[0]()
	releases[0]() // twice is once
	if err := <-waited; err != nil {
		t.Fatalf("alice's waiting call after one ended: %v", err)
	}
	if n, all := a.InFlight("alice"); n != budgets.AICallsPerTenant || all != budgets.AICallsPerTenant+1 {
		t.Fatalf("in flight: alice %d, all %d", n, all)
	}
	for i := 0; a.total < budgets.AICalls; i++ {
		if err := take(context.Background(), fmt.Sprintf("t%d", i/budgets.AICallsPerTenant)); err != nil {
			t.Fatal(err)
		}
	}
	if f := fault.As(take(context.Background(), "carol")); f == nil || f.Code != fault.Overloaded {
		t.Fatalf("past the gateway's cap: %v", f)
	}
}
