package caddymodule

import (
	"bufio"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/caddyserver/caddy/v2/caddytest"

	"github.com/retainer-gw/retainer/budgets"
	"github.com/retainer-gw/retainer/internal/dnstest"
	"github.com/retainer-gw/retainer/internal/waitfor"
)

func domainsGatewayConfig(store, caddyData, resolver string, extraGlobal ...string) string {
	return fmt.Sprintf(`{
	admin localhost:%d
	http_port %d
	https_port %d
	grace_period 1s
	storage file_system %s
	skip_install_trust
	on_demand_tls {
		permission retainer apps
	}
	retainer {
		store %s
		workers 2
		timeout 500ms
		%s
	}
}

http://api.localhost:%d {
	%s
	retainer_api apps {
		require_scopes
		domains {
			resolver %s
			target edge.example.net
			reserved *.apps.localhost
		}
	}
}

http://*.apps.localhost:%d {
	retainer apps {
		key {labels.2}
	}
}

https://*.wild.test {
	tls internal
	retainer apps {
		key {labels.2}
		resolve routes
	}
}

https:// {
	tls internal {
		on_demand
	}
	retainer apps {
		key {host}
		resolve domains
	}
}
`, adminPort, httpPort, httpsPort, caddyData, store, strings.Join(extraGlobal, "\n\t\t"), httpPort, testJWT, resolver, httpPort)
}

// httpsGet requests https://host/ on a new connection, trusting only
// roots; it answers the status and body, and the certificate served.
func httpsGet(host string, roots *x509.CertPool) (string, *x509.Certificate, error) {
	conn, err := tls.DialWithDialer(&net.Dialer{Timeout: 10 * time.Second}, "tcp", fmt.Sprintf("127.0.0.1:%d", httpsPort), &tls.Config{ServerName: host, RootCAs: roots})
	if err != nil {
		return "", nil, err
	}
	defer conn.Close()
	leaf := conn.ConnectionState().PeerCertificates[0]
	fmt.Fprintf(conn, "GET / HTTP/1.1\r\nHost: %s\r\nConnection: close\r\n\r\n", host)
	res, err := http.ReadResponse(bufio.NewReader(conn), nil)
	if err != nil {
		return "", leaf, err
	}
	defer res.Body.Close()
	body, _ := io.ReadAll(res.Body)
	return fmt.Sprintf("%d %s", res.StatusCode, body), leaf, nil
}

