package caddymodule

import (
	"fmt"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/caddyserver/caddy/v2/caddytest"

	"github.com/retainer-gw/retainer/internal/s3test"
)

// TestObjectsS3Stalled: with the S3 service stalled (SIGSTOP), a handler's
// bucket.get fails within half its bound with OVERLOADED, which it
// catches, its isolate and its state kept (not a TIMEOUT that rebuilds
// it); the control plane's GET answers 503 within its wait; once the
// service goes on, so do both.
func TestObjectsS3Stalled(t *testing.T) {
	s := s3test.Start(t)
	defer s.Resume()
	saved := controlWait
	controlWait = 2 * time.Second
	defer func() { controlWait = saved }()
	objectsS3 := fmt.Sprintf("objects s3 {\n\t\t\tendpoint %s\n\t\t\tbucket stalled\n\t\t\tregion %s\n\t\t\taccess_key %s\n\t\t\tsecret_key %s\n\t\t}",
		s.Endpoint, s.Region, s.AccessKey, s.SecretKey)
	caddytest.NewTester(t).InitServer(gatewayConfig(filepath.Join(t.TempDir(), "registry.db"), objectsS3), "caddyfile")
	bob := token(t, "bob", allScopes)
	if a := do(t, "PUT", api("/objects/k"), bob, []byte("v")); a.status != 200 {
		t.Fatalf("put: %d %s", a.status, a.body)
	}
	code := `async () => { let n = 0; return { async fetch(request, env) {
		n++;
		try { const o = await env.bucket.get('k'); return Response.json({n, got: o ? await o.text() : null}); }
		catch (e) { return Response.json({n, code: e.code}); }
	} }; }`
	a := do(t, "POST", api("/executions"), bob, mustJSON(map[string]any{"code": code, "retainHandles": true, "timeoutMs": 2000, "capabilities": []string{"objectsRead"}}))
	if a.status != 200 {
		t.Fatalf("deploy: %d %s", a.status, a.body)
	}
	host := a.json(t)["executionId"].(string) + ".apps.localhost"
	if a := do(t, "GET", site(host, "/"), "", nil); string(a.body) != `{"n":1,"got":"v"}` {
		t.Fatalf("before the stall: %d %s", a.status, a.body)
	}
	s.Pause()
	for n := 2; n <= 3; n++ {
		if a := do(t, "GET", site(host, "/"), "", nil); a.status != 200 || string(a.body) != fmt.Sprintf(`{"n":%d,"code":"OVERLOADED"}`, n) {
			t.Fatalf("the service stalled, call %d: %d %s", n, a.status, a.body)
		}
	}
	if a := do(t, "GET", api("/objects/k"), bob, nil); a.status != 503 || a.code() != "OVERLOADED" {
		t.Fatalf("the control plane's get, the service stalled: %d %s", a.status, a.body)
	}
	if a := do(t, "GET", api("/objects"), bob, nil); a.status != 503 || a.code() != "OVERLOADED" {
		t.Fatalf("the control plane's list, the service stalled: %d %s", a.status, a.body)
	}
	s.Resume()
	var last answer
	for deadline := time.Now().Add(20 * time.Second); time.Now().Before(deadline); time.Sleep(100 * time.Millisecond) {
		if last = do(t, "GET", site(host, "/"), "", nil); strings.Contains(string(last.body), `"got":"v"`) {
			break
		}
	}
	if !strings.Contains(string(last.body), `"got":"v"`) || !strings.HasPrefix(string(last.body), `{"n":`) || strings.HasPrefix(string(last.body), `{"n":1,`) {
		t.Fatalf("after the stall: %d %s", last.status, last.body)
	}
}
