package main

import (
	"bufio"
	"bytes"
	"context"
	encbin "encoding/binary"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/retainer-gw/retainer/internal/etcdtest"
	"github.com/retainer-gw/retainer/internal/pgtest"
)

// What a cluster must hold under faults (docs/cluster.md): each fault
// through three gateway processes on a real etcd and PostgreSQL.

// restartMember stops member i (it leaves the cluster) and starts it again
// on the same configuration: its memory is what the store held at start.
func restartMember(t *testing.T, ctx context.Context, gws map[int]*gateway, i int, etcd, dsn string) {
	t.Helper()
	gws[i].stop()
	gws[i] = startMember(t, ctx, i, etcd, dsn)
}

// visitKey is a visitor's GET of a route name or executionId through
// member i's public port.
func visitKey(t *testing.T, i int, key string) (int, string) {
	return clusterCall(t, "GET", fmt.Sprintf("http://%s.apps.localhost:%d/", key, memberPort(i)), "", "")
}

// A gateway serves a handle only while it owns the handle's space: one
// restarted while the handle existed (its memory holds the handle, it
// owns nothing) answers 404 by route and by id once the handle is deleted
// through the owner, and 404 by route once the route is unbound there;
// it never serves a second isolate from what it remembers.
func TestClusterServesOnlyWhatItOwns(t *testing.T) {
	srv := etcdtest.Start(t)
	pg := pgtest.Start(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	gws := map[int]*gateway{}
	for i := 1; i <= 3; i++ {
		gws[i] = startMember(t, ctx, i, srv.Endpoint, pg.DSN)
	}
	a := gws[1]
	deleted := deployThrough(t, a, fmt.Sprintf(`{"retainHandles": true, "capabilities": ["kvRead", "kvWrite"], "code": %q}`, shopHandler))
	bindThrough(t, a, "shop", deleted)
	unbound := deployThrough(t, a, `{"retainHandles": true, "code": "export default { fetch() { return new Response('kept') } }"}`)
	bindThrough(t, a, "kept", unbound)
	for i := 1; i <= 3; i++ {
		for _, key := range []string{"shop", deleted, "kept", unbound} {
			if status, body := visitKey(t, i, key); status != 200 {
				t.Fatalf("%s through gw-%d before the restart: %d %s", key, i, status, body)
			}
		}
	}
	// gw-2 restarts while both handles exist: it remembers them, owns
	// neither, and has not looked up their owner since.
	restartMember(t, ctx, gws, 2, srv.Endpoint, pg.DSN)
	if status, body := clusterCall(t, "DELETE", a.api+"/handles/"+deleted, a.token, ""); status != 204 {
		t.Fatalf("deleting through the owner: %d %s", status, body)
	}
	if status, body := clusterCall(t, "DELETE", a.api+"/routes/kept", a.token, ""); status != 204 {
		t.Fatalf("unbinding through the owner: %d %s", status, body)
	}
	for round := 0; round < 2; round++ {
		for i := 1; i <= 3; i++ {
			for _, key := range []string{"shop", deleted, "kept"} {
				if status, body := visitKey(t, i, key); status != 404 {
					t.Fatalf("%s through gw-%d after its end (round %d): %d %q, want 404", key, i, round, status, body)
				}
			}
			if status, body := visitKey(t, i, unbound); status != 200 || body != "kept" {
				t.Fatalf("the unbound handle by id through gw-%d: %d %q", i, status, body)
			}
		}
	}
	// Nothing was claimed or rebuilt at gw-2 for what it remembered.
	_, m2 := clusterCall(t, "GET", fmt.Sprintf("http://localhost:%d/metrics", memberAdmin(2)), "", "")
	if owned, rebuilt := metricValue(m2, "retainer_cluster_spaces_owned"), metricValue(m2, "retainer_rebuilds_total"); owned != 0 || rebuilt > 0 {
		t.Fatalf("gw-2 owns %v spaces and rebuilt %v handles", owned, rebuilt)
	}
}

// tap is a TCP proxy in front of a member's cluster listener (the address
// it advertises): it keeps every byte the other members send it, and can
// change bytes on their way (an attacker on the gateways' network).
type tap struct {
	ln       net.Listener
	mu       sync.Mutex
	captured []*bytes.Buffer
	swap     atomic.Pointer[[2][]byte]
}

func startTap(t *testing.T, to string) *tap {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	tp := &tap{ln: ln}
	t.Cleanup(func() { ln.Close() })
	go func() {
		for {
			in, err := ln.Accept()
			if err != nil {
				return
			}
			out, err := net.Dial("tcp", to)
			if err != nil {
				in.Close()
				continue
			}
			buf := &bytes.Buffer{}
			tp.mu.Lock()
			tp.captured = append(tp.captured, buf)
			tp.mu.Unlock()
			go func() { io.Copy(in, out); in.Close() }()
			go func() {
				defer out.Close()
				b := make([]byte, 64<<10)
				for {
					n, err := in.Read(b)
					if n > 0 {
						data := b[:n]
						if sw := tp.swap.Load(); sw != nil {
							data = bytes.ReplaceAll(data, sw[0], sw[1])
						}
						tp.mu.Lock()
						buf.Write(data)
						tp.mu.Unlock()
						if _, err := out.Write(data); err != nil {
							return
						}
					}
					if err != nil {
						return
					}
				}
			}()
		}
	}()
	return tp
}

// requests answers every request the tap saw, each with its body read.
func (tp *tap) requests(t *testing.T) []*http.Request {
	tp.mu.Lock()
	defer tp.mu.Unlock()
	var out []*http.Request
	for _, c := range tp.captured {
		if bytes.HasPrefix(c.Bytes(), []byte(linkPreface)) {
			out = append(out, linkRequests(c.Bytes())...)
			continue
		}
		br := bufio.NewReader(bytes.NewReader(c.Bytes()))
		for {
			req, err := http.ReadRequest(br)
			if err != nil {
				break
			}
			body, err := io.ReadAll(req.Body)
			if err != nil {
				break
			}
			req.GetBody = func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(body)), nil }
			if req.ContentLength < 0 {
				req.TransferEncoding = []string{"chunked"}
			}
			out = append(out, req)
		}
	}
	return out
}

