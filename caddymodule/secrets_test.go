package caddymodule

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/url"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/caddyserver/caddy/v2/caddytest"
)

func secretsConfig(store, key string) string {
	keyLine := ""
	if key != "" {
		keyLine = "secrets_key " + key
	}
	return appsGatewayConfig(store, "workers 2\n\t\ttimeout 5s\n\t\t"+keyLine, "outbound_allow_private")
}

// seen records the headers an upstream received, request by request.
type seen struct {
	mu   sync.Mutex
	reqs []http.Header
}

func (s *seen) add(h http.Header) {
	s.mu.Lock()
	s.reqs = append(s.reqs, h.Clone())
	s.mu.Unlock()
}

func (s *seen) count() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.reqs)
}

func (s *seen) last(t *testing.T) http.Header {
	t.Helper()
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(s.reqs) == 0 {
		t.Fatal("the upstream saw no request")
	}
	return s.reqs[len(s.reqs)-1]
}

// TestSecrets is docs/secrets.md through a real gateway: a secret put by
// the tenant is set by the gateway on the program's fetch to its host
// (replacing the program's own header), never seen by the program, its
// answers or its receipt; a rotation applies to the next fetch; a redirect
// to another host drops it; an unknown name, or another tenant's, fails
// the deploy; the list shows names only; a bystander's handler keeps its
// state throughout.
func TestSecrets(t *testing.T) {
	const one, two = "sk-live-0ne-VALUE-7c1f", "sk-live-tw0-VALUE-9a3e"
	var up, other seen
	otherSrv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		other.add(r.Header)
		w.Write([]byte("other host"))
	}))
	defer otherSrv.Close()
	otherURL, _ := url.Parse(otherSrv.URL)
	otherHost := "localhost:" + otherURL.Port() // another host name, same server
	upSrv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		up.add(r.Header)
		if r.URL.Path == "/redirect" {
			http.Redirect(w, r, "http://"+otherHost+"/landed", http.StatusFound)
			return
		}
		w.Write([]byte("upstream answer"))
	}))
	defer upSrv.Close()
	upHost := strings.TrimPrefix(upSrv.URL, "http://")

	store := filepath.Join(t.TempDir(), "registry.db")
	tester := caddytest.NewTester(t)
	tester.InitServer(secretsConfig(store, "0123456789abcdef0123456789abcdef-test-key"), "caddyfile")
	alice := token(t, "alice", allScopes)
	bob := token(t, "bob", allScopes)

	bystander := do(t, "POST", api("/executions"), bob, mustJSON(map[string]any{"code": counter, "retainHandles": true}))
	if bystander.status != 200 {
		t.Fatalf("deploy the bystander: %d %s", bystander.status, bystander.body)
	}
	bySite := bystander.json(t)["executionId"].(string) + ".apps.localhost"
	do(t, "GET", site(bySite, "/"), "", nil)

	if a := do(t, "PUT", api("/secrets/UP_KEY"), alice, []byte(one)); a.status != 200 || a.json(t)["name"] != "UP_KEY" || a.json(t)["updatedAt"] == nil || strings.Contains(string(a.body), one) {
		t.Fatalf("PUT /secrets/UP_KEY: %d %s", a.status, a.body)
	}
	if a := do(t, "PUT", api("/secrets/lower"), alice, []byte("x")); a.status != 400 {
		t.Fatalf("a lower-case name: %d %s", a.status, a.body)
	}
	if a := do(t, "PUT", api("/secrets/BIG"), alice, []byte(strings.Repeat("x", 8<<10+1))); a.status != 413 {
		t.Fatalf("a value over 8 KiB: %d %s", a.status, a.body)
	}

	handler := `async () => ({ async fetch(req, env) {
		const path = new URL(req.url).pathname;
		const sent = new Request('http://` + upHost + `' + path, {headers: {authorization: 'Bearer mine', 'x-api-key': 'mine'}});
		const res = await fetch(sent);
		return Response.json({status: res.status, body: await res.text(), sent: [...sent.headers], env: JSON.stringify(env), globals: Object.getOwnPropertyNames(globalThis).join(',')});
	} })`
	deploy := func(tok string, headers map[string]map[string]string) answer {
		return do(t, "POST", api("/executions"), tok, mustJSON(map[string]any{"code": handler, "retainHandles": true, "capabilities": []string{"fetch"},
			"outbound": map[string]any{"allow": []string{upHost, otherHost}, "headers": headers}, "env": map[string]string{"MODE": "test"}}))
	}
	headers := map[string]map[string]string{upHost: {"Authorization": "Bearer {secret.UP_KEY}", "X-Api-Key": "{secret.UP_KEY}"}}
	dep := deploy(alice, headers)
	if dep.status != 200 {
		t.Fatalf("deploy: %d %s", dep.status, dep.body)
	}
	appSite := dep.json(t)["executionId"].(string) + ".apps.localhost"

	a := do(t, "GET", site(appSite, "/call"), "", nil)
	if a.status != 200 || !strings.Contains(string(a.body), `"body":"upstream answer"`) {
		t.Fatalf("the handler's fetch: %d %s", a.status, a.body)
	}
	if strings.Contains(string(a.body), one) {
		t.Fatalf("the program saw the secret: %s", a.body)
	}
	if h := up.last(t); h.Get("Authorization") != "Bearer "+one || h.Get("X-Api-Key") != one || len(h.Values("X-Api-Key")) != 1 {
		t.Fatalf("the upstream saw %v", h)
	}

	// Rotated: the next fetch carries the new value, with no redeploy.
	if a := do(t, "PUT", api("/secrets/UP_KEY"), alice, mustJSON(map[string]string{"value": two})); a.status != 200 {
		t.Fatalf("rotate: %d %s", a.status, a.body)
	}
	if a := do(t, "GET", site(appSite, "/call"), "", nil); a.status != 200 || strings.Contains(string(a.body), two) {
		t.Fatalf("after the rotation: %d %s", a.status, a.body)
	}
	if h := up.last(t); h.Get("Authorization") != "Bearer "+two {
		t.Fatalf("after the rotation the upstream saw %q", h.Get("Authorization"))
	}

	// A redirect to another host: the injected headers stay behind.
	if a := do(t, "GET", site(appSite, "/redirect"), "", nil); a.status != 200 || !strings.Contains(string(a.body), `"body":"other host"`) {
		t.Fatalf("the redirect: %d %s", a.status, a.body)
	}
	if h := other.last(t); h.Get("X-Api-Key") != "" || strings.Contains(fmt.Sprint(h), two) {
		t.Fatalf("the other host saw the secret: %v", h)
	}

	// Names only, never values; the receipt holds no value either.
	list := do(t, "GET", api("/secrets"), alice, nil)
	if list.status != 200 || !strings.Contains(string(list.body), `"name":"UP_KEY"`) || strings.Contains(string(list.body), one) || strings.Contains(string(list.body), two) {
		t.Fatalf("GET /secrets: %d %s", list.status, list.body)
	}
	if l := do(t, "GET", api("/secrets"), bob, nil); l.status != 200 || strings.TrimSpace(string(l.body)) != `{"secrets":[]}` {
		t.Fatalf("bob's secrets: %d %s", l.status, l.body)
	}
	rec := do(t, "GET", api("/results/"+dep.json(t)["resultId"].(string)), alice, nil)
	if rec.status != 200 || strings.Contains(string(rec.body), one) || strings.Contains(string(rec.body), two) {
		t.Fatalf("the receipt: %d %s", rec.status, rec.body)
	}

	// An unknown name fails the deploy; bob naming alice's secret gets
	// nothing but the same refusal.
	if a := deploy(alice, map[string]map[string]string{upHost: {"Authorization": "Bearer {secret.NOPE}"}}); a.status != 400 || !strings.Contains(string(a.body), "NOPE") {
		t.Fatalf("an unknown secret: %d %s", a.status, a.body)
	}
	if a := deploy(bob, headers); a.status != 400 || !strings.Contains(string(a.body), "UP_KEY") {
		t.Fatalf("bob naming alice's secret: %d %s", a.status, a.body)
	}

	// Deleted: 204, then 404; the list is empty; a fetch that names it
	// fails rather than going out without it.
	if a := do(t, "DELETE", api("/secrets/UP_KEY"), alice, nil); a.status != 204 {
		t.Fatalf("DELETE: %d %s", a.status, a.body)
	}
	if a := do(t, "DELETE", api("/secrets/UP_KEY"), alice, nil); a.status != 404 {
		t.Fatalf("DELETE again: %d %s", a.status, a.body)
	}
	n := up.count()
	if a := do(t, "GET", site(appSite, "/call"), "", nil); a.status == 200 || up.count() != n {
		t.Fatalf("a fetch naming a deleted secret: %d %s (upstream requests %d → %d)", a.status, a.body, n, up.count())
	}

	if a := do(t, "GET", site(bySite, "/"), "", nil); a.status != 200 || !strings.Contains(string(a.body), "2") {
		t.Fatalf("the bystander: %d %s", a.status, a.body)
	}

	// Without secrets_key the API answers 501 naming the option.
	tester.InitServer(secretsConfig(store, ""), "caddyfile")
	for _, m := range []string{"GET", "PUT", "DELETE"} {
		path := "/secrets/UP_KEY"
		if m == "GET" {
			path = "/secrets"
		}
		if a := do(t, m, api(path), alice, []byte(one)); a.status != 501 || a.code() != "NOT_IMPLEMENTED" || !strings.Contains(string(a.body), "secrets_key") {
			t.Fatalf("%s %s without secrets_key: %d %s", m, path, a.status, a.body)
		}
	}
	if a := deploy(alice, headers); a.status != 501 {
		t.Fatalf("a deploy naming a secret without secrets_key: %d %s", a.status, a.body)
	}
}

// TestSecretsKeyUnder32Bytes: a short key fails the configuration.
func TestSecretsKeyUnder32Bytes(t *testing.T) {
	t.Parallel()
	for key, ok := range map[string]bool{"short": false, strings.Repeat("k", 31): false, strings.Repeat("k", 32): true, "MDEyMzQ1Njc4OWFiY2RlZjAxMjM0NTY3ODlhYmNkZWY=": true, "": true} {
		a := &App{SecretsKey: key}
		a.setDefaults()
		err := a.Validate()
		if (err == nil) != ok || err != nil && !strings.Contains(err.Error(), "secrets_key") {
			t.Errorf("secrets_key %q: %v", key, err)
		}
	}
}
