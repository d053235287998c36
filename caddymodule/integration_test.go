package caddymodule

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptrace"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/caddyserver/caddy/v2/caddyconfig"
	"github.com/caddyserver/caddy/v2/caddytest"
	"github.com/golang-jwt/jwt/v5"

	_ "github.com/caddyserver/caddy/v2/modules/standard"

	"github.com/retainer-gw/retainer/internal/freeport"
	"github.com/retainer-gw/retainer/internal/waitfor"
	"github.com/retainer-gw/retainer/sandbox/child"
	"github.com/retainer-gw/retainer/workers"
)

// listenHelper is the test binary's subcommand that listens as another
// process would (listenAsAnotherProcess, set where Linux's SO_REUSEPORT is).
const listenHelper = "retainer-test-listen"

var listenAsAnotherProcess func(network, addr string)

func TestMain(m *testing.M) {
	if len(os.Args) > 1 && os.Args[1] == workers.Subcommand {
		child.Main()
	}
	if len(os.Args) > 3 && os.Args[1] == listenHelper && listenAsAnotherProcess != nil {
		listenAsAnotherProcess(os.Args[2], os.Args[3])
	}
	caddytest.Default.AdminPort = adminPort
	// A load stops the last test's gateway (its workers, a 1 s grace
	// period) before it starts the next: past caddytest's 5 s on a loaded
	// machine, which failed a test that then passed.
	caddytest.Default.LoadRequestTimeout = time.Minute
	os.Exit(m.Run())
}

const testSecret = "integration-secret-integration-secret"

// testJWT is a site's retainer_jwt directive for the tokens the tests
// sign (testSecret, their issuer and audience).
const testJWT = `retainer_jwt {
		secret ` + testSecret + `
		issuer https://id.example.com/
		audience retainer
	}`

// The ports of this test process's Caddy, free ones picked as it starts
// (internal/freeport): every config of these tests loads on the same three,
// and a second run of the package at the same time picks its own.
var (
	adminPort = freeport.For("admin")
	httpPort  = freeport.For("http")
	httpsPort = freeport.For("https")
)

// adminURL is path on this process's Caddy admin endpoint.
func adminURL(path string) string { return fmt.Sprintf("http://localhost:%d%s", adminPort, path) }

func gatewayConfig(store string, extraGlobal string) string {
	return fmt.Sprintf(`{
	admin localhost:%d
	http_port %d
	https_port %d
	grace_period 1s
	retainer {
		store %s
		workers 2
		isolates_per_worker 32
		timeout 500ms
		max_request_body 1MiB
		%s
	}
}

http://api.localhost:%d {
	%s
	retainer_api apps {
		require_scopes
	}
}

http://anon.localhost:%d {
	retainer_api apps {
		allow_anonymous
	}
}

http://*.apps.localhost:%d {
	retainer apps {
		key {labels.2}
	}
}

http://*.named.localhost:%d {
	retainer apps {
		key {labels.2}
		resolve routes
	}
}
`, adminPort, httpPort, httpsPort, store, extraGlobal, httpPort, testJWT, httpPort, httpPort, httpPort)
}

// appsGatewayConfig is a gateway with the API at api.localhost (tokens
// of testSecret, registry apps, api the lines inside its retainer_api
// block) and the apps' sites at *.apps.localhost; global are the lines of
// the retainer block after the store.
func appsGatewayConfig(store, global, api string) string {
	return fmt.Sprintf(`{
	admin localhost:%d
	http_port %d
	https_port %d
	retainer {
		store %s
		%s
	}
}

http://api.localhost:%d {
	%s
	retainer_api apps {
		%s
	}
}

http://*.apps.localhost:%d {
	retainer apps {
		key {labels.2}
	}
}
`, adminPort, httpPort, httpsPort, store, global, httpPort, testJWT, api, httpPort)
}

// client dials every host name to the local Caddy.
var client = &http.Client{
	Timeout: 20 * time.Second,
	Transport: &http.Transport{DialContext: func(ctx context.Context, network, _ string) (net.Conn, error) {
		return (&net.Dialer{}).DialContext(ctx, network, fmt.Sprintf("127.0.0.1:%d", httpPort))
	}},
}

