package caddymodule

import (
	"bufio"
	"bytes"
	"fmt"
	"io"
	"net"
	"net/http"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/caddyserver/caddy/v2/caddytest"

	"github.com/retainer-gw/retainer/budgets"
	"github.com/retainer-gw/retainer/internal/waitfor"
)

// An endless stream whose cancels the handler counts.
const endlessStream = `async () => { let cancelled = 0; return { fetch(request) {
	if (request.url.endsWith('/cancelled')) return new Response(String(cancelled));
	const chunk = new Uint8Array(64 << 10).fill(120);
	return new Response(new ReadableStream({
		pull(c) { c.enqueue(chunk) },
		cancel() { cancelled++ },
	}), { headers: { 'content-type': 'text/event-stream' } });
} } }`

// One visitor address holds at most 64 streams of a handle open (429
// past it), and a visitor who stops reading is cut at stream_timeout by
// the write deadline (docs/architecture.md, "Budgets").
func TestVisitorStreamBounds(t *testing.T) {
	tester := caddytest.NewTester(t)
	// stream_timeout must outlast opening the 64 streams, or the first is
	// cut (and its slot freed) before the 65th asks: 5 s, for a loaded
	// machine.
	tester.InitServer(gatewayConfig(filepath.Join(t.TempDir(), "registry.db"), "stream_timeout 5s"), "caddyfile")
	alice := token(t, "alice", allScopes)
	a := do(t, "POST", api("/executions"), alice, mustJSON(map[string]any{"code": endlessStream, "retainHandles": true, "concurrency": 100, "timeoutMs": 5000}))
	id, _ := a.json(t)["executionId"].(string)
	if id == "" {
		t.Fatalf("deploy: %d %s", a.status, a.body)
	}
	host := id + ".apps.localhost"
	open := func() (net.Conn, int) {
		t.Helper()
		c, err := net.Dial("tcp", fmt.Sprintf("127.0.0.1:%d", httpPort))
		if err != nil {
			t.Fatal(err)
		}
		fmt.Fprintf(c, "GET /stream HTTP/1.1\r\nHost: %s\r\n\r\n", host)
		c.SetReadDeadline(time.Now().Add(10 * time.Second))
		buf := make([]byte, 12)
		if _, err := c.Read(buf); err != nil {
			t.Fatal(err)
		}
		var status int
		fmt.Sscanf(string(buf[9:12]), "%d", &status)
		return c, status
	}
	// 64 streams read by nobody: the 65th is refused.
	var conns []net.Conn
	for i := 0; i < streamsPerVisitor; i++ {
		c, status := open()
		if status != 200 {
			t.Fatalf("stream %d: %d", i+1, status)
		}
		conns = append(conns, c)
	}
	if c, status := open(); status != http.StatusTooManyRequests {
		t.Fatalf("stream %d: %d", streamsPerVisitor+1, status)
	} else {
		c.Close()
	}
	// None of them is read: stream_timeout (5 s) cuts every one, though
	// its writes are blocked, and the handler's cancel runs for each.
	got := ""
	if !waitfor.Within(20*time.Second, func() bool {
		got = strings.TrimSpace(string(do(t, "GET", site(host, "/cancelled"), "", nil).body))
		return got == fmt.Sprint(streamsPerVisitor+1)
	}) {
		t.Fatalf("%s of %d unread streams were cut", got, streamsPerVisitor+1)
	}
	for _, c := range conns {
		c.Close()
	}
	// The slots are free again.
	if c, status := open(); status != 200 {
		t.Fatalf("a stream after the others were cut: %d", status)
	} else {
		c.Close()
	}
}