// A tenant's own domain from claim to HTTPS (docs/domains.md): pending and
// dark until its TXT record shows the claim's value, then served with a
// certificate for it from Caddy's internal CA; another tenant's pending
// claim beside it ends when it is verified, and then that tenant can
// neither claim nor see it; a deleted domain and one whose handle ended lose
// traffic and certificate at once.
func TestCustomDomainOverHTTPS(t *testing.T) {
	dnsSrv := dnstest.Start(t)
	caddyData := t.TempDir()
	tester := caddytest.NewTester(t)
	tester.InitServer(domainsGatewayConfig(filepath.Join(t.TempDir(), "registry.db"), caddyData, dnsSrv.Addr), "caddyfile")
	alice := token(t, "alice", allScopes)
	bob := token(t, "bob", allScopes)
	id := deployCounter(t, alice)
	if a := do(t, "PUT", api("/routes/shop"), alice, mustJSON(map[string]any{"executionId": id})); a.status != 200 {
		t.Fatalf("route: %d %s", a.status, a.body)
	}

	// Claim: 202 pending, with the TXT record to publish.
	a := do(t, "PUT", api("/domains/Shop.Example.Test"), alice, mustJSON(map[string]any{"route": "shop"}))
	var claim struct {
		Host, Status, Target string
		Verify               struct{ TXT struct{ Name, Value string } }
	}
	if err := jsonUnmarshal(a.body, &claim); err != nil || a.status != 202 || claim.Host != "shop.example.test" || claim.Status != "pending" ||
		claim.Target != "edge.example.net" || claim.Verify.TXT.Name != "_retainer-challenge.shop.example.test" || len(claim.Verify.TXT.Value) < 32 {
		t.Fatalf("claim: %d %s", a.status, a.body)
	}
	// Bad hosts; another tenant's claim and reads.
	for _, bad := range []string{"127.0.0.1", "localhost", "x.apps.localhost", "a_b.example.test"} {
		if a := do(t, "PUT", api("/domains/"+bad), alice, mustJSON(map[string]any{"route": "shop"})); a.status != 400 || a.code() != "BAD_REQUEST" {
			t.Errorf("claim of %s: %d %s", bad, a.status, a.body)
		}
	}
	// Another tenant's claim of a pending host is its own, with its own
	// TXT value (a pending claim holds nothing).
	bobID := deployCounter(t, bob)
	if a := do(t, "PUT", api("/domains/shop.example.test"), bob, mustJSON(map[string]any{"executionId": bobID})); a.status != 202 || strings.Contains(string(a.body), claim.Verify.TXT.Value) {
		t.Fatalf("another tenant's claim: %d %s", a.status, a.body)
	}

	// Unverified: no certificate, no traffic.
	roots := x509.NewCertPool()
	if _, _, err := httpsGet("shop.example.test", roots); err == nil {
		t.Fatal("a pending domain was served over HTTPS")
	}
	// Verify: nothing published, the wrong value, then the right one.
	if a := do(t, "POST", api("/domains/shop.example.test/verify"), alice, nil); a.status != 409 || a.code() != "CONFLICT" || !strings.Contains(string(a.body), "No TXT record") {
		t.Fatalf("verify with nothing published: %d %s", a.status, a.body)
	}
	dnsSrv.Set("_retainer-challenge.shop.example.test", "an-old-value")
	if a := do(t, "POST", api("/domains/shop.example.test/verify"), alice, nil); a.status != 409 || !strings.Contains(string(a.body), "an-old-value") {
		t.Fatalf("verify with the wrong value: %d %s", a.status, a.body)
	}
	dnsSrv.Set("_retainer-challenge.shop.example.test", "an-old-value", claim.Verify.TXT.Value)
	if a := do(t, "POST", api("/domains/shop.example.test/verify"), alice, nil); a.status != 200 || a.json(t)["status"] != "active" {
		t.Fatalf("verify: %d %s", a.status, a.body)
	}
	if a := do(t, "GET", api("/domains"), alice, nil); a.status != 200 || strings.TrimSpace(string(a.body)) != `{"domains":[{"host":"shop.example.test","status":"active","route":"shop","target":"edge.example.net"}]}` {
		t.Fatalf("alice's list: %d %s", a.status, a.body)
	}
	// The first to verify takes the host: bob's claim ended; he can
	// neither claim nor see alice's.
	if a := do(t, "PUT", api("/domains/shop.example.test"), bob, mustJSON(map[string]any{"executionId": bobID})); a.status != 409 || a.code() != "CONFLICT" {
		t.Fatalf("another tenant's claim of an active host: %d %s", a.status, a.body)
	}
	for _, req := range [][2]string{{"GET", "/domains/shop.example.test"}, {"POST", "/domains/shop.example.test/verify"}, {"DELETE", "/domains/shop.example.test"}} {
		if a := do(t, req[0], api(req[1]), bob, nil); a.status != 404 || a.code() != "NOT_FOUND" {
			t.Fatalf("another tenant's %s %s: %d %s", req[0], req[1], a.status, a.body)
		}
	}
	if a := do(t, "GET", api("/domains"), bob, nil); a.status != 200 || strings.TrimSpace(string(a.body)) != `{"domains":[]}` {
		t.Fatalf("bob's list: %d %s", a.status, a.body)
	}
	if m := metricsText(t); !strings.Contains(m, "retainer_domains_active 1") || !strings.Contains(m, "retainer_domains_pending 0") {
		t.Fatalf("the domain metrics:\n%s", m)
	}
	// An owner's later put of an active host: 200, no new verification.
	if a := do(t, "PUT", api("/domains/shop.example.test"), alice, mustJSON(map[string]any{"route": "shop"})); a.status != 200 || strings.TrimSpace(string(a.body)) != `{"host":"shop.example.test","status":"active","target":"edge.example.net"}` {
		t.Fatalf("owner's put of an active host: %d %s", a.status, a.body)
	}

	// Served over HTTPS with a certificate for the host from Caddy's
	// local CA (issued on the first handshake).
	pem, err := os.ReadFile(filepath.Join(caddyData, "pki", "authorities", "local", "root.crt"))
	if err != nil || !roots.AppendCertsFromPEM(pem) {
		t.Fatalf("Caddy's local root: %v", err)
	}
	first := time.Now()
	got, leaf, err := httpsGet("shop.example.test", roots)
	if err != nil || got != `200 {"served":1}` || leaf.VerifyHostname("shop.example.test") != nil {
		t.Fatalf("HTTPS: %q %v", got, err)
	}
	firstTook := time.Since(first)
	if got, _, err := httpsGet("shop.example.test", roots); err != nil || got != `200 {"served":2}` {
		t.Fatalf("HTTPS again: %q %v", got, err)
	}
	// Measured, not asserted (docs/history/performance-log.md: 9–13 ms,
	// then ~2 ms each): the first request (the certificate issued), then
	// new connections to the domain and to a route under the wildcard
	// certificate, each a full handshake.
	warm := func(host string) time.Duration {
		httpsGet(host, roots)
		start := time.Now()
		for i := 0; i < 20; i++ {
			if _, _, err := httpsGet(host, roots); err != nil {
				t.Fatalf("%s: %v", host, err)
			}
		}
		return time.Since(start) / 20
	}
	t.Logf("HTTPS, new connection each: first request to a new domain %v; then %v; a route under the wildcard certificate %v",
		firstTook.Round(time.Millisecond), warm("shop.example.test").Round(10*time.Microsecond), warm("shop.wild.test").Round(10*time.Microsecond))
	// Another host, pending: still no certificate.
	if a := do(t, "PUT", api("/domains/www.example.test"), alice, mustJSON(map[string]any{"executionId": id})); a.status != 202 {
		t.Fatalf("second claim: %d %s", a.status, a.body)
	}
	if _, _, err := httpsGet("www.example.test", roots); err == nil {
		t.Fatal("a pending host got a certificate")
	}

	// Deleted: 404 on the API, and new handshakes fail at once.
	if a := do(t, "DELETE", api("/domains/shop.example.test"), alice, nil); a.status != 204 {
		t.Fatalf("delete: %d %s", a.status, a.body)
	}
	if _, _, err := httpsGet("shop.example.test", roots); err == nil {
		t.Fatal("a deleted domain was still served over HTTPS")
	}
	if a := do(t, "GET", api("/domains/shop.example.test"), alice, nil); a.status != 404 {
		t.Fatalf("a deleted domain: %d %s", a.status, a.body)
	}

	// A domain ends with its handle.
	dnsSrv.Set("_retainer-challenge.www.example.test", do(t, "GET", api("/domains/www.example.test"), alice, nil).json(t)["verify"].(map[string]any)["txt"].(map[string]any)["value"].(string))
	if a := do(t, "POST", api("/domains/www.example.test/verify"), alice, nil); a.status != 200 {
		t.Fatalf("verify www: %d %s", a.status, a.body)
	}
	if got, _, err := httpsGet("www.example.test", roots); err != nil || got != `200 {"served":45}` {
		t.Fatalf("HTTPS www: %q %v", got, err)
	}
	if a := do(t, "DELETE", api("/handles/"+id), alice, nil); a.status != 204 {
		t.Fatalf("close: %d %s", a.status, a.body)
	}
	if _, _, err := httpsGet("www.example.test", roots); err == nil {
		t.Fatal("a domain outlived its handle")
	}
	if a := do(t, "PUT", api("/domains/www.example.test"), bob, mustJSON(map[string]any{"executionId": bobID})); a.status != 409 {
		t.Fatalf("another tenant took a host its handle's end freed: %d %s", a.status, a.body)
	}

	// Verification attempts are bounded per tenant.
	do(t, "PUT", api("/domains/slow.example.test"), bob, mustJSON(map[string]any{"executionId": bobID}))
	limited := false
	for i := 0; i < budgets.DomainVerifyBurst+2 && !limited; i++ {
		a := do(t, "POST", api("/domains/slow.example.test/verify"), bob, nil)
		limited = a.status == 429 && a.code() == "QUOTA_EXCEEDED"
	}
	if !limited {
		t.Fatal("verifications are not bounded")
	}
}

