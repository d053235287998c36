package caddymodule

import (
	"bufio"
	"bytes"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/caddyserver/caddy/v2"
	"github.com/caddyserver/caddy/v2/caddytest"

	"github.com/retainer-gw/retainer/budgets"
	"github.com/retainer-gw/retainer/fault"
	"github.com/retainer-gw/retainer/internal/waitfor"
)

// Request bodies are the visitor's time (README.md, API): a
// body of up to 1 MiB is read whole before the handler is called, a larger
// one streams; a body that stalls, or trickles past request_body_timeout,
// answers 408 REQUEST_TIMEOUT and never costs the handle its isolate.

// bodyOptions keeps the bounds short so that the tests stay quick.
const bodyOptions = "request_body_idle 1s\nrequest_body_timeout 4s\nmax_request_body 4MiB"

const bodyReader = `let served = 0;
const seen = {};
export default { async fetch(request) {
	const url = new URL(request.url);
	const n = url.searchParams.get('n');
	switch (url.pathname) {
	case '/upload': {
		const reader = request.body.getReader();
		let length = 0;
		for (;;) {
			const { value, done } = await reader.read();
			if (done) break;
			length += value.length;
			seen[n] = length;
		}
		return Response.json({ served: ++served, length });
	}
	case '/caught':
		try {
			const reader = request.body.getReader();
			for (;;) {
				const { value, done } = await reader.read();
				if (done) break;
				seen[n] = (seen[n] || 0) + value.length;
			}
		} catch (e) {
			return Response.json({ caught: e.name, code: e.code });
		}
		return new Response('not caught');
	case '/progress':
		return Response.json({ seen: seen[n] || 0 });
	}
	return Response.json({ served: ++served });
} };`

// rawAnswer is what the gateway wrote to a hand-made request.
type rawAnswer struct {
	status int
	body   string
	err    error
	at     time.Time // when the answer was read
}

func (a rawAnswer) String() string {
	if a.err != nil {
		return a.err.Error()
	}
	return fmt.Sprintf("%d %.200s", a.status, a.body)
}

// rawPost sends a POST by hand: its head with framing (a Content-Length or
// Transfer-Encoding header), then whatever send writes, until send returns
// or the answer arrives (stop is closed then). It answers what the gateway
// wrote, read within 20 s.
func rawPost(host, path, framing string, send func(w io.Writer, stop <-chan struct{})) rawAnswer {
	return rawPostFrom("", host, path, framing, send)
}

// rawPostFrom is rawPost from the loopback address src (the system's
// choice when "").
func rawPostFrom(src, host, path, framing string, send func(w io.Writer, stop <-chan struct{})) rawAnswer {
	var d net.Dialer
	if src != "" {
		d.LocalAddr = &net.TCPAddr{IP: net.ParseIP(src)}
	}
	conn, err := d.Dial("tcp", fmt.Sprintf("127.0.0.1:%d", httpPort))
	if err != nil {
		return rawAnswer{err: err}
	}
	defer conn.Close()
	fmt.Fprintf(conn, "POST %s HTTP/1.1\r\nHost: %s:%d\r\n%s\r\nContent-Type: application/octet-stream\r\n\r\n", path, host, httpPort, framing)
	stop := make(chan struct{})
	sent := make(chan struct{})
	go func() { defer close(sent); send(conn, stop) }()
	defer func() { <-sent }()
	defer close(stop)
	conn.SetReadDeadline(time.Now().Add(20 * time.Second))
	res, err := http.ReadResponse(bufio.NewReader(conn), nil)
	if err != nil {
		return rawAnswer{err: fmt.Errorf("no answer: %v", err), at: time.Now()}
	}
	body, _ := io.ReadAll(res.Body)
	res.Body.Close()
	return rawAnswer{status: res.StatusCode, body: string(body), at: time.Now()}
}

// pause waits d, or less when stop closes; false then.
func pause(d time.Duration, stop <-chan struct{}) bool {
	select {
	case <-time.After(d):
		return true
	case <-stop:
		return false
	}
}