// The link between members (caddymodule/link.go) as an attacker on the
// gateways' network reads it: a preface and the rest of the hello (the
// addressee's length and bytes, 8 of time, 16 random, a 32-byte MAC:
// caddymodule/linkhello.go), then frames of a 9-byte head (type, stream,
// length) and a payload.
const (
	linkPreface     = "\x00retainer-link/2\n"
	linkFrameHead   = 1
	linkFrameData   = 2
	linkFrameEnd    = 3
	linkFrameAnswer = 6
)

// linkFrames answers the frames in a captured link connection.
func linkFrames(b []byte) (frames [][]byte, types []byte, ids []uint32) {
	b = b[linkHelloLen(b):]
	for len(b) >= 9 {
		n := int(encbin.BigEndian.Uint32(b[5:9]))
		if len(b) < 9+n {
			break
		}
		frames, types, ids = append(frames, b[9:9+n]), append(types, b[0]), append(ids, encbin.BigEndian.Uint32(b[1:5]))
		b = b[9+n:]
	}
	return
}

// linkRequests decodes the requests a captured link connection carried:
// each stream's head (method, target, Host, length, headers: uvarints and
// strings) and body.
func linkRequests(captured []byte) []*http.Request {
	frames, types, ids := linkFrames(captured)
	var out []*http.Request
	byID := map[uint32]*http.Request{}
	bodies := map[uint32]*bytes.Buffer{}
	for i, f := range frames {
		switch types[i] {
		case linkFrameHead:
			str := func() string {
				n, k := encbin.Uvarint(f)
				s := string(f[k : k+int(n)])
				f = f[k+int(n):]
				return s
			}
			method, target, host := str(), str(), str()
			length, k := encbin.Varint(f)
			f = f[k:]
			count, k := encbin.Uvarint(f)
			f = f[k:]
			req, err := http.NewRequest(method, "http://"+host+target, nil)
			if err != nil {
				continue
			}
			for range count {
				name := str()
				req.Header.Add(name, str())
			}
			req.ContentLength = length
			body := &bytes.Buffer{}
			req.GetBody = func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(body.Bytes())), nil }
			byID[ids[i]], bodies[ids[i]] = req, body
		case linkFrameData:
			if b := bodies[ids[i]]; b != nil {
				b.Write(f)
			}
		case linkFrameEnd:
			if req := byID[ids[i]]; req != nil {
				if req.ContentLength < 0 {
					req.TransferEncoding = []string{"chunked"}
				}
				out = append(out, req)
				delete(byID, ids[i])
			}
		}
	}
	return out
}

