package caddymodule

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/caddyserver/caddy/v2/caddytest"
	"github.com/coder/websocket"

	"github.com/retainer-gw/retainer/internal/waitfor"
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
	var c *websocket.Conn
	var res *http.Response
	var err error
	waitfor.Within(30*time.Second, func() bool {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		c, res, err = dialSocket(ctx, host, "/chat")
		return err == nil || res == nil || res.StatusCode != 429
	})
	if err != nil {
		t.Fatalf("dial %s once a slot was freed: %v %v", host, res, err)
	}
	return c
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

// dialFrom opens a WebSocket to host through the local Caddy from the
// loopback address src (127.0.0.0/8 is all loopback): visitors at several
// addresses.
func dialFrom(ctx context.Context, src, host, path string) (*websocket.Conn, *http.Response, error) {
	d := &net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(src)}}
	hc := &http.Client{Transport: &http.Transport{DialContext: func(ctx context.Context, network, _ string) (net.Conn, error) {
		return d.DialContext(ctx, network, fmt.Sprintf("127.0.0.1:%d", httpPort))
	}}}
	return websocket.Dial(ctx, fmt.Sprintf("ws://%s:%d%s", host, httpPort, path), &websocket.DialOptions{HTTPClient: hc})
}

// readmeChatWithSize is the README's chat room as written, its room's
// size answered over a GET of /size.
func readmeChatWithSize(t *testing.T) string {
	t.Helper()
	readme, err := os.ReadFile("../README.md")
	if err != nil {
		t.Fatal(err)
	}
	_, rest, _ := strings.Cut(string(readme), "cat > chat.json <<'EOF'\n")
	body, _, _ := strings.Cut(rest, "\nEOF\n")
	var chat struct{ Code string }
	if err := json.Unmarshal([]byte(body), &chat); err != nil || chat.Code == "" {
		t.Fatalf("the README's chat.json: %v", err)
	}
	const head = "export default { fetch(request) {\n"
	if !strings.Contains(chat.Code, head) {
		t.Fatalf("the README's chat room has no %q", head)
	}
	return strings.Replace(chat.Code, head, head+"  if (new URL(request.url).pathname === '/size') return Response.json({size: room.size});\n", 1)
}

// roomSize is a handler's room size over GET /size.
func roomSize(t *testing.T, host string) int {
	t.Helper()
	a := do(t, "GET", site(host, "/size"), "", nil)
	var m struct{ Size int }
	if a.status != 200 || json.Unmarshal(a.body, &m) != nil {
		t.Fatalf("room size: %d %s", a.status, a.body)
	}
	return m.Size
}

// waitRoomSize waits for a room's size to be want, answering the last seen.
func waitRoomSize(t *testing.T, host string, want int) int {
	t.Helper()
	got := 0
	waitfor.Within(15*time.Second, func() bool { got = roomSize(t, host); return got == want })
	return got
}

// The README's chat room with 150 visitors who join, talk and leave at
// once (half with a close, half by dropping the connection): every one
// hears its own message (no event lost to the handle's queue, no 1011),
// the room is empty afterwards (one close event a socket), and a new pair
// still hears each other (docs/websockets.md).
func TestWebSocketRoomOf150VisitorsEmpties(t *testing.T) {
	bob, mallory := attacked(t, "")
	host := deploy(t, mallory, readmeChatWithSize(t), nil) + ".apps.localhost"
	const visitors = 150
	var wg sync.WaitGroup
	var heard, failed, retried atomic.Int32
	var firstErr atomic.Value
	for i := range visitors {
		wg.Add(1)
		go func() {
			defer wg.Done()
			ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
			defer cancel()
			// Three addresses: one holds at most 64 sockets of a handle.
			// An upgrade is a request: past the handle's queue it answers
			// 503 OVERLOADED, and the visitor tries again.
			c, res, err := dialFrom(ctx, fmt.Sprintf("127.0.0.%d", 2+i%3), host, "/ws")
			for err != nil && res != nil && res.StatusCode == 503 && ctx.Err() == nil {
				retried.Add(1)
				time.Sleep(time.Duration(10+i%20) * time.Millisecond)
				c, res, err = dialFrom(ctx, fmt.Sprintf("127.0.0.%d", 2+i%3), host, "/ws")
			}
			if err != nil {
				failed.Add(1)
				firstErr.CompareAndSwap(nil, fmt.Sprintf("visitor %d: dial: %v", i, err))
				return
			}
			mine := fmt.Sprintf("visitor %d says hi", i)
			if err := c.Write(ctx, websocket.MessageText, []byte(mine)); err != nil {
				failed.Add(1)
				firstErr.CompareAndSwap(nil, fmt.Sprintf("visitor %d: write: %v", i, err))
				c.CloseNow()
				return
			}
			for {
				_, data, err := c.Read(ctx)
				if err != nil {
					failed.Add(1)
					firstErr.CompareAndSwap(nil, fmt.Sprintf("visitor %d: before hearing itself: %v", i, err))
					c.CloseNow()
					return
				}
				if string(data) == mine {
					break
				}
			}
			heard.Add(1)
			if i%2 == 0 {
				c.Close(websocket.StatusNormalClosure, "bye")
			} else {
				c.CloseNow()
			}
		}()
	}
	wg.Wait()
	right := roomSize(t, host)
	after := waitRoomSize(t, host, 0)
	t.Logf("%d visitors: %d heard their own message, %d failed (%d upgrades answered 503 and tried again); the room's size right after they left %d, then %d", visitors, heard.Load(), failed.Load(), retried.Load(), right, after)
	if heard.Load() != visitors {
		t.Fatalf("%d of %d visitors heard their own message; first failure: %v", heard.Load(), visitors, firstErr.Load())
	}
	if after != 0 {
		t.Fatalf("the room kept %d dead sockets", after)
	}
	// A new pair hears each other.
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	one, two := mustDial(t, host), mustDial(t, host)
	if err := one.Write(ctx, websocket.MessageText, []byte("anyone here?")); err != nil {
		t.Fatal(err)
	}
	if a, b := readText(t, one), readText(t, two); a != "anyone here?" || b != "anyone here?" {
		t.Fatalf("the new pair heard %q and %q", a, b)
	}
	if n := roomSize(t, host); n != 2 {
		t.Fatalf("the room holds %d, want the new pair", n)
	}
	bob.check("150 visitors in a chat room")
}

