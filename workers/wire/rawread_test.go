package wire

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"testing"
	"time"
)

// drainedPair is echoPair with both sides reading as ReadDrained says.
func drainedPair(t testing.TB) (*Conn, *Conn) { return newEchoPair(t, true) }

// Calls one after another, each answer alone on the socket: a wait that
// missed the next frame's readiness would hang a call (the deadline).
func TestDrainedReadsMissNoFrame(t *testing.T) {
	caller, _ := drainedPair(t)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	for i := 0; i < 3000; i++ {
		path := fmt.Sprintf("/p/%d", i)
		res, err := caller.Call(ctx, path, []byte("x"))
		if err != nil {
			t.Fatalf("call %d: %v", i, err)
		}
		if string(res) != path+":x" {
			t.Fatalf("call %d answered %q", i, res)
		}
	}
}

// Many goroutines at once, frames of every size up to 300 KB (past the
// read buffer, which grows for one and shrinks after): every answer is
// its own call's, intact.
func TestDrainedReadsKeepEveryFrameWhole(t *testing.T) {
	caller, _ := drainedPair(t)
	callEchoes(t, caller, 16, 20, func(g, i int) int { return 1 + (g*20+i)%7*50000 })
}

// rawFrame is a frame as write puts it on the wire.
func rawFrame(id uint64, kind byte, path string, payload []byte) []byte {
	b := binary.BigEndian.AppendUint32(nil, uint32(frameHeader+len(path)+len(payload)))
	b = binary.BigEndian.AppendUint64(b, id)
	b = append(b, kind)
	b = binary.BigEndian.AppendUint16(b, uint16(len(path)))
	return append(append(b, path...), payload...)
}

// A peer's frames cut at every point, written in pieces with pauses
// between them: each request is served once, whole, in order.
func TestDrainedReadsJoinFramesCutAnywhere(t *testing.T) {
	a, b := socketPair(t)
	got := make(chan string, 1000)
	c := NewConn(a, 1<<20, 1<<20, func(_ context.Context, path string, body []byte) ([]byte, error) {
		got <- path + "=" + string(body)
		return nil, nil
	}, nil)
	c.ReadDrained()
	c.Start()
	defer c.Close()
	defer b.Close()
	var stream []byte
	var want []string
	for i := 0; i < 200; i++ {
		body := bytes.Repeat([]byte{'b'}, rand.IntN(3000))
		path := fmt.Sprintf("/r/%d", i)
		stream = append(stream, rawFrame(uint64(i+1), kindRequest, path, body)...)
		want = append(want, path+"="+string(body))
	}
	for len(stream) > 0 {
		n := min(len(stream), 1+rand.IntN(700))
		if _, err := b.Write(stream[:n]); err != nil {
			t.Fatal(err)
		}
		stream = stream[n:]
		if rand.IntN(8) == 0 {
			time.Sleep(time.Millisecond)
		}
	}
	seen := map[string]bool{}
	for range want {
		select {
		case s := <-got:
			seen[s] = true
		case <-time.After(10 * time.Second):
			t.Fatalf("%d of %d requests served", len(seen), len(want))
		}
	}
	for _, w := range want {
		if !seen[w] {
			t.Fatalf("request %.20q... not served whole", w)
		}
	}
}

// A peer that dies in the middle of a frame: the connection ends, the
// calls waiting fail (none hangs), nothing is called malformed, and the
// half frame is never served.
func TestDrainedReadOfAPeerDeadMidFrame(t *testing.T) {
	a, b := socketPair(t)
	var bad []string
	var mu sync.Mutex
	served := make(chan string, 4)
	c := NewConn(a, 1<<20, 1<<20, func(_ context.Context, path string, _ []byte) ([]byte, error) {
		served <- path
		return nil, nil
	}, func(reason string) { mu.Lock(); bad = append(bad, reason); mu.Unlock() })
	c.ReadDrained()
	c.Start()
	defer c.Close()
	done := make(chan error, 1)
	go func() {
		_, err := c.Call(context.Background(), "/waits", nil)
		done <- err
	}()
	frame := rawFrame(7, kindRequest, "/half", bytes.Repeat([]byte{'h'}, 100000))
	if _, err := b.Write(frame[:len(frame)/2]); err != nil {
		t.Fatal(err)
	}
	time.Sleep(20 * time.Millisecond)
	b.Close()
	select {
	case err := <-done:
		if err == nil {
			t.Fatal("the call waiting on a dead peer succeeded")
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the call waiting on a dead peer hangs")
	}
	<-c.Done()
	select {
	case p := <-served:
		t.Fatalf("the half frame was served as %s", p)
	default:
	}
	mu.Lock()
	defer mu.Unlock()
	if len(bad) != 0 {
		t.Fatalf("a dead peer was called malformed: %v", bad)
	}
}

// A frame length over the cap ends the connection as read's does, named
// bad, before anything of its size is allocated.
func TestDrainedReadRefusesAFrameOverTheCap(t *testing.T) {
	a, b := socketPair(t)
	reasons := make(chan string, 2)
	c := NewConn(a, 1<<20, 1<<20, nil, func(reason string) { reasons <- reason })
	c.ReadDrained()
	c.Start()
	defer c.Close()
	defer b.Close()
	if _, err := b.Write(binary.BigEndian.AppendUint32(nil, 1<<31)); err != nil {
		t.Fatal(err)
	}
	select {
	case r := <-reasons:
		if r != fmt.Sprintf("a frame of %d bytes", 1<<31) {
			t.Fatalf("named %q", r)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("a frame over the cap was not refused")
	}
	<-c.Done()
	if _, err := c.Call(context.Background(), "/after", nil); !errors.Is(err, ErrNotSent) {
		t.Fatalf("a call after the end: %v", err)
	}
}
