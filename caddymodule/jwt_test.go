package caddymodule

import (
	"fmt"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/caddyserver/caddy/v2/caddytest"
	"github.com/golang-jwt/jwt/v5"
)

// TestJWTPlaceholdersAndCredentials: the tenant and chosen claims become
// placeholders; a token read from a cookie or a query parameter never
// reaches a handler.
func TestJWTPlaceholdersAndCredentials(t *testing.T) {
	store := filepath.Join(t.TempDir(), "registry.db")
	tester := caddytest.NewTester(t)
	tester.InitServer(fmt.Sprintf(`{
	admin localhost:%[4]d
	http_port %[1]d
	https_port %[5]d
	retainer {
		store %[2]s
		workers 2
	}
}

http://whoami.localhost:%[1]d {
	retainer_jwt {
		secret %[3]s
		claims org
	}
	respond "{http.auth.user.id} {http.auth.user.org} {http.auth.user.scope}"
}

http://api.localhost:%[1]d {
	retainer_api apps {
		allow_anonymous
	}
}

http://*.apps.localhost:%[1]d {
	retainer_jwt {
		secret %[3]s
		cookie tok
		query access_token
	}
	retainer apps {
		key {labels.2}
	}
}
`, httpPort, store, testSecret, adminPort, httpsPort), "caddyfile")
	tok, _ := jwt.NewWithClaims(jwt.SigningMethodHS256, jwt.MapClaims{
		"sub": "alice", "org": "acme", "scope": "retainer:read", "exp": time.Now().Add(time.Hour).Unix(),
	}).SignedString([]byte(testSecret))

	if a := do(t, "GET", site("whoami.localhost", "/"), tok, nil); string(a.body) != "alice acme retainer:read" {
		t.Fatalf("placeholders: %d %q", a.status, a.body)
	}
	a := do(t, "POST", site("api.localhost", "/executions"), "", mustJSON(map[string]any{"retainHandles": true,
		"code": `async () => ({ fetch(req) { return Response.json({url: req.url, cookie: req.headers.get('cookie'), auth: req.headers.get('authorization')}) } })`}))
	id := a.json(t)["executionId"].(string)
	// The token in a cookie: the cookie is gone, the visitor's others stay.
	a = do(t, "GET", site(id+".apps.localhost", "/x?a=1"), "", nil, "Cookie", "theme=dark; tok="+tok)
	if a.status != 200 || strings.Contains(string(a.body), tok) || !strings.Contains(string(a.body), `"cookie":"theme=dark"`) {
		t.Fatalf("cookie token: %d %s", a.status, a.body)
	}
	// The token in the query: the parameter is gone from the URL.
	a = do(t, "GET", site(id+".apps.localhost", "/x?a=1&access_token="+tok), "", nil)
	if a.status != 200 || strings.Contains(string(a.body), tok) || !strings.Contains(string(a.body), "/x?a=1") {
		t.Fatalf("query token: %d %s", a.status, a.body)
	}
	// No token: the data plane answers 401 before the handler.
	if a := do(t, "GET", site(id+".apps.localhost", "/"), "", nil); a.status != 401 || a.code() != "UNAUTHENTICATED" {
		t.Fatalf("no token: %d %s", a.status, a.body)
	}
}
