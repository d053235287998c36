package caddymodule

import (
	"fmt"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/caddyserver/caddy/v2/caddytest"

	"github.com/retainer-gw/retainer/internal/s3test"
	"github.com/retainer-gw/retainer/internal/waitfor"
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
	waitfor.Within(20*time.Second, func() bool {
		last = do(t, "GET", site(host, "/"), "", nil)
		return strings.Contains(string(last.body), `"got":"v"`)
	})
	if !strings.Contains(string(last.body), `"got":"v"`) || !strings.HasPrefix(string(last.body), `{"n":`) || strings.HasPrefix(string(last.body), `{"n":1,`) {
		t.Fatalf("after the stall: %d %s", last.status, last.body)
	}
}

// TestObjectsDownloadsAreEgress: an object's bytes relayed by a handler
// and sent by the control plane's GET are the tenant's egress; a relay's
// chunks are not the handle's invocations (a 256 MiB relay added 4,097);
// the bystander is charged nothing.
func TestObjectsDownloadsAreEgress(t *testing.T) {
	caddytest.NewTester(t).InitServer(gatewayConfig(filepath.Join(t.TempDir(), "registry.db"), ""), "caddyfile")
	alice := token(t, "alice", allScopes)
	bob := token(t, "bob", allScopes)
	files := deployObjects(t, alice)
	bobFiles := deployObjects(t, bob)
	const size = 2 << 20
	blob := make([]byte, size)
	for i := range blob {
		blob[i] = byte(i * 7)
	}
	if a := do(t, "PUT", api("/objects/big.bin"), alice, blob); a.status != 200 {
		t.Fatalf("put: %d %s", a.status, a.body)
	}
	if a := do(t, "PUT", site(bobFiles, "/b.txt"), "", []byte("bob's")); a.status != 200 {
		t.Fatalf("bob's put: %d %s", a.status, a.body)
	}
	invocations := func() float64 {
		a := do(t, "GET", api("/handles/"+strings.TrimSuffix(files, ".apps.localhost")), alice, nil)
		n, _ := a.json(t)["invocations"].(float64)
		return n
	}
	before, bobBefore, calls := usageToday(t, alice), usageToday(t, bob), invocations()
	if a := do(t, "GET", site(files, "/big.bin"), "", nil); a.status != 200 || len(a.body) != size {
		t.Fatalf("relayed: %d, %d bytes", a.status, len(a.body))
	}
	if a := do(t, "GET", api("/objects/big.bin"), alice, nil); a.status != 200 || len(a.body) != size {
		t.Fatalf("control plane: %d, %d bytes", a.status, len(a.body))
	}
	var after usageTotals
	waitfor.Within(10*time.Second, func() bool {
		after = usageToday(t, alice)
		return after.EgressBytes-before.EgressBytes >= 2*size
	})
	if got := after.EgressBytes - before.EgressBytes; got < 2*size {
		t.Fatalf("egress of two %d-byte downloads: %d", size, got)
	}
	if got := invocations() - calls; got > 2 {
		t.Fatalf("one relayed download added %v invocations", got)
	}
	if a := do(t, "GET", site(bobFiles, "/served"), "", nil); a.status != 200 || a.json(t)["served"].(float64) != 2 {
		t.Fatalf("bob's handler: %d %s", a.status, a.body)
	}
	if got := usageToday(t, bob).EgressBytes - bobBefore.EgressBytes; got > 1000 {
		t.Fatalf("bob was charged %d bytes of alice's downloads", got)
	}
}
