package caddymodule

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/caddyserver/caddy/v2/caddytest"
	"github.com/coder/websocket"
)

// chatRoom is the canonical WebSocket handler (docs/websockets.md): a room
// in one closure, its size over HTTP, its page served by the same handle.
// Headless Chromium dumps a page's DOM once it has loaded, and a page does
// not wait for a WebSocket, but its load waits for an image: a page asked
// for with ?hold=<origin> loads the image <origin>/held and fetches
// <origin>/shown when it has shown a message, and the test's server
// (holdUntilShown) answers the first only after the second.
const chatRoom = `async () => { const room = new Set();
	return { async fetch(request, env) {
	const path = new URL(request.url).pathname;
	if (path === '/size') return Response.json({size: room.size});
	if (path === '/') return new Response(` + "`" + `<!doctype html><title>chat</title><body><p id="log">waiting</p><script>
		const hold = new URLSearchParams(location.search).get('hold');
		const ws = new WebSocket('ws://' + location.host + '/chat');
		ws.onopen = () => ws.send('from the browser');
		ws.onmessage = (e) => {
			document.getElementById('log').textContent = 'got: ' + e.data;
			if (hold) fetch(hold + '/shown', {mode: 'no-cors'});
		};
		if (hold) document.body.appendChild(new Image()).src = hold + '/held';
	</script></body>` + "`" + `, {headers: {'content-type': 'text/html'}});
	if (request.headers.get('Upgrade') !== 'websocket') return new Response('expected a websocket', {status: 426});
	const [client, server] = Object.values(new WebSocketPair());
	server.accept();
	room.add(server);
	server.addEventListener('message', async (event) => {
		if (typeof event.data !== 'string') return server.send(new Uint8Array(event.data).reverse());
		if (event.data === 'boom') return 'x'.repeat(2 ** 29 - 32).toLowerCase();
		if (event.data === 'huge') return server.send('x'.repeat(2 ** 20 + 1));
		if (event.data.startsWith('kv:')) { await env.kv.put('last', event.data); return server.send('stored'); }
		for (const peer of room) peer.send(event.data);
	});
	server.addEventListener('close', () => room.delete(server));
	return new Response(null, { status: 101, webSocket: client });
} } }`

// holdUntilShown serves a browser page's hold (see chatRoom): /held
// answers once /shown was asked for, or after 20 s. Its origin is the
// page's ?hold=. (A hold served by the handle itself would be an
// invocation in progress, and a handle of concurrency 1 takes its
// socket's messages only after it. Nor is Chromium's virtual time of use
// here: a fetch in flight pauses it, and with it, at times, the page's
// socket, whose message then waited for the hold it was to end.)
func holdUntilShown(t *testing.T) string {
	shown := make(chan struct{})
	var once sync.Once
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/shown":
			once.Do(func() { close(shown) })
		case "/held":
			select {
			case <-shown:
			case <-time.After(20 * time.Second):
			}
		}
	}))
	t.Cleanup(srv.Close)
	return srv.URL
}

// dialSocket opens a WebSocket to host through the local Caddy.
func dialSocket(ctx context.Context, host, path string) (*websocket.Conn, *http.Response, error) {
	return websocket.Dial(ctx, fmt.Sprintf("ws://%s:%d%s", host, httpPort, path), &websocket.DialOptions{HTTPClient: client})
}

func mustDial(t *testing.T, host string) *websocket.Conn {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	c, res, err := dialSocket(ctx, host, "/chat")
	if err != nil {
		status := 0
		if res != nil {
			status = res.StatusCode
		}
		t.Fatalf("dial %s: %d %v", host, status, err)
	}
	return c
}

// dialOnceFreed dials host until a slot a close freed is free again: the
// close reaches the gateway after the visitor's side has seen it.
func dialOnceFreed(t *testing.T, host string) *websocket.Conn {
	t.Helper()
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		c, res, err := dialSocket(ctx, host, "/chat")
		cancel()
		if err == nil {
			return c
		}
		if res == nil || res.StatusCode != 429 || time.Now().After(deadline) {
			t.Fatalf("dial %s once a slot was freed: %v %v", host, res, err)
		}
	}
}

