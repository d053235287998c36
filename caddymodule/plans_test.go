package caddymodule

import (
	"context"
	"encoding/json"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/caddyserver/caddy/v2/caddyconfig/caddyfile"
	"github.com/caddyserver/caddy/v2/caddyconfig/httpcaddyfile"
	"github.com/caddyserver/caddy/v2/caddytest"
	"github.com/coder/websocket"
	"github.com/golang-jwt/jwt/v5"
	"go.uber.org/zap"

	"github.com/retainer-gw/retainer/store"
)

// planToken is a token of tenant whose tier claim names plan ("" for no
// claim), signed with secret.
func planToken(t testing.TB, tenant, plan, secret string) string {
	claims := jwt.MapClaims{
		"sub": tenant, "iss": "https://id.example.com/", "aud": "retainer",
		"exp": time.Now().Add(time.Hour).Unix(), "iat": time.Now().Unix(), "scope": allScopes,
	}
	if plan != "" {
		claims["tier"] = plan
	}
	s, err := jwt.NewWithClaims(jwt.SigningMethodHS256, claims).SignedString([]byte(secret))
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// quotaCut checks a plan's refusal: 429 QUOTA_EXCEEDED with Retry-After
// until the UTC day ends.
func checkQuotaCut(t *testing.T, what string, a answer) {
	t.Helper()
	if a.status != 429 || a.code() != "QUOTA_EXCEEDED" {
		t.Fatalf("%s past the plan: %d %s", what, a.status, a.body)
	}
	after, err := strconv.Atoi(a.header.Get("Retry-After"))
	left := time.Until(time.Now().UTC().Truncate(24 * time.Hour).Add(24 * time.Hour))
	if err != nil || after < 1 || time.Duration(after)*time.Second > left+2*time.Second {
		t.Fatalf("%s: Retry-After %q, the day ends in %v", what, a.header.Get("Retry-After"), left)
	}
}

// systemEntries answers the system entries of a handle's stored log that
// name a plan's limit.
func planEntries(t *testing.T, tok, id string) []string {
	t.Helper()
	logs, _ := readLogs(t, tok, id, "?limit=1000")
	var out []string
	for _, e := range logs {
		if e.Level == "system" && strings.Contains(e.Message, "plan allows") {
			out = append(out, e.Message)
		}
	}
	return out
}

// deployCounterRetrying deploys the counter as deployCounter does, trying
// again while the tenant waits for a worker of its own (two workers here).
func deployCounterRetrying(t *testing.T, tok string) string {
	t.Helper()
	return deploy(t, tok, counter, map[string]any{"timeoutMs": 5000})
}

const plansGlobal = `workers 4
		plans {
			plan_claim tier
			small {
				requests_per_day 20
			}
			big {
				requests_per_day 1000
				cpu_ms_per_day 600000
			}
		}`

// A plan of 20 requests a day (docs/usage.md): alice's token names it; her
// 21st visit answers 429 QUOTA_EXCEEDED with Retry-After until the UTC day
// ends, and so does her API (reading her usage and logs stays open); one
// system entry in her handle's log says which limit, however many visits
// were refused. Bob (no plan: no default is defined) and carol (another
// plan) run on, their handles' counters intact. The cut survives a restart
// of the gateway, and so do bob's and carol's service.
func TestPlanCapsRequestsADay(t *testing.T) {
	config := gatewayConfig(filepath.Join(t.TempDir(), "registry.db"), plansGlobal)
	tester := caddytest.NewTester(t)
	tester.InitServer(config, "caddyfile")
	alice := planToken(t, "alice", "small", testSecret)
	bob := planToken(t, "bob", "", testSecret)
	carol := planToken(t, "carol", "big", testSecret)
	id, bobID, carolID := deployCounterRetrying(t, alice), deployCounterRetrying(t, bob), deployCounterRetrying(t, carol)
	for i := 1; i <= 20; i++ {
		if got := served(t, do(t, "GET", site(id+".apps.localhost", "/"), "", nil)); got != i {
			t.Fatalf("alice's visit %d served %d", i, got)
		}
	}
	for i := 0; i < 3; i++ {
		checkQuotaCut(t, "alice's visit", do(t, "GET", site(id+".apps.localhost", "/"), "", nil))
	}
	checkQuotaCut(t, "alice's POST /executions", do(t, "POST", api("/executions"), alice, mustJSON(map[string]any{"code": "() => 1"})))
	checkQuotaCut(t, "alice's POST /handles/{id}/fetch", do(t, "POST", api("/handles/"+id+"/fetch"), alice, mustJSON(map[string]any{"method": "GET", "url": "http://x/"})))
	checkQuotaCut(t, "alice's GET /handles", do(t, "GET", api("/handles"), alice, nil))
	if a := do(t, "GET", api("/usage"), alice, nil); a.status != 200 {
		t.Fatalf("alice's usage while cut: %d %s", a.status, a.body)
	}
	if got := planEntries(t, alice, id); len(got) != 1 || !strings.Contains(got[0], "requests_per_day 20") {
		t.Fatalf("alice's log on her plan: %q", got)
	}
	// Bob and carol notice nothing, before and after 25 visits each.
	for i := 1; i <= 25; i++ {
		if got := served(t, do(t, "GET", site(bobID+".apps.localhost", "/"), "", nil)); got != i {
			t.Fatalf("bob's visit %d served %d", i, got)
		}
		if got := served(t, do(t, "GET", site(carolID+".apps.localhost", "/"), "", nil)); got != i {
			t.Fatalf("carol's visit %d served %d", i, got)
		}
	}
	if a := do(t, "GET", api("/handles"), bob, nil); a.status != 200 {
		t.Fatalf("bob's API: %d %s", a.status, a.body)
	}
	if got := planEntries(t, bob, bobID); len(got) != 0 {
		t.Fatalf("bob's log: %q", got)
	}

	restart(tester, config)
	checkQuotaCut(t, "alice's visit after a restart", do(t, "GET", site(id+".apps.localhost", "/"), "", nil))
	checkQuotaCut(t, "alice's API after a restart", do(t, "GET", api("/handles"), alice, nil))
	for _, h := range []string{bobID, carolID} {
		if a := do(t, "GET", site(h+".apps.localhost", "/"), "", nil); a.status != 200 {
			t.Fatalf("a bystander after the restart: %d %s", a.status, a.body)
		}
	}
	if got := planEntries(t, alice, id); len(got) != 1 {
		t.Fatalf("alice's log after the restart: %q", got)
	}
}

// A tenant cannot choose its plan: a token naming a plan that does not
// exist holds it to the default; a token naming the big plan that the
// gateway's issuer did not sign is refused; a plan named in a header or the
// query of a visit is nobody's word. A visitor's traffic, even one that
// carries a tenant's token to another tenant's handle, is charged to the
// handle's tenant only.
func TestPlanCannotBeChosenByTheTenant(t *testing.T) {
	config := gatewayConfig(filepath.Join(t.TempDir(), "registry.db"), `plans {
			plan_claim tier
			default {
				requests_per_day 5
			}
			big {
				requests_per_day 1000
			}
		}`)
	caddytest.NewTester(t).InitServer(config, "caddyfile")
	mallory := planToken(t, "mallory", "unlimited", testSecret)
	carol := planToken(t, "carol", "big", testSecret)
	id, carolID := deployCounterRetrying(t, mallory), deployCounterRetrying(t, carol)
	for i := 1; i <= 5; i++ {
		served(t, do(t, "GET", site(id+".apps.localhost", "/"), "", nil))
	}
	checkQuotaCut(t, "a token naming a plan that does not exist", do(t, "GET", site(id+".apps.localhost", "/"), "", nil))
	forged := planToken(t, "mallory", "big", "another-secret-another-secret-another")
	if a := do(t, "GET", api("/handles"), forged, nil); a.status != 401 {
		t.Fatalf("a token the issuer did not sign: %d %s", a.status, a.body)
	}
	checkQuotaCut(t, "a visit naming a plan", do(t, "GET", site(id+".apps.localhost", "/?tier=big"), "", nil, "X-Tier", "big", "Tier", "big"))
	checkQuotaCut(t, "mallory's API", do(t, "GET", api("/handles"), mallory, nil))
	// Mallory, cut, visits carol's handle 10 times with her own token:
	// carol's requests, not hers.
	for i := 1; i <= 10; i++ {
		if got := served(t, do(t, "GET", site(carolID+".apps.localhost", "/"), mallory, nil)); got != i {
			t.Fatalf("a visit to carol's handle %d served %d", i, got)
		}
	}
	count := func(tok string) int64 {
		a := do(t, "GET", api("/usage"), tok, nil)
		var out struct{ Usage []struct{ Requests int64 } }
		if a.status != 200 || jsonUnmarshal(a.body, &out) != nil {
			t.Fatalf("usage: %d %s", a.status, a.body)
		}
		n := int64(0)
		for _, r := range out.Usage {
			n += r.Requests
		}
		return n
	}
	if m, c := count(mallory), count(carol); m != 5 || c != 10 {
		t.Fatalf("requests charged: mallory %d (want 5), carol %d (want 10)", m, c)
	}
}

// An ai_tokens_per_day cap against a model endpoint started here: each
// visit's ai.run spends 8 tokens; with a cap of 20, the third visit passes
// it and the fourth is refused, while bob, on no plan, runs on.
func TestPlanCapsAITokens(t *testing.T) {
	model, _ := aiEndpoint(t)
	config := strings.Replace(aiConfig(filepath.Join(t.TempDir(), "registry.db"), model.URL), "timeout 5s", `timeout 5s
		plans {
			plan_claim tier
			starter {
				ai_tokens_per_day 20
			}
		}`, 1)
	caddytest.NewTester(t).InitServer(config, "caddyfile")
	alice := planToken(t, "alice", "starter", testSecret)
	bob := planToken(t, "bob", "", testSecret)
	code := `async () => ({ async fetch() {
		const r = await ai.run('chat', {prompt: 'hi'});
		return new Response(r.response);
	} })`
	extra := map[string]any{"capabilities": []string{"ai"}}
	id, bobID := deploy(t, alice, code, extra), deploy(t, bob, code, extra)
	for i := 1; i <= 3; i++ {
		if a := do(t, "GET", site(id+".apps.localhost", "/"), "", nil); a.status != 200 || string(a.body) != "echo: hi" {
			t.Fatalf("alice's visit %d: %d %s", i, a.status, a.body)
		}
	}
	checkQuotaCut(t, "alice's visit past 20 tokens", do(t, "GET", site(id+".apps.localhost", "/"), "", nil))
	if got := planEntries(t, alice, id); len(got) != 1 || !strings.Contains(got[0], "ai_tokens_per_day 20") {
		t.Fatalf("alice's log: %q", got)
	}
	for i := 1; i <= 5; i++ {
		if a := do(t, "GET", site(bobID+".apps.localhost", "/"), "", nil); a.status != 200 {
			t.Fatalf("bob's visit %d: %d %s", i, a.status, a.body)
		}
	}
	if got := usageToday(t, alice); got.AITokens != 24 {
		t.Fatalf("alice's usage: %+v", got)
	}
}

// The plans block parses as docs/usage.md writes it; a limit it does not
// know, a negative one or a plan defined twice is refused.
func TestPlansOption(t *testing.T) {
	t.Parallel()
	d := caddyfile.NewTestDispenser(`retainer {
		plans {
			plan_claim tier
			default {
				requests_per_day 20
				cpu_ms_per_day 600000
			}
			pro {
				ai_tokens_per_day 100000
				egress_bytes_per_day 1073741824
			}
		}
	}`)
	v, err := parseGlobal(d, nil)
	if err != nil {
		t.Fatal(err)
	}
	var app App
	if err := json.Unmarshal(v.(httpcaddyfile.App).Value, &app); err != nil {
		t.Fatal(err)
	}
	p := app.Plans
	if p == nil || p.claim() != "tier" || p.Plans["default"].RequestsPerDay != 20 || p.Plans["default"].CPUMsPerDay != 600000 ||
		p.Plans["pro"].AITokensPerDay != 100000 || p.Plans["pro"].EgressBytesPerDay != 1<<30 {
		t.Fatalf("parsed %+v", p)
	}
	if p.of("pro") != p.Plans["pro"] || p.of("nope") != p.Plans["default"] || p.of("") != p.Plans["default"] {
		t.Fatal("a plan's name is not resolved as documented")
	}
	if (&Plans{}).claim() != "plan" {
		t.Fatal("the default claim is not plan")
	}
	for _, bad := range []string{
		`retainer {
			plans {
				free {
					bytes_per_day 1
				}
			}
		}`,
		`retainer {
			plans {
				free {
					requests_per_day -1
				}
			}
		}`,
		`retainer {
			plans {
				free {
					requests_per_day 1
				}
				free {
					requests_per_day 2
				}
			}
		}`,
	} {
		if _, err := parseGlobal(caddyfile.NewTestDispenser(bad), nil); err == nil {
			t.Fatalf("accepted %s", bad)
		}
	}
}

// BenchmarkPlanCheck is what a plan costs each invocation (docs/usage.md):
// the tenant's plan and today's totals from memory, and the count after it.
// Without plans: the check's nil test only.
func BenchmarkPlanCheck(b *testing.B) {
	st, err := store.OpenBolt(filepath.Join(b.TempDir(), "usage.db"), time.Second)
	if err != nil {
		b.Fatal(err)
	}
	defer st.Close()
	rt := &runtime{}
	rt.logger.Store(zap.NewNop())
	m := openUsage(st, "", nil, nil, nil)
	defer m.close()
	rt.usage.Store(m)
	key := logTenant("apps", "alice")
	m.plans.record(key, "pro", 1)
	for _, plans := range []*Plans{nil, {Plans: map[string]*Plan{"pro": {RequestsPerDay: 1 << 40, CPUMsPerDay: 1 << 40}}}} {
		rt.app.Store(&App{Plans: plans})
		name := "none"
		if plans != nil {
			name = "plan"
		}
		b.Run(name, func(b *testing.B) {
			b.ReportAllocs()
			for i := 0; i < b.N; i++ {
				if err := rt.admit("apps", "h1", "alice"); err != nil {
					b.Fatal(err)
				}
				m.add(key, time.Now(), 1, 0.5, 100)
			}
		})
	}
}

// cpu_ms_per_day and egress_bytes_per_day: a tenant whose visits spin
// is cut once its isolate's CPU time reaches 100 ms (however many visits
// that takes on a busy machine), with a system entry naming the limit;
// a tenant answering 10 KB a visit is cut at its 11th visit by a cap of
// 100,000 bytes; a bystander on no plan runs on.
func TestPlanCapsCPUAndEgress(t *testing.T) {
	config := gatewayConfig(filepath.Join(t.TempDir(), "registry.db"), `workers 4
		plans {
			plan_claim tier
			cpu {
				cpu_ms_per_day 100
			}
			egress {
				egress_bytes_per_day 100000
			}
		}`)
	caddytest.NewTester(t).InitServer(config, "caddyfile")
	spinner := planToken(t, "spinner", "cpu", testSecret)
	sender := planToken(t, "sender", "egress", testSecret)
	bob := planToken(t, "bob", "", testSecret)
	spinID := deploy(t, spinner, `async () => ({ async fetch() {
		const end = Date.now() + 20; while (Date.now() < end) {}
		return new Response('spun');
	} })`, map[string]any{"timeoutMs": 2000})
	sendID := deploy(t, sender, `async () => ({ async fetch() { return new Response('x'.repeat(10240)); } })`, nil)
	bobID := deployCounterRetrying(t, bob)
	cut := 0
	for i := 1; i <= 200 && cut == 0; i++ {
		a := do(t, "GET", site(spinID+".apps.localhost", "/"), "", nil)
		switch {
		case a.status == 429:
			checkQuotaCut(t, "the spinner's visit", a)
			cut = i
		case a.status != 200:
			t.Fatalf("the spinner's visit %d: %d %s", i, a.status, a.body)
		}
	}
	if cut < 2 {
		t.Fatalf("the spinner was cut at visit %d (0: never)", cut)
	}
	if got := planEntries(t, spinner, spinID); len(got) != 1 || !strings.Contains(got[0], "cpu_ms_per_day 100") {
		t.Fatalf("the spinner's log: %q", got)
	}
	for i := 1; i <= 10; i++ {
		if a := do(t, "GET", site(sendID+".apps.localhost", "/"), "", nil); a.status != 200 || len(a.body) != 10240 {
			t.Fatalf("the sender's visit %d: %d", i, a.status)
		}
	}
	checkQuotaCut(t, "the sender's 11th visit", do(t, "GET", site(sendID+".apps.localhost", "/"), "", nil))
	if got := planEntries(t, sender, sendID); len(got) != 1 || !strings.Contains(got[0], "egress_bytes_per_day 100000") {
		t.Fatalf("the sender's log: %q", got)
	}
	for i := 1; i <= 15; i++ {
		if got := served(t, do(t, "GET", site(bobID+".apps.localhost", "/"), "", nil)); got != i {
			t.Fatalf("bob's visit %d served %d", i, got)
		}
	}
}

// A WebSocket open when its tenant passes its plan's limit closes (1008)
// at the visitor's next message; a bystander's socket echoes on.
func TestPlanClosesOpenSockets(t *testing.T) {
	config := gatewayConfig(filepath.Join(t.TempDir(), "registry.db"), `plans {
			plan_claim tier
			tiny {
				requests_per_day 3
			}
		}`)
	caddytest.NewTester(t).InitServer(config, "caddyfile")
	alice := planToken(t, "alice", "tiny", testSecret)
	bob := planToken(t, "bob", "", testSecret)
	echo := `async () => ({ async fetch(request) {
		if (request.headers.get('Upgrade') !== 'websocket') return new Response('page');
		const [client, server] = Object.values(new WebSocketPair());
		server.accept();
		server.addEventListener('message', (event) => server.send('echo ' + event.data));
		return new Response(null, { status: 101, webSocket: client });
	} })`
	id, bobID := deploy(t, alice, echo, nil), deploy(t, bob, echo, nil)
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
	defer cancel()
	sockets := map[string]*websocket.Conn{}
	for _, h := range []string{id, bobID} {
		c, _, err := dialSocket(ctx, h+".apps.localhost", "/ws") // a request
		if err != nil {
			t.Fatal(err)
		}
		defer c.CloseNow()
		sockets[h] = c
		if err := c.Write(ctx, websocket.MessageText, []byte("one")); err != nil {
			t.Fatal(err)
		}
		if got := readText(t, c); got != "echo one" {
			t.Fatalf("the echo: %q", got)
		}
	}
	for i := 0; i < 2; i++ {
		if a := do(t, "GET", site(id+".apps.localhost", "/"), "", nil); a.status != 200 {
			t.Fatalf("alice's visit %d: %d %s", i, a.status, a.body)
		}
	}
	checkQuotaCut(t, "alice's 4th request", do(t, "GET", site(id+".apps.localhost", "/"), "", nil))
	sockets[id].Write(ctx, websocket.MessageText, []byte("two"))
	if code := closedWith(t, sockets[id]); code != websocket.StatusPolicyViolation {
		t.Fatalf("alice's socket closed with %d", code)
	}
	for i := 0; i < 3; i++ {
		if err := sockets[bobID].Write(ctx, websocket.MessageText, []byte("more")); err != nil {
			t.Fatal(err)
		}
		if got := readText(t, sockets[bobID]); got != "echo more" {
			t.Fatalf("bob's echo: %q", got)
		}
	}
}

// planTokenAt is planToken issued at iat (the zero time: no iat claim),
// with scope.
func planTokenAt(t testing.TB, tenant, plan, scope string, iat time.Time) string {
	claims := jwt.MapClaims{
		"sub": tenant, "iss": "https://id.example.com/", "aud": "retainer",
		"exp": time.Now().Add(time.Hour).Unix(), "scope": scope,
	}
	if !iat.IsZero() {
		claims["iat"] = iat.Unix()
	}
	if plan != "" {
		claims["tier"] = plan
	}
	s, err := jwt.NewWithClaims(jwt.SigningMethodHS256, claims).SignedString([]byte(testSecret))
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// A tenant cannot undo its plan with another token it holds
// (docs/usage.md): only a token issued later than the one that recorded
// the plan changes it, and a token naming no plan never does. Alice, on
// small (20 visits), is cut; one GET /usage or log read with a read-only
// token naming no plan (issued later), a token naming pro issued before
// her small one, or a token naming pro without an iat, changes nothing:
// her visits and API stay 429 (the red team's sequence let her serve again
// on `default`). A pro token issued after her small one is the operator's
// upgrade: it lifts the cut at once, and her older small token does not
// bring it back. Dave, downgraded from pro to small by a newer token, is
// held to small, and his older pro token does not undo it; moved to
// medium by a yet newer one, he is cut again, and his log names both
// limits. Bob, a
// bystander on small, counts on untouched. All of it survives a restart.
func TestPlanHeldAgainstTheTenantsOtherTokens(t *testing.T) {
	config := gatewayConfig(filepath.Join(t.TempDir(), "registry.db"), `workers 4
		plans {
			plan_claim tier
			default {
				requests_per_day 100000
			}
			small {
				requests_per_day 20
			}
			medium {
				requests_per_day 25
			}
			pro {
				requests_per_day 1000
			}
		}`)
	tester := caddytest.NewTester(t)
	tester.InitServer(config, "caddyfile")
	now := time.Now()
	visit := func(h string) answer { return do(t, "GET", site(h+".apps.localhost", "/"), "", nil) }
	aliceSmall := planTokenAt(t, "alice", "small", allScopes, now.Add(-10*time.Minute))
	bob := planTokenAt(t, "bob", "small", allScopes, now.Add(-10*time.Minute))
	id, bobID := deployCounterRetrying(t, aliceSmall), deployCounterRetrying(t, bob)
	bobServed := 0
	bobVisits := func(n int) {
		t.Helper()
		for i := 0; i < n; i++ {
			bobServed++
			if got := served(t, visit(bobID)); got != bobServed {
				t.Fatalf("bob's visit %d served %d", bobServed, got)
			}
		}
	}
	for i := 1; i <= 20; i++ {
		if got := served(t, visit(id)); got != i {
			t.Fatalf("alice's visit %d served %d", i, got)
		}
	}
	checkQuotaCut(t, "alice's 21st visit", visit(id))
	checkQuotaCut(t, "alice's GET /handles", do(t, "GET", api("/handles"), aliceSmall, nil))
	bobVisits(5)

	stillCut := func(what string) {
		t.Helper()
		checkQuotaCut(t, "alice's visit after "+what, visit(id))
		checkQuotaCut(t, "alice's GET /handles after "+what, do(t, "GET", api("/handles"), aliceSmall, nil))
	}
	readOnly := planTokenAt(t, "alice", "", "retainer:read", now) // issued later, no plan
	for _, path := range []string{"/usage?by=day", "/handles/" + id + "/logs"} {
		if a := do(t, "GET", api(path), readOnly, nil); a.status != 200 {
			t.Fatalf("GET %s with a read-only token while cut: %d %s", path, a.status, a.body)
		}
		stillCut("GET " + path + " with a read-only token naming no plan")
	}
	olderPro := planTokenAt(t, "alice", "pro", allScopes, now.Add(-time.Hour))
	if a := do(t, "GET", api("/usage"), olderPro, nil); a.status != 200 {
		t.Fatalf("GET /usage with an older pro token: %d %s", a.status, a.body)
	}
	checkQuotaCut(t, "GET /handles with an older pro token", do(t, "GET", api("/handles"), olderPro, nil))
	stillCut("an older pro token")
	noIat := planTokenAt(t, "alice", "pro", allScopes, time.Time{})
	if a := do(t, "GET", api("/usage"), noIat, nil); a.status != 200 {
		t.Fatalf("GET /usage with a pro token without iat: %d %s", a.status, a.body)
	}
	stillCut("a pro token without iat")
	bobVisits(5)

	// The operator's upgrade: a token naming pro issued after the small one.
	newerPro := planTokenAt(t, "alice", "pro", "retainer:read", now.Add(-time.Minute))
	if a := do(t, "GET", api("/usage"), newerPro, nil); a.status != 200 {
		t.Fatalf("GET /usage with a newer pro token: %d %s", a.status, a.body)
	}
	if got := served(t, visit(id)); got != 21 {
		t.Fatalf("alice's first visit on pro served %d", got)
	}
	if a := do(t, "GET", api("/handles"), aliceSmall, nil); a.status != 200 {
		t.Fatalf("alice's API on pro with her older small token: %d %s", a.status, a.body)
	}
	if got := served(t, visit(id)); got != 22 {
		t.Fatalf("alice's visit after her older small token served %d", got)
	}

	// Dave, on pro, is downgraded by a newer small token; his older pro
	// token, used on every endpoint, does not undo it.
	davePro := planTokenAt(t, "dave", "pro", allScopes, now.Add(-time.Hour))
	daveID := deployCounterRetrying(t, davePro)
	daveSmall := planTokenAt(t, "dave", "small", "retainer:read", now.Add(-time.Minute))
	if a := do(t, "GET", api("/usage"), daveSmall, nil); a.status != 200 {
		t.Fatalf("dave's downgrade: %d %s", a.status, a.body)
	}
	for i := 1; i <= 20; i++ {
		if got := served(t, visit(daveID)); got != i {
			t.Fatalf("dave's visit %d served %d", i, got)
		}
	}
	checkQuotaCut(t, "dave's 21st visit", visit(daveID))
	for _, path := range []string{"/usage", "/handles/" + daveID + "/logs", "/handles"} {
		do(t, "GET", api(path), davePro, nil)
		checkQuotaCut(t, "dave's visit after GET "+path+" with his older pro token", visit(daveID))
	}
	// Moved to medium by a later token, he serves 5 more and is cut again;
	// his log says so, naming each limit once.
	daveMedium := planTokenAt(t, "dave", "medium", "retainer:read", now.Add(-30*time.Second))
	do(t, "GET", api("/usage"), daveMedium, nil)
	for i := 21; i <= 25; i++ {
		if got := served(t, visit(daveID)); got != i {
			t.Fatalf("dave's visit %d on medium served %d", i, got)
		}
	}
	checkQuotaCut(t, "dave's 26th visit", visit(daveID))
	checkQuotaCut(t, "dave's 27th visit", visit(daveID))
	if got := planEntries(t, daveMedium, daveID); len(got) != 2 || !strings.Contains(got[0], "requests_per_day 20;") || !strings.Contains(got[1], "requests_per_day 25;") {
		t.Fatalf("dave's log: %q", got)
	}
	bobVisits(5)

	restart(tester, config)
	if a := visit(id); a.status != 200 {
		t.Fatalf("alice's visit on pro after the restart: %d %s", a.status, a.body)
	}
	do(t, "GET", api("/usage"), olderPro, nil)
	checkQuotaCut(t, "dave's visit after the restart", visit(daveID))
	do(t, "GET", api("/usage"), davePro, nil)
	checkQuotaCut(t, "dave's visit after the restart and his older pro token", visit(daveID))
	if a := visit(bobID); a.status != 200 {
		t.Fatalf("bob's visit after the restart: %d %s", a.status, a.body)
	}
}

// Two gateways of a cluster share plansTable (docs/usage.md): one whose
// memory has not seen the other's record still keeps the later token's
// plan, because its write is conditional on the store's row; a row
// written before records had an iat is its plan, which any token with an
// iat replaces and none without one does; a token naming no plan never
// does.
func TestPlanRecordsKeepTheLaterToken(t *testing.T) {
	t.Parallel()
	st, err := store.OpenBolt(filepath.Join(t.TempDir(), "plans.db"), time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	a, b := openTenantPlans(st), openTenantPlans(st)
	a.record("alice", "small", 200)
	b.record("alice", "pro", 100) // b's memory has no record of alice
	b.record("alice", "", 300)
	for _, g := range []*tenantPlans{a, b} {
		g.load()
		if got := g.get("alice"); got != "small" {
			t.Fatalf("alice's plan after an older pro token and a plan-less one: %q", got)
		}
	}
	b.record("alice", "pro", 300)
	a.record("alice", "small", 250) // a's memory still says small@200
	a.load()
	if got := a.get("alice"); got != "pro" {
		t.Fatalf("alice's plan after a later pro token: %q", got)
	}
	if err := st.Commit(context.Background(), store.Txn{Then: []store.Op{store.Put(plansTable, []byte("bob"), []byte("small"))}}); err != nil {
		t.Fatal(err)
	}
	a.load()
	a.record("bob", "pro", 0)
	if got := a.get("bob"); got != "small" {
		t.Fatalf("a bare row after a token without iat: %q", got)
	}
	a.record("bob", "pro", 1)
	b.load()
	if got := b.get("bob"); got != "pro" {
		t.Fatalf("a bare row after a token with an iat: %q", got)
	}
}