// trickle sends chunks of one byte every 200 ms, n of them (for ever when
// n < 0), then the end of the body unless open.
func trickle(n int, open bool, ended *time.Time) func(io.Writer, <-chan struct{}) {
	return func(w io.Writer, stop <-chan struct{}) {
		for i := 0; n < 0 || i < n; i++ {
			if _, err := io.WriteString(w, "1\r\nx\r\n"); err != nil || !pause(200*time.Millisecond, stop) {
				return
			}
		}
		if !open {
			io.WriteString(w, "0\r\n\r\n")
		}
		if ended != nil {
			*ended = time.Now()
		}
	}
}

// A visitor who trickles a chunked body (a byte every 200 ms for 3 s) to a
// one-at-a-time handle holds no slot of it: ten visitors who come while
// it trickles are all answered before its last byte is sent, and the
// trickler is answered after (its body whole, within
// request_body_timeout).
func TestTrickledBodyHoldsNoSlot(t *testing.T) {
	bob, mallory := attacked(t, bodyOptions)
	id := deploy(t, mallory, bodyReader, map[string]any{"timeoutMs": 500})
	host := id + ".apps.localhost"

	var ended time.Time
	trickled := make(chan rawAnswer, 1)
	began := time.Now()
	go func() { trickled <- rawPost(host, "/upload", "Transfer-Encoding: chunked", trickle(15, false, &ended)) }()
	time.Sleep(300 * time.Millisecond)

	const visitors = 10
	var wg sync.WaitGroup
	answered := make([]time.Time, visitors)
	failed := make(chan string, visitors)
	for i := range answered {
		wg.Add(1)
		go func() {
			defer wg.Done()
			a := do(t, "GET", site(host, "/"), "", nil)
			answered[i] = time.Now()
			if a.status != 200 {
				failed <- fmt.Sprintf("visitor %d: %d %s", i, a.status, a.body)
			}
		}()
	}
	wg.Wait()
	close(failed)
	for f := range failed {
		t.Error(f)
	}
	tr := <-trickled
	latest := answered[0]
	for _, at := range answered {
		if at.After(latest) {
			latest = at
		}
	}
	t.Logf("the visitors' last answer came %v after they came; the trickle ended %v after it began and was answered %v after",
		latest.Sub(began.Add(300*time.Millisecond)).Round(time.Millisecond), ended.Sub(began).Round(time.Millisecond), tr.at.Sub(began).Round(time.Millisecond))
	if tr.status != 200 || !strings.Contains(tr.body, `"length":15`) {
		t.Fatalf("the trickler: %v", tr)
	}
	for i, at := range answered {
		if ended.IsZero() || !at.Before(ended) {
			t.Fatalf("visitor %d was answered only after the trickled body ended: the trickler held the handle", i)
		}
	}
	// Ten visitors and the trickle: the closure state is intact.
	if a := do(t, "GET", site(host, "/"), "", nil); served(t, a) != visitors+2 {
		t.Fatalf("after the trickle: %s", a.body)
	}
	bob.check("a trickled body")
}

// progressOf polls the handler's count of bytes read from upload n until it
// reaches at least want.
func progressOf(t *testing.T, host, n string, want int) error {
	var a answer
	seen := 0
	if waitfor.Within(10*time.Second, func() bool {
		a, seen = do(t, "GET", site(host, "/progress?n="+n), "", nil), 0
		fmt.Sscanf(string(a.body), `{"seen":%d}`, &seen)
		return seen >= want
	}) {
		return nil
	}
	return fmt.Errorf("the handler read %d bytes of upload %s, want %d (%d %s)", seen, n, want, a.status, a.body)
}

