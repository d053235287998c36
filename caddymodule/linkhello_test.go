package caddymodule

import (
	"bufio"
	"bytes"
	"context"
	"encoding/binary"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	goruntime "runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// captureLinkConn forwards r through a member of secret to the member at
// to, through a tap that answers nothing, and answers every byte the
// forwarder sent on the connection (its hello and the stream's frames).
func captureLinkConn(t *testing.T, secret []byte, to string, r *http.Request) []byte {
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
		b, _ := io.ReadAll(c) // until the forwarder gives up and closes
		got <- b
	}()
	tap := &clusterNode{secret: secret, link: newLinkClient(300 * time.Millisecond)}
	tap.link.dial = tapDial(rec.Addr().String())
	forwardOnce(t, tap, r, to, false)
	tap.link.close()
	b := <-got
	if len(b) == 0 {
		t.Fatal("nothing captured")
	}
	return b
}

// answeredOrClosed sends raw to addr and answers the status of stream 1's
// answer, or 0 when the connection is closed with no answer.
func answeredOrClosed(t *testing.T, addr string, raw []byte) int {
	t.Helper()
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	go c.Write(raw)
	c.SetReadDeadline(time.Now().Add(10 * time.Second))
	l := &linkConn{br: bufio.NewReader(c)}
	for {
		typ, id, payload, err := l.readFrame(nil)
		if err != nil {
			return 0
		}
		if typ == frameAnswer && id == 1 {
			hr := headReader{b: payload}
			return int(hr.uvarint())
		}
	}
}

// TestLinkForwardToAnotherMemberRunsNothing: a forward captured on its
// way to one member (a TCP tap on its advertised address) and presented
// to another member of the same cluster (the space's owner after a
// failover) runs nothing there: the whole connection is closed at its
// hello (addressed to the first), the stream alone behind a hello of
// its own is refused 403 (its head names the first), as is the same
// forward over HTTP/1.1; the member addressed takes it once, and a
// bystander's forward to the second member is served.
func TestLinkForwardToAnotherMemberRunsNothing(t *testing.T) {
	secret := []byte(strings.Repeat("s", 32))
	first, ranFirst := countingOwner(t, secret)
	second, ranSecond := countingOwner(t, secret)
	r := httptest.NewRequest("POST", "/inc", strings.NewReader("one"))
	r.Header.Set("Authorization", "Bearer alice-token")
	raw := captureLinkConn(t, secret, first, r)
	hello, err := readLinkHello(bufio.NewReader(bytes.NewReader(raw)))
	if err != nil {
		t.Fatal(err)
	}
	// The stream's head, body and end (the tap's forwarder reset it
	// after: dropped).
	frames := raw[len(hello.signed)+len(hello.mac):]
	for off := 0; off+frameHeadSize <= len(frames); {
		next := off + frameHeadSize + int(binary.BigEndian.Uint32(frames[off+5:off+9]))
		if frames[off] == frameEnd {
			frames = frames[:next]
			break
		}
		off = next
	}

	if got := answeredOrClosed(t, second, raw); got != 0 {
		t.Fatalf("the captured connection presented to another member: %d, want it closed unanswered", got)
	}
	if got := linkAnswerStatus(t, secret, second, frames); got != 403 {
		t.Fatalf("the captured stream presented to another member: %d, want 403", got)
	}
	if ranSecond() != 0 {
		t.Fatalf("the other member ran %d captured forwards", ranSecond())
	}

	// Over HTTP/1.1 (a forwarded upgrade's path): the same.
	recAddr, got := captureHTTPForward(t)
	tapped := tapDial(recAddr)
	n := &clusterNode{secret: secret, transport: &http.Transport{DisableCompression: true, ResponseHeaderTimeout: 300 * time.Millisecond,
		DialContext: func(_ context.Context, network, _ string) (net.Conn, error) { return tapped(network, "") }}}
	forwardOnce(t, n, httptest.NewRequest("POST", "/inc", strings.NewReader("one")), first, false)
	req := <-got
	c, err := net.Dial("tcp", second)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	c.Write(req)
	c.SetReadDeadline(time.Now().Add(10 * time.Second))
	res, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil {
		t.Fatal(err)
	}
	res.Body.Close()
	if res.StatusCode != 403 || ranSecond() != 1 {
		t.Fatalf("the captured HTTP/1.1 forward presented to another member: %d (its handler ran %d), want 403 before the handler", res.StatusCode, ranSecond())
	}

	if got := linkAnswerStatus(t, secret, first, frames); got != 404 || ranFirst() != 1 {
		t.Fatalf("the captured stream to the member addressed: %d (ran %d), want 404 (checked, no such registry) once", got, ranFirst())
	}
	bystander := &clusterNode{secret: secret, link: newLinkClient(10 * time.Second)}
	defer bystander.link.close()
	if w, _, p := forwardOnce(t, bystander, httptest.NewRequest("GET", "/", nil), second, false); p != nil || w.Code != 404 || ranSecond() != 2 {
		t.Fatalf("a bystander's forward to the other member: %v %d %q", p, w.Code, w.Body.String())
	}
}

