package caddymodule

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/caddyserver/caddy/v2/caddytest"
)

// TestSecretsQuotaRaceValuesAndReceipt, the secrets API under attack
// through a real gateway: with 96 secrets kept, 40 PUTs of new names at
// once store exactly 4 (before, all 40 were counted against 96 and the
// tenant kept 136) and the rest answer 429 QUOTA_EXCEEDED; a value a
// header cannot carry (CR, LF, NUL) is refused with 400 when it is put,
// not when a fetch later fails on it; a deploy's receipt keeps its
// outbound.headers templates, never the values; bob's secrets and his
// handle's closure counter are untouched throughout.
func TestSecretsQuotaRaceValuesAndReceipt(t *testing.T) {
	const value = "sk-receipt-VALUE-5b7d"
	store := filepath.Join(t.TempDir(), "registry.db")
	caddytest.NewTester(t).InitServer(secretsConfig(store, "0123456789abcdef0123456789abcdef-test-key"), "caddyfile")
	alice, bob := token(t, "alice", allScopes), token(t, "bob", allScopes)

	if a := do(t, "PUT", api("/secrets/BOB_KEY"), bob, []byte("bob's")); a.status != 200 {
		t.Fatalf("bob's secret: %d %s", a.status, a.body)
	}
	by := do(t, "POST", api("/executions"), bob, mustJSON(map[string]any{"code": counter, "retainHandles": true}))
	if by.status != 200 {
		t.Fatalf("deploy the bystander: %d %s", by.status, by.body)
	}
	bySite := by.json(t)["executionId"].(string) + ".apps.localhost"
	first := do(t, "GET", site(bySite, "/"), "", nil)

	for i := 0; i < 96; i++ {
		if a := do(t, "PUT", api(fmt.Sprintf("/secrets/KEPT_%d", i)), alice, []byte("v")); a.status != 200 {
			t.Fatalf("secret %d: %d %s", i, a.status, a.body)
		}
	}
	// 40 connections opened first, then 40 PUTs sent at one instant.
	racer := &http.Client{Timeout: 20 * time.Second, Transport: &http.Transport{MaxIdleConnsPerHost: 64,
		DialContext: client.Transport.(*http.Transport).DialContext}}
	defer racer.CloseIdleConnections()
	send := func(method, path string, body string) (int, string) {
		req, _ := http.NewRequest(method, api(path), strings.NewReader(body))
		req.Header.Set("Authorization", "Bearer "+alice)
		res, err := racer.Do(req)
		if err != nil {
			return 0, err.Error()
		}
		defer res.Body.Close()
		b, _ := io.ReadAll(res.Body)
		return res.StatusCode, string(b)
	}
	var wg sync.WaitGroup
	for i := 0; i < 40; i++ {
		wg.Add(1)
		go func() { defer wg.Done(); send("GET", "/secrets", "") }()
	}
	wg.Wait()
	start := make(chan struct{})
	status, bodies := make([]int, 40), make([]string, 40)
	for i := range status {
		wg.Add(1)
		go func(i int) {
			defer wg.Done()
			<-start
			status[i], bodies[i] = send("PUT", fmt.Sprintf("/secrets/RACED_%d", i), "v")
		}(i)
	}
	close(start)
	wg.Wait()
	stored := 0
	for i, code := range status {
		switch {
		case code == 200:
			stored++
		case code != 429 || !strings.Contains(bodies[i], "QUOTA_EXCEEDED"):
			t.Fatalf("raced PUT %d: %d %s", i, code, bodies[i])
		}
	}
	var list struct {
		Secrets []struct{ Name string } `json:"secrets"`
	}
	l := do(t, "GET", api("/secrets"), alice, nil)
	json.Unmarshal(l.body, &list)
	if stored != 4 || len(list.Secrets) != 100 {
		t.Fatalf("40 raced PUTs over 96: %d stored, %d listed; the quota is 100", stored, len(list.Secrets))
	}
	// Replacing a kept one still works at the quota.
	if a := do(t, "PUT", api("/secrets/KEPT_0"), alice, []byte("v2")); a.status != 200 {
		t.Fatalf("replacing at the quota: %d %s", a.status, a.body)
	}

	// Values a header cannot carry are refused when put.
	for _, v := range []string{"abc\r\nX-Evil: 1", "line\nbreak", "nul\x00", "del\x7f"} {
		if a := do(t, "PUT", api("/secrets/BOB_KEY"), bob, mustJSON(map[string]string{"value": v})); a.status != 400 || a.code() != "BAD_REQUEST" {
			t.Fatalf("the value %q: %d %s", v, a.status, a.body)
		}
	}
	if a := do(t, "PUT", api("/secrets/TABBED"), bob, []byte("a\tb é")); a.status != 200 {
		t.Fatalf("a tab and UTF-8: %d %s", a.status, a.body)
	}

	// The receipt keeps the templates, never the value.
	if a := do(t, "PUT", api("/secrets/BOB_KEY"), bob, []byte(value)); a.status != 200 {
		t.Fatalf("bob's rotation: %d %s", a.status, a.body)
	}
	headers := map[string]map[string]string{"api.example.com": {"Authorization": "Bearer {secret.BOB_KEY}"}}
	dep := do(t, "POST", api("/executions"), bob, mustJSON(map[string]any{"code": `async () => ({ async fetch() { return new Response('ok'); } })`,
		"retainHandles": true, "capabilities": []string{"fetch"}, "outbound": map[string]any{"allow": []string{"api.example.com"}, "headers": headers}}))
	if dep.status != 200 {
		t.Fatalf("deploy with headers: %d %s", dep.status, dep.body)
	}
	rec := do(t, "GET", api("/results/"+dep.json(t)["resultId"].(string)+".json"), bob, nil)
	var receipt struct {
		Grants struct {
			OutboundHeaders map[string]map[string]string `json:"outboundHeaders"`
		} `json:"grants"`
	}
	json.Unmarshal(rec.body, &receipt)
	if rec.status != 200 || strings.Contains(string(rec.body), value) || receipt.Grants.OutboundHeaders["api.example.com"]["Authorization"] != "Bearer {secret.BOB_KEY}" {
		t.Fatalf("the receipt's grants: %d %s", rec.status, rec.body)
	}

	l = do(t, "GET", api("/secrets"), bob, nil)
	if l.status != 200 || !strings.Contains(string(l.body), `"BOB_KEY"`) || !strings.Contains(string(l.body), `"TABBED"`) {
		t.Fatalf("bob's secrets: %d %s", l.status, l.body)
	}
	if a := do(t, "GET", site(bySite, "/"), "", nil); a.status != 200 || string(first.body) != `{"served":1}` || string(a.body) != `{"served":2}` {
		t.Fatalf("the bystander: %s then %d %s", first.body, a.status, a.body)
	}
}
