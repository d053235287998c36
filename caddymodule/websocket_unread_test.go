package caddymodule

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/coder/websocket"

	"github.com/retainer-gw/retainer/internal/waitfor"
)

// dialUnread opens a WebSocket from src whose receive buffer is 4 KiB, so
// what its visitor does not read waits at the gateway, not in the kernel.
func dialUnread(ctx context.Context, src, host, path string) (*websocket.Conn, *http.Response, error) {
	d := &net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(src)}, Control: func(_, _ string, c syscall.RawConn) error {
		var serr error
		err := c.Control(func(fd uintptr) { serr = syscall.SetsockoptInt(int(fd), syscall.SOL_SOCKET, syscall.SO_RCVBUF, 4096) })
		if err != nil {
			return err
		}
		return serr
	}}
	hc := &http.Client{Transport: &http.Transport{DialContext: func(ctx context.Context, network, _ string) (net.Conn, error) {
		return d.DialContext(ctx, network, fmt.Sprintf("127.0.0.1:%d", httpPort))
	}}}
	return websocket.Dial(ctx, fmt.Sprintf("ws://%s:%d%s", host, httpPort, path), &websocket.DialOptions{HTTPClient: hc})
}

// A visitor who opens six sockets to the README's chat room, never reads
// them, and sends 1 MiB messages the room broadcasts to all of them cannot
// make the room's isolate hit its 64 MiB memory bound: what waits for
// sockets whose visitors do not read is bounded per isolate (a quarter of
// its memory bound, at most 8 MiB), the sockets holding the most close
// with 1008, and an honest member at another address hears every message,
// is never closed with 1011, and the room (its state) lives on with no
// strike (docs/websockets.md). Before, each socket could hold 16 MiB: the
// isolate hit MEMORY, the room was lost and the member closed with 1011.
func TestWebSocketUnreadSocketsCannotSinkTheRoom(t *testing.T) {
	bob, mallory := attacked(t, "")
	// Each message is broadcast to seven sockets in one invocation: 5 s,
	// not the gateway's 500 ms, for a loaded machine (the isolate was lost
	// at its bound there, and the member closed with 1011).
	id := deploy(t, mallory, readmeChatWithSize(t), map[string]any{"timeoutMs": 5000})
	host := id + ".apps.localhost"
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	honest, _, err := dialFrom(ctx, "127.0.0.9", host, "/ws")
	if err != nil {
		t.Fatal(err)
	}
	honest.SetReadLimit(2 << 20)
	var heard atomic.Int32
	honestEnd := make(chan error, 1)
	go func() {
		for {
			_, data, err := honest.Read(ctx)
			if err != nil {
				honestEnd <- err
				return
			}
			if len(data) == 1<<20 {
				heard.Add(1)
			}
		}
	}()
	const unread = 6
	var socks []*websocket.Conn
	for range unread {
		c, _, err := dialUnread(ctx, "127.0.0.3", host, "/ws")
		if err != nil {
			t.Fatal(err)
		}
		c.SetReadLimit(2 << 20)
		socks = append(socks, c)
	}
	if n := waitRoomSize(t, host, unread+1); n != unread+1 {
		t.Fatalf("the room holds %d, want %d", n, unread+1)
	}
	msg := []byte(strings.Repeat("m", 1<<20))
	const flood = 20
	sent := 0
	// hearAll waits until the honest member has heard every message sent.
	hearAll := func() {
		for deadline := time.Now().Add(20 * time.Second); int(heard.Load()) < sent && time.Now().Before(deadline); {
			select {
			case err := <-honestEnd:
				t.Fatalf("the honest member heard %d of %d messages, then its socket ended: %v (close %v)", heard.Load(), sent, err, websocket.CloseStatus(err))
			case <-time.After(20 * time.Millisecond):
			}
		}
	}
	start := time.Now()
	for sent < flood {
		wctx, wcancel := context.WithTimeout(ctx, 10*time.Second)
		err := socks[0].Write(wctx, websocket.MessageText, msg)
		wcancel()
		if err != nil {
			break
		}
		sent++
		// The red team's pace (20 in 2.4 s): a room's members read what
		// one member sends at that pace; one who sends faster than the
		// others read is a visitor they do not keep up with
		// (docs/websockets.md). The next message goes once the honest
		// member has heard this one: on a loaded machine the gateway's
		// relays to every socket lagged that pace, what waited for all of
		// them passed the isolate's share, and the socket waiting longest
		// was the honest member's (the first of the room; closed after 2
		// of 20 in a full run beside a CPU hog).
		time.Sleep(120 * time.Millisecond)
		hearAll()
	}
	took := time.Since(start)
	// The member hears every message.
	hearAll()
	t.Logf("%d of %d messages of 1 MiB sent in %v from %d sockets never read; the honest member heard %d", sent, flood, took.Round(time.Millisecond), unread, heard.Load())
	if sent < 12 || int(heard.Load()) != sent {
		t.Fatalf("%d messages sent, the honest member heard %d", sent, heard.Load())
	}
	// The unread sockets were closed for not reading.
	for i, c := range socks {
		if code, ok := readUntilClosed(c); !ok || code != websocket.StatusPolicyViolation {
			t.Fatalf("unread socket %d: closed %v with %v, want 1008", i, ok, code)
		}
	}
	// The room lives on: the member is its one socket, and still talks.
	if n := waitRoomSize(t, host, 1); n != 1 {
		t.Fatalf("the room holds %d after the unread sockets closed, want the honest member", n)
	}
	if err := honest.Write(ctx, websocket.MessageText, make([]byte, 1<<20)); err != nil {
		t.Fatal(err)
	}
	want := heard.Load() + 1
	waitfor.Within(10*time.Second, func() bool { return heard.Load() >= want })
	if heard.Load() != want {
		t.Fatalf("the honest member did not hear its own message after the flood")
	}
	select {
	case err := <-honestEnd:
		t.Fatalf("the honest member's socket ended: %v (close %v)", err, websocket.CloseStatus(err))
	default:
	}
	if logs := handleLogs(t, mallory, id, "the unread sockets"); strings.Contains(logs, "strike") || strings.Contains(logs, "memory bound") {
		t.Fatalf("the room's handle was struck: %.1500s", logs)
	}
	honest.Close(websocket.StatusNormalClosure, "bye")
	bob.check("a visitor's unread sockets in a chat room")
}