// A handle's isolate holds 1,024 open streams: past them a visitor gets
// 429 QUOTA_EXCEEDED, never a 500 (17 visitor addresses once took all
// 1,024 and everyone else got 500 HANDLER_ERROR), while one address still
// holds at most 64. The visitor address is Caddy's client IP with trusted
// proxies respected: X-Forwarded-For from the trusted 127.0.0.1 names the
// visitor, from another address it is ignored. A bystander handle's
// counter and the streaming handle's own state survive, and a slot given
// back is taken again.
func TestHandleStreamSlotsPastTheCapAre429(t *testing.T) {
	config := strings.Replace(gatewayConfig(filepath.Join(t.TempDir(), "registry.db"), ""),
		"\tgrace_period 1s\n", "\tgrace_period 1s\n\tservers {\n\t\ttrusted_proxies static 127.0.0.1/32\n\t}\n", 1)
	caddytest.NewTester(t).InitServer(config, "caddyfile")
	alice := token(t, "alice", allScopes)
	a := do(t, "POST", api("/executions"), alice, mustJSON(map[string]any{"code": `async () => { let served = 0; return { fetch(request) {
		served++;
		if (request.url.endsWith('/state')) return new Response(String(served));
		return new Response(new ReadableStream({ start(c) { c.enqueue(new TextEncoder().encode('data: hi\n\n')) } }),
			{ headers: { 'content-type': 'text/event-stream' } });
	} } }`, "retainHandles": true, "concurrency": 100, "timeoutMs": 5000}))
	id, _ := a.json(t)["executionId"].(string)
	if id == "" {
		t.Fatalf("deploy: %d %s", a.status, a.body)
	}
	bystander := deployCounter(t, alice)
	if n := served(t, do(t, "GET", site(bystander+".apps.localhost", "/"), "", nil)); n != 1 {
		t.Fatalf("bystander: %d", n)
	}
	host := id + ".apps.localhost"
	var conns []net.Conn
	defer func() {
		for _, c := range conns {
			c.Close()
		}
	}()
	// open asks for a stream from source (a loopback address), naming
	// forwarded in X-Forwarded-For unless it is "".
	open := func(source, forwarded string) (net.Conn, *http.Response) {
		t.Helper()
		d := net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(source)}}
		c, err := d.Dial("tcp", fmt.Sprintf("127.0.0.1:%d", httpPort))
		if err != nil {
			t.Fatal(err)
		}
		xff := ""
		if forwarded != "" {
			xff = "X-Forwarded-For: " + forwarded + "\r\n"
		}
		fmt.Fprintf(c, "GET /stream HTTP/1.1\r\nHost: %s\r\n%s\r\n", host, xff)
		c.SetReadDeadline(time.Now().Add(10 * time.Second))
		res, err := http.ReadResponse(bufio.NewReader(c), nil)
		if err != nil {
			t.Fatal(err)
		}
		if res.StatusCode != 200 {
			body, _ := io.ReadAll(res.Body)
			c.Close()
			res.Body = io.NopCloser(bytes.NewReader(body))
			return nil, res
		}
		conns = append(conns, c)
		return c, res
	}
	refused := func(res *http.Response) string {
		body, _ := io.ReadAll(res.Body)
		return fmt.Sprintf("%d %s", res.StatusCode, body)
	}
	// One visitor (forwarded by the trusted proxy): 64, then 429.
	for i := 0; i < streamsPerVisitor; i++ {
		if _, res := open("127.0.0.1", "203.0.113.1"); res.StatusCode != 200 {
			t.Fatalf("visitor 1, stream %d: %s", i+1, refused(res))
		}
	}
	if _, res := open("127.0.0.1", "203.0.113.1"); res.StatusCode != 429 || !strings.Contains(refused(res), "QUOTA_EXCEEDED") {
		t.Fatalf("visitor 1, stream %d: %d", streamsPerVisitor+1, res.StatusCode)
	}
	// The same X-Forwarded-For from an untrusted address is not believed.
	if _, res := open("127.0.0.50", "203.0.113.1"); res.StatusCode != 200 {
		t.Fatalf("a spoofed X-Forwarded-For was believed: %s", refused(res))
	}
	// 15 more addresses, forwarded or not, fill the handle's 1,024.
	total := streamsPerVisitor + 1
	for v := 2; total < budgets.StreamsPerHandle; v++ {
		for i := 0; i < streamsPerVisitor && total < budgets.StreamsPerHandle; i++ {
			source, forwarded := fmt.Sprintf("127.0.0.%d", 100+v), ""
			if v%2 == 0 {
				source, forwarded = "127.0.0.1", fmt.Sprintf("203.0.113.%d", v)
			}
			if _, res := open(source, forwarded); res.StatusCode != 200 {
				t.Fatalf("visitor %d, stream %d (%d in all): %s", v, i+1, total+1, refused(res))
			}
			total++
		}
	}
	// The 17th address gets 429 QUOTA_EXCEEDED, not 500.
	res := func() *http.Response { _, res := open("127.0.0.200", ""); return res }()
	if got := refused(res); res.StatusCode != 429 || !strings.Contains(got, "QUOTA_EXCEEDED") {
		t.Fatalf("a stream past the handle's %d: %s", budgets.StreamsPerHandle, got)
	}
	if n := served(t, do(t, "GET", site(bystander+".apps.localhost", "/"), "", nil)); n != 2 {
		t.Fatalf("bystander after: %d", n)
	}
	if s := do(t, "GET", site(host, "/state"), "", nil); s.status != 200 || string(s.body) != fmt.Sprint(budgets.StreamsPerHandle+3) {
		t.Fatalf("the streaming handle's state: %d %s, want %d", s.status, s.body, budgets.StreamsPerHandle+3)
	}
	// Visitor 1's streams end: their slots are taken again.
	for _, c := range conns[:streamsPerVisitor] {
		c.Close()
	}
	if !waitfor.Within(15*time.Second, func() bool { _, res = open("127.0.0.200", ""); return res.StatusCode == 200 }) {
		t.Fatalf("a stream after 64 ended: %s", refused(res))
	}
}
