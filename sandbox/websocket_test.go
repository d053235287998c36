package sandbox

import (
	"context"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/retainer-gw/retainer/internal/waitfor"
	"github.com/retainer-gw/retainer/program"
	"github.com/retainer-gw/retainer/sandbox/webapi/websocket"
)

// readRecords reads a socket's stream until it holds n records (or ends).
func readRecords(t *testing.T, id string, stream int64, recs *websocket.Records, n int) ([]websocket.Record, bool) {
	t.Helper()
	var out []websocket.Record
	for len(out) < n {
		chunk, done, err := engine(t).ReadStream(context.Background(), id, stream, 2*time.Second)
		if err != nil {
			t.Fatalf("read: %v", err)
		}
		got, err := recs.Add(chunk)
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, got...)
		if done {
			return out, true
		}
	}
	return out, false
}

// The runtime's WebSocketPair: the 101 answer, the handler's sends as
// records, the visitor's messages and close as events (docs/websockets.md).
func TestWebSocketPairInTheIsolate(t *testing.T) {
	id := deploy(t, `async () => { const room = new Set(); return { fetch(request) {
		if (request.url.endsWith('/size')) return new Response(String(room.size));
		if (request.headers.get('Upgrade') !== 'websocket') return new Response('expected a websocket', {status: 426});
		const [client, server] = Object.values(new WebSocketPair());
		server.accept();
		room.add(server);
		server.send('hello');
		server.addEventListener('message', (event) => {
			if (event.data === 'bye') return server.close(4000, 'as asked');
			if (typeof event.data === 'string') server.send('echo: ' + event.data);
			else server.send(new Uint8Array(event.data).reverse());
		});
		server.onclose = (event) => { room.delete(server); };
		return new Response(null, { status: 101, webSocket: client });
	} } }`)
	e := engine(t)
	res, err := e.Invoke(context.Background(), id, "fetch", program.NewWireRequest("GET", "https://x/chat", [][2]string{{"upgrade", "websocket"}}, nil))
	if err != nil || res.Status != 101 || res.Stream == 0 {
		t.Fatalf("upgrade: %+v %v", res, err)
	}
	recs := &websocket.Records{Max: 1 << 20}
	got, _ := readRecords(t, id, res.Stream, recs, 1)
	if got[0].Kind != websocket.Text || string(got[0].Data) != "hello" {
		t.Fatalf("first record %+v", got[0])
	}
	event := func(kind byte, code int, data string) {
		t.Helper()
		r, err := e.Invoke(context.Background(), id, program.SocketEvent, program.SocketEventRequest(res.Stream, kind, code, []byte(data)))
		if err != nil || r.Status != 204 {
			t.Fatalf("event: %+v %v", r, err)
		}
	}
	event(websocket.Text, 0, "héllo")
	event(websocket.Binary, 0, "\x01\x02\xff")
	got, _ = readRecords(t, id, res.Stream, recs, 2)
	if string(got[0].Data) != "echo: héllo" || got[1].Kind != websocket.Binary || string(got[1].Data) != "\xff\x02\x01" {
		t.Fatalf("echoes %+v", got)
	}
	if r, _ := get(t, id, "https://x/size"); string(r.BodyBytes()) != "1" {
		t.Fatalf("room size %s", r.BodyBytes())
	}
	event(websocket.Text, 0, "bye")
	got, done := readRecords(t, id, res.Stream, recs, 1)
	if len(got) != 1 || got[0].Kind != websocket.Close || got[0].Code != 4000 || string(got[0].Data) != "as asked" || done {
		t.Fatalf("close %+v done %v", got, done)
	}
	// The visitor's answer to the close reaches onclose (the stream stays
	// open until the gateway lets it go).
	event(websocket.Close, 4000, "")
	if r, _ := get(t, id, "https://x/size"); string(r.BodyBytes()) != "0" {
		t.Fatalf("room size after the close %s", r.BodyBytes())
	}
	e.CancelStream(id, res.Stream)
	// A request can never pose as an event: an invocation named fetch with
	// a socket url is a plain request, and "websocket" needs the gateway's
	// event url.
	if _, err := e.Invoke(context.Background(), id, program.SocketEvent, program.NewWireRequest("GET", "https://x/", nil, nil)); err == nil {
		t.Fatal("an event with a request's url was taken")
	}
	if r, err := e.Invoke(context.Background(), id, "fetch", program.NewWireRequest("GET", "socket:1:t:0", nil, []byte("x"))); err != nil || r.Status != 426 {
		t.Fatalf("a request with an event's url: %+v %v", r, err)
	}
	// Bad uses throw as in Workers.
	out := mustRun(t, `async () => {
		const errs = [];
		try { new WebSocket('wss://example.com') } catch (e) { errs.push(e.constructor.name) }
		const [c, s] = Object.values(new WebSocketPair());
		try { s.send('x') } catch (e) { errs.push('send before accept') }
		try { new Response(null, {status: 101}) } catch (e) { errs.push(e.constructor.name) }
		try { new Response(null, {status: 101, webSocket: s}) } catch (e) { errs.push('server end') }
		s.accept();
		try { s.close(1001) } catch (e) { errs.push(e.name) }
		s.close(); s.close();
		return [errs, s.readyState, WebSocket.OPEN, new Response(null, {status: 101, webSocket: c}).webSocket === c];
	}`)
	if string(out.Result) != `[["TypeError","send before accept","RangeError","server end","InvalidAccessError"],2,1,true]` {
		t.Fatalf("misuse: %s", out.Result)
	}
}

