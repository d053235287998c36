package client_test

import (
	"fmt"
	"net/http"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/caddyserver/caddy/v2"
	"github.com/caddyserver/caddy/v2/caddyconfig"
	_ "github.com/caddyserver/caddy/v2/caddyconfig/caddyfile"
	_ "github.com/caddyserver/caddy/v2/modules/standard"
	"github.com/golang-jwt/jwt/v5"

	_ "github.com/retainer-gw/retainer/caddymodule"
	"github.com/retainer-gw/retainer/internal/freeport"
	"github.com/retainer-gw/retainer/internal/waitfor"
	"github.com/retainer-gw/retainer/sandbox/child"
	"github.com/retainer-gw/retainer/workers"
)

// The tests talk to a real gateway started in this process (its workers
// are this test binary in worker mode), through the socket and over HTTP.

const testSecret = "client-test-secret-client-test-secret"

// testPort is the gateway's, a free one (internal/freeport).
var testPort = freeport.For("http")

// gatewayURL is the executor socket of the gateway the tests start.
var gatewayURL = fmt.Sprintf("ws://127.0.0.1:%d/executor", testPort)

// apiURL is the same API over HTTP.
var apiURL = fmt.Sprintf("http://127.0.0.1:%d", testPort)

func TestMain(m *testing.M) {
	if len(os.Args) > 1 && os.Args[1] == workers.Subcommand {
		child.Main()
	}
	dir, err := os.MkdirTemp("", "retainer-client-test")
	if err != nil {
		panic(err)
	}
	cfg := fmt.Sprintf(`{
	admin off
	grace_period 1s
	log {
		output discard
	}
	retainer {
		store %s/registry.db
		workers auto
		timeout 5s
		max_request_body 64KiB
	}
}

http://127.0.0.1:%d {
	retainer_jwt {
		secret %s
		audience retainer
		leeway 1s
	}
	retainer_api {
	}
}
`, dir, testPort, testSecret)
	adapter := caddyconfig.GetAdapter("caddyfile")
	gatewayConfig, _, err = adapter.Adapt([]byte(cfg), nil)
	if err != nil {
		panic(err)
	}
	if err := caddy.Load(gatewayConfig, true); err != nil {
		panic(err)
	}
	waitHealthy()
	code := m.Run()
	caddy.Stop()
	os.RemoveAll(dir)
	os.Exit(code)
}

// gatewayConfig is the running gateway's JSON config.
var gatewayConfig []byte

// restartGateway stops the gateway (its workers and isolates end) and
// starts it again on the same registry file.
func restartGateway(t *testing.T) {
	if err := caddy.Stop(); err != nil {
		t.Fatal(err)
	}
	if err := caddy.Load(gatewayConfig, true); err != nil {
		t.Fatal(err)
	}
	waitHealthy()
}

func waitHealthy() {
	if !waitfor.Within(time.Minute, func() bool {
		req, _ := http.NewRequest(http.MethodGet, apiURL+"/health", nil)
		req.Header.Set("Authorization", "Bearer "+token("health"))
		res, err := http.DefaultClient.Do(req)
		if err != nil {
			return false
		}
		res.Body.Close()
		return res.StatusCode == 200
	}) {
		panic("the gateway did not become healthy")
	}
}

// token mints a tenant's bearer token.
func token(tenant string) string { return tokenFor(tenant, time.Hour) }

// tokenFor is a token of tenant that expires in ttl.
func tokenFor(tenant string, ttl time.Duration) string {
	tok := jwt.NewWithClaims(jwt.SigningMethodHS256, jwt.MapClaims{
		"sub": tenant, "aud": "retainer", "exp": time.Now().Add(ttl).Unix(),
	})
	s, err := tok.SignedString([]byte(testSecret))
	if err != nil {
		panic(err)
	}
	return s
}

// post calls the HTTP API.
func post(t *testing.T, tenant, path, body string) (int, string) {
	t.Helper()
	req, _ := http.NewRequest(http.MethodPost, apiURL+path, strings.NewReader(body))
	req.Header.Set("Authorization", "Bearer "+token(tenant))
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	var b strings.Builder
	_, _ = fmt.Fprint(&b, readAll(res))
	return res.StatusCode, b.String()
}

func readAll(res *http.Response) string {
	var sb strings.Builder
	buf := make([]byte, 4096)
	for {
		n, err := res.Body.Read(buf)
		sb.Write(buf[:n])
		if err != nil {
			return sb.String()
		}
	}
}