// lateAcceptor holds every socket it is given without accept() until GET
// /accept, then counts their messages and close events.
const lateAcceptor = `async () => { const held = []; const closes = []; let messages = 0;
	return { fetch(request) {
	const path = new URL(request.url).pathname;
	if (path === '/closes') return Response.json({closes, messages});
	if (path === '/accept') {
		for (const s of held.splice(0)) {
			s.accept();
			s.addEventListener('message', () => { messages++; });
			s.addEventListener('close', (e) => { closes.push(e.code); });
		}
		return new Response('accepted');
	}
	const [client, server] = Object.values(new WebSocketPair());
	held.push(server);
	return new Response(null, { status: 101, webSocket: client });
} } }`

// A visitor's flood before the handler's accept(): past 1 MiB of frames
// the socket closes with 1008, the worker does not hold the flood, and a
// late accept() gets the close event alone (docs/websockets.md).
func TestWebSocketFloodBeforeAccept(t *testing.T) {
	bob, mallory := attacked(t, "")
	id := deploy(t, mallory, lateAcceptor, nil)
	host := id + ".apps.localhost"
	c := mustDial(t, host)
	pid := hostPID(t, id)
	rssBefore := procStatus(t, strconv.Itoa(pid), "VmRSS")
	closed := make(chan websocket.StatusCode, 1)
	go func() {
		code, _ := readUntilClosed(c)
		closed <- code
	}()
	const flood = 64 << 20 // the test's own bound; main held it all
	frame := make([]byte, 64<<10)
	sent := 0
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
	defer cancel()
	var code websocket.StatusCode
	gotClose := false
	for sent < flood && !gotClose {
		if err := c.Write(ctx, websocket.MessageBinary, frame); err != nil {
			break
		}
		sent += len(frame)
		select {
		case code = <-closed:
			gotClose = true
		default:
		}
	}
	if !gotClose {
		select {
		case code = <-closed:
		case <-time.After(5 * time.Second):
		}
	}
	rssAfter, peak := procStatus(t, strconv.Itoa(pid), "VmRSS"), procStatus(t, strconv.Itoa(pid), "VmHWM")
	t.Logf("a flood before accept(): %.1f MiB sent, closed with %v; the worker's RSS %d MiB before, %d MiB after (peak %d MiB)", float64(sent)/(1<<20), code, rssBefore>>10, rssAfter>>10, peak>>10)
	if code != websocket.StatusPolicyViolation {
		t.Fatalf("a flood before accept() closed with %v, want 1008", code)
	}
	if a := do(t, "GET", site(host, "/accept"), "", nil); a.status != 200 {
		t.Fatalf("accept: %d %s", a.status, a.body)
	}
	var got string
	waitfor.Within(10*time.Second, func() bool {
		got = string(do(t, "GET", site(host, "/closes"), "", nil).body)
		return got == `{"closes":[1008],"messages":0}`
	})
	if got != `{"closes":[1008],"messages":0}` {
		t.Fatalf("the late accept() saw %s, want one close event (1008) and no message", got)
	}
	bob.check("a flood before accept()")
}