// Every accepted socket gets exactly one close event, whatever ends it
// (docs/websockets.md): the visitor's close, the gateway letting the
// stream go (a refused upgrade, an event it could not deliver), or both.
// Before accept(), at most 1 MiB of messages wait; past it the socket
// closes with 1008 and a late accept() gets that close event alone.
func TestWebSocketCloseEventsOnce(t *testing.T) {
	id := deploy(t, `async () => { const room = new Set(); const closes = []; let late; let lateMessages = 0;
		return { fetch(request) {
		const path = new URL(request.url).pathname;
		if (path === '/stats') return new Response(room.size + ' ' + closes.join(',') + ' ' + lateMessages);
		if (path === '/accept') {
			late.accept();
			late.addEventListener('message', () => { lateMessages++; });
			late.addEventListener('close', (e) => { closes.push('late:' + e.code); });
			return new Response('accepted');
		}
		const [client, server] = Object.values(new WebSocketPair());
		if (path === '/late') { late = server; return new Response(null, { status: 101, webSocket: client }); }
		server.accept();
		room.add(server);
		server.addEventListener('message', (event) => { for (const peer of room) peer.send(event.data); });
		server.addEventListener('close', (e) => { room.delete(server); closes.push(e.code); });
		return new Response(null, { status: 101, webSocket: client });
	} } }`)
	e := engine(t)
	open := func(path string) int64 {
		t.Helper()
		res, err := e.Invoke(context.Background(), id, "fetch", program.NewWireRequest("GET", "https://x"+path, [][2]string{{"upgrade", "websocket"}}, nil))
		if err != nil || res.Status != 101 || res.Stream == 0 {
			t.Fatalf("upgrade: %+v %v", res, err)
		}
		return res.Stream
	}
	event := func(stream int64, kind byte, code int, data string) {
		t.Helper()
		r, err := e.Invoke(context.Background(), id, program.SocketEvent, program.SocketEventRequest(stream, kind, code, []byte(data)))
		if err != nil || r.Status != 204 && r.Status != 410 {
			t.Fatalf("event: %+v %v", r, err)
		}
	}
	stats := func(want string) {
		t.Helper()
		var got string
		if !waitfor.Within(30*time.Second, func() bool {
			r, err := get(t, id, "https://x/stats")
			if err != nil {
				t.Fatal(err)
			}
			got = string(r.BodyBytes())
			return got == want
		}) {
			t.Fatalf("stats %q, want %q", got, want)
		}
	}
	refused, closed, both := open("/"), open("/"), open("/")
	stats("3  0")
	// The gateway refused the upgrade after accept(): it lets the stream go.
	e.CancelStream(id, refused)
	stats("2 1006 0")
	// The visitor closed; then the gateway lets the stream go.
	event(closed, websocket.Close, 1000, "bye")
	e.CancelStream(id, closed)
	stats("1 1006,1000 0")
	// The close event twice, then the stream's cancel: one event.
	event(both, websocket.Close, 4001, "")
	event(both, websocket.Close, 4002, "")
	event(both, websocket.Text, 0, "after the close")
	e.CancelStream(id, both)
	stats("0 1006,1000,4001 0")
	// A new pair still hears each other: the room holds no dead socket.
	one, two := open("/"), open("/")
	event(one, websocket.Text, 0, "hello")
	for _, st := range []int64{one, two} {
		if got, _ := readRecords(t, id, st, &websocket.Records{Max: 1 << 20}, 1); string(got[0].Data) != "hello" {
			t.Fatalf("broadcast %+v", got)
		}
	}

	// Before accept(): past 1 MiB of messages the socket closes with 1008.
	late := open("/late")
	chunk := strings.Repeat("x", 64<<10)
	for i := 0; i < 20; i++ {
		event(late, websocket.Binary, 0, chunk)
	}
	if got, _ := readRecords(t, id, late, &websocket.Records{Max: 1 << 20}, 1); got[0].Kind != websocket.Close || got[0].Code != 1008 {
		t.Fatalf("a flood before accept(): %+v", got)
	}
	if r, _ := get(t, id, "https://x/accept"); r.Status != 200 {
		t.Fatalf("accept: %+v", r)
	}
	event(late, websocket.Close, 1008, "")
	e.CancelStream(id, late)
	stats("2 1006,1000,4001,late:1008 0")
}

