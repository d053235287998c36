package caddymodule

import (
	"fmt"
	"net"
	"net/http"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/caddyserver/caddy/v2/caddytest"
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
	deadline := time.Now().Add(20 * time.Second)
	for {
		got := strings.TrimSpace(string(do(t, "GET", site(host, "/cancelled"), "", nil).body))
		if got == fmt.Sprint(streamsPerVisitor+1) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s of %d unread streams were cut", got, streamsPerVisitor+1)
		}
		time.Sleep(200 * time.Millisecond)
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