// A visitor who floods tiny frames and leaves: the frames still unread
// are dropped, deliveries stop soon after, and the handle answers a GET
// (docs/websockets.md).
func TestWebSocketFlooderWhoLeaves(t *testing.T) {
	bob, mallory := attacked(t, "")
	host := deploy(t, mallory, `async () => { let received = 0; return { fetch(request) {
		if (new URL(request.url).pathname === '/count') return Response.json({received});
		const [client, server] = Object.values(new WebSocketPair());
		server.accept();
		server.addEventListener('message', () => { received++; });
		return new Response(null, { status: 101, webSocket: client });
	} } }`, nil) + ".apps.localhost"
	count := func() int {
		t.Helper()
		a := do(t, "GET", site(host, "/count"), "", nil)
		var m struct{ Received int }
		if a.status != 200 || json.Unmarshal(a.body, &m) != nil {
			t.Fatalf("count: %d %s", a.status, a.body)
		}
		return m.Received
	}
	c := mustDial(t, host)
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
	defer cancel()
	// The flood lasts 1.5 s. A write may block before that: the gateway
	// stops reading a visitor whose frames come faster than the handle
	// takes them (on a busy machine, soon), and that is the flow control
	// working; the flooder then leaves all the same.
	flood, stopFlood := context.WithTimeout(ctx, 1500*time.Millisecond)
	sent := 0
	for ; ; sent++ {
		if err := c.Write(flood, websocket.MessageText, []byte("x")); err != nil {
			if flood.Err() != nil {
				break
			}
			t.Fatal(err)
		}
	}
	stopFlood()
	c.CloseNow()
	left := time.Now()
	atLeave := count()
	answered := time.Since(left)
	// Deliveries stop: the count holds still for a second.
	last, still := count(), time.Now()
	for time.Since(still) < time.Second {
		if time.Since(left) > 12*time.Second {
			t.Fatalf("deliveries went on for 12 s after the flooder left: %d of %d frames delivered", last, sent)
		}
		time.Sleep(100 * time.Millisecond)
		if n := count(); n != last {
			last, still = n, time.Now()
		}
	}
	t.Logf("a flooder sent %d frames in 1.5 s and left; a GET answered %v later (count %d); deliveries stopped %v after the leave at %d", sent, answered.Round(time.Millisecond), atLeave, still.Sub(left).Round(time.Millisecond), last)
	bob.check("a flooder who left")
}

// roomWithRefusals is a room whose handler also answers 101 to a request
// that is no upgrade (/forced), which the gateway refuses.
const roomWithRefusals = `async () => { const room = new Set(); let messages = 0; return { async fetch(request) {
	const path = new URL(request.url).pathname;
	if (path === '/size') return Response.json({size: room.size, messages});
	if (path !== '/forced' && request.headers.get('Upgrade') !== 'websocket') return new Response('expected a websocket', {status: 426});
	const [client, server] = Object.values(new WebSocketPair());
	server.accept();
	room.add(server);
	server.addEventListener('message', (event) => {
		messages++;
		if (event.data === 'let me go') return server.close(4000, 'as asked');
		const until = Date.now() + 1; while (Date.now() < until) {}
		for (const peer of room) peer.send(event.data);
	});
	server.addEventListener('close', () => room.delete(server));
	return new Response(null, { status: 101, webSocket: client });
} } }`