// linkHelloLen answers the length of a captured link connection's hello.
func linkHelloLen(b []byte) int {
	if len(b) <= len(linkPreface) {
		return len(b)
	}
	return min(len(b), len(linkPreface)+1+int(b[len(linkPreface)])+8+16+32)
}

// linkStreamOf answers the frames of the first stream of a captured link
// connection whose head's target is target, as a connection of its own:
// the captured hello, then that stream's head, body and end as stream 1.
func linkStreamOf(captured []byte, target string) []byte {
	frames, types, ids := linkFrames(captured)
	name := append(encbin.AppendUvarint(nil, uint64(len(target))), target...)
	out, id, found := bytes.Clone(captured[:linkHelloLen(captured)]), uint32(0), false
	for i, f := range frames {
		if !found && types[i] == linkFrameHead && bytes.Contains(f, name) {
			found, id = true, ids[i]
		}
		if !found || ids[i] != id || types[i] != linkFrameHead && types[i] != linkFrameData && types[i] != linkFrameEnd {
			continue
		}
		var h [9]byte
		h[0] = types[i]
		encbin.BigEndian.PutUint32(h[1:5], 1)
		encbin.BigEndian.PutUint32(h[5:9], uint32(len(f)))
		out = append(append(out, h[:]...), f...)
		if types[i] == linkFrameEnd {
			return out
		}
	}
	return nil
}

// links answers the link connections the tap captured, whole.
func (tp *tap) links() [][]byte {
	tp.mu.Lock()
	defer tp.mu.Unlock()
	var out [][]byte
	for _, c := range tp.captured {
		if bytes.HasPrefix(c.Bytes(), []byte(linkPreface)) {
			out = append(out, bytes.Clone(c.Bytes()))
		}
	}
	return out
}

// replayLink sends a captured link connection's bytes again, whole, to
// addr and answers the status of every answer that comes back.
func replayLink(t *testing.T, captured []byte, addr string) []int {
	t.Helper()
	conn, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	heads := 0
	_, types, _ := linkFrames(captured)
	for _, typ := range types {
		if typ == linkFrameHead {
			heads++
		}
	}
	if _, err := conn.Write(captured); err != nil {
		t.Fatal(err)
	}
	conn.SetReadDeadline(time.Now().Add(10 * time.Second))
	br := bufio.NewReader(conn)
	var statuses []int
	for len(statuses) < heads {
		var h [9]byte
		if _, err := io.ReadFull(br, h[:]); err != nil {
			break
		}
		payload := make([]byte, encbin.BigEndian.Uint32(h[5:9]))
		if _, err := io.ReadFull(br, payload); err != nil {
			break
		}
		if h[0] == linkFrameAnswer {
			status, _ := encbin.Uvarint(payload)
			statuses = append(statuses, int(status))
		}
	}
	return statuses
}

// send writes req as it was captured to addr, and answers the status.
func send(t *testing.T, req *http.Request, addr string) int {
	t.Helper()
	conn, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	req.Body, _ = req.GetBody()
	if err := req.Write(conn); err != nil {
		t.Fatal(err)
	}
	res, err := http.ReadResponse(bufio.NewReader(conn), req)
	if err != nil {
		t.Fatal(err)
	}
	res.Body.Close()
	return res.StatusCode
}