// metricsText is the admin endpoint's metrics.
func metricsText(t *testing.T) string {
	t.Helper()
	res, err := http.Get(adminURL("/metrics"))
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	data, _ := io.ReadAll(res.Body)
	return string(data)
}

// A squatter's pending claim holds nothing: the host's real owner claims
// it too, publishes its own TXT value and verifies; the squatter's claim
// ends (it was 409 for the owner while the squatter's claim lasted, up to
// 7 days, renewable by delete and re-claim). Hosts a URL reads as IPv4
// addresses are refused.
func TestDomainSquatterLosesToTheRealOwner(t *testing.T) {
	dnsSrv := dnstest.Start(t)
	tester := caddytest.NewTester(t)
	tester.InitServer(domainsGatewayConfig(filepath.Join(t.TempDir(), "registry.db"), t.TempDir(), dnsSrv.Addr), "caddyfile")
	squatter, owner := token(t, "squatter", allScopes), token(t, "owner", allScopes)
	squatterID, ownerID := deployCounter(t, squatter), deployCounter(t, owner)
	type claim struct {
		Status string
		Verify struct{ TXT struct{ Name, Value string } }
	}
	put := func(tok, id string) (answer, claim) {
		a := do(t, "PUT", api("/domains/shop.owner.test"), tok, mustJSON(map[string]any{"executionId": id}))
		var c claim
		jsonUnmarshal(a.body, &c)
		return a, c
	}
	a, sq := put(squatter, squatterID)
	if a.status != 202 || sq.Status != "pending" {
		t.Fatalf("the squatter's claim: %d %s", a.status, a.body)
	}
	a, own := put(owner, ownerID)
	if a.status != 202 || own.Status != "pending" || own.Verify.TXT.Value == sq.Verify.TXT.Value || own.Verify.TXT.Name != "_retainer-challenge.shop.owner.test" {
		t.Fatalf("the owner's claim beside the squatter's: %d %s", a.status, a.body)
	}
	dnsSrv.Set(own.Verify.TXT.Name, own.Verify.TXT.Value)
	if a := do(t, "POST", api("/domains/shop.owner.test/verify"), squatter, nil); a.status != 409 || a.code() != "CONFLICT" {
		t.Fatalf("the squatter's verify against the owner's record: %d %s", a.status, a.body)
	}
	if a := do(t, "POST", api("/domains/shop.owner.test/verify"), owner, nil); a.status != 200 || a.json(t)["status"] != "active" {
		t.Fatalf("the owner's verify: %d %s", a.status, a.body)
	}
	// The squatter's claim ended; the host is the owner's.
	if a := do(t, "GET", api("/domains/shop.owner.test"), squatter, nil); a.status != 404 || a.code() != "NOT_FOUND" {
		t.Fatalf("the squatter's claim after the owner verified: %d %s", a.status, a.body)
	}
	if a := do(t, "GET", api("/domains"), squatter, nil); strings.TrimSpace(string(a.body)) != `{"domains":[]}` {
		t.Fatalf("the squatter's list: %d %s", a.status, a.body)
	}
	if a, _ := put(squatter, squatterID); a.status != 409 || a.code() != "CONFLICT" {
		t.Fatalf("the squatter's claim of an active host: %d %s", a.status, a.body)
	}
	if m := metricsText(t); !strings.Contains(m, "retainer_domains_active 1") || !strings.Contains(m, "retainer_domains_pending 0") {
		t.Fatalf("the domain metrics:\n%s", m)
	}
	// IP-shaped hosts: 400 BAD_REQUEST, nothing claimed.
	for _, bad := range []string{"127.1", "0x7f.1", "foo.123", "shop.0x1f", "1.2.3.4"} {
		if a := do(t, "PUT", api("/domains/"+bad), owner, mustJSON(map[string]any{"executionId": ownerID})); a.status != 400 || a.code() != "BAD_REQUEST" {
			t.Errorf("claim of %s: %d %s", bad, a.status, a.body)
		}
	}
	if a := do(t, "GET", api("/domains"), owner, nil); a.status != 200 || strings.Count(string(a.body), `"host"`) != 1 {
		t.Fatalf("the owner's list: %d %s", a.status, a.body)
	}
}