// What waits for an isolate's sockets is bounded for all of them together
// (a quarter of its memory bound, at most 8 MiB: docs/websockets.md): a
// socket whose visitor never reads is closed with 1008 once what waits
// for it passes that, while a socket that is read keeps receiving, and
// the isolate and its state live on. Before, 16 MiB could wait per socket.
func TestWebSocketWaitingSendsBoundedPerIsolate(t *testing.T) {
	id := deploy(t, `async () => { const room = new Set(); let blasts = 0; const part = 'x'.repeat(256 << 10);
		return { fetch(request) {
		if (request.url.endsWith('/blast')) { blasts++; for (const s of room) s.send(part); return new Response(String(blasts)); }
		const [client, server] = Object.values(new WebSocketPair());
		server.accept();
		room.add(server);
		return new Response(null, { status: 101, webSocket: client });
	} } }`)
	e := engine(t)
	upgrade := func() int64 {
		t.Helper()
		res, err := e.Invoke(context.Background(), id, "fetch", program.NewWireRequest("GET", "https://x/chat", [][2]string{{"upgrade", "websocket"}}, nil))
		if err != nil || res.Status != 101 || res.Stream == 0 {
			t.Fatalf("upgrade: %+v %v", res, err)
		}
		return res.Stream
	}
	read, unread := upgrade(), upgrade()
	recs := &websocket.Records{Max: 1 << 20}
	const blasts = 40 // 10 MiB to each socket
	for i := 1; i <= blasts; i++ {
		r, err := get(t, id, "https://x/blast")
		if err != nil || string(r.BodyBytes()) != strconv.Itoa(i) {
			t.Fatalf("blast %d: %s %v (the isolate's state was lost?)", i, r.BodyBytes(), err)
		}
		got, _ := readRecords(t, id, read, recs, 1)
		if got[0].Kind != websocket.Text || len(got[0].Data) != 256<<10 {
			t.Fatalf("blast %d: the socket that reads got %c %d bytes", i, got[0].Kind, len(got[0].Data))
		}
	}
	// The socket nobody read: what the stream's window took, then 1008.
	var got []websocket.Record
	unreadRecs := &websocket.Records{Max: 1 << 20}
	for deadline := time.Now().Add(30 * time.Second); len(got) == 0 || got[len(got)-1].Kind != websocket.Close; {
		chunk, done, err := e.ReadStream(context.Background(), id, unread, 500*time.Millisecond)
		if err != nil {
			t.Fatal(err)
		}
		more, err := unreadRecs.Add(chunk)
		if err != nil {
			t.Fatal(err)
		}
		got = append(got, more...)
		if done || time.Now().After(deadline) {
			t.Fatalf("the unread socket was not closed: %d records", len(got))
		}
	}
	if c := got[len(got)-1]; c.Code != 1008 || len(got) > 3 {
		t.Fatalf("the unread socket got %d records, then close %d %q", len(got)-1, c.Code, c.Data)
	}
	e.CancelStream(id, read)
	e.CancelStream(id, unread)
}