// integrityHandler counts in kv (/inc), keeps the start of a body
// (/big), and answers with the gateways' own headers (/forge, and
// /forgestream as a stream, the names in other cases), counting in its
// closure.
const integrityHandler = `let n = 0;
export default { async fetch(req, env) {
	const u = new URL(req.url);
	if (u.pathname === '/inc') { const c = Number(await env.kv.get('c') || 0) + 1; await env.kv.put('c', String(c)); return new Response(String(c)) }
	if (u.pathname === '/get') { return new Response(String(await env.kv.get(u.searchParams.get('k')))) }
	if (u.pathname === '/big') { const t = await req.text(); await env.kv.put('big', t.slice(0, 8) + ' ' + t.length); return new Response(t.slice(0, 8) + ' ' + t.length) }
	n++;
	if (u.pathname === '/forgestream') {
		const text = String(n);
		return new Response(new ReadableStream({ start(c) { c.enqueue(new TextEncoder().encode(text)); c.close() } }), {headers: {'retainer-not-owner': '1', 'RETAINER-FORWARDED': 'x', 'Retainer-other': 'y'}});
	}
	return new Response(String(n), {headers: {'Retainer-Not-Owner': '1', 'Retainer-Forwarded': 'x', 'Retainer-Other': 'y'}});
} }`

