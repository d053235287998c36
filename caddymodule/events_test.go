package caddymodule

import (
	"context"
	"encoding/json"
	"fmt"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/caddyserver/caddy/v2"
	"github.com/caddyserver/caddy/v2/caddyconfig"
	"github.com/caddyserver/caddy/v2/caddytest"

	"github.com/retainer-gw/retainer/internal/waitfor"
)

// eventRecorder is a test-only Caddy event handler that keeps what it hears.
type eventRecorder struct{}

var (
	heardMu sync.Mutex
	heard   []caddy.Event
)

func (eventRecorder) CaddyModule() caddy.ModuleInfo {
	return caddy.ModuleInfo{ID: "events.handlers.retainer_test_recorder", New: func() caddy.Module { return new(eventRecorder) }}
}

func (eventRecorder) Handle(_ context.Context, e caddy.Event) error {
	heardMu.Lock()
	heard = append(heard, e)
	heardMu.Unlock()
	return nil
}

func init() { caddy.RegisterModule(eventRecorder{}) }

// TestHandleEndIsACaddyEvent: every end of a handle is published once as a
// Caddy event, with its reason.
func TestHandleEndIsACaddyEvent(t *testing.T) {
	store := filepath.Join(t.TempDir(), "registry.db")
	cfgJSON, _, err := caddyconfig.GetAdapter("caddyfile").Adapt([]byte(gatewayConfig(store, "")), nil)
	if err != nil {
		t.Fatal(err)
	}
	var cfg map[string]any
	json.Unmarshal(cfgJSON, &cfg)
	cfg["apps"].(map[string]any)["events"] = map[string]any{
		"subscriptions": []any{map[string]any{"events": []string{"handle_ended"}, "handlers": []any{map[string]any{"handler": "retainer_test_recorder"}}}},
	}
	raw, _ := json.Marshal(cfg)
	tester := caddytest.NewTester(t)
	tester.InitServer(string(raw), "json")
	alice := token(t, "alice", allScopes)
	id := deployCounter(t, alice)
	if a := do(t, "DELETE", api("/handles/"+id), alice, nil); a.status != 204 {
		t.Fatalf("close: %d", a.status)
	}
	ended := func() bool {
		heardMu.Lock()
		defer heardMu.Unlock()
		for _, e := range heard {
			if e.Name() == "handle_ended" && e.Data["execution_id"] == id && e.Data["reason"] == "closed" && e.Data["tenant"] == "alice" {
				return true
			}
		}
		return false
	}
	if !waitfor.Within(5*time.Second, ended) {
		heardMu.Lock()
		defer heardMu.Unlock()
		t.Fatalf("no handle_ended event for %s; heard %d events", id, len(heard))
	}
}

// TestShortSecretStopsTheConfig: a secret under 32 bytes, or one that is
// empty once its placeholder is replaced, refuses to load.
func TestShortSecretStopsTheConfig(t *testing.T) {
	for secret, want := range map[string]string{
		"too-short":                 "at least 32 are required",
		"{env.RETAINER_UNSET_TEST}": "empty after its placeholders are replaced",
	} {
		caddytest.AssertLoadError(t, fmt.Sprintf(`{
	admin localhost:%d
	http_port %d
}
http://api.localhost:%[2]d {
	retainer_jwt {
		secret %s
	}
	retainer_api
}`, adminPort, httpPort, secret), "caddyfile", want)
	}
}
