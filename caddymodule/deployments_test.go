package caddymodule

import (
	"encoding/json"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/caddyserver/caddy/v2/caddytest"
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
	for handleRecord(t, tok, id) != nil {
		if time.Since(start) > d {
			t.Fatalf("handle %s still lives after %v", id, d)
		}
		time.Sleep(100 * time.Millisecond)
	}
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