// TestLinkHelloIsChecked: a link connection whose hello does not check is
// closed unanswered before any frame is read: under another secret,
// stamped too long ago or in the future, addressed to another member,
// a member's hello sent a second time, a hello changed on the way, the
// preface alone and the last version's preface; a good hello is served,
// and nothing of the others ran.
func TestLinkHelloIsChecked(t *testing.T) {
	secret := []byte(strings.Repeat("s", 32))
	addr, ran := countingOwner(t, secret)
	signedHead := func() []byte {
		r := httptest.NewRequest("GET", "/", nil)
		h, _ := forward{Kind: "data", Registry: "r", At: time.Now(), Nonce: newNonce(), To: addr, Body: "none"}.header(secret, r, r.Header)
		return appendFrame(appendFrame(nil, frameHead, 1, linkRequestHead(r, h, 0)), frameEnd, 1, nil)
	}
	hello := func(secret []byte, to string, at time.Time) []byte {
		b, err := appendLinkHello(secret, to, at)
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	good := hello(secret, addr, time.Now())
	changed := bytes.Clone(good)
	changed[len(linkPreface)+3] ^= 1
	for _, tc := range []struct {
		name  string
		hello []byte
	}{
		{"another secret", hello([]byte(strings.Repeat("o", 32)), addr, time.Now())},
		{"stamped too long ago", hello(secret, addr, time.Now().Add(-forwardMaxAge-time.Second))},
		{"stamped in the future", hello(secret, addr, time.Now().Add(forwardSkew+time.Second))},
		{"addressed to another member", hello(secret, "127.0.0.1:1", time.Now())},
		{"changed on the way", changed},
		{"the preface alone", []byte(linkPreface)},
		{"the last version's preface", []byte("\x00retainer-link/1\n")},
	} {
		if got := answeredOrClosed(t, addr, append(bytes.Clone(tc.hello), signedHead()...)); got != 0 {
			t.Errorf("%s: answered %d, want closed unanswered", tc.name, got)
		}
	}
	if ran() != 0 {
		t.Fatalf("%d forwards ran behind hellos that do not check", ran())
	}
	if got := answeredOrClosed(t, addr, append(bytes.Clone(good), signedHead()...)); got != 404 {
		t.Fatalf("a good hello: %d, want 404 (checked, no such registry)", got)
	}
	if got := answeredOrClosed(t, addr, append(bytes.Clone(good), signedHead()...)); got != 0 {
		t.Fatalf("the same hello sent again: %d, want closed unanswered", got)
	}
	if ran() != 1 {
		t.Fatalf("%d forwards ran, want 1", ran())
	}
}

// TestLinkFloodWithoutSecretHoldsLittle: 128 link connections from eight
// addresses (127.0.0.2-9, 16 each), each sending a hello that does not
// check and a head frame claiming 2 MiB with all but its last byte (the
// owner once held ~1.5 GB for 256 of them, and kept them open), and 64
// connections from 127.0.0.1 (where the members dial from) that send the
// preface and nothing more, opened first and held (they once filled the
// address's 32 link connections, and members' forwards answered 503 for
// 10 s): the owner's
// heap grows by far less than what was sent, and every forward of a
// member, each on a connection dialled during the flood, is served.
func TestLinkFloodWithoutSecretHoldsLittle(t *testing.T) {
	secret := []byte(strings.Repeat("s", 32))
	addr, ran := countingOwner(t, secret)
	var before goruntime.MemStats
	goruntime.GC()
	goruntime.ReadMemStats(&before)
	var peak atomic.Uint64
	stop := make(chan struct{})
	var sampled sync.WaitGroup
	sampled.Add(1)
	go func() {
		defer sampled.Done()
		var m goruntime.MemStats
		for {
			goruntime.ReadMemStats(&m)
			if m.HeapInuse > peak.Load() {
				peak.Store(m.HeapInuse)
			}
			select {
			case <-stop:
				return
			case <-time.After(50 * time.Millisecond):
			}
		}
	}()

	var conns []net.Conn
	var mu sync.Mutex
	keep := func(c net.Conn) {
		mu.Lock()
		conns = append(conns, c)
		mu.Unlock()
	}
	defer func() {
		mu.Lock()
		defer mu.Unlock()
		for _, c := range conns {
			c.Close()
		}
	}()
	// 64 connections from 127.0.0.1 that send the preface alone, held.
	for range 64 {
		c, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		keep(c)
		c.Write([]byte(linkPreface))
	}
	bad, err := appendLinkHello([]byte(strings.Repeat("o", 32)), addr, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	var h [frameHeadSize]byte
	h[0] = frameHead
	binary.BigEndian.PutUint32(h[5:9], linkMaxHead)
	claim := append(append(bad, h[:]...), make([]byte, linkMaxHead-1)...)
	// They wait: a member's dial closes the oldest of them.
	time.Sleep(2 * linkPendingGrace)
	var flood sync.WaitGroup
	for host := 2; host <= 9; host++ {
		flood.Add(1)
		go func() {
			defer flood.Done()
			d := net.Dialer{LocalAddr: &net.TCPAddr{IP: net.IPv4(127, 0, 0, byte(host))}}
			for range 16 {
				c, err := d.Dial("tcp", addr)
				if err != nil {
					return
				}
				keep(c)
				c.SetWriteDeadline(time.Now().Add(3 * time.Second))
				c.Write(claim)
			}
		}()
	}

	// A member's forwards meanwhile, each on a connection of its own.
	served := 0
	deadline := time.Now().Add(3 * time.Second)
	for time.Now().Before(deadline) {
		n := &clusterNode{secret: secret, link: newLinkClient(10 * time.Second)}
		w, _, p := forwardOnce(t, n, httptest.NewRequest("GET", "/", nil), addr, false)
		n.link.close()
		if p != nil || w.Code != 404 {
			t.Fatalf("a member's forward during the flood: %v %d %q", p, w.Code, w.Body.String())
		}
		served++
	}
	flood.Wait()
	time.Sleep(300 * time.Millisecond)
	close(stop)
	sampled.Wait()
	grew := int64(peak.Load()) - int64(before.HeapInuse)
	sent := 128 * len(claim)
	t.Logf("heap grew by %.1f MiB at most for %.0f MiB sent by %d connections; %d forwards served meanwhile", float64(grew)/(1<<20), float64(sent)/(1<<20), len(conns), served)
	if grew > 200<<20 {
		t.Fatalf("the owner's heap grew by %d MiB for connections without the secret", grew>>20)
	}
	if ran() != served {
		t.Fatalf("%d forwards ran, %d served", ran(), served)
	}
	open := 0
	mu.Lock()
	defer mu.Unlock()
	for _, c := range conns {
		if !closedWithin(c, 10*time.Millisecond) {
			open++
		}
	}
	if open > linkMaxPending {
		t.Fatalf("%d of %d connections without the secret still open, want at most %d", open, len(conns), linkMaxPending)
	}
}