// A forwarded request is taken once and only as signed: a request
// captured between two gateways and sent again (over HTTP/1.1, its link
// stream alone on a new connection, or the whole link connection) is
// refused (403) and its kv increment, or its POST /executions' kv
// increment, applied once, while another tenant's closure counter on the
// same owner goes on; a header changed on the way is refused before the
// handler runs; a body over the digest bound changed on the way (same
// length) is refused and never reaches the handler, while the same body
// unchanged, and one of unknown length, are served; a handler's
// Retainer-* headers never reach the forwarder, which sends each request
// once; the owner restarted takes no forward signed before it started.
func TestClusterForwardsAreTakenOnce(t *testing.T) {
	srv := etcdtest.Start(t)
	pg := pgtest.Start(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	tp := startTap(t, fmt.Sprintf("127.0.0.1:%d", memberLink(1)))
	config := clusterConfig(t, 1, srv.Endpoint, pg.DSN)
	data, err := os.ReadFile(config)
	if err != nil {
		t.Fatal(err)
	}
	edited := strings.Replace(string(data), fmt.Sprintf("listen 127.0.0.1:%d", memberLink(1)), fmt.Sprintf("listen 127.0.0.1:%d\n\t\t\tadvertise ", memberLink(1))+tp.ln.Addr().String(), 1)
	if err := os.WriteFile(config, []byte(edited), 0o600); err != nil {
		t.Fatal(err)
	}
	a := startMemberAt(t, ctx, 1, config)
	startMember(t, ctx, 2, srv.Endpoint, pg.DSN)
	startMember(t, ctx, 3, srv.Endpoint, pg.DSN)
	bindThrough(t, a, "shop", deployThrough(t, a, fmt.Sprintf(`{"retainHandles": true, "capabilities": ["kvRead", "kvWrite"], "code": %q}`, integrityHandler)))
	// The bystander: another tenant's closure counter on the same owner.
	out, err := binary(ctx, "retainer-token", "--sub", "bob").Output()
	if err != nil {
		t.Fatal(err)
	}
	bob := &gateway{api: a.api, token: strings.TrimSpace(string(out))}
	bindThrough(t, bob, "bystander", deployThrough(t, bob, `{"retainHandles": true, "code": "let n = 0; export default { fetch() { n++; return new Response(String(n)) } }"}`))
	bystander := func(want string) {
		t.Helper()
		if status, body := clusterCall(t, "GET", fmt.Sprintf("http://bystander.apps.localhost:%d/", memberPort(3)), "", ""); status != 200 || body != want {
			t.Fatalf("the bystander's counter through gw-3: %d %q, want %q", status, body, want)
		}
	}
	bystander("1")

	// A captured forward sent again, to the owner's listener itself.
	if status, body := clusterCall(t, "POST", fmt.Sprintf("http://shop.apps.localhost:%d/inc", memberPort(2)), "", "one"); status != 200 || body != "1" {
		t.Fatalf("the increment through gw-2: %d %q", status, body)
	}
	var inc *http.Request
	for _, req := range tp.requests(t) {
		if req.URL.Path == "/inc" {
			inc = req
		}
	}
	if inc == nil || inc.Header.Get("Retainer-Forwarded") == "" {
		t.Fatal("the tap saw no forwarded increment")
	}
	for k := 0; k < 2; k++ {
		if status := send(t, inc, fmt.Sprintf("127.0.0.1:%d", memberLink(1))); status != 403 {
			t.Fatalf("a replayed forward answered %d, want 403", status)
		}
	}
	// A computation forwarded to the owner: its kv increment is the
	// count of its runs.
	gw2 := &gateway{api: fmt.Sprintf("http://api.localhost:%d", memberPort(2)), token: a.token}
	counted := `{"capabilities": ["kvRead", "kvWrite"], "code": "async () => { const n = Number(await kv.get('runs') || 0) + 1; await kv.put('runs', String(n)); return n }"}`
	if status, body := clusterCall(t, "POST", gw2.api+"/executions", gw2.token, counted); status != 200 || !strings.Contains(body, `"result":1`) {
		t.Fatalf("a counted computation through gw-2: %d %.300s", status, body)
	}
	// Each forward's link stream alone, sent again on a new connection.
	for _, target := range []string{"/inc", "/executions"} {
		var stream []byte
		for _, captured := range tp.links() {
			if stream = linkStreamOf(captured, target); stream != nil {
				break
			}
		}
		if stream == nil {
			t.Fatalf("the tap saw no link stream for %s", target)
		}
		// Its connection's hello was taken: the connection is closed
		// before any frame is read (caddymodule's
		// TestLinkReplayedHeadRunsNothing has the head refused 403
		// behind a fresh hello).
		for k := 0; k < 2; k++ {
			if statuses := replayLink(t, stream, fmt.Sprintf("127.0.0.1:%d", memberLink(1))); len(statuses) != 0 {
				t.Fatalf("the %s stream replayed: %v, want the connection closed at its hello", target, statuses)
			}
		}
	}
	// A header changed on the way: refused, and the handler does not run.
	tp.swap.Store(&[2][]byte{[]byte("role-READER-1"), []byte("role-WRITER-1")})
	req, _ := http.NewRequest("POST", fmt.Sprintf("http://shop.apps.localhost:%d/inc", memberPort(2)), strings.NewReader("one"))
	req.Header.Set("X-Role", "role-READER-1")
	res, err := clusterClient.Do(req)
	tp.swap.Store(nil)
	if err != nil {
		t.Fatal(err)
	}
	io.Copy(io.Discard, res.Body)
	res.Body.Close()
	if res.StatusCode != 403 {
		t.Fatalf("a forward whose header changed on the way: %d, want 403", res.StatusCode)
	}
	// The whole link connection the forwards crossed, sent again as is.
	replayed := 0
	for _, captured := range tp.links() {
		if statuses := replayLink(t, captured, fmt.Sprintf("127.0.0.1:%d", memberLink(1))); len(statuses) != 0 {
			t.Fatalf("a link connection replayed whole answered %v, want it closed at its hello", statuses)
		}
		if _, types, _ := linkFrames(captured); bytes.IndexByte(types, linkFrameHead) >= 0 {
			replayed++
		}
	}
	if replayed == 0 {
		t.Fatal("no forward on the link was replayed")
	}
	if status, body := visit(t, 3, "/get?k=c"); status != 200 || body != "1" {
		t.Fatalf("the count after the replays: %d %q, want 1", status, body)
	}
	if status, body := visit(t, 3, "/get?k=runs"); status != 200 || body != "1" {
		t.Fatalf("the computation's runs after the replays: %d %q, want 1", status, body)
	}
	bystander("2")

	// A 70 KB body crosses whole; changed on the way, it is refused.
	big := strings.Repeat("SWAPME-1", 70_000/8)
	if status, body := clusterCall(t, "POST", fmt.Sprintf("http://shop.apps.localhost:%d/big", memberPort(3)), "", big); status != 200 || body != "SWAPME-1 70000" {
		t.Fatalf("a 70 KB body through gw-3: %d %q", status, body)
	}
	res, err = clusterClient.Post(fmt.Sprintf("http://shop.apps.localhost:%d/big", memberPort(2)), "text/plain", io.MultiReader(strings.NewReader(big), strings.NewReader("!")))
	if err != nil {
		t.Fatal(err)
	}
	got, _ := io.ReadAll(res.Body)
	res.Body.Close()
	if res.StatusCode != 200 || string(got) != "SWAPME-1 70001" {
		t.Fatalf("a body of unknown length through gw-2: %d %q", res.StatusCode, got)
	}
	tp.swap.Store(&[2][]byte{[]byte("SWAPME-1"), []byte("SWAPME-2")})
	status, body := clusterCall(t, "POST", fmt.Sprintf("http://shop.apps.localhost:%d/big", memberPort(3)), "", big)
	tp.swap.Store(nil)
	if status != 403 {
		t.Fatalf("a body changed on the way: %d %q, want 403", status, body)
	}
	// A streamed body (of unknown length: chained frames) changed on the
	// way: refused, and the handler keeps nothing of it.
	tp.swap.Store(&[2][]byte{[]byte("SWAPME-1"), []byte("SWAPME-2")})
	res, err = clusterClient.Post(fmt.Sprintf("http://shop.apps.localhost:%d/big", memberPort(2)), "text/plain", io.MultiReader(strings.NewReader(big), strings.NewReader("?")))
	tp.swap.Store(nil)
	if err != nil {
		t.Fatal(err)
	}
	got, _ = io.ReadAll(res.Body)
	res.Body.Close()
	if res.StatusCode != 403 {
		t.Fatalf("a streamed body changed on the way: %d %q, want 403", res.StatusCode, got)
	}
	if status, body := visit(t, 2, "/get?k=big"); status != 200 || body != "SWAPME-1 70001" {
		t.Fatalf("what the handler kept of the bodies: %d %q", status, body)
	}
	// The same through the API: a 70 KB program changed on the way to the
	// owner does not run as the tenant.
	program := fmt.Sprintf(`{"code": %q}`, "// "+big+"\nasync () => 'ran ' + 'SWAPME-1'.length")
	if status, body := clusterCall(t, "POST", gw2.api+"/executions", gw2.token, program); status != 200 || !strings.Contains(body, `"ran 8"`) {
		t.Fatalf("a 70 KB program through gw-2: %d %.200s", status, body)
	}
	tp.swap.Store(&[2][]byte{[]byte("SWAPME-1"), []byte("SWAPME-2")})
	status, body = clusterCall(t, "POST", gw2.api+"/executions", gw2.token, program)
	tp.swap.Store(nil)
	if status != 403 {
		t.Fatalf("a program changed on the way: %d %.200s, want 403", status, body)
	}

	// A handler's Retainer-* headers, on an answer and on a stream:
	// dropped, and never a second send.
	for k := 1; k <= 6; k++ {
		path := "/forge"
		if k > 3 {
			path = "/forgestream"
		}
		res, err := clusterClient.Get(fmt.Sprintf("http://shop.apps.localhost:%d", memberPort(2)) + path)
		if err != nil {
			t.Fatal(err)
		}
		got, _ := io.ReadAll(res.Body)
		res.Body.Close()
		if res.StatusCode != 200 || string(got) != fmt.Sprint(k) {
			t.Fatalf("visit %d (%s) of a handler that says it is not the owner: %d %q", k, path, res.StatusCode, got)
		}
		for name := range res.Header {
			if strings.HasPrefix(name, "Retainer-") {
				t.Fatalf("the handler's %s reached the visitor", name)
			}
		}
	}

	// The owner restarted has forgotten the nonces it took: a forward
	// signed before it started is not taken either.
	a.stop()
	startMemberAt(t, ctx, 1, config)
	if status := send(t, inc, fmt.Sprintf("127.0.0.1:%d", memberLink(1))); status == 200 {
		t.Fatal("a captured forward was taken by the restarted owner")
	}
	if status, body := visit(t, 3, "/get?k=c"); status != 200 || body != "1" {
		t.Fatalf("the count after the replay to the restarted owner: %d %q, want 1", status, body)
	}
}

// memberBehindFront starts member i with trusted_proxies for loopback: a
// visitor's address is the X-Forwarded-For a front on this machine sets.
func memberBehindFront(t *testing.T, ctx context.Context, i int, etcd, dsn string) *gateway {
	t.Helper()
	config := clusterConfig(t, i, etcd, dsn)
	data, err := os.ReadFile(config)
	if err != nil {
		t.Fatal(err)
	}
	admin := fmt.Sprintf("admin localhost:%d", memberAdmin(i))
	edited := strings.Replace(string(data), admin, admin+"\n\tservers {\n\t\ttrusted_proxies static 127.0.0.1/32\n\t}", 1)
	if err := os.WriteFile(config, []byte(edited), 0o600); err != nil {
		t.Fatal(err)
	}
	return startMemberAt(t, ctx, i, config)
}

// answer is one visitor's request as it was answered.
type answer struct {
	gw         int
	at         time.Duration // from the kill to the answer (negative: before)
	status     int
	retryAfter bool
	body       string
}

// While a space moves (its owner killed or paused under load), visitors through the
// two other gateways get 200 or 503 OVERLOADED with Retry-After, nothing
// else, and each gateway serves again within lease + 5 s; a visitor asking
// for made-up hosts meanwhile is refused (429) at its own address (the one
// trusted_proxies gives behind a front), and no other visitor is.
func TestClusterFailoverAnswers503(t *testing.T) {
	t.Run("kill", func(t *testing.T) { failoverUnderLoad(t, false) })
	t.Run("pause", func(t *testing.T) { failoverUnderLoad(t, true) })
}

// failoverUnderLoad is TestClusterFailoverAnswers503 with the owner
// killed (kill -9), or paused (SIGSTOP) for the rest of the test.
func failoverUnderLoad(t *testing.T, pause bool) {
	srv := etcdtest.Start(t)
	pg := pgtest.Start(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	gws := map[int]*gateway{}
	for i := 1; i <= 3; i++ {
		gws[i] = memberBehindFront(t, ctx, i, srv.Endpoint, pg.DSN)
	}
	a := gws[1]
	bindThrough(t, a, "shop", deployThrough(t, a, fmt.Sprintf(`{"retainHandles": true, "capabilities": ["kvRead", "kvWrite"], "code": %q}`, shopHandler)))
	if status, body := visit(t, 1, "/"); status != 200 {
		t.Fatalf("before the kill: %d %s", status, body)
	}

	var killed atomic.Pointer[time.Time]
	since := func() time.Duration {
		if k := killed.Load(); k != nil {
			return time.Since(*k)
		}
		return -time.Second
	}
	const lease = 2 * time.Second
	stop := make(chan struct{})
	answers := make(chan answer, 10000)
	var wg sync.WaitGroup
	get := func(url, visitor string) (*http.Response, string, error) {
		req, _ := http.NewRequest("GET", url, nil)
		req.Header.Set("X-Forwarded-For", visitor)
		res, err := clusterClient.Do(req)
		if err != nil {
			return nil, "", err
		}
		body, _ := io.ReadAll(res.Body)
		res.Body.Close()
		return res, string(body), nil
	}
	for k := 0; k < 4; k++ {
		wg.Add(1)
		go func(gw int, visitor string) {
			defer wg.Done()
			for {
				select {
				case <-stop:
					return
				case <-time.After(10 * time.Millisecond):
				}
				res, body, err := get(fmt.Sprintf("http://shop.apps.localhost:%d/", memberPort(gw)), visitor)
				at := since() // when the answer came
				if err != nil {
					answers <- answer{gw: gw, at: at, body: err.Error()}
					continue
				}
				answers <- answer{gw: gw, at: at, status: res.StatusCode, retryAfter: res.Header.Get("Retry-After") != "", body: body}
			}
		}(2+k%2, "192.0.2.1") // one busy visitor (a NAT, say)
	}
	refused := atomic.Int64{}
	wg.Add(1)
	go func() {
		defer wg.Done()
		for n := 0; ; n++ {
			select {
			case <-stop:
				return
			default:
			}
			res, _, err := get(fmt.Sprintf("http://made-up-%d.apps.localhost:%d/", n, memberPort(2)), "198.51.100.7")
			if err == nil && res.StatusCode == 429 {
				refused.Add(1)
			}
			time.Sleep(2 * time.Millisecond)
		}
	}()
	time.Sleep(time.Second)
	if pause {
		a.cmd.Process.Signal(syscall.SIGSTOP)
		t.Cleanup(func() { a.cmd.Process.Signal(syscall.SIGCONT) })
	} else {
		a.cmd.Process.Kill()
		a.cmd.Wait()
	}
	now := time.Now()
	killed.Store(&now)
	time.Sleep(lease + 5*time.Second + time.Second)
	close(stop)
	wg.Wait()
	close(answers)

	counts := map[string]int{}
	firstServed, lastRefused := map[int]time.Duration{}, map[int]time.Duration{}
	for ans := range answers {
		key := fmt.Sprintf("gw-%d %d", ans.gw, ans.status)
		if ans.status == 503 && ans.retryAfter {
			key += "+Retry-After"
		}
		counts[key]++
		switch {
		case ans.status == 200:
			if _, ok := firstServed[ans.gw]; !ok && ans.at >= 0 {
				firstServed[ans.gw] = ans.at
			}
		case ans.status == 503 && ans.retryAfter:
			lastRefused[ans.gw] = max(lastRefused[ans.gw], ans.at)
		default:
			t.Errorf("through gw-%d %v after the kill: %d %q", ans.gw, ans.at, ans.status, ans.body)
		}
	}
	t.Logf("answers by gateway and status: %v; last 503 after the kill %v; made-up hosts refused %d", counts, lastRefused, refused.Load())
	for _, gw := range []int{2, 3} {
		if lastRefused[gw] > lease+5*time.Second {
			t.Errorf("gw-%d answered 503 %v after the kill (lease %v)", gw, lastRefused[gw], lease)
		}
		if _, ok := firstServed[gw]; !ok {
			t.Errorf("gw-%d never served after the kill", gw)
		}
	}
	if refused.Load() == 0 {
		t.Error("the visitor asking for made-up hosts was never refused")
	}
}

// An owner paused past its lease (SIGSTOP) with requests in flight, whose
// isolate answered them while the gateway slept: once another gateway
// serves the space, the woken owner sends none of its old isolate's
// answers (503), and its next requests go to the new owner.
func TestClusterPausedOwnerSendsNothingOld(t *testing.T) {
	srv := etcdtest.Start(t)
	pg := pgtest.Start(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	gws := map[int]*gateway{}
	for i := 1; i <= 3; i++ {
		gws[i] = startMember(t, ctx, i, srv.Endpoint, pg.DSN)
	}
	a := gws[1]
	t.Cleanup(func() { a.cmd.Process.Signal(syscall.SIGCONT) })
	const slow = `let served = 0;
export default { async fetch(req) {
	if (new URL(req.url).pathname === '/slow') await new Promise(r => setTimeout(r, 250));
	served++;
	return new Response('served ' + served);
} }`
	bindThrough(t, a, "shop", deployThrough(t, a, fmt.Sprintf(`{"retainHandles": true, "code": %q}`, slow)))
	// The old isolate's count is past what the new owner's reaches here.
	for k := 1; k <= 5; k++ {
		if status, body := visit(t, 1, "/"); status != 200 || body != fmt.Sprintf("served %d", k) {
			t.Fatalf("before the pause: %d %q", status, body)
		}
	}
	inflight := make(chan string, 2)
	for k := 0; k < 2; k++ {
		go func() {
			req, _ := http.NewRequest("POST", fmt.Sprintf("http://shop.apps.localhost:%d/slow", memberPort(1)), nil)
			res, err := clusterClient.Do(req)
			if err != nil {
				inflight <- err.Error()
				return
			}
			body, _ := io.ReadAll(res.Body)
			res.Body.Close()
			inflight <- fmt.Sprintf("%d %s", res.StatusCode, body)
		}()
	}
	waitInFlight(t, 1, 2)
	paused := pauseMember(t, a)
	status, body := visitUntilServed(t, 2, "/", paused)
	if status != 200 || body != "served 1" {
		t.Fatalf("the new owner's first answer: %d %q", status, body)
	}
	t.Logf("the new owner served %v after the pause", time.Since(paused).Round(time.Millisecond))
	a.cmd.Process.Signal(syscall.SIGCONT)
	for k := 0; k < 2; k++ {
		got := <-inflight
		var n int
		if _, err := fmt.Sscanf(got, "200 served %d", &n); err == nil && n > 5 {
			t.Errorf("the woken owner answered from its old isolate: %q", got)
		}
		// A request read only once the owner woke may have gone to the
		// new owner (a count from 1).
		t.Logf("an in-flight request at the paused owner: %.100s", got)
	}
	var n int
	status, body = visitUntilServed(t, 1, "/", time.Now())
	if _, err := fmt.Sscanf(body, "served %d", &n); status != 200 || err != nil || n > 4 {
		t.Fatalf("through the woken gateway: %d %q, want the new owner's count", status, body)
	}
}