func readText(t *testing.T, c *websocket.Conn) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	_, data, err := c.Read(ctx)
	if err != nil {
		t.Fatalf("read: %v", err)
	}
	return string(data)
}

// closedWith reads until the socket closes and answers its close code.
func closedWith(t *testing.T, c *websocket.Conn) websocket.StatusCode {
	t.Helper()
	code, ok := readUntilClosed(c)
	if !ok {
		t.Fatal("the socket did not close")
	}
	return code
}

// readUntilClosed reads until the socket closes and answers its close code, or
// false when it stayed open for 15 seconds; it calls no t method, so a
// goroutine of a test may use it.
func readUntilClosed(c *websocket.Conn) (websocket.StatusCode, bool) {
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
	defer cancel()
	for {
		if _, _, err := c.Read(ctx); err != nil {
			return websocket.CloseStatus(err), ctx.Err() == nil
		}
	}
}

func deploySocketHandler(t *testing.T, tok string) string {
	t.Helper()
	a := do(t, "POST", api("/executions"), tok, mustJSON(map[string]any{"code": chatRoom, "retainHandles": true, "capabilities": []string{"kvRead", "kvWrite"}, "timeoutMs": 2000}))
	id, _ := a.json(t)["executionId"].(string)
	if id == "" {
		t.Fatalf("deploy: %d %s", a.status, a.body)
	}
	return id
}