// On-demand certificates cost the operator: with issuance_per_hour 2 a
// tenant's third new host gets no certificate this hour while its first
// two serve and another tenant's host gets one; a deleted domain's
// certificate leaves Caddy's storage.
func TestCertificateIssuanceBudget(t *testing.T) {
	dnsSrv := dnstest.Start(t)
	caddyData := t.TempDir()
	tester := caddytest.NewTester(t)
	tester.InitServer(domainsGatewayConfig(filepath.Join(t.TempDir(), "registry.db"), caddyData, dnsSrv.Addr, "issuance_per_hour 2"), "caddyfile")
	alice, bob := token(t, "alice", allScopes), token(t, "bob", allScopes)
	activate := func(tok, id, host string) {
		t.Helper()
		a := do(t, "PUT", api("/domains/"+host), tok, mustJSON(map[string]any{"executionId": id}))
		if a.status != 202 {
			t.Fatalf("claim %s: %d %s", host, a.status, a.body)
		}
		dnsSrv.Set("_retainer-challenge."+host, a.json(t)["verify"].(map[string]any)["txt"].(map[string]any)["value"].(string))
		if a := do(t, "POST", api("/domains/"+host+"/verify"), tok, nil); a.status != 200 {
			t.Fatalf("verify %s: %d %s", host, a.status, a.body)
		}
	}
	aliceID, bobID := deployCounter(t, alice), deployCounter(t, bob)
	for _, h := range []string{"one.alice.test", "two.alice.test", "three.alice.test"} {
		activate(alice, aliceID, h)
	}
	activate(bob, bobID, "www.bob.test")
	// The local CA's root exists once Caddy has started its PKI app.
	roots := x509.NewCertPool()
	pem, err := os.ReadFile(filepath.Join(caddyData, "pki", "authorities", "local", "root.crt"))
	if err != nil || !roots.AppendCertsFromPEM(pem) {
		t.Fatalf("Caddy's local root: %v", err)
	}
	hour := time.Now().Truncate(time.Hour)
	for i, h := range []string{"one.alice.test", "two.alice.test"} {
		if got, leaf, err := httpsGet(h, roots); err != nil || got != fmt.Sprintf(`200 {"served":%d}`, i+1) || leaf.VerifyHostname(h) != nil {
			t.Fatalf("%s: %q %v", h, got, err)
		}
	}
	_, _, thirdErr := httpsGet("three.alice.test", roots)
	if thirdErr == nil && time.Now().Truncate(time.Hour).Equal(hour) {
		t.Fatal("a tenant's third new certificate in an hour of issuance_per_hour 2 was issued")
	}
	t.Logf("the third new host's handshake: %v", thirdErr)
	// Already issued ones keep serving; another tenant has its own budget.
	if got, _, err := httpsGet("one.alice.test", roots); err != nil || got != `200 {"served":3}` {
		t.Fatalf("an issued certificate after the budget was spent: %q %v", got, err)
	}
	if got, _, err := httpsGet("www.bob.test", roots); err != nil || got != `200 {"served":1}` {
		t.Fatalf("another tenant's host: %q %v", got, err)
	}
	// A deleted domain's certificate leaves storage; the others stay.
	stored := func(h string) bool {
		_, err := os.Stat(filepath.Join(caddyData, "certificates", "local", h, h+".crt"))
		return err == nil
	}
	if !stored("one.alice.test") || !stored("two.alice.test") {
		t.Fatal("issued certificates are not in storage where the test looks")
	}
	if a := do(t, "DELETE", api("/domains/one.alice.test"), alice, nil); a.status != 204 {
		t.Fatalf("delete: %d %s", a.status, a.body)
	}
	dir := filepath.Join(caddyData, "certificates", "local", "one.alice.test")
	waitfor.Within(10*time.Second, func() bool { _, err := os.Stat(dir); return err != nil })
	if _, err := os.Stat(dir); !os.IsNotExist(err) || stored("one.alice.test") {
		t.Fatalf("a deleted domain's certificate is still in storage: %v", err)
	}
	if !stored("two.alice.test") {
		t.Fatal("another domain's certificate left storage")
	}
	if _, _, err := httpsGet("one.alice.test", roots); err == nil {
		t.Fatal("a deleted domain was served over HTTPS")
	}
}