// Bodies that stop arriving, or trickle past request_body_timeout, all
// answer 408 REQUEST_TIMEOUT, never 504, although they last longer than
// the handle's 500 ms bound: small ones (read whole by the gateway, the
// handler never called), and large ones that stream into a handler that
// has started reading them (its read fails; a handler that catches the
// error answers for itself). The handle keeps its isolate and its closure
// state, and takes no strike.
func TestStalledBodiesAnswer408(t *testing.T) {
	bob, mallory := attacked(t, bodyOptions+"\nbound_strikes 2")
	id := deploy(t, mallory, bodyReader, map[string]any{"timeoutMs": 500, "concurrency": 8})
	host := id + ".apps.localhost"
	if a := do(t, "POST", site(host, "/upload"), "", []byte("a whole body")); a.status != 200 || !strings.Contains(string(a.body), `"served":1`) {
		t.Fatalf("an upload: %d %s", a.status, a.body)
	}
	// A one-at-a-time handle waits for a streamed body on another path of
	// the sandbox (one call's watchdog for the whole wait).
	single := deploy(t, mallory, bodyReader, map[string]any{"timeoutMs": 500})
	singleHost := single + ".apps.localhost"
	mib := strings.Repeat("x", 1<<20)
	// stallAfter sends what, then nothing more.
	stallAfter := func(what string) func(io.Writer, <-chan struct{}) {
		return func(w io.Writer, stop <-chan struct{}) {
			io.WriteString(w, what)
			<-stop
		}
	}
	// largeThen sends 1.5 MiB of a 3 MiB body, waits until the handler
	// has read 1 MiB of it, then runs then.
	largeThen := func(n string, then func(io.Writer, <-chan struct{})) func(io.Writer, <-chan struct{}) {
		return func(w io.Writer, stop <-chan struct{}) {
			io.WriteString(w, mib+mib[:512<<10])
			if err := progressOf(t, host, n, 1<<20); err != nil {
				t.Error(err)
			}
			then(w, stop)
		}
	}
	largeChunked := func(n string, then func(io.Writer, <-chan struct{})) func(io.Writer, <-chan struct{}) {
		return func(w io.Writer, stop <-chan struct{}) {
			fmt.Fprintf(w, "%x\r\n%s\r\n", 3<<19, mib+mib[:512<<10])
			if err := progressOf(t, host, n, 1<<20); err != nil {
				t.Error(err)
			}
			then(w, stop)
		}
	}
	cases := []struct {
		name, path, framing string
		send                func(io.Writer, <-chan struct{})
		want                string // in the answer's status and body
		host                string // when not host
	}{
		{"a small body of known length that stalls", "/upload?n=a", "Content-Length: 100", stallAfter("0123456789"), "408 REQUEST_TIMEOUT", ""},
		{"a small chunked body that stalls", "/upload?n=b", "Transfer-Encoding: chunked", stallAfter("5\r\nhello\r\n"), "408 REQUEST_TIMEOUT", ""},
		{"a small chunked body that trickles past request_body_timeout", "/upload?n=c", "Transfer-Encoding: chunked", trickle(-1, true, nil), "408 REQUEST_TIMEOUT", ""},
		{"a 3 MiB body that stalls while the handler reads it", "/upload?n=d", "Content-Length: 3145728", largeThen("d", stallAfter("")), "408 REQUEST_TIMEOUT", ""},
		{"a large chunked body that trickles past request_body_timeout while the handler reads it", "/upload?n=e", "Transfer-Encoding: chunked", largeChunked("e", trickle(-1, true, nil)), "408 REQUEST_TIMEOUT", ""},
		{"a 3 MiB body that stalls while a handler that catches reads it", "/caught?n=f", "Content-Length: 3145728", largeThen("f", stallAfter("")), `200 {"caught":"TypeError","code":"REQUEST_TIMEOUT"}`, ""},
		{"a 3 MiB body that stalls at once while a one-at-a-time handler reads it", "/upload?n=g", "Content-Length: 3145728", stallAfter("0123456789"), "408 REQUEST_TIMEOUT", singleHost},
	}
	answers := make([]rawAnswer, len(cases))
	var wg sync.WaitGroup
	for i, c := range cases {
		wg.Add(1)
		to := host
		if c.host != "" {
			to = c.host
		}
		go func() { defer wg.Done(); answers[i] = rawPost(to, c.path, c.framing, c.send) }()
	}
	wg.Wait()
	for i, c := range cases {
		a := answers[i]
		t.Logf("%s: %v", c.name, a)
		if got := fmt.Sprintf("%d %s", a.status, a.body); a.err != nil || !strings.Contains(got, strings.SplitN(c.want, " ", 2)[1]) || !strings.HasPrefix(got, c.want[:3]) {
			t.Errorf("%s: answered %v, want %s", c.name, a, c.want)
		}
	}
	// One upload and this visit: the isolate and its closure state stayed.
	if a := do(t, "GET", site(host, "/"), "", nil); a.status != 200 || !strings.Contains(string(a.body), `"served":2`) {
		t.Fatalf("after the stalled bodies: %d %s", a.status, a.body)
	}
	if a := do(t, "GET", api("/handles/"+id), mallory, nil); a.status != 200 {
		t.Fatalf("the handle after the stalled bodies: %d %s", a.status, a.body)
	}
	if a := do(t, "GET", site(singleHost, "/"), "", nil); a.status != 200 || !strings.Contains(string(a.body), `"served":1`) {
		t.Fatalf("the one-at-a-time handle after its stalled body: %d %s", a.status, a.body)
	}
	bob.check("stalled bodies")
}