// WebSockets to a handle through a real gateway (docs/websockets.md).
func TestWebSocketsToAHandle(t *testing.T) {
	tester := caddytest.NewTester(t)
	store := filepath.Join(t.TempDir(), "registry.db")
	tester.InitServer(gatewayConfig(store, "websockets_per_handle 3\nwebsockets_per_tenant 4"), "caddyfile")
	alice := token(t, "alice", allScopes)
	bob := token(t, "bob", allScopes)
	id := deploySocketHandler(t, alice)
	host := id + ".apps.localhost"

	// A room of two: each message reaches both; the room's size over HTTP.
	ann, ben := mustDial(t, host), mustDial(t, host)
	ctx := context.Background()
	if err := ann.Write(ctx, websocket.MessageText, []byte("hello, room")); err != nil {
		t.Fatal(err)
	}
	if a, b := readText(t, ann), readText(t, ben); a != "hello, room" || b != "hello, room" {
		t.Fatalf("the room heard %q and %q", a, b)
	}
	if a := do(t, "GET", site(host, "/size"), "", nil); strings.TrimSpace(string(a.body)) != `{"size":2}` {
		t.Fatalf("room size: %d %s", a.status, a.body)
	}
	// Binary messages, bytes as they are.
	if err := ben.Write(ctx, websocket.MessageBinary, []byte{1, 2, 255}); err != nil {
		t.Fatal(err)
	}
	if typ, data, err := ben.Read(ctx); err != nil || typ != websocket.MessageBinary || string(data) != "\xff\x02\x01" {
		t.Fatalf("binary echo: %v %q %v", typ, data, err)
	}
	// The output gate: a send after a kv write goes once the write is
	// durable, so a run started after it reads the value.
	ann.Write(ctx, websocket.MessageText, []byte("kv:42"))
	if got := readText(t, ann); got != "stored" {
		t.Fatalf("kv message answered %q", got)
	}
	if a := do(t, "POST", api("/executions"), alice, mustJSON(map[string]any{"code": "async () => kv.get('last')", "capabilities": []string{"kvRead"}})); !strings.Contains(string(a.body), `"kv:42"`) {
		t.Fatalf("the write before the send: %s", a.body)
	}

	// Bounds: the third socket of a handle is the last; a tenant's fifth.
	third := mustDial(t, host)
	if _, res, err := dialSocket(ctx, host, "/chat"); err == nil || res == nil || res.StatusCode != 429 {
		t.Fatalf("a fourth socket: %v %v", res, err)
	}
	other := deploySocketHandler(t, alice)
	fourth := mustDial(t, other+".apps.localhost")
	if _, res, err := dialSocket(ctx, other+".apps.localhost", "/chat"); err == nil || res == nil || res.StatusCode != 429 {
		t.Fatalf("a tenant's fifth socket: %v %v", res, err)
	}
	bobs := deploySocketHandler(t, bob)
	bobSocket := mustDial(t, bobs+".apps.localhost")
	// A message over 1 MiB closes its socket with 1009; a visitor's close
	// frees its slot.
	big := make([]byte, 1<<20+1)
	third.Write(ctx, websocket.MessageBinary, big)
	if code := closedWith(t, third); code != websocket.StatusMessageTooBig {
		t.Fatalf("a message over 1 MiB closed with %v", code)
	}
	fourth.Close(websocket.StatusNormalClosure, "")
	again := dialOnceFreed(t, host)

	// Not an upgrade: the handler's answer; an upgrade it refuses: its
	// status; through the API: 501.
	if a := do(t, "GET", site(host, "/chat"), "", nil); a.status != 426 {
		t.Fatalf("a plain GET: %d %s", a.status, a.body)
	}
	if a := do(t, "POST", api("/handles/"+id+"/fetch"), alice, mustJSON(map[string]any{"method": "GET", "url": "https://x/chat", "headers": [][2]string{{"upgrade", "websocket"}}})); a.status != 501 || a.code() != "NOT_IMPLEMENTED" {
		t.Fatalf("an upgrade through the API: %d %s", a.status, a.body)
	}

	// A bound hit in a message handler: its sockets close with 1011, the
	// handle lives on and serves again.
	again.Write(ctx, websocket.MessageText, []byte("boom"))
	for _, c := range []*websocket.Conn{again, ann, ben} {
		if code := closedWith(t, c); code != websocket.StatusInternalError {
			t.Fatalf("after a bound hit: closed with %v", code)
		}
	}
	if a := do(t, "GET", site(host, "/size"), "", nil); a.status != 200 || strings.TrimSpace(string(a.body)) != `{"size":0}` {
		t.Fatalf("after the bound hit: %d %s", a.status, a.body)
	}
	// A reload of the configuration keeps sockets open.
	dave := mustDial(t, host)
	tester.InitServer(gatewayConfig(store, "websockets_per_handle 3\nwebsockets_per_tenant 5"), "caddyfile")
	dave.Write(ctx, websocket.MessageText, []byte("after the reload"))
	if got := readText(t, dave); got != "after the reload" {
		t.Fatalf("after a reload: %q", got)
	}
	// A worker killed under its sockets closes them with 1011; the handle
	// is rebuilt on its next request.
	if pid := hostPID(t, id); pid == 0 {
		t.Fatal("no worker holds the handle")
	} else if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	if code := closedWith(t, dave); code != websocket.StatusInternalError {
		t.Fatalf("after its worker was killed: closed with %v", code)
	}
	if a := do(t, "GET", site(host, "/size"), "", nil); a.status != 200 || strings.TrimSpace(string(a.body)) != `{"size":0}` {
		t.Fatalf("after the kill: %d %s", a.status, a.body)
	}
	// The handle's end closes its sockets with 1001; another tenant's
	// socket stays open.
	carl := mustDial(t, host)
	if a := do(t, "DELETE", api("/handles/"+id), alice, nil); a.status != 204 {
		t.Fatalf("close: %d %s", a.status, a.body)
	}
	if code := closedWith(t, carl); code != websocket.StatusGoingAway {
		t.Fatalf("after the handle's end: closed with %v", code)
	}
	bobSocket.Write(ctx, websocket.MessageText, []byte("still here"))
	if got := readText(t, bobSocket); got != "still here" {
		t.Fatalf("bob's socket: %q", got)
	}
	// A message over 1 MiB from the handler closes the socket with 1009.
	bobSocket.Write(ctx, websocket.MessageText, []byte("huge"))
	if code := closedWith(t, bobSocket); code != websocket.StatusMessageTooBig {
		t.Fatalf("the handler's message over 1 MiB closed with %v", code)
	}
	if a := do(t, "GET", site(bobs+".apps.localhost", "/size"), "", nil); a.status != 200 {
		t.Fatalf("bob's handle after a message over 1 MiB: %d %s", a.status, a.body)
	}

	// In a real browser: the page of the handle opens a socket, sends and
	// shows what came back.
	out := dumpDOM(t, site(bobs+".apps.localhost", "/?hold="+url.QueryEscape(holdUntilShown(t))), 0)
	if !strings.Contains(string(out), "got: from the browser") {
		t.Fatalf("the browser's page:\n%s", out)
	}
}

