package caddymodule

import (
	"bufio"
	"context"
	"encoding/csv"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/caddyserver/caddy/v2"
	"github.com/caddyserver/caddy/v2/caddytest"
	"github.com/caddyserver/caddy/v2/modules/caddyhttp"
)

type storedEntry struct {
	Time, Level, Message, Method, URL string
	Status                            int
	DurationMs, CPUMs                 float64
}

func readLogs(t *testing.T, tok, id, query string) ([]storedEntry, string) {
	t.Helper()
	a := do(t, "GET", api("/handles/"+id+"/logs"+query), tok, nil)
	var page struct {
		Logs   []storedEntry
		Cursor *string
	}
	if a.status != 200 || json.Unmarshal(a.body, &page) != nil || page.Logs == nil {
		t.Fatalf("logs%s: %d %.300s", query, a.status, a.body)
	}
	cursor := ""
	if page.Cursor != nil {
		cursor = *page.Cursor
	}
	return page.Logs, cursor
}

// A handle's console lines and one request entry per invocation are kept
// in the store: they survive a restart of the gateway, page with limit and
// cursor (oldest first), and since in the future answers none. Another
// tenant's handle's log is 404, and the bystander's log holds only its own.
func TestStoredHandleLogs(t *testing.T) {
	config := gatewayConfig(filepath.Join(t.TempDir(), "registry.db"), "")
	tester := caddytest.NewTester(t)
	tester.InitServer(config, "caddyfile")
	alice, bob := token(t, "alice", allScopes), token(t, "bob", allScopes)
	id, bobID := deployCounter(t, alice), deployCounter(t, bob)
	for i := 1; i <= 3; i++ {
		if got := served(t, do(t, "GET", site(id+".apps.localhost", fmt.Sprintf("/p%d", i)), "", nil)); got != i {
			t.Fatalf("visit %d served %d", i, got)
		}
	}
	if a := do(t, "GET", site(id+".apps.localhost", "/throw"), "", nil); a.status != 500 {
		t.Fatalf("a throwing visit: %d", a.status)
	}
	served(t, do(t, "GET", site(bobID+".apps.localhost", "/bob"), "", nil))

	restart(tester, config)

	var all []storedEntry
	cursor := ""
	for pages := 0; ; pages++ {
		q := "?since=2000-01-01T00:00:00Z&limit=2"
		if cursor != "" {
			q = "?limit=2&cursor=" + cursor
		}
		page, next := readLogs(t, alice, id, q)
		if len(page) == 0 {
			break
		}
		if len(page) > 2 || pages > 20 {
			t.Fatalf("page %d has %d entries", pages, len(page))
		}
		all = append(all, page...)
		cursor = next
	}
	var requests, visits []string
	threw := false
	for _, e := range all {
		switch {
		case e.Level == "request":
			requests = append(requests, fmt.Sprintf("%s %s %d", e.Method, e.URL[strings.LastIndex(e.URL, "/"):], e.Status))
			if e.DurationMs <= 0 {
				t.Fatalf("a request entry without its duration: %+v", e)
			}
		case e.Level == "log" && strings.HasPrefix(e.Message, "visit "):
			visits = append(visits, e.Message[strings.LastIndex(e.Message, "/"):])
		case strings.Contains(e.Message, "secret detail"):
			threw = true
		}
		if _, err := time.Parse("2006-01-02T15:04:05.000Z07:00", e.Time); err != nil {
			t.Fatalf("an entry's time: %v", err)
		}
	}
	if strings.Join(requests, ",") != "GET /p1 200,GET /p2 200,GET /p3 200,GET /throw 500" ||
		strings.Join(visits, ",") != "/p1,/p2,/p3" || !threw {
		t.Fatalf("alice's stored log after a restart: requests %q, visits %q, the error kept %v; %+v", requests, visits, threw, all)
	}
	if page, _ := readLogs(t, alice, id, "?since="+time.Now().Add(time.Hour).UTC().Format(time.RFC3339)); len(page) != 0 {
		t.Fatalf("since in the future: %+v", page)
	}
	// The default page is the newest entries.
	if page, _ := readLogs(t, alice, id, "?limit=1"); len(page) != 1 || page[0].Level != "request" || !strings.HasSuffix(page[0].URL, "/throw") {
		t.Fatalf("the newest entry: %+v", page)
	}
	if a := do(t, "GET", api("/handles/"+id+"/logs"), bob, nil); a.status != 404 {
		t.Fatalf("bob read alice's log: %d %s", a.status, a.body)
	}
	if a := do(t, "GET", api("/handles/"+id+"/logs?limit=5000"), alice, nil); a.status != 400 {
		t.Fatalf("limit 5000: %d %s", a.status, a.body)
	}
	page, _ := readLogs(t, bob, bobID, "")
	if len(page) != 2 || strings.Contains(fmt.Sprint(page), id) || !strings.Contains(fmt.Sprint(page), "/bob") {
		t.Fatalf("bob's log: %+v", page)
	}
}