// What the gateway holds of bodies it reads whole is bounded a visitor
// address (16 MiB): sixteen bodies of 1 MiB that have sent 600 KiB each
// and stall take it all, so a seventeenth answers 429 at once; once the
// stalls have answered 408 their share is free again.
func TestHeldBodiesAreBoundedPerVisitor(t *testing.T) {
	bob, mallory := attacked(t, bodyOptions)
	id := deploy(t, mallory, bodyReader, map[string]any{"timeoutMs": 500})
	host := id + ".apps.localhost"
	part := strings.Repeat("x", 600<<10)
	var wg sync.WaitGroup
	stalled := make([]rawAnswer, 16)
	began := make(chan struct{}, 16)
	for i := range stalled {
		wg.Add(1)
		go func() {
			defer wg.Done()
			stalled[i] = rawPost(host, "/upload", "Content-Length: 1048576", func(w io.Writer, stop <-chan struct{}) {
				io.WriteString(w, part)
				began <- struct{}{}
				<-stop
			})
		}()
	}
	for range stalled {
		<-began
	}
	// The gateway has read what they sent: their share is taken.
	waitfor.Until(t, 30*time.Second, "the stalled bodies holding the visitor's share", func() bool {
		return mostHeldByAVisitor() >= budgets.RequestBodiesHeldPerVisitor
	})
	over := rawPost(host, "/upload", "Content-Length: 1048576", func(w io.Writer, stop <-chan struct{}) {
		io.WriteString(w, part)
		<-stop
	})
	wg.Wait()
	if over.status != 429 || !strings.Contains(over.body, "QUOTA_EXCEEDED") {
		t.Errorf("a seventeenth body past the visitor's share: %v", over)
	}
	for i, a := range stalled {
		if a.status != 408 {
			t.Errorf("stalled body %d: %v", i, a)
		}
	}
	if a := do(t, "POST", site(host, "/upload"), "", []byte(part)); a.status != 200 || !strings.Contains(string(a.body), fmt.Sprintf(`"length":%d`, len(part))) {
		t.Fatalf("a body after the stalls: %d %s", a.status, a.body)
	}
	bob.check("bodies past a visitor's share")
}

// mostHeldByAVisitor is the most the gateway's runtimes hold of one
// visitor address's bodies.
func mostHeldByAVisitor() int64 {
	var most int64
	for _, rt := range runtimesOf() {
		rt.bodies.mu.Lock()
		for _, n := range rt.bodies.by {
			most = max(most, n)
		}
		rt.bodies.mu.Unlock()
	}
	return most
}