// The issuance book starts afresh each clock hour and counts a host once;
// denied handshakes are logged once a second per host, and for at most
// budgets.TLSDenialLogsPerSecond hosts a second.
func TestIssuanceBookAndDenialLog(t *testing.T) {
	t.Parallel()
	var b issuanceBook
	at := time.Date(2026, 1, 1, 10, 59, 0, 0, time.UTC)
	for i, c := range []struct {
		tenant, host string
		want         bool
	}{{"a", "h1", true}, {"a", "h1", true}, {"a", "h2", true}, {"a", "h3", false}, {"b", "h3", true}, {"a", "h2", true}} {
		if _, ok := b.allow("apps", c.tenant, c.host, 2, at); ok != c.want {
			t.Errorf("%d: %s %s: %v", i, c.tenant, c.host, ok)
		}
	}
	if _, ok := b.allow("other", "a", "h3", 2, at); !ok {
		t.Error("another registry's tenant shares the budget")
	}
	if _, ok := b.allow("apps", "a", "h3", 2, at.Add(time.Minute)); !ok {
		t.Error("the budget did not start afresh when the hour turned")
	}
	var l denialLog
	now := time.Date(2026, 1, 1, 10, 0, 0, 0, time.UTC)
	if !l.first("x.test", now) || l.first("x.test", now.Add(500*time.Millisecond)) || !l.first("y.test", now) || !l.first("x.test", now.Add(time.Second)) {
		t.Error("once a second per host")
	}
	n := 0
	for i := 0; i < 1000; i++ {
		if l.first(fmt.Sprintf("h%d.test", i), now.Add(2*time.Second)) {
			n++
		}
	}
	if n != budgets.TLSDenialLogsPerSecond {
		t.Errorf("%d hosts logged in one second", n)
	}
}

