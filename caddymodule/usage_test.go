package caddymodule

import (
	"context"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/caddyserver/caddy/v2/caddytest"
	"github.com/coder/websocket"

	"github.com/retainer-gw/retainer/internal/waitfor"
)

// usageToday is tenant tok's usage today, summed over its rows.
type usageTotals struct {
	Requests, EgressBytes, SQLBytes, AITokens, WebsocketMessages int64
	CPUMs, WallMs                                                float64
}

func usageToday(t *testing.T, tok string) usageTotals {
	t.Helper()
	a := do(t, "GET", api("/usage?by=hour&from="+time.Now().UTC().Format(time.DateOnly)), tok, nil)
	var out struct{ Usage []usageTotals }
	if a.status != 200 || jsonUnmarshal(a.body, &out) != nil {
		t.Fatalf("usage: %d %s", a.status, a.body)
	}
	var sum usageTotals
	for _, r := range out.Usage {
		sum.Requests += r.Requests
		sum.EgressBytes += r.EgressBytes
		sum.SQLBytes = max(sum.SQLBytes, r.SQLBytes)
		sum.AITokens += r.AITokens
		sum.WebsocketMessages += r.WebsocketMessages
		sum.CPUMs += r.CPUMs
		sum.WallMs += r.WallMs
	}
	return sum
}

// What a request entry does not count is metered too (docs/usage.md): a
// streamed answer's bytes as they are sent, an outbound fetch's answer,
// WebSocket messages either way (and the bytes sent), and the tenant's SQL
// database's bytes; a computation's CPU. Bob, who only
// watches, is charged nothing of it.
func TestUsageCountsStreamsSocketsFetchesAndSQL(t *testing.T) {
	upstream := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Write([]byte(strings.Repeat("u", 30000)))
	}))
	defer upstream.Close()
	config := strings.Replace(gatewayConfig(filepath.Join(t.TempDir(), "registry.db"), ""),
		"require_scopes", "require_scopes\n\t\toutbound_allow_private", 1)
	caddytest.NewTester(t).InitServer(config, "caddyfile")
	alice, bob := token(t, "alice", allScopes), token(t, "bob", allScopes)
	id := deploy(t, alice, `async () => ({ async fetch(request, env) {
		const url = new URL(request.url);
		if (url.pathname === '/stream') {
			let n = 0;
			return new Response(new ReadableStream({ pull(c) {
				if (n++ === 20) return c.close();
				c.enqueue(new TextEncoder().encode('s'.repeat(1000)));
			} }));
		}
		if (url.pathname === '/fetch') return new Response(String((await (await fetch(url.searchParams.get('u'))).text()).length));
		if (url.pathname === '/sql') {
			await env.db.exec('CREATE TABLE IF NOT EXISTS t (x); INSERT INTO t VALUES (randomblob(50000))');
			return new Response('ok');
		}
		if (url.pathname === '/spin') { const end = Date.now() + 60; while (Date.now() < end) {} return new Response('spun'); }
		const [client, server] = Object.values(new WebSocketPair());
		server.accept();
		server.addEventListener('message', (event) => server.send('echo ' + event.data));
		return new Response(null, { status: 101, webSocket: client });
	} })`, map[string]any{"capabilities": []string{"fetch", "sqlWrite"}, "timeoutMs": 2000,
		"outbound": map[string]any{"allow": []string{strings.TrimPrefix(upstream.URL, "http://")}}})
	bobID := deployCounter(t, bob)
	served(t, do(t, "GET", site(bobID+".apps.localhost", "/"), "", nil))
	bobBefore := usageToday(t, bob)

	if a := do(t, "GET", site(id+".apps.localhost", "/stream"), "", nil); a.status != 200 || len(a.body) != 20000 {
		t.Fatalf("the stream: %d, %d bytes", a.status, len(a.body))
	}
	if a := do(t, "GET", site(id+".apps.localhost", "/fetch?u="+upstream.URL), "", nil); a.status != 200 || string(a.body) != "30000" {
		t.Fatalf("the fetch: %d %s", a.status, a.body)
	}
	if a := do(t, "GET", site(id+".apps.localhost", "/sql"), "", nil); a.status != 200 {
		t.Fatalf("the SQL write: %d %s", a.status, a.body)
	}
	if a := do(t, "GET", site(id+".apps.localhost", "/spin"), "", nil); a.status != 200 {
		t.Fatalf("the spin: %d %s", a.status, a.body)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	c, _, err := dialSocket(ctx, id+".apps.localhost", "/ws")
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 3; i++ {
		if err := c.Write(ctx, websocket.MessageText, []byte(strings.Repeat("m", 1000))); err != nil {
			t.Fatal(err)
		}
		if got := readText(t, c); got != "echo "+strings.Repeat("m", 1000) {
			t.Fatalf("the echo: %.20q", got)
		}
	}
	c.Close(websocket.StatusNormalClosure, "")

	var got usageTotals
	waitfor.Within(10*time.Second, func() bool { got = usageToday(t, alice); return got.WebsocketMessages >= 6 })
	// 20,000 streamed + 30,000 fetched + 3 × 1,005 sent on the socket.
	if got.EgressBytes < 53000 || got.WebsocketMessages != 6 || got.SQLBytes < 50000 || got.CPUMs <= 0 {
		t.Fatalf("alice's usage: %+v", got)
	}
	// A computation's CPU is the tenant's too.
	if a := do(t, "POST", api("/executions"), alice, mustJSON(map[string]any{"code": "() => { const end = Date.now() + 30; while (Date.now() < end) {} return 1; }"})); a.status != 200 {
		t.Fatalf("the computation: %d %s", a.status, a.body)
	}
	if after := usageToday(t, alice); after.CPUMs <= got.CPUMs || after.Requests != got.Requests {
		t.Fatalf("alice's usage after a computation: %+v, before %+v", after, got)
	}
	if after := usageToday(t, bob); after != bobBefore {
		t.Fatalf("bob was charged: %+v, then %+v", bobBefore, after)
	}
}
