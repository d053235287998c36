package caddymodule

import (
	"bufio"
	"context"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	goruntime "runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/retainer-gw/retainer/internal/waitfor"
)

// countingListener counts the connections it accepted.
type countingListener struct {
	net.Listener
	n atomic.Int32
}

func (l *countingListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err == nil {
		l.n.Add(1)
	}
	return c, err
}

// startLinkOwner serves h on a cluster listener of its own (the link and
// HTTP/1.1), as an owner's listen address does.
func startLinkOwner(t *testing.T, h http.Handler) (string, *splitListener, *countingListener) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	cl := &countingListener{Listener: ln}
	sl := newSplitListener(cl, newLinkServer(h))
	srv := &http.Server{Handler: h}
	go srv.Serve(sl)
	t.Cleanup(func() { srv.Close() })
	return ln.Addr().String(), sl, cl
}

// forwardOnce forwards r to addr through n and answers the recorded
// answer, the outcome, and the panic the relay raised, if any.
func forwardOnce(t *testing.T, n *clusterNode, r *http.Request, addr string, lookAgain bool) (w *httptest.ResponseRecorder, got forwardOutcome, panicked any) {
	t.Helper()
	fb, err := readForwardBody(r)
	if err != nil {
		t.Error(err)
		return
	}
	w = httptest.NewRecorder()
	defer func() { panicked = recover() }()
	got = n.forwardTo(w, r, addr, forward{Kind: "data", Registry: "r"}, fb, lookAgain)
	return
}

// TestLinkMultiplexesForwards: 300 forwards at once, with no body, a body
// held whole and streamed bodies larger than a stream's window, and
// answers streamed in flushed pieces, cross on one connection; the owner
// checks each one's HMAC, nonce and body cover (parseForward) and every
// answer comes back to its own request.
func TestLinkMultiplexesForwards(t *testing.T) {
	secret := []byte(strings.Repeat("s", 32))
	var nonces nonceSet
	addr, _, accepted := startLinkOwner(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		f, err := parseForward(secret, r, time.Now())
		if err == nil {
			var nonce [16]byte
			hex.Decode(nonce[:], []byte(f.Nonce))
			err = nonces.first(nonce, time.Now())
		}
		if err != nil {
			w.WriteHeader(403)
			io.WriteString(w, err.Error())
			return
		}
		body, err := io.ReadAll(r.Body)
		if err != nil {
			w.WriteHeader(403)
			io.WriteString(w, err.Error())
			return
		}
		sum := sha256.Sum256(body)
		w.Header().Set("X-Path", r.URL.RequestURI())
		if r.URL.Path == "/stream" {
			for i := range 5 {
				fmt.Fprintf(w, "piece %d;", i)
				w.(http.Flusher).Flush()
				time.Sleep(5 * time.Millisecond)
			}
			return
		}
		fmt.Fprintf(w, "%s %s %d %x", r.Method, r.Host, len(body), sum[:4])
	}))
	// The head timeout (the lease) is generous: under -race on a loaded
	// machine the 75 streamed bodies (45 MB) took up to 10 s before and
	// after the header's HMAC, and a last answer's head came past a 10 s
	// one (503) in two of five full runs of the link tests.
	n := &clusterNode{secret: secret, link: newLinkClient(60 * time.Second)}
	defer n.link.close()

	type result struct {
		i    int
		want string
		w    *httptest.ResponseRecorder
		got  forwardOutcome
		p    any
	}
	results := make(chan result, 300)
	var wg sync.WaitGroup
	for i := range 300 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			var r *http.Request
			var body string
			target := fmt.Sprintf("/r/%d?q=%d", i, i)
			switch i % 4 {
			case 0:
				r = httptest.NewRequest("GET", target, nil)
			case 1:
				body = strings.Repeat("h", 100+i)
				r = httptest.NewRequest("POST", target, strings.NewReader(body))
			case 2:
				body = strings.Repeat(fmt.Sprint(i%10), 600<<10+i) // streamed, past the window
				r = httptest.NewRequest("PUT", target, strings.NewReader(body))
				r.ContentLength = -1
			case 3:
				target = "/stream"
				r = httptest.NewRequest("GET", target, nil)
			}
			r.Host = fmt.Sprintf("t%d.example", i)
			sum := sha256.Sum256([]byte(body))
			want := fmt.Sprintf("%s %s %d %x", r.Method, r.Host, len(body), sum[:4])
			if target == "/stream" {
				want = "piece 0;piece 1;piece 2;piece 3;piece 4;"
			}
			w, got, p := forwardOnce(t, n, r, addr, false)
			results <- result{i, want, w, got, p}
		}()
	}
	wg.Wait()
	close(results)
	for res := range results {
		if res.p != nil || res.got != forwardRelayed || res.w.Code != 200 || res.w.Body.String() != res.want {
			t.Fatalf("forward %d: %v %v %d %q, want %q", res.i, res.p, res.got, res.w.Code, res.w.Body.String(), res.want)
		}
		if want := fmt.Sprintf("/r/%d?q=%d", res.i, res.i); res.i%4 != 3 && res.w.Header().Get("X-Path") != want {
			t.Fatalf("forward %d got the answer of %q", res.i, res.w.Header().Get("X-Path"))
		}
	}
	if got := accepted.n.Load(); got != 1 {
		t.Fatalf("300 forwards took %d connections, want 1", got)
	}
}