// One tenant deploys, binds a route name, claims a host and deletes the
// handle, 130 times over: the names its ends reserve count against its
// 100, so past 100 binds answer 429 QUOTA_EXCEEDED (before, every cycle
// reserved one more name and one more host, without end); its pending
// hosts were never verified and reserve nothing. A bystander binds names
// meanwhile and its handle's counter survives.
func TestDeployBindDeleteLoopReservesAtMost100Names(t *testing.T) {
	tester := caddytest.NewTester(t)
	tester.InitServer(gatewayConfig(filepath.Join(t.TempDir(), "registry.db"), ""), "caddyfile")
	mallory, bob := token(t, "mallory", allScopes), token(t, "bob", allScopes)
	bobID := deployCounter(t, bob)
	if a := do(t, "PUT", api("/routes/bobs"), bob, mustJSON(map[string]any{"executionId": bobID})); a.status != 200 {
		t.Fatalf("bob's route: %d %s", a.status, a.body)
	}
	want := 1
	if n := served(t, do(t, "GET", site("bobs.named.localhost", "/"), "", nil)); n != want {
		t.Fatalf("bob's counter: %d", n)
	}
	bound, refused := 0, 0
	for i := 0; i < 130; i++ {
		id := deployCounter(t, mallory)
		switch a := do(t, "PUT", api(fmt.Sprintf("/routes/m%d", i)), mallory, mustJSON(map[string]any{"executionId": id})); {
		case a.status == 200:
			bound++
		case a.status == 429 && a.code() == "QUOTA_EXCEEDED":
			refused++
		default:
			t.Fatalf("bind %d: %d %s", i, a.status, a.body)
		}
		if a := do(t, "PUT", api(fmt.Sprintf("/domains/m%d.example.test", i)), mallory, mustJSON(map[string]any{"executionId": id})); a.status != 202 {
			t.Fatalf("claim %d: %d %s", i, a.status, a.body)
		}
		if a := do(t, "DELETE", api("/handles/"+id), mallory, nil); a.status != 204 {
			t.Fatalf("delete %d: %d %s", i, a.status, a.body)
		}
		if i%10 == 0 {
			// The bystander binds and is served throughout.
			if a := do(t, "PUT", api(fmt.Sprintf("/routes/bob%d", i)), bob, mustJSON(map[string]any{"executionId": bobID})); a.status != 200 {
				t.Fatalf("bob's bind during the loop: %d %s", a.status, a.body)
			}
			want++
			if n := served(t, do(t, "GET", site(fmt.Sprintf("bob%d.named.localhost", i), "/"), "", nil)); n != want {
				t.Fatalf("bob's counter during the loop: %d, want %d", n, want)
			}
		}
	}
	t.Logf("130 deploy-bind-claim-delete cycles: %d names bound then reserved, %d binds refused", bound, refused)
	if bound != 100 || refused != 30 {
		t.Fatalf("bound %d, refused %d; want 100 and 30", bound, refused)
	}
	// mallory's names stay its own; its pending hosts were not reserved.
	if a := do(t, "PUT", api("/routes/m3"), bob, mustJSON(map[string]any{"executionId": bobID})); a.status != 409 || a.code() != "CONFLICT" {
		t.Fatalf("bob's bind of a reserved name: %d %s", a.status, a.body)
	}
	if a := do(t, "PUT", api("/routes/m120"), bob, mustJSON(map[string]any{"executionId": bobID})); a.status != 200 {
		t.Fatalf("bob's bind of a name the loop was refused: %d %s", a.status, a.body)
	}
	if a := do(t, "PUT", api("/domains/m3.example.test"), bob, mustJSON(map[string]any{"executionId": bobID})); a.status != 202 {
		t.Fatalf("bob's claim of a pending host whose handle ended: %d %s", a.status, a.body)
	}
	if n := served(t, do(t, "GET", site("m120.named.localhost", "/"), "", nil)); n != want+1 {
		t.Fatalf("bob's counter after the loop: %d, want %d", n, want+1)
	}
	// A reserved name the tenant unbinds is free, and so is a slot.
	if a := do(t, "DELETE", api("/routes/m4"), mallory, nil); a.status != 204 {
		t.Fatalf("unbinding a reserved name: %d %s", a.status, a.body)
	}
	id := deployCounter(t, mallory)
	if a := do(t, "PUT", api("/routes/fresh"), mallory, mustJSON(map[string]any{"executionId": id})); a.status != 200 {
		t.Fatalf("a new name after freeing a reserved one: %d %s", a.status, a.body)
	}
}