// A socket with no message either way for websocket_idle closes with 1001;
// pings keep it open.
func TestWebSocketIdle(t *testing.T) {
	tester := caddytest.NewTester(t)
	tester.InitServer(gatewayConfig(filepath.Join(t.TempDir(), "registry.db"), "websocket_idle 1s"), "caddyfile")
	id := deploySocketHandler(t, token(t, "alice", allScopes))
	pinged := mustDial(t, id+".apps.localhost")
	closed := make(chan websocket.StatusCode, 1)
	go func() { // reads, so pongs arrive
		code, _ := readUntilClosed(pinged)
		closed <- code
	}()
	for i := 0; i < 8; i++ {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		err := pinged.Ping(ctx)
		cancel()
		if err != nil {
			t.Fatalf("ping %d, %v into the socket: %v", i+1, time.Duration(i)*300*time.Millisecond, err)
		}
		time.Sleep(300 * time.Millisecond)
	}
	if code := <-closed; code != websocket.StatusGoingAway {
		t.Fatalf("after the pings stopped: closed with %v", code)
	}
	c := mustDial(t, id+".apps.localhost")
	start := time.Now()
	c.Write(context.Background(), websocket.MessageText, []byte("one"))
	readText(t, c)
	if code := closedWith(t, c); code != websocket.StatusGoingAway || time.Since(start) < time.Second {
		t.Fatalf("idle: closed with %v after %v", code, time.Since(start))
	}
}

// The README's chat room deploys as written and serves its page and room.
func TestReadmeChatRoom(t *testing.T) {
	readme, err := os.ReadFile("../README.md")
	if err != nil {
		t.Fatal(err)
	}
	_, rest, ok := strings.Cut(string(readme), "cat > chat.json <<'EOF'\n")
	body, _, ok2 := strings.Cut(rest, "\nEOF\n")
	if !ok || !ok2 {
		t.Fatal("the README has no chat.json")
	}
	tester := caddytest.NewTester(t)
	tester.InitServer(gatewayConfig(filepath.Join(t.TempDir(), "registry.db"), ""), "caddyfile")
	alice := token(t, "alice", allScopes)
	a := do(t, "POST", api("/executions"), alice, []byte(body))
	id, _ := a.json(t)["executionId"].(string)
	if id == "" {
		t.Fatalf("deploy: %d %s", a.status, a.body)
	}
	if a := do(t, "PUT", api("/routes/chat"), alice, mustJSON(map[string]any{"executionId": id})); a.status != 200 {
		t.Fatalf("route: %d %s", a.status, a.body)
	}
	if a := do(t, "GET", site("chat.apps.localhost", "/"), "", nil); a.status != 200 || !strings.Contains(string(a.body), "new WebSocket") {
		t.Fatalf("page: %d %s", a.status, a.body)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	one, _, err := dialSocket(ctx, "chat.apps.localhost", "/ws")
	if err != nil {
		t.Fatal(err)
	}
	two, _, err := dialSocket(ctx, "chat.apps.localhost", "/ws")
	if err != nil {
		t.Fatal(err)
	}
	one.Write(ctx, websocket.MessageText, []byte("hi all"))
	if a, b := readText(t, one), readText(t, two); a != "hi all" || b != "hi all" {
		t.Fatalf("the room heard %q and %q", a, b)
	}
}