// TestLinkOwnerDiesMidStream: an owner whose connections end (its process
// died) with forwards in flight on the link: every forward still waiting
// for its answer gets the retryable 503 at once (no hang), a streamed
// body the owner had stopped reading ends with it, an answer already
// under way is cut (the relay aborts, as a proxy's does), nothing of the
// link is left running, and the next forward finds the member unreachable
// and looks again.
func TestLinkOwnerDiesMidStream(t *testing.T) {
	secret := []byte(strings.Repeat("s", 32))
	var inFlight sync.WaitGroup
	inFlight.Add(21)
	release := make(chan struct{})
	addr, sl, _ := startLinkOwner(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/half" {
			io.WriteString(w, "the first half")
			w.(http.Flusher).Flush()
		} else {
			inFlight.Done()
		}
		select {
		case <-release:
		case <-r.Context().Done():
		}
	}))
	defer close(release)
	before := goruntime.NumGoroutine()
	n := &clusterNode{secret: secret, link: newLinkClient(time.Minute)}
	defer n.link.close()

	type result struct {
		path string
		w    *httptest.ResponseRecorder
		got  forwardOutcome
		p    any
	}
	results := make(chan result, 22)
	send := func(path string, r *http.Request) {
		go func() {
			w, got, p := forwardOnce(t, n, r, addr, false)
			results <- result{path, w, got, p}
		}()
	}
	for range 20 {
		send("/hold", httptest.NewRequest("GET", "/hold", nil))
	}
	big := httptest.NewRequest("POST", "/hold", strings.NewReader(strings.Repeat("b", 4<<20)))
	big.ContentLength = -1
	send("/big", big)
	// The answer under way: relayed in part to its visitor before the
	// owner dies.
	half := &notifyRecorder{ResponseRecorder: httptest.NewRecorder(), wrote: make(chan struct{})}
	go func() {
		defer func() { results <- result{"/half", half.ResponseRecorder, forwardRelayed, recover()} }()
		r := httptest.NewRequest("GET", "/half", nil)
		fb, _ := readForwardBody(r)
		n.forwardTo(half, r, addr, forward{Kind: "data", Registry: "r"}, fb, false)
	}()
	inFlight.Wait()
	<-half.wrote

	sl.Close() // the owner's process ends: its sockets close
	deadline := time.After(10 * time.Second)
	for range 22 {
		select {
		case res := <-results:
			switch res.path {
			case "/half":
				if !errors.Is(asError(res.p), http.ErrAbortHandler) || res.w.Code != 200 || res.w.Body.String() != "the first half" {
					t.Errorf("the answer under way: %v %d %q", res.p, res.w.Code, res.w.Body.String())
				}
			default:
				if res.p != nil || res.got != forwardFailed || res.w.Code != 503 || res.w.Header().Get("Retry-After") == "" || !strings.Contains(res.w.Body.String(), "OVERLOADED") {
					t.Errorf("%s: %v %v %d %v %q", res.path, res.p, res.got, res.w.Code, res.w.Header(), res.w.Body.String())
				}
			}
		case <-deadline:
			t.Fatal("forwards to a dead owner still wait")
		}
	}
	if _, got, _ := forwardOnce(t, n, httptest.NewRequest("GET", "/", nil), addr, true); got != forwardLookAgain {
		t.Fatalf("a forward to the dead owner's address: %v, want a look again", got)
	}
	if !waitfor.Within(30*time.Second, func() bool { return goruntime.NumGoroutine() <= before+2 }) {
		buf := make([]byte, 1<<20)
		t.Fatalf("%d goroutines, %d before:\n%s", goruntime.NumGoroutine(), before, buf[:goruntime.Stack(buf, true)])
	}
}

func asError(p any) error {
	err, _ := p.(error)
	return err
}

// TestLinkMemberThatNeverAnswers: a member that takes the connection and
// its frames but answers nothing (paused) gets the forward abandoned with
// the retryable 503 once the head timeout (the lease) passed.
func TestLinkMemberThatNeverAnswers(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() { io.Copy(io.Discard, c); c.Close() }()
		}
	}()
	n := &clusterNode{secret: []byte(strings.Repeat("s", 32)), link: newLinkClient(300 * time.Millisecond)}
	defer n.link.close()
	done := make(chan struct{})
	go func() {
		defer close(done)
		w, got, p := forwardOnce(t, n, httptest.NewRequest("GET", "/", nil), ln.Addr().String(), true)
		if p != nil || got != forwardFailed || w.Code != 503 || w.Header().Get("Retry-After") == "" {
			t.Errorf("a forward to a silent member: %v %v %d %v", p, got, w.Code, w.Header())
		}
	}()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("a forward to a silent member still waits")
	}
}