// Where the transport has no read deadline (HTTP/3), a goroutine reads the
// body and the same bounds hold: a body that stalls answers 408 after
// request_body_idle, one that trickles past request_body_timeout 408 too,
// and a whole one is read.
func TestWholeBodyWithoutReadDeadlines(t *testing.T) {
	t.Parallel()
	h := &Retainer{app: &App{MaxRequestBody: 4 << 20, RequestBodyIdle: caddy.Duration(300 * time.Millisecond), RequestBodyTimeout: caddy.Duration(time.Second)}, live: new(started)}
	read := func(send func(w *io.PipeWriter)) (string, error) {
		pr, pw := io.Pipe()
		defer pw.Close()
		go send(pw)
		r := httptest.NewRequest("POST", "/", pr)
		r.ContentLength = -1
		body, _, release, err := h.readVisitorBody(httptest.NewRecorder(), r, "tenant", time.Now())
		release()
		return string(body), err
	}
	if body, err := read(func(w *io.PipeWriter) { io.WriteString(w, "whole"); w.Close() }); body != "whole" || err != nil {
		t.Fatalf("a whole body: %q %v", body, err)
	}
	if _, err := read(func(w *io.PipeWriter) { io.WriteString(w, "stalls") }); fault.CodeOf(err) != fault.RequestTimeout || !strings.Contains(err.Error(), "request_body_idle") {
		t.Fatalf("a body that stalls: %v", err)
	}
	trickles := func(w *io.PipeWriter) {
		for {
			if _, err := io.WriteString(w, "x"); err != nil {
				return
			}
			time.Sleep(100 * time.Millisecond)
		}
	}
	if _, err := read(trickles); fault.CodeOf(err) != fault.RequestTimeout || !strings.Contains(err.Error(), "request_body_timeout") {
		t.Fatalf("a body that trickles: %v", err)
	}
}

// A body refused for its size is answered, not reset: the visitor is
// still sending it when the answer goes, and a connection closed with
// bytes unread resets, which a client that has not yet read the answer
// sees instead (Go's client did in 5-14% of such uploads). 150 uploads of
// 2 MiB to the 1 MiB bound, with a length or chunked, each answer 413
// TOO_LARGE; an upload that announces 2 MiB and waits for a 100 Continue
// gets the answer whole without sending.
func TestRefusedBodiesAreAnsweredNotReset(t *testing.T) {
	tester := caddytest.NewTester(t)
	tester.InitServer(gatewayConfig(filepath.Join(t.TempDir(), "registry.db"), ""), "caddyfile")
	id := deploy(t, token(t, "alice", allScopes), bodyReader, nil)
	expecting := &http.Client{Timeout: 20 * time.Second, Transport: &http.Transport{
		ExpectContinueTimeout: 10 * time.Second, DialContext: client.Transport.(*http.Transport).DialContext}}
	payload := make([]byte, 2<<20)
	for i := 0; i < 150; i++ {
		kind := []string{"with a length", "chunked", "expecting 100 Continue"}[i%3]
		var body io.Reader = bytes.NewReader(payload)
		if kind == "chunked" {
			body = io.MultiReader(body) // no length known: chunked
		}
		req, _ := http.NewRequest("POST", site(id+".apps.localhost", "/upload"), body)
		c := client
		if kind == "expecting 100 Continue" {
			req.Header.Set("Expect", "100-continue")
			c = expecting
		}
		res, err := c.Do(req)
		if err != nil {
			t.Fatalf("upload %d, %s: %v", i+1, kind, err)
		}
		data, _ := io.ReadAll(res.Body)
		res.Body.Close()
		if res.StatusCode != 413 || !strings.Contains(string(data), "TOO_LARGE") {
			t.Fatalf("upload %d, %s: %d %s", i+1, kind, res.StatusCode, data)
		}
	}
}