// One visitor address holds at most 64 of a handle's sockets (429 past
// it, as for streams), and every upgrade the gateway refuses after the
// handler's accept() gives the handler its close event: the room never
// keeps the refused socket (docs/websockets.md).
func TestWebSocketSocketsPerVisitorAndRefusedUpgrades(t *testing.T) {
	bob, mallory := attacked(t, "websockets_per_handle 70")
	host := deploy(t, mallory, roomWithRefusals, nil) + ".apps.localhost"
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
	defer cancel()
	var open []*websocket.Conn
	defer func() {
		for _, c := range open {
			c.CloseNow()
		}
	}()
	dial := func(src string) (*websocket.Conn, int) {
		t.Helper()
		c, res, err := dialFrom(ctx, src, host, "/chat")
		if err != nil {
			if res == nil {
				t.Fatalf("dial from %s: %v", src, err)
			}
			return nil, res.StatusCode
		}
		open = append(open, c)
		return c, 101
	}
	for i := range 64 {
		if _, status := dial("127.0.0.2"); status != 101 {
			t.Fatalf("socket %d of one address: %d", i+1, status)
		}
	}
	if _, status := dial("127.0.0.2"); status != 429 {
		t.Fatalf("the 65th socket of one address: %d, want 429", status)
	}
	if _, status := dial("127.0.0.3"); status != 101 {
		t.Fatalf("another address: %d", status)
	}
	if n := waitRoomSize(t, host, 65); n != 65 {
		t.Fatalf("after a refused 65th socket the room holds %d, want 65", n)
	}
	// The handle's own cap (70), from a third address.
	for range 5 {
		if _, status := dial("127.0.0.4"); status != 101 {
			t.Fatalf("under the handle's cap: %d", status)
		}
	}
	if _, status := dial("127.0.0.4"); status != 429 {
		t.Fatalf("past websockets_per_handle: %d, want 429", status)
	}
	// A 101 to a request that is no upgrade is refused too.
	if a := do(t, "GET", site(host, "/forced"), "", nil); a.status == 101 || a.status == 200 {
		t.Fatalf("a 101 to a plain GET: %d %s", a.status, a.body)
	}
	if n := waitRoomSize(t, host, 70); n != 70 {
		t.Fatalf("after refused upgrades the room holds %d, want 70", n)
	}
	// The room still broadcasts to every socket.
	if err := open[0].Write(ctx, websocket.MessageText, []byte("to all")); err != nil {
		t.Fatal(err)
	}
	for i, c := range open {
		if _, data, err := c.Read(ctx); err != nil || string(data) != "to all" {
			t.Fatalf("socket %d heard %q %v", i, data, err)
		}
	}
	// The handler's own close: the visitor's answer is its close event.
	open[1].Write(ctx, websocket.MessageText, []byte("let me go"))
	if code, _ := readUntilClosed(open[1]); code != 4000 {
		t.Fatalf("the handler's close: %v", code)
	}
	if n := waitRoomSize(t, host, 69); n != 69 {
		t.Fatalf("after the handler closed a socket the room holds %d, want 69", n)
	}
	for _, c := range open {
		c.CloseNow()
	}
	open = nil
	if n := waitRoomSize(t, host, 0); n != 0 {
		t.Fatalf("after every visitor left the room holds %d", n)
	}
	bob.check("sockets past a visitor's and a handle's caps")
}

// A handle whose message handler is slower than its visitors send: no
// event is lost and no socket is closed 1011; the visitors are slowed
// (the gateway stops reading them), and the handle still answers requests
// meanwhile, in the half of its queue socket events leave free
// (docs/websockets.md).
func TestWebSocketBusyHandleSlowsVisitors(t *testing.T) {
	bob, mallory := attacked(t, "")
	host := deploy(t, mallory, roomWithRefusals, nil) + ".apps.localhost"
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	const sockets, each = 100, 10
	conns := make([]*websocket.Conn, sockets)
	for i := range conns {
		c, _, err := dialFrom(ctx, fmt.Sprintf("127.0.0.%d", 2+i%2), host, "/chat")
		if err != nil {
			t.Fatalf("socket %d: %v", i, err)
		}
		defer c.CloseNow()
		conns[i] = c
	}
	// Every socket reads what the room sends it (100 x 10 x 100 frames).
	var wrong atomic.Value
	var readers sync.WaitGroup
	for _, c := range conns {
		readers.Add(1)
		go func() {
			defer readers.Done()
			for heard := 0; heard < sockets*each; heard++ {
				if _, _, err := c.Read(ctx); err != nil {
					wrong.CompareAndSwap(nil, err.Error())
					return
				}
			}
		}()
	}
	var writers sync.WaitGroup
	for _, c := range conns {
		writers.Add(1)
		go func() {
			defer writers.Done()
			for j := range each {
				if err := c.Write(ctx, websocket.MessageText, []byte(fmt.Sprintf("m%d", j))); err != nil {
					wrong.CompareAndSwap(nil, err.Error())
					return
				}
			}
		}()
	}
	// Requests are answered while the sockets keep the handle busy.
	served, overloaded := 0, 0
	for i := 0; i < 20; i++ {
		a := do(t, "GET", site(host, "/size"), "", nil)
		switch a.status {
		case 200:
			served++
		case 503:
			overloaded++
		default:
			t.Fatalf("a request beside the sockets: %d %s", a.status, a.body)
		}
		time.Sleep(20 * time.Millisecond)
	}
	writers.Wait()
	readers.Wait()
	if w := wrong.Load(); w != nil {
		t.Fatalf("a socket failed: %v", w)
	}
	a := do(t, "GET", site(host, "/size"), "", nil)
	var m struct{ Size, Messages int }
	json.Unmarshal(a.body, &m)
	t.Logf("%d sockets x %d messages into a 1 ms handler: %d delivered, room %d; requests beside them: %d answered, %d OVERLOADED", sockets, each, m.Messages, m.Size, served, overloaded)
	if m.Messages != sockets*each || m.Size != sockets {
		t.Fatalf("delivered %d of %d messages, room %d of %d", m.Messages, sockets*each, m.Size, sockets)
	}
	if served == 0 {
		t.Fatal("no request was answered while the sockets kept the handle busy")
	}
	bob.check("a busy handle's sockets")
}