// TestLinkForwardsAreChecked: the owner's checks hold on the link: a
// forward is served once and refused (403) when its frames are sent again
// on a new connection, as is a forward signed with another secret or none
// at all; the not-owner mark sends the forwarder to look again, a
// handler's forged mark is relayed as the handler's answer without it.
func TestLinkForwardsAreChecked(t *testing.T) {
	secret := []byte(strings.Repeat("s", 32))
	owner := &clusterNode{secret: secret, started: time.Now().Add(-time.Second), data: map[string]*Retainer{}, apis: map[string]*API{}}
	var captured sync.Map // path -> the head frame's payload
	tapped := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/forged":
			w.Header().Set(notOwnerHeader, "1")
			w.Header().Set("Retainer-Other", "x")
			io.WriteString(w, "the handler")
		case "/elsewhere":
			f, err := parseForward(secret, r, time.Now())
			if err != nil {
				t.Error(err)
			}
			w.Header().Set(notOwnerHeader, notOwnerMark(secret, f.Nonce))
			w.WriteHeader(503)
		default:
			owner.serveForwarded(w, r)
		}
	})
	addr, _, _ := startLinkOwner(t, tapped)
	owner.self = addr
	n := &clusterNode{secret: secret, link: newLinkClient(10 * time.Second)}
	defer n.link.close()

	// Capture the head the forwarder sends by sending it through a
	// second link client to a listener that records it.
	rec, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer rec.Close()
	go func() {
		c, err := rec.Accept()
		if err != nil {
			return
		}
		defer c.Close()
		br := bufio.NewReader(c)
		readLinkHello(br)
		l := &linkConn{br: br}
		typ, _, payload, err := l.readFrame(nil)
		if err == nil && typ == frameHead {
			captured.Store("head", append([]byte(nil), payload...))
		}
		io.Copy(io.Discard, br)
	}()
	tap := &clusterNode{secret: secret, link: newLinkClient(300 * time.Millisecond)}
	tap.link.dial = tapDial(rec.Addr().String())
	defer tap.link.close()
	forwardOnce(t, tap, httptest.NewRequest("GET", "/taken", nil), addr, false)
	head, ok := captured.Load("head")
	if !ok {
		t.Fatal("no head captured")
	}
	replay := func(head []byte) int {
		c, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		frames := appendFrame(helloFor(t, secret, addr), frameHead, 1, head)
		c.Write(appendFrame(frames, frameEnd, 1, nil))
		l := &linkConn{br: bufio.NewReader(c)}
		c.SetReadDeadline(time.Now().Add(10 * time.Second))
		typ, _, payload, err := l.readFrame(nil)
		if err != nil || typ != frameAnswer {
			t.Fatalf("no answer: %v %d", err, typ)
		}
		hr := headReader{b: payload}
		return int(hr.uvarint())
	}
	if got := replay(head.([]byte)); got != 404 {
		t.Fatalf("the captured forward, first sent: %d, want 404 (checked, no such registry)", got)
	}
	if got := replay(head.([]byte)); got != 403 {
		t.Fatalf("the captured forward sent again: %d, want 403", got)
	}
	forged := strings.Replace(string(head.([]byte)), "/taken", "/takeN", 1)
	if got := replay([]byte(forged)); got != 403 {
		t.Fatalf("a forward changed on the way: %d, want 403", got)
	}
	other := &clusterNode{secret: []byte(strings.Repeat("o", 32)), link: newLinkClient(10 * time.Second)}
	defer other.link.close()
	if w, _, _ := forwardOnce(t, other, httptest.NewRequest("GET", "/", nil), addr, false); w.Code != 403 {
		t.Fatalf("a forward under another secret: %d", w.Code)
	}
	if w, _, _ := forwardOnce(t, n, httptest.NewRequest("GET", "/", nil), addr, false); w.Code != 404 {
		t.Fatalf("a good forward: %d %q", w.Code, w.Body.String())
	}

	if _, got, _ := forwardOnce(t, n, httptest.NewRequest("GET", "/elsewhere", nil), addr, true); got != forwardLookAgain {
		t.Fatalf("the owner's not-owner mark: %v, want a look again", got)
	}
	w, got, _ := forwardOnce(t, n, httptest.NewRequest("GET", "/elsewhere", nil), addr, false)
	if got != forwardRelayed || w.Code != 503 || w.Header().Get(notOwnerHeader) != "" {
		t.Fatalf("the second look's answer: %v %d %v", got, w.Code, w.Header())
	}
	w, got, _ = forwardOnce(t, n, httptest.NewRequest("GET", "/forged", nil), addr, true)
	if got != forwardRelayed || w.Code != 200 || w.Body.String() != "the handler" || w.Header().Get(notOwnerHeader) != "" || w.Header().Get("Retainer-Other") != "" {
		t.Fatalf("a forged mark: %v %d %v %q", got, w.Code, w.Header(), w.Body)
	}
}

// TestLinkRefusesAPeerPastItsWindow: a peer on the cluster's network
// that sends body bytes past a stream's window, or past its connection's
// across streams whose handlers read nothing, has its connection closed
// (the owner holds at most the windows, not what the peer sends), and a
// bystander's forwards on their own connection are served meanwhile.
func TestLinkRefusesAPeerPastItsWindow(t *testing.T) {
	secret := []byte(strings.Repeat("s", 32))
	release := make(chan struct{})
	defer close(release)
	addr, _, _ := startLinkOwner(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/hold" {
			select {
			case <-release:
			case <-r.Context().Done():
			}
			return
		}
		io.WriteString(w, "served")
	}))
	head := func(target string) []byte {
		return linkRequestHead(httptest.NewRequest("POST", target, nil), "none", -1)
	}
	closed := func(name string, frames []byte) {
		t.Helper()
		c, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		go c.Write(append(helloFor(t, nil, addr), frames...))
		c.SetReadDeadline(time.Now().Add(10 * time.Second))
		// Closed: the end of the stream, or a reset (unread bytes).
		_, err = io.Copy(io.Discard, c)
		if errors.Is(err, os.ErrDeadlineExceeded) {
			t.Fatalf("%s: the connection was not closed: %v", name, err)
		}
	}
	chunk := make([]byte, linkMaxData)
	var frames []byte
	frames = appendFrame(frames, frameHead, 1, head("/hold"))
	for range linkWindow/linkMaxData + 1 {
		frames = appendFrame(frames, frameData, 1, chunk)
	}
	closed("past a stream's window", frames)

	frames = nil
	for id := uint32(1); id <= linkConnWindow/(linkWindow-linkMaxData)+1; id++ {
		frames = appendFrame(frames, frameHead, id, head("/hold"))
		for range linkWindow/linkMaxData - 1 {
			frames = appendFrame(frames, frameData, id, chunk)
		}
	}
	closed("past the connection's window", frames)

	n := &clusterNode{secret: secret, link: newLinkClient(10 * time.Second)}
	defer n.link.close()
	if w, got, p := forwardOnce(t, n, httptest.NewRequest("GET", "/", nil), addr, false); p != nil || got != forwardRelayed || w.Body.String() != "served" {
		t.Fatalf("the bystander's forward: %v %v %d %q", p, got, w.Code, w.Body.String())
	}
}