func token(t testing.TB, tenant string, scopes string) string {
	tok := jwt.NewWithClaims(jwt.SigningMethodHS256, jwt.MapClaims{
		"sub": tenant, "iss": "https://id.example.com/", "aud": "retainer",
		"exp": time.Now().Add(time.Hour).Unix(), "iat": time.Now().Unix(), "scope": scopes,
	})
	s, err := tok.SignedString([]byte(testSecret))
	if err != nil {
		t.Fatal(err)
	}
	return s
}

const allScopes = "retainer:execute retainer:deploy retainer:read"

type answer struct {
	status int
	header http.Header
	body   []byte
	// te is the response's transfer encodings (["chunked"] when chunked).
	te []string
}

func (a answer) json(t testing.TB) map[string]any {
	t.Helper()
	var m map[string]any
	if err := json.Unmarshal(a.body, &m); err != nil {
		t.Fatalf("not JSON (%d): %s", a.status, a.body)
	}
	return m
}

func (a answer) code() string {
	var env struct {
		Error struct{ Code string } `json:"error"`
	}
	json.Unmarshal(a.body, &env)
	return env.Error.Code
}

func do(t testing.TB, method, url, tok string, body []byte, headers ...string) answer {
	t.Helper()
	req, err := http.NewRequest(method, url, bytes.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	if tok != "" {
		req.Header.Set("Authorization", "Bearer "+tok)
	}
	for i := 0; i+1 < len(headers); i += 2 {
		req.Header.Set(headers[i], headers[i+1])
	}
	// A kept-alive connection may belong to the previous test's server,
	// stopped since, and a new one may reach it while it shuts down: a
	// request that failed on a reused connection, or a GET, is sent once
	// more on a new one (the stopped server never served it).
	reused := false
	req = req.WithContext(httptrace.WithClientTrace(req.Context(), &httptrace.ClientTrace{
		GotConn: func(info httptrace.GotConnInfo) { reused = info.Reused },
	}))
	res, err := client.Do(req)
	if err != nil && (reused || method == "GET" || method == "HEAD") {
		client.CloseIdleConnections()
		req, _ = http.NewRequest(method, url, bytes.NewReader(body))
		for i := 0; i+1 < len(headers); i += 2 {
			req.Header.Set(headers[i], headers[i+1])
		}
		if tok != "" {
			req.Header.Set("Authorization", "Bearer "+tok)
		}
		res, err = client.Do(req)
	}
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	data, _ := io.ReadAll(res.Body)
	return answer{res.StatusCode, res.Header, data, res.TransferEncoding}
}

func api(path string) string { return fmt.Sprintf("http://api.localhost:%d%s", httpPort, path) }
func site(host, path string) string {
	return fmt.Sprintf("http://%s:%d%s", host, httpPort, path)
}

func mustJSON(v any) []byte { b, _ := json.Marshal(v); return b }

const counter = `async () => { let served = 0; return { async fetch(request, env, ctx) {
	const url = request.url;
	if (url.endsWith('/echo')) return new Response(await request.arrayBuffer(), {headers: {'content-type': 'application/octet-stream'}});
	if (url.endsWith('/headers')) return Response.json([...request.headers]);
	if (url.endsWith('/framing')) return new Response('intact body', {headers: {'transfer-encoding': 'chunked', 'connection': 'close', 'x-kept': 'yes'}});
	if (url.endsWith('/throw')) throw new Error('secret detail');
	if (url.endsWith('/huge')) return new Response('x'.repeat(9 << 20));
	if (url.endsWith('/fake')) { const Response = class { constructor() { this.status = 200 } }; return new Response('fake') }
	console.log('visit', url);
	return Response.json({served: ++served});
} } }`

func deployCounter(t *testing.T, tok string) string {
	t.Helper()
	// A 5 s bound: the 9 MiB body of /huge must meet the response bound,
	// not a loaded CI machine's clock.
	a := do(t, "POST", api("/executions"), tok, mustJSON(map[string]any{"code": counter, "retainHandles": true, "timeoutMs": 5000}))
	if a.status != 200 {
		t.Fatalf("deploy: %d %s", a.status, a.body)
	}
	m := a.json(t)
	id, _ := m["executionId"].(string)
	if id == "" || fmt.Sprint(m["handles"]) != "[fetch]" || m["result"] != nil {
		t.Fatalf("deploy answered %s", a.body)
	}
	return id
}

func served(t *testing.T, a answer) int {
	t.Helper()
	if a.status != 200 {
		t.Fatalf("answer %d %s", a.status, a.body)
	}
	var m struct{ Served int }
	json.Unmarshal(a.body, &m)
	return m.Served
}

func workerPIDs(t *testing.T) []int {
	a := do(t, "GET", site("anon.localhost", "/health"), "", nil)
	var h struct {
		Status  string
		Workers []struct {
			PID   int
			State string
		}
	}
	json.Unmarshal(a.body, &h)
	var pids []int
	for _, w := range h.Workers {
		pids = append(pids, w.PID) // 0 for a slot not up: never kill(0)
	}
	return pids
}

func TestGateway(t *testing.T) {
	store := filepath.Join(t.TempDir(), "registry.db")
	tester := caddytest.NewTester(t)
	tester.InitServer(gatewayConfig(store, "isolation shared"), "caddyfile")
	alice := token(t, "alice", allScopes)
	bob := token(t, "bob", allScopes)

	// Computations.
	a := do(t, "POST", api("/executions"), alice, mustJSON(map[string]any{"code": "async () => { console.log('x'); return 1 + 1 }"}))
	if m := a.json(t); a.status != 200 || fmt.Sprint(m["result"], m["logs"]) != "2 [x]" || m["resultId"] == "" || m["executionId"] != nil {
		t.Fatalf("computation: %d %s", a.status, a.body)
	}
	if a := do(t, "POST", api("/executions"), alice, mustJSON(map[string]any{"code": "async () => { while(true){} }"})); a.status != 504 || a.code() != "TIMEOUT" {
		t.Fatalf("timeout: %d %s", a.status, a.body)
	}
	if a := do(t, "POST", api("/executions"), alice, mustJSON(map[string]any{"code": "async () => ("})); a.status != 422 || a.code() != "SYNTAX" {
		t.Fatalf("syntax: %d %s", a.status, a.body)
	}
	if a := do(t, "POST", api("/executions"), alice, mustJSON(map[string]any{"code": "async () => 1", "timeoutMs": 999999})); a.status != 400 || a.code() != "BAD_REQUEST" {
		t.Fatalf("timeout over max: %d %s", a.status, a.body)
	}
	if a := do(t, "POST", api("/executions"), alice, []byte(`{"code":"`+strings.Repeat("x", 2<<20)+`"}`)); a.status != 413 || a.code() != "TOO_LARGE" {
		t.Fatalf("big body: %d %.200s", a.status, a.body)
	}

	// Authentication: the two 401 forms.
	a = do(t, "GET", api("/handles"), "", nil)
	if a.status != 401 || a.header.Get("WWW-Authenticate") != `Bearer realm="retainer"` || a.code() != "UNAUTHENTICATED" || a.header.Get("Content-Type") != "application/json" {
		t.Fatalf("no token: %d %v %s", a.status, a.header, a.body)
	}
	a = do(t, "GET", api("/handles"), alice+"x", nil)
	if a.status != 401 || a.header.Get("WWW-Authenticate") != `Bearer realm="retainer", error="invalid_token"` || a.code() != "UNAUTHENTICATED" {
		t.Fatalf("bad token: %d %v %s", a.status, a.header, a.body)
	}
	// Scopes.
	readOnly := token(t, "alice", "retainer:read")
	if a := do(t, "POST", api("/executions"), readOnly, mustJSON(map[string]any{"code": counter, "retainHandles": true})); a.status != 403 || a.code() != "FORBIDDEN" {
		t.Fatalf("deploy without scope: %d %s", a.status, a.body)
	}
	if a := do(t, "POST", api("/executions"), token(t, "alice", "retainer:deploy"), mustJSON(map[string]any{"code": "async () => 1", "retainHandles": true})); a.status != 200 {
		t.Fatalf("deploy scope alone: %d %s", a.status, a.body)
	}
	if a := do(t, "GET", api("/handles"), readOnly, nil); a.status != 200 {
		t.Fatalf("read scope: %d %s", a.status, a.body)
	}

	// Deploy → traffic → API invoke → logs.
	id := deployCounter(t, alice)
	if n := served(t, do(t, "GET", site(id+".apps.localhost", "/"), "", nil)); n != 1 {
		t.Fatalf("first visit served %d", n)
	}
	if n := served(t, do(t, "GET", site(id+".apps.localhost", "/again?x=1"), "", nil)); n != 2 {
		t.Fatalf("second visit served %d", n)
	}
	wire := mustJSON(map[string]any{"method": "GET", "url": "https://example.com/api", "headers": [][]string{{"accept", "application/json"}}, "body": nil})
	a = do(t, "POST", api("/handles/"+id+"/fetch"), alice, wire)
	var wres struct {
		Status  int
		Headers [][]string
		Body    string
	}
	json.Unmarshal(a.body, &wres)
	body, _ := base64.StdEncoding.DecodeString(wres.Body)
	if a.status != 200 || wres.Status != 200 || string(body) != `{"served":3}` {
		t.Fatalf("API invoke: %d %s", a.status, a.body)
	}
	if a := do(t, "POST", api("/handles/"+id+"/scheduled"), alice, wire); a.status != 404 || a.code() != "NO_SUCH_HANDLE" {
		t.Fatalf("unknown handle name: %d %s", a.status, a.body)
	}
	a = do(t, "GET", api("/handles/"+id+"/logs"), alice, nil)
	var logs struct {
		Logs []struct{ Time, Level, Message string }
	}
	json.Unmarshal(a.body, &logs)
	if a.status != 200 || len(logs.Logs) < 3 || logs.Logs[0].Level != "log" || !strings.HasPrefix(logs.Logs[0].Message, "visit http://"+id+".apps.localhost") {
		t.Fatalf("logs: %s", a.body)
	}
	if _, err := time.Parse("2006-01-02T15:04:05.000Z07:00", logs.Logs[0].Time); err != nil {
		t.Fatalf("log time %q is not RFC 3339 with milliseconds", logs.Logs[0].Time)
	}
	a = do(t, "GET", api("/handles/"+id), alice, nil)
	if m := a.json(t); a.status != 200 || m["executionId"] != id || m["invocations"].(float64) != 3 || m["idleBoundMs"].(float64) != 600000 {
		t.Fatalf("handle info: %s", a.body)
	}

	// The data plane: bodies, headers, framing, errors.
	payload := make([]byte, 100<<10)
	rand.Read(payload)
	a = do(t, "POST", site(id+".apps.localhost", "/echo"), "", payload)
	if a.status != 200 || !bytes.Equal(a.body, payload) {
		t.Fatalf("100 KiB echo: %d, %d bytes, equal %v", a.status, len(a.body), bytes.Equal(a.body, payload))
	}
	a = do(t, "GET", site(id+".apps.localhost", "/headers"), alice, nil, "X-Visitor", "yes")
	if a.status != 200 || strings.Contains(strings.ToLower(string(a.body)), "authorization") || strings.Contains(string(a.body), alice) || !strings.Contains(string(a.body), `"x-visitor","yes"`) {
		t.Fatalf("headers seen by the handler: %s", a.body)
	}
	a = do(t, "GET", site(id+".apps.localhost", "/framing"), "", nil)
	if a.status != 200 || string(a.body) != "intact body" || a.header.Get("X-Kept") != "yes" || a.header.Get("Connection") == "close" {
		t.Fatalf("framing: %d %v %q", a.status, a.header, a.body)
	}
	a = do(t, "GET", site(id+".apps.localhost", "/throw"), "", nil)
	if a.status != 500 || a.code() != "HANDLER_ERROR" || strings.Contains(string(a.body), "secret detail") {
		t.Fatalf("throw: %d %s", a.status, a.body)
	}
	if a := do(t, "POST", site(id+".apps.localhost", "/echo"), "", make([]byte, 2<<20)); a.status != 413 || a.code() != "TOO_LARGE" {
		t.Fatalf("a 2 MiB request body: %d %s", a.status, a.body)
	}
	if a := do(t, "GET", site(id+".apps.localhost", "/huge"), "", nil); a.status != 502 || a.code() != "BAD_RESPONSE" {
		t.Fatalf("a 9 MiB response body: %d %.300s", a.status, a.body)
	}
	if a := do(t, "GET", site(id+".apps.localhost", "/fake"), "", nil); a.status != 502 || a.code() != "BAD_RESPONSE" || !strings.Contains(string(a.body), "not a Response") {
		t.Fatalf("a forged Response: %d %s", a.status, a.body)
	}
	if a := do(t, "GET", site("nothing-here.apps.localhost", "/"), "", nil); a.status != 404 || a.code() != "NOT_FOUND" {
		t.Fatalf("unknown key: %d %s", a.status, a.body)
	}
	// A WebSocket upgrade the handler does not accept is refused with its
	// answer (docs/websockets.md); other upgrades answer 501.
	if a := do(t, "GET", site(id+".apps.localhost", "/"), "", nil, "Connection", "Upgrade", "Upgrade", "websocket"); a.status != 200 {
		t.Fatalf("websocket: %d %s", a.status, a.body)
	}
	if a := do(t, "GET", site(id+".apps.localhost", "/"), "", nil, "Connection", "Upgrade", "Upgrade", "h2c"); a.status != 501 || a.code() != "NOT_IMPLEMENTED" {
		t.Fatalf("h2c upgrade: %d %s", a.status, a.body)
	}

	// Routes: bind, swap, resolve routes only.
	second := deployCounter(t, alice)
	if a := do(t, "PUT", api("/routes/shop"), alice, mustJSON(map[string]string{"executionId": id})); a.status != 200 {
		t.Fatalf("bind: %d %s", a.status, a.body)
	}
	if n := served(t, do(t, "GET", site("shop.named.localhost", "/"), "", nil)); n < 4 {
		t.Fatalf("route served %d", n)
	}
	if a := do(t, "GET", site(id+".named.localhost", "/"), "", nil); a.status != 404 || a.code() != "NOT_FOUND" {
		t.Fatalf("resolve routes took an executionId: %d %s", a.status, a.body)
	}
	if a := do(t, "PUT", api("/routes/shop"), alice, mustJSON(map[string]string{"executionId": second})); a.status != 200 {
		t.Fatalf("swap: %d %s", a.status, a.body)
	}
	if n := served(t, do(t, "GET", site("shop.named.localhost", "/"), "", nil)); n != 1 {
		t.Fatalf("after the swap the route served %d", n)
	}
	if a := do(t, "PUT", api("/routes/7c9e6679-7425-40de-944b-e07fc1f90ae7"), alice, mustJSON(map[string]string{"executionId": second})); a.status != 400 {
		t.Fatalf("uuid-shaped route: %d %s", a.status, a.body)
	}

	// Tenants: bob sees and touches nothing of alice's.
	if a := do(t, "GET", api("/handles"), bob, nil); string(a.body) != `{"handles":[]}`+"\n" {
		t.Fatalf("bob's list: %s", a.body)
	}
	for _, c := range []struct{ method, path string }{
		{"GET", "/handles/" + id}, {"GET", "/handles/" + id + "/logs"}, {"DELETE", "/handles/" + id}, {"POST", "/handles/" + id + "/fetch"},
	} {
		a := do(t, c.method, api(c.path), bob, wire)
		b := do(t, c.method, api(strings.ReplaceAll(c.path, id, "00000000-0000-4000-8000-000000000000")), bob, wire)
		if a.status != 404 || a.code() != "HANDLES_CLOSED" || a.status != b.status || strings.ReplaceAll(string(a.body), id, "X") != strings.ReplaceAll(string(b.body), "00000000-0000-4000-8000-000000000000", "X") {
			t.Fatalf("bob %s %s: %d %s vs unknown %s", c.method, c.path, a.status, a.body, b.body)
		}
	}
	if a := do(t, "PUT", api("/routes/shop"), bob, mustJSON(map[string]string{"executionId": deployCounter(t, bob)})); a.status != 409 || a.code() != "CONFLICT" {
		t.Fatalf("bob takes alice's route: %d %s", a.status, a.body)
	}

	// A config reload keeps every isolate and worker.
	pids := workerPIDs(t)
	before := served(t, do(t, "GET", site(id+".apps.localhost", "/"), "", nil))
	tester.InitServer(gatewayConfig(store, "isolation shared\nbound_strikes 4"), "caddyfile")
	if after := served(t, do(t, "GET", site(id+".apps.localhost", "/"), "", nil)); after != before+1 {
		t.Fatalf("after a reload the counter went from %d to %d", before, after)
	}
	if fmt.Sprint(workerPIDs(t)) != fmt.Sprint(pids) {
		t.Fatalf("worker pids changed across a reload: %v → %v", pids, workerPIDs(t))
	}
	// So does one that spells the same store otherwise (through a
	// symbolic link to its folder, with "."): it must not open the file
	// again and wait out this process's own lock.
	link := filepath.Join(t.TempDir(), "linked")
	if err := os.Symlink(filepath.Dir(store), link); err != nil {
		t.Fatal(err)
	}
	before = served(t, do(t, "GET", site(id+".apps.localhost", "/"), "", nil))
	tester.InitServer(gatewayConfig(link+"/./"+filepath.Base(store), "isolation shared\nbound_strikes 4"), "caddyfile")
	if after := served(t, do(t, "GET", site(id+".apps.localhost", "/"), "", nil)); after != before+1 {
		t.Fatalf("after a reload naming the store through a link the counter went from %d to %d", before, after)
	}
	if fmt.Sprint(workerPIDs(t)) != fmt.Sprint(pids) {
		t.Fatalf("worker pids changed across a reload naming the store through a link: %v → %v", pids, workerPIDs(t))
	}
	tester.InitServer(gatewayConfig(store, "isolation shared\nbound_strikes 4"), "caddyfile")

	// A worker killed under traffic: retryable answers, then service.
	for _, pid := range pids {
		if pid > 0 {
			syscall.Kill(pid, syscall.SIGKILL)
		}
	}
	deadline := time.Now().Add(20 * time.Second)
	for {
		a := do(t, "GET", site(id+".apps.localhost", "/"), "", nil)
		if a.status == 200 {
			if served(t, a) != 1 {
				t.Fatalf("after the crash the rebuilt counter served %d", served(t, a))
			}
			break
		}
		if a.status != 503 || a.header.Get("Retry-After") == "" || a.code() != "WORKER_CRASHED" || time.Now().After(deadline) {
			t.Fatalf("during the crash: %d %v %s", a.status, a.header, a.body)
		}
		time.Sleep(20 * time.Millisecond)
	}

	// Restart with the same store: the handle is rebuilt on its next request.
	restart(tester, gatewayConfig(store, "isolation shared"))
	if n := served(t, do(t, "GET", site(id+".apps.localhost", "/"), "", nil)); n != 1 {
		t.Fatalf("after a restart the handle served %d", n)
	}
	if n := served(t, do(t, "GET", site("shop.named.localhost", "/"), "", nil)); n != 1 {
		t.Fatalf("after a restart the route served %d", n)
	}

	// Close → HANDLES_CLOSED everywhere.
	if a := do(t, "DELETE", api("/handles/"+id), alice, nil); a.status != 204 {
		t.Fatalf("close: %d %s", a.status, a.body)
	}
	if a := do(t, "GET", api("/handles/"+id), alice, nil); a.status != 404 || a.code() != "HANDLES_CLOSED" {
		t.Fatalf("after close: %d %s", a.status, a.body)
	}
	if a := do(t, "GET", site(id+".apps.localhost", "/"), "", nil); a.status != 404 || a.code() != "NOT_FOUND" {
		t.Fatalf("traffic after close: %d %s", a.status, a.body)
	}
	// Health answers without a tenant.
	a = do(t, "GET", site("anon.localhost", "/health"), "", nil)
	if a.status != 200 || a.json(t)["status"] != "ok" {
		t.Fatalf("health: %d %s", a.status, a.body)
	}
	// Metrics on Caddy's admin endpoint.
	metrics := metricsText(t)
	for _, want := range []string{`retainer_invocations_total{outcome="ok"}`, `retainer_handle_ends_total{reason="closed"}`,
		"retainer_invocation_duration_seconds_bucket", "retainer_worker_restarts_total", "retainer_rebuilds_total", "retainer_handles_live", "retainer_handles_parked", "retainer_queue_depth", "retainer_invocations_in_progress",
		"retainer_websockets_open", "retainer_domains_active", "retainer_domains_pending"} {
		if !strings.Contains(string(metrics), want) {
			t.Errorf("metrics lack %s", want)
		}
	}
	// A reload that changes the worker count applies it to the running pool.
	tester.InitServer(gatewayConfig(store, "isolation shared\nworkers 3"), "caddyfile")
	if !waitfor.Within(20*time.Second, func() bool {
		pids := workerPIDs(t)
		return len(pids) == 3 && !strings.Contains(fmt.Sprint(pids), " 0") && pids[0] != 0
	}) {
		t.Fatalf("workers after a reload to 3: %v", workerPIDs(t))
	}
}

func jsonUnmarshal(data []byte, v any) error { return json.Unmarshal(data, v) }

// restart stops Retainer (a config without it lets the runtime go: workers
// end, the store closes) and loads config again: a gateway restart with
// the same store, inside one test process.
func restart(tester *caddytest.Tester, config string) {
	tester.InitServer(fmt.Sprintf(`{
	admin localhost:%d
	http_port %d
}
http://other.localhost:%[2]d {
	respond "no retainer here"
}`, adminPort, httpPort), "caddyfile")
	tester.InitServer(config, "caddyfile")
}

// By default (worker_cpus auto) each idle worker runs on one CPU, shown on
// the admin endpoint; a reload to shared gives the same workers every CPU
// back. A mode it does not know is refused.
func TestWorkerCPUsOption(t *testing.T) {
	if _, _, err := caddyconfig.GetAdapter("caddyfile").Adapt([]byte(gatewayConfig("x.db", "worker_cpus sometimes")), nil); err == nil || !strings.Contains(err.Error(), "not shared, pinned or auto") {
		t.Fatalf("worker_cpus sometimes: %v", err)
	}
	store := filepath.Join(t.TempDir(), "registry.db")
	tester := caddytest.NewTester(t)
	tester.InitServer(gatewayConfig(store, "isolation shared"), "caddyfile")
	var all unix.CPUSet
	if err := unix.SchedGetaffinity(0, &all); err != nil {
		t.Fatal(err)
	}
	workers := func() []adminWorker {
		t.Helper()
		res, err := http.Get(adminURL("/retainer/workers"))
		if err != nil {
			t.Fatal(err)
		}
		defer res.Body.Close()
		var out struct{ Workers []adminWorker }
		if err := json.NewDecoder(res.Body).Decode(&out); err != nil {
			t.Fatal(err)
		}
		return out.Workers
	}
	cpusOf := func(pid int) int {
		var set unix.CPUSet
		if err := unix.SchedGetaffinity(pid, &set); err != nil {
			t.Fatal(err)
		}
		return set.Count()
	}
	pinned := workers()
	if len(pinned) != 2 {
		t.Fatalf("workers: %+v", pinned)
	}
	for _, w := range pinned {
		if w.CPU == nil || cpusOf(w.PID) != 1 {
			t.Fatalf("worker %d pinned: cpu %v, its main thread may use %d CPUs", w.Index, w.CPU, cpusOf(w.PID))
		}
	}
	tester.InitServer(gatewayConfig(store, "isolation shared\nworker_cpus shared"), "caddyfile")
	for i, w := range workers() {
		if w.PID != pinned[i].PID {
			t.Fatalf("worker %d replaced by the reload: %d → %d", i, pinned[i].PID, w.PID)
		}
		if w.CPU != nil || cpusOf(w.PID) != all.Count() {
			t.Errorf("worker %d after a reload to shared: cpu %v, %d of %d CPUs", i, w.CPU, cpusOf(w.PID), all.Count())
		}
	}
}