// sseTail opens a tail and sends its events ("log {...}", "dropped
// {...}") on the channel until ctx ends.
func sseTail(t *testing.T, ctx context.Context, tok, id string) (int, <-chan string) {
	t.Helper()
	req, _ := http.NewRequestWithContext(ctx, "GET", api("/handles/"+id+"/tail"), nil)
	req.Header.Set("Authorization", "Bearer "+tok)
	res, err := (&http.Client{Transport: client.Transport}).Do(req)
	if err != nil {
		t.Fatal(err)
	}
	events := make(chan string, 100)
	if res.StatusCode != 200 {
		res.Body.Close()
		close(events)
		return res.StatusCode, events
	}
	go func() {
		defer res.Body.Close()
		defer close(events)
		sc := bufio.NewScanner(res.Body)
		event := ""
		for sc.Scan() {
			line := sc.Text()
			switch {
			case strings.HasPrefix(line, "event: "):
				event = strings.TrimPrefix(line, "event: ")
			case strings.HasPrefix(line, "data: "):
				events <- event + " " + strings.TrimPrefix(line, "data: ")
			}
		}
	}()
	return 200, events
}

// A tail sees three requests' entries as they happen; another tenant's
// tail of the handle is 404; the 11th tail of a tenant is 429 while a
// bystander tenant tails and is served as before.
func TestHandleTail(t *testing.T) {
	tester := caddytest.NewTester(t)
	tester.InitServer(gatewayConfig(filepath.Join(t.TempDir(), "registry.db"), ""), "caddyfile")
	alice, bob, mallory := token(t, "alice", allScopes), token(t, "bob", allScopes), token(t, "mallory", allScopes)
	id, bobID := deployCounter(t, alice), deployCounter(t, bob)
	served(t, do(t, "GET", site(bobID+".apps.localhost", "/"), "", nil))
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()

	status, events := sseTail(t, ctx, alice, id)
	if status != 200 {
		t.Fatalf("alice's tail: %d", status)
	}
	for i := 1; i <= 3; i++ {
		served(t, do(t, "GET", site(id+".apps.localhost", fmt.Sprintf("/t%d", i)), "", nil))
	}
	var requests []string
	deadline := time.After(10 * time.Second)
	for len(requests) < 3 {
		select {
		case ev, ok := <-events:
			if !ok {
				t.Fatalf("the tail ended after %q", requests)
			}
			if strings.HasPrefix(ev, "log ") && strings.Contains(ev, `"level":"request"`) {
				requests = append(requests, ev[strings.Index(ev, "/t"):strings.Index(ev, "/t")+3])
			}
		case <-deadline:
			t.Fatalf("the tail saw %q within 10 s", requests)
		}
	}
	if strings.Join(requests, ",") != "/t1,/t2,/t3" {
		t.Fatalf("the tail's requests: %q", requests)
	}

	if status, _ := sseTail(t, ctx, mallory, id); status != 404 {
		t.Fatalf("mallory's tail of alice's handle: %d", status)
	}
	for i := 2; i <= 10; i++ {
		if status, _ := sseTail(t, ctx, alice, id); status != 200 {
			t.Fatalf("alice's tail %d: %d", i, status)
		}
	}
	a := do(t, "GET", api("/handles/"+id+"/tail"), alice, nil)
	if a.status != 429 || a.code() != "QUOTA_EXCEEDED" {
		t.Fatalf("alice's 11th tail: %d %s", a.status, a.body)
	}
	status, bobEvents := sseTail(t, ctx, bob, bobID)
	if status != 200 {
		t.Fatalf("bob's tail while alice holds 10: %d", status)
	}
	if got := served(t, do(t, "GET", site(bobID+".apps.localhost", "/"), "", nil)); got != 2 {
		t.Fatalf("bob's counter: %d, want 2", got)
	}
	select {
	case ev := <-bobEvents:
		if !strings.HasPrefix(ev, "log ") || strings.Contains(ev, id) {
			t.Fatalf("bob's tail: %s", ev)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("bob's tail saw nothing of his visit")
	}
}

// An open tail does not hold up a reload, even with Caddy's default
// grace period (wait for open answers forever): it ends as the old server
// shuts down, and the reader may open it again.
func TestTailEndsOnReload(t *testing.T) {
	config := strings.Replace(gatewayConfig(filepath.Join(t.TempDir(), "registry.db"), ""), "grace_period 1s\n", "", 1)
	tester := caddytest.NewTester(t)
	tester.InitServer(config, "caddyfile")
	alice := token(t, "alice", allScopes)
	id := deployCounter(t, alice)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	status, events := sseTail(t, ctx, alice, id)
	if status != 200 {
		t.Fatalf("the tail: %d", status)
	}
	reloaded := make(chan struct{})
	go func() {
		tester.InitServer(strings.Replace(config, "timeout 500ms", "timeout 600ms", 1), "caddyfile")
		close(reloaded)
	}()
	select {
	case <-reloaded:
	case <-time.After(15 * time.Second):
		t.Fatal("a reload waited 15 s for an open tail")
	}
	for ev := range events {
		t.Logf("an event before the end: %s", ev)
	}
	// The reader opens the tail again on a new connection, as one whose
	// connection the old server's shutdown closed: an idle keep-alive
	// connection of the old server, reused at the moment it shuts down,
	// once held this request until the test's deadline (a CI run).
	client.Transport.(*http.Transport).CloseIdleConnections()
	if status, _ := sseTail(t, ctx, alice, id); status != 200 {
		t.Fatalf("a tail after the reload: %d", status)
	}
}

// Usage a UTC day: 50 visits of 10 KB to alice's handle, each writing 1 KB
// to kv, count 50 requests, their wall time, at least 500 KB of egress and
// 50 KB of kv at GET /usage, none of it in bob's; the admin export lists both tenants, and it survives a restart.
func TestUsagePerTenantAndDay(t *testing.T) {
	config := gatewayConfig(filepath.Join(t.TempDir(), "registry.db"), "")
	tester := caddytest.NewTester(t)
	tester.InitServer(config, "caddyfile")
	alice, bob := token(t, "alice", allScopes), token(t, "bob", allScopes)
	id := deploy(t, alice, `async () => ({ async fetch(request, env) {
		const n = Number(await env.kv.get('n') ?? 0) + 1;
		await env.kv.put('n', String(n));
		await env.kv.put('blob' + n, 'y'.repeat(1000));
		return new Response('x'.repeat(10240));
	} })`, map[string]any{"capabilities": []string{"kvRead", "kvWrite"}})
	bobID := deployCounter(t, bob)
	for i := 0; i < 50; i++ {
		if a := do(t, "GET", site(id+".apps.localhost", "/"), "", nil); a.status != 200 || len(a.body) != 10240 {
			t.Fatalf("visit %d: %d, %d bytes", i, a.status, len(a.body))
		}
	}
	served(t, do(t, "GET", site(bobID+".apps.localhost", "/"), "", nil))
	restart(tester, config)

	today := time.Now().UTC().Format(time.DateOnly)
	type row struct {
		Registry, Tenant, Start string
		Requests, EgressBytes   int64
		WallMs, CPUMs           float64
		KVBytes                 *int64
		SQLBytes, ObjectBytes   *int64
		AITokens                *int64
		WebsocketMessages       *int64
	}
	read := func(tok string, query ...string) []row {
		t.Helper()
		q := "?from=" + today + "&to=" + today
		if len(query) > 0 {
			q = query[0]
		}
		a := do(t, "GET", api("/usage"+q), tok, nil)
		var out struct{ Usage []row }
		if a.status != 200 || json.Unmarshal(a.body, &out) != nil {
			t.Fatalf("usage: %d %s", a.status, a.body)
		}
		return out.Usage
	}
	rows := read(alice)
	if len(rows) != 1 || rows[0].Requests != 50 || rows[0].EgressBytes < 50*10240 || rows[0].WallMs <= 0 || rows[0].Start != today+"T00:00:00Z" ||
		rows[0].KVBytes == nil || *rows[0].KVBytes < 50*1000 || rows[0].CPUMs <= 0 ||
		rows[0].SQLBytes == nil || rows[0].ObjectBytes == nil || rows[0].AITokens == nil || rows[0].WebsocketMessages == nil {
		t.Fatalf("alice's usage: %+v", rows)
	}
	// By hour: the same requests, in hours that start on the hour.
	hours := read(alice, "?by=hour&from="+today)
	sum := int64(0)
	for _, h := range hours {
		if !strings.HasSuffix(h.Start, ":00:00Z") || !strings.HasPrefix(h.Start, today+"T") {
			t.Fatalf("an hour's start: %+v", h)
		}
		sum += h.Requests
	}
	if sum != 50 {
		t.Fatalf("alice's hours: %+v", hours)
	}
	if a := do(t, "GET", api("/usage?by=week"), alice, nil); a.status != 400 || a.code() != "BAD_REQUEST" {
		t.Fatalf("by=week: %d %s", a.status, a.body)
	}
	// Each request entry of alice's log has its CPU time.
	logs, _ := readLogs(t, alice, id, "?limit=1000")
	withCPU := 0
	for _, e := range logs {
		if e.Level == "request" && e.CPUMs > 0 && e.CPUMs <= e.DurationMs {
			withCPU++
		}
	}
	if withCPU < 40 {
		t.Fatalf("request entries with cpuMs: %d of %d", withCPU, len(logs))
	}
	if rows := read(bob); len(rows) != 1 || rows[0].Requests != 1 || rows[0].EgressBytes >= 10240 || rows[0].KVBytes == nil || *rows[0].KVBytes != 0 {
		t.Fatalf("bob's usage: %+v", rows)
	}
	res, err := http.Get(adminURL("/retainer/usage"))
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	var export struct{ Usage []row }
	json.NewDecoder(res.Body).Decode(&export)
	tenants := map[string]int64{}
	for _, r := range export.Usage {
		if r.Registry == "apps" {
			tenants[r.Tenant] += r.Requests
		}
	}
	if tenants["alice"] != 50 || tenants["bob"] != 1 {
		t.Fatalf("the admin export: %+v", export.Usage)
	}
	// The same export in CSV: a header and a row per tenant and day.
	res, err = http.Get(adminURL("/retainer/usage?format=csv&from=" + today))
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	records, err := csv.NewReader(res.Body).ReadAll()
	if err != nil || res.Header.Get("Content-Type") != "text/csv; charset=utf-8" || len(records) < 3 ||
		strings.Join(records[0], ",") != "registry,tenant,start,requests,cpuMs,wallMs,egressBytes,kvBytes,sqlBytes,objectBytes,aiTokens,websocketMessages" {
		t.Fatalf("the CSV export: %v %q", err, records)
	}
	csvTenants := map[string]string{}
	for _, r := range records[1:] {
		if r[0] == "apps" {
			csvTenants[r[1]] = r[3]
		}
	}
	if csvTenants["alice"] != "50" || csvTenants["bob"] != "1" {
		t.Fatalf("the CSV export's tenants: %q", records)
	}
}

// A tail asked of the server a reload retires (a request that came on one
// of its keep-alive connections as the new configuration took over) is
// answered at once, 503 with Retry-After and the connection closed, not
// held by the stopping gateway: such a tail once waited 30 s for its head
// and held the old server's shutdown. The old server is called directly,
// as its connection would.
func TestTailOnARetiredServerIsAnsweredAtOnce(t *testing.T) {
	config := gatewayConfig(filepath.Join(t.TempDir(), "registry.db"), "")
	tester := caddytest.NewTester(t)
	tester.InitServer(config, "caddyfile")
	alice := token(t, "alice", allScopes)
	id := deployCounter(t, alice)
	httpApp, err := caddy.ActiveContext().App("http")
	if err != nil {
		t.Fatal(err)
	}
	var old []*caddyhttp.Server
	for _, srv := range httpApp.(*caddyhttp.App).Servers {
		old = append(old, srv)
	}
	tester.InitServer(strings.Replace(config, "timeout 500ms", "timeout 600ms", 1), "caddyfile")
	for _, srv := range old {
		req := httptest.NewRequest("GET", api("/handles/"+id+"/tail"), nil)
		req.Header.Set("Authorization", "Bearer "+alice)
		rec := httptest.NewRecorder()
		done := make(chan struct{})
		go func() {
			defer close(done)
			srv.ServeHTTP(rec, req)
		}()
		select {
		case <-done:
		case <-time.After(10 * time.Second):
			t.Fatal("a tail asked of the retired server was held 10 s")
		}
		if rec.Code != 503 || rec.Header().Get("Retry-After") == "" || rec.Header().Get("Connection") != "close" {
			t.Fatalf("the retired server's tail: %d %q, headers %v", rec.Code, rec.Body.String(), rec.Header())
		}
	}
	// The new server serves the tail.
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if status, _ := sseTail(t, ctx, alice, id); status != 200 {
		t.Fatalf("a tail after the reload: %d", status)
	}
}