// TestLinkHandlerPanicEndsItsForwardOnly: a handler that panics at the
// owner ends its own forward with the retryable 503 at once (not after
// the lease), the owner goes on, and the next forward on the same
// connection is served.
func TestLinkHandlerPanicEndsItsForwardOnly(t *testing.T) {
	addr, _, accepted := startLinkOwner(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/panic" {
			panic("a bug")
		}
		io.WriteString(w, "served")
	}))
	n := &clusterNode{secret: []byte(strings.Repeat("s", 32)), link: newLinkClient(time.Minute)}
	defer n.link.close()
	start := time.Now()
	w, got, p := forwardOnce(t, n, httptest.NewRequest("GET", "/panic", nil), addr, false)
	if p != nil || got != forwardFailed || w.Code != 503 || w.Header().Get("Retry-After") == "" || time.Since(start) > 30*time.Second {
		t.Fatalf("a forward whose handler panicked: %v %v %d %v after %v", p, got, w.Code, w.Header(), time.Since(start))
	}
	if w, got, p := forwardOnce(t, n, httptest.NewRequest("GET", "/", nil), addr, false); p != nil || got != forwardRelayed || w.Body.String() != "served" {
		t.Fatalf("the next forward: %v %v %d %q", p, got, w.Code, w.Body.String())
	}
	if accepted.n.Load() != 1 {
		t.Fatalf("%d connections, want 1", accepted.n.Load())
	}
}

// notifyRecorder closes wrote at its first write.
type notifyRecorder struct {
	*httptest.ResponseRecorder
	once  sync.Once
	wrote chan struct{}
}

func (r *notifyRecorder) Write(p []byte) (int, error) {
	n, err := r.ResponseRecorder.Write(p)
	r.once.Do(func() { close(r.wrote) })
	return n, err
}

// startClusterOwner serves a cluster node's listener as listen does: the
// link, whose heads are checked before anything is held for them, and
// HTTP/1.1.
func startClusterOwner(t *testing.T, secret []byte) string {
	t.Helper()
	owner := &clusterNode{secret: secret, started: time.Now().Add(-time.Second), data: map[string]*Retainer{}, apis: map[string]*API{}}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	owner.serveCluster(ln, http.HandlerFunc(owner.serveForwarded))
	t.Cleanup(func() { owner.server.Close() })
	return ln.Addr().String()
}

// settle waits (up to 30 s) for the goroutines to come back to at most
// want, and answers how many there are.
func settle(want int) int {
	var n int
	waitfor.Within(30*time.Second, func() bool {
		n = goruntime.NumGoroutine()
		return n <= want
	})
	return n
}

// closedWithin reads c until it ends: false when it is still open after
// d.
func closedWithin(c net.Conn, d time.Duration) bool {
	c.SetReadDeadline(time.Now().Add(d))
	_, err := io.Copy(io.Discard, c)
	return !errors.Is(err, os.ErrDeadlineExceeded)
}

// TestLinkUnsignedHeadsHoldNothing: one who reaches the cluster listener
// without the secret and sends 130,000 heads on a link connection while
// reading nothing (their 403s once used up the connection's 16 MiB window
// and pinned 4,096 handlers, each holding its parsed head, forever) gets
// its first head answered 403 and the connection closed: no goroutine is
// left for it, and a bystander member's forwards are served meanwhile.
func TestLinkUnsignedHeadsHoldNothing(t *testing.T) {
	secret := []byte(strings.Repeat("s", 32))
	addr := startClusterOwner(t, secret)
	n := &clusterNode{secret: secret, link: newLinkClient(10 * time.Second)}
	defer n.link.close()
	bystander := func() {
		t.Helper()
		if w, _, p := forwardOnce(t, n, httptest.NewRequest("GET", "/", nil), addr, false); p != nil || w.Code != 404 {
			t.Fatalf("the bystander's forward: %v %d %q", p, w.Code, w.Body.String())
		}
	}
	bystander()
	base := goruntime.NumGoroutine()

	head := linkRequestHead(httptest.NewRequest("GET", "/", nil), "none", 0)
	// One head, read: its 403, then the connection's end.
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	c.Write(appendFrame(helloFor(t, secret, addr), frameHead, 1, head))
	c.SetReadDeadline(time.Now().Add(10 * time.Second))
	l := &linkConn{br: bufio.NewReader(c)}
	typ, _, payload, err := l.readFrame(nil)
	if hr := (headReader{b: payload}); err != nil || typ != frameAnswer || hr.uvarint() != 403 {
		t.Fatalf("an unsigned head's answer: %v %d", err, typ)
	}
	if !closedWithin(c, 10*time.Second) {
		t.Fatal("the connection of an unsigned head was not closed")
	}

	// The flood, never read.
	var frames []byte
	for id := uint32(1); id <= 130000; id++ {
		frames = appendFrame(frames, frameHead, id, head)
	}
	for range 3 {
		c, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		c.SetWriteDeadline(time.Now().Add(20 * time.Second))
		c.Write(append(helloFor(t, secret, addr), frames...)) // fails once the owner closed the connection
	}
	if got := settle(base + 20); got > base+20 {
		t.Fatalf("%d goroutines after the flood, %d before", got, base)
	}
	bystander()
}

// TestLinkHeadsOfManyFieldsAreRefused: a head claiming and carrying
// 1,000,000 empty header fields (2 MB; it once cost the owner ~30 times
// that before any check) closes its connection having cost about what
// was sent, as does a head that claims 2 MiB and sends 1 KiB; a visitor's
// request of more fields than a head may carry is refused by the
// forwarder (413), and the link goes on serving.
func TestLinkHeadsOfManyFieldsAreRefused(t *testing.T) {
	secret := []byte(strings.Repeat("s", 32))
	addr := startClusterOwner(t, secret)
	head := appendString(appendString(appendString(nil, "GET"), "/"), "x")
	head = binary.AppendVarint(head, 0)
	head = binary.AppendUvarint(head, 1000000)
	head = append(head, make([]byte, 2*1000000)...)
	var before, after goruntime.MemStats
	goruntime.GC()
	goruntime.ReadMemStats(&before)
	const conns = 5
	for range conns {
		c, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		go c.Write(appendFrame(helloFor(t, secret, addr), frameHead, 1, head))
		if !closedWithin(c, 10*time.Second) {
			t.Error("a head of 1,000,000 fields: the connection was not closed")
		}
		c.Close()
	}
	// A head that claims 2 MiB and sends 1 KiB.
	var claims []net.Conn
	for range conns {
		c, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		var h [frameHeadSize]byte
		h[0] = frameHead
		binary.BigEndian.PutUint32(h[5:9], linkMaxHead)
		c.Write(append(append(helloFor(t, secret, addr), h[:]...), make([]byte, 1024)...))
		claims = append(claims, c)
	}
	time.Sleep(500 * time.Millisecond) // the owner reads what came
	goruntime.ReadMemStats(&after)
	sent := uint64(conns * (len(head) + frameHeadSize))
	if got := after.TotalAlloc - before.TotalAlloc; got > 6*sent {
		t.Fatalf("the owner allocated %d MB for %d MB of heads", got>>20, sent>>20)
	}
	t.Logf("allocated %.1f MB for %.1f MB of heads", float64(after.TotalAlloc-before.TotalAlloc)/(1<<20), float64(sent)/(1<<20))

	n := &clusterNode{secret: secret, link: newLinkClient(10 * time.Second)}
	defer n.link.close()
	r := httptest.NewRequest("GET", "/", nil)
	for i := range linkMaxFields {
		r.Header.Add("X-Many", strconv.Itoa(i))
	}
	if w, _, p := forwardOnce(t, n, r, addr, false); p != nil || w.Code != 413 {
		t.Fatalf("a request of %d fields: %v %d", linkMaxFields, p, w.Code)
	}
	if w, _, p := forwardOnce(t, n, httptest.NewRequest("GET", "/", nil), addr, false); p != nil || w.Code != 404 {
		t.Fatalf("the next forward: %v %d %q", p, w.Code, w.Body.String())
	}
}

// TestLinkQuietConnectionsAreClosed: on the cluster listener, a link
// connection that sends its preface and nothing more, or a frame's head
// and not its payload, and an HTTP/1.1 connection kept alive after its
// 403, are closed; a member's connection left idle is closed by the
// owner and its next forward, on a new one, is served.
func TestLinkQuietConnectionsAreClosed(t *testing.T) {
	idle, wait := linkIdle, linkFrameWait
	linkIdle, linkFrameWait = 2*time.Second, time.Second
	defer func() { linkIdle, linkFrameWait = idle, wait }()
	secret := []byte(strings.Repeat("s", 32))
	addr := startClusterOwner(t, secret)
	quiet := func(name string, send []byte, answered bool) {
		t.Helper()
		c, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		c.Write(send)
		if answered {
			c.SetReadDeadline(time.Now().Add(10 * time.Second))
			if _, err := c.Read(make([]byte, 64)); err != nil {
				t.Fatalf("%s: no answer: %v", name, err)
			}
		}
		if !closedWithin(c, 15*time.Second) {
			t.Errorf("%s: still open", name)
		}
	}
	quiet("the preface alone", []byte(linkPreface), false)
	var h [frameHeadSize]byte
	h[0] = frameHead
	binary.BigEndian.PutUint32(h[5:9], 100)
	quiet("a frame's head alone", append(append(helloFor(t, secret, addr), h[:]...), 1, 2, 3), false)
	quiet("HTTP/1.1 kept alive", []byte("GET / HTTP/1.1\r\nHost: x\r\n\r\n"), true)

	n := &clusterNode{secret: secret, link: newLinkClient(10 * time.Second)}
	defer n.link.close()
	for range 2 {
		if w, _, p := forwardOnce(t, n, httptest.NewRequest("GET", "/", nil), addr, false); p != nil || w.Code != 404 {
			t.Fatalf("a member's forward: %v %d %q", p, w.Code, w.Body.String())
		}
		time.Sleep(3 * time.Second)
	}
}

// TestLinkPeerThatReadsNothingIsClosed: a peer whose streams' answers
// (1 MiB each, 40 of them) fill their windows and which never gives room
// back has each of those streams reset once its answer waited linkStall
// (and its connection closed when the connection's window is what they
// wait for): their handlers end instead of waiting forever.
func TestLinkPeerThatReadsNothingIsClosed(t *testing.T) {
	shortLinkStall(t)
	addr, _, _ := startLinkOwner(t, answerMiB)
	base := goruntime.NumGoroutine()
	sendStreams(t, addr, slices.Repeat([]string{"/"}, 40)...)
	time.Sleep(500 * time.Millisecond)
	if got := settle(base + 5); got > base+5 {
		t.Fatalf("%d goroutines, %d before the peer's streams", got, base)
	}
}

// TestLinkPeerThatGivesNoRoomLosesItsConnection: a peer whose streams'
// answers (1 MiB each, 80 of them) fill the connection's window (16 MiB)
// and which never gives room back has its connection closed once the
// answers waiting for that window waited linkStall.
func TestLinkPeerThatGivesNoRoomLosesItsConnection(t *testing.T) {
	shortLinkStall(t)
	addr, _, _ := startLinkOwner(t, answerMiB)
	c := sendStreams(t, addr, slices.Repeat([]string{"/"}, 80)...) // and never a window frame
	if !closedWithin(c, 15*time.Second) {
		t.Fatal("the connection of a peer that gives no room back is still open")
	}
}

// shortLinkStall makes linkStall a second for the test.
func shortLinkStall(t *testing.T) {
	stall := linkStall
	linkStall = time.Second
	t.Cleanup(func() { linkStall = stall })
}

// answerMiB answers every request with 1 MiB.
var answerMiB = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
	w.Write(make([]byte, 1<<20))
})

// sendStreams dials the link owner at addr as a peer with no secret and
// sends a GET of each path as a stream (ids 1, 2, ...), its head and its
// end, in one write: the connection, closed when the test ends.
func sendStreams(t *testing.T, addr string, paths ...string) net.Conn {
	t.Helper()
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	frames := helloFor(t, nil, addr)
	for i, path := range paths {
		id := uint32(i + 1)
		frames = appendFrame(frames, frameHead, id, linkRequestHead(httptest.NewRequest("GET", path, nil), "none", 0))
		frames = appendFrame(frames, frameEnd, id, nil)
	}
	c.Write(frames)
	return c
}

// TestLinkConnectionsFromOneAddressAreBounded: past linkMaxConnsPerHost
// link connections from one address, a new one is closed at once.
func TestLinkConnectionsFromOneAddressAreBounded(t *testing.T) {
	secret := []byte(strings.Repeat("s", 32))
	addr := startClusterOwner(t, secret)
	var conns []net.Conn
	for range linkMaxConnsPerHost + 8 {
		c, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		c.Write(helloFor(t, secret, addr))
		conns = append(conns, c)
	}
	var closed atomic.Int32
	var wg sync.WaitGroup
	for _, c := range conns {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if closedWithin(c, 3*time.Second) {
				closed.Add(1)
			}
		}()
	}
	wg.Wait()
	if closed.Load() != 8 {
		t.Fatalf("%d connections closed at once, want 8", closed.Load())
	}
}

// TestLinkRefusedHeadSparesAMembersConnection: on a connection whose
// first head checked (a member's), a head that does not check (say, a
// visitor's request the signature does not cover as rebuilt) is answered
// 403 by the read loop and the forwards around it are served on the same
// connection.
func TestLinkRefusedHeadSparesAMembersConnection(t *testing.T) {
	secret := []byte(strings.Repeat("s", 32))
	addr := startClusterOwner(t, secret)
	signed := func() []byte {
		r := httptest.NewRequest("GET", "/", nil)
		h, _ := forward{Kind: "data", Registry: "r", At: time.Now(), Nonce: newNonce(), To: addr, Body: "none"}.header(secret, r, r.Header)
		return linkRequestHead(r, h, 0)
	}
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	frames := appendFrame(helloFor(t, secret, addr), frameHead, 1, signed())
	frames = appendFrame(frames, frameEnd, 1, nil)
	for id := uint32(2); id <= 20; id++ {
		frames = appendFrame(frames, frameHead, id, linkRequestHead(httptest.NewRequest("GET", "/", nil), "none", 0))
	}
	frames = appendFrame(frames, frameHead, 21, signed())
	frames = appendFrame(frames, frameEnd, 21, nil)
	c.Write(frames)
	c.SetReadDeadline(time.Now().Add(10 * time.Second))
	l := &linkConn{br: bufio.NewReader(c)}
	got := map[uint32]uint64{}
	bodies := map[uint32]string{}
	for len(got) < 21 {
		typ, id, payload, err := l.readFrame(nil)
		if err != nil {
			t.Fatalf("after %d answers: %v", len(got), err)
		}
		switch typ {
		case frameAnswer:
			hr := headReader{b: payload}
			got[id] = hr.uvarint()
		case frameData:
			bodies[id] += string(payload)
		}
	}
	for id, status := range got {
		if want := uint64(403); (id == 1 || id == 21) && status != 404 || id != 1 && id != 21 && status != want {
			t.Fatalf("stream %d answered %d %q", id, status, bodies[id])
		}
	}
}

// countingOwner serves a cluster node's listener as listen does (the
// link, whose heads are admitted by the read loop, and HTTP/1.1), with
// serveForwarded counted: ran answers how many requests reached it.
func countingOwner(t *testing.T, secret []byte) (addr string, ran func() int) {
	t.Helper()
	owner := &clusterNode{secret: secret, started: time.Now().Add(-time.Second), data: map[string]*Retainer{}, apis: map[string]*API{}}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var n atomic.Int32
	owner.serveCluster(ln, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		n.Add(1)
		owner.serveForwarded(w, r)
	}))
	t.Cleanup(func() { owner.server.Close() })
	return ln.Addr().String(), func() int { return int(n.Load()) }
}

// captureLinkStream forwards r through a member of secret to the member
// at to, through a tap that keeps what came and answers nothing, and
// answers the stream's frames (its head, body and end, as stream 1)
// without the hello.
func captureLinkStream(t *testing.T, secret []byte, to string, r *http.Request) []byte {
	t.Helper()
	rec, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer rec.Close()
	got := make(chan []byte, 1)
	go func() {
		c, err := rec.Accept()
		if err != nil {
			got <- nil
			return
		}
		defer c.Close()
		br := bufio.NewReader(c)
		readLinkHello(br)
		l := &linkConn{br: br}
		var frames []byte
		for {
			typ, _, payload, err := l.readFrame(nil)
			if err != nil {
				got <- nil
				return
			}
			frames = appendFrame(frames, typ, 1, payload)
			if typ == frameEnd {
				got <- frames
				io.Copy(io.Discard, br)
				return
			}
		}
	}()
	tap := &clusterNode{secret: secret, link: newLinkClient(300 * time.Millisecond)}
	tap.link.dial = tapDial(rec.Addr().String())
	defer tap.link.close()
	forwardOnce(t, tap, r, to, false)
	frames := <-got
	if frames == nil {
		t.Fatal("no stream captured")
	}
	return frames
}

// linkAnswerStatus sends a link connection's frames to addr (a fresh
// hello under secret first) and answers the status of stream 1's answer.
func linkAnswerStatus(t *testing.T, secret []byte, addr string, frames []byte) int {
	t.Helper()
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	c.Write(append(helloFor(t, secret, addr), frames...))
	c.SetReadDeadline(time.Now().Add(10 * time.Second))
	l := &linkConn{br: bufio.NewReader(c)}
	for {
		typ, id, payload, err := l.readFrame(nil)
		if err != nil {
			t.Fatalf("no answer: %v", err)
		}
		if typ == frameAnswer && id == 1 {
			hr := headReader{b: payload}
			return int(hr.uvarint())
		}
	}
}

// editHead answers frames with stream 1's head rebuilt after edit changed
// its header (every field as it came, Retainer-Forwarded included).
func editHead(t *testing.T, frames []byte, edit func(h http.Header)) []byte {
	t.Helper()
	typ, n := frames[0], binary.BigEndian.Uint32(frames[5:9])
	if typ != frameHead {
		t.Fatalf("the first frame is a %d", typ)
	}
	hr := headReader{b: frames[frameHeadSize : frameHeadSize+n]}
	method, target, host := hr.string(), hr.string(), hr.string()
	length, k := binary.Varint(hr.b)
	hr.b = hr.b[k:]
	h := hr.header(linkMaxFields)
	if hr.err != nil {
		t.Fatal(hr.err)
	}
	edit(h)
	head := appendString(appendString(appendString(nil, method), target), host)
	head = appendHeader(binary.AppendVarint(head, length), h)
	return append(appendFrame(nil, frameHead, 1, head), frames[frameHeadSize+n:]...)
}

// TestLinkReplayedHeadRunsNothing: a forward captured on the link (its
// head, body and end) and sent again on a new connection within its 30 s
// is refused 403 by the owner's read loop before any handler runs for
// it; the same forward with one header changed, added or removed
// (Authorization, Content-Type, Cookie, Upgrade, Connection) is refused
// as well, before the original is taken; the original, sent once, is
// served once.
func TestLinkReplayedHeadRunsNothing(t *testing.T) {
	secret := []byte(strings.Repeat("s", 32))
	addr, ran := countingOwner(t, secret)
	r := httptest.NewRequest("POST", "/pay?to=shop", strings.NewReader("amount=10"))
	r.Header.Set("Authorization", "Bearer alice-token")
	r.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	r.Header.Set("Cookie", "session=alice")
	frames := captureLinkStream(t, secret, addr, r)

	for _, tc := range []struct {
		name string
		edit func(h http.Header)
	}{
		{"Authorization swapped", func(h http.Header) { h.Set("Authorization", "Bearer mallory-tok") }},
		{"Content-Type changed", func(h http.Header) { h.Set("Content-Type", "application/json") }},
		{"Cookie removed", func(h http.Header) { h.Del("Cookie") }},
		{"Upgrade added", func(h http.Header) { h.Set("Upgrade", "websocket") }},
		{"Connection added", func(h http.Header) { h.Set("Connection", "Upgrade") }},
		{"a value added", func(h http.Header) { h.Add("Cookie", "admin=1") }},
	} {
		if got := linkAnswerStatus(t, secret, addr, editHead(t, frames, tc.edit)); got != 403 {
			t.Errorf("%s: %d, want 403", tc.name, got)
		}
	}
	if got := linkAnswerStatus(t, secret, addr, editHead(t, frames, func(http.Header) {})); got != 404 {
		t.Fatalf("the captured forward, rebuilt unchanged and first sent: %d, want 404 (checked, no such registry)", got)
	}
	if ran() != 1 {
		t.Fatalf("the handler ran %d times for one forward taken", ran())
	}
	for range 3 {
		if got := linkAnswerStatus(t, secret, addr, frames); got != 403 {
			t.Fatalf("the captured forward sent again: %d, want 403", got)
		}
	}
	if ran() != 1 {
		t.Fatalf("the handler ran %d times: a replayed head reached it", ran())
	}
}

// TestForwardReplayedOverHTTPRunsNothing: the same over the cluster
// listener's HTTP/1.1 side (a forwarded WebSocket upgrade's path): a
// captured forward with a header changed is refused, the original is
// served once, and sent again it is refused (403) before the handler
// reads its body.
func TestForwardReplayedOverHTTPRunsNothing(t *testing.T) {
	secret := []byte(strings.Repeat("s", 32))
	addr, ran := countingOwner(t, secret)
	recAddr, got := captureHTTPForward(t)
	tapped := tapDial(recAddr)
	n := &clusterNode{secret: secret, transport: &http.Transport{DisableCompression: true, ResponseHeaderTimeout: 300 * time.Millisecond,
		DialContext: func(ctx context.Context, network, _ string) (net.Conn, error) { return tapped(network, "") }}}
	r := httptest.NewRequest("POST", "/pay?to=shop", strings.NewReader("amount=10"))
	r.Header.Set("Authorization", "Bearer alice-token")
	r.Header.Set("Cookie", "session=alice")
	forwardOnce(t, n, r, addr, false)
	raw := <-got
	if !strings.Contains(string(raw), "Retainer-Forwarded") {
		t.Fatalf("no forward captured: %q", raw)
	}
	send := func(raw []byte) int {
		t.Helper()
		c, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		c.Write(raw)
		c.SetReadDeadline(time.Now().Add(10 * time.Second))
		res, err := http.ReadResponse(bufio.NewReader(c), nil)
		if err != nil {
			t.Fatal(err)
		}
		res.Body.Close()
		return res.StatusCode
	}
	swapped := strings.Replace(string(raw), "Bearer alice-token", "Bearer mallory-tok", 1)
	if got := send([]byte(swapped)); got != 403 {
		t.Fatalf("Authorization swapped: %d, want 403", got)
	}
	added := strings.Replace(string(raw), "\r\n\r\n", "\r\nX-Admin: 1\r\n\r\n", 1)
	if got := send([]byte(added)); got != 403 {
		t.Fatalf("a header added: %d, want 403", got)
	}
	if got := send(raw); got != 404 {
		t.Fatalf("the captured forward first sent: %d, want 404 (checked, no such registry)", got)
	}
	if got := send(raw); got != 403 {
		t.Fatalf("the captured forward sent again: %d, want 403", got)
	}
	if ran() != 4 {
		t.Fatalf("the handler ran %d times, want 4 (over HTTP/1.1 it admits each request itself)", ran())
	}
}

// TestLinkStalledVisitorIsResetAlone: on a link connection otherwise idle,
// a stream whose answer waits linkStall for room its peer never gives
// back (its visitor reads nothing) is reset alone: a forward beside it on
// the same connection, answered later, is still served.
func TestLinkStalledVisitorIsResetAlone(t *testing.T) {
	shortLinkStall(t)
	addr, _, _ := startLinkOwner(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/big" {
			w.Write(make([]byte, 1<<20))
			return
		}
		time.Sleep(2500 * time.Millisecond)
		io.WriteString(w, "late")
	}))
	c := sendStreams(t, addr, "/big", "/late") // and never a window frame
	c.SetReadDeadline(time.Now().Add(15 * time.Second))
	l := &linkConn{br: bufio.NewReader(c)}
	var reset bool
	var late string
	for {
		typ, id, payload, err := l.readFrame(nil)
		if err != nil {
			t.Fatalf("the connection ended (reset %v, the late answer %q): %v", reset, late, err)
		}
		switch {
		case id == 1 && typ == frameReset:
			reset = true
		case id == 2 && typ == frameData:
			late += string(payload)
		}
		if id == 2 && typ == frameEnd {
			break
		}
	}
	if !reset || late != "late" {
		t.Fatalf("the stalled stream reset: %v; the forward beside it: %q", reset, late)
	}
}

// helloFor answers a fresh hello to the member at addr under secret.
func helloFor(t *testing.T, secret []byte, addr string) []byte {
	t.Helper()
	b, err := appendLinkHello(secret, addr, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// tapDial dials tap whatever the address asked for: a TCP tap on the
// way to a member.
func tapDial(tap string) func(network, addr string) (net.Conn, error) {
	return func(network, _ string) (net.Conn, error) { return net.Dial("tcp", tap) }
}

// captureHTTPForward listens on a loopback port and answers its address
// and, once sent, the raw bytes of the one HTTP/1.1 request that comes
// there (nil if none does): a forward captured on its way.
func captureHTTPForward(t *testing.T) (string, <-chan []byte) {
	t.Helper()
	rec, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { rec.Close() })
	got := make(chan []byte, 1)
	go func() {
		c, err := rec.Accept()
		if err != nil {
			got <- nil
			return
		}
		defer c.Close()
		var raw strings.Builder
		req, err := http.ReadRequest(bufio.NewReader(io.TeeReader(c, &raw)))
		if err == nil {
			io.Copy(io.Discard, req.Body)
		}
		got <- []byte(raw.String())
	}()
	return rec.Addr().String(), got
}
