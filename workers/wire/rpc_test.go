package wire

import (
	"bufio"
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"os"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/retainer-gw/retainer/internal/waitfor"
)

// socketPair is the two ends of a Unix socketpair, as between a gateway
// and its worker.
func socketPair(t testing.TB) (net.Conn, net.Conn) {
	fds, err := syscall.Socketpair(syscall.AF_UNIX, syscall.SOCK_STREAM|syscall.SOCK_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	conn := func(fd int, name string) net.Conn {
		f := os.NewFile(uintptr(fd), name)
		defer f.Close()
		c, err := net.FileConn(f)
		if err != nil {
			t.Fatal(err)
		}
		return c
	}
	return conn(fds[0], "a"), conn(fds[1], "b")
}

// echoPair is a caller and a peer that answers each request with its
// payload, behind the payload's path.
func echoPair(t testing.TB) (*Conn, *Conn) { return newEchoPair(t, false) }

// newEchoPair is echoPair, with both sides reading as ReadDrained says
// when drained.
func newEchoPair(t testing.TB, drained bool) (*Conn, *Conn) {
	a, b := socketPair(t)
	const max = 16 << 20
	peer := NewConn(b, max, max, func(_ context.Context, path string, body []byte) ([]byte, error) {
		return append([]byte(path+":"), body...), nil
	}, nil)
	caller := NewConn(a, max, max, nil, nil)
	if drained {
		peer.ReadDrained()
		caller.ReadDrained()
		if !peer.raw || !caller.raw {
			t.Fatal("a socket's connection does not read drained")
		}
	}
	peer.Start()
	caller.Start()
	t.Cleanup(func() { caller.Close(); peer.Close() })
	return caller, peer
}

// callEchoes calls an echoPair's caller from goroutines at once, each
// making calls of size(g, i) bytes, and fails t unless every answer is its
// own call's, intact.
func callEchoes(t *testing.T, caller *Conn, goroutines, calls int, size func(g, i int) int) {
	t.Helper()
	var wg sync.WaitGroup
	errs := make(chan error, goroutines)
	for g := 0; g < goroutines; g++ {
		wg.Add(1)
		go func(g int) {
			defer wg.Done()
			for i := 0; i < calls; i++ {
				body := bytes.Repeat([]byte{byte('a' + g%26)}, size(g, i))
				path := fmt.Sprintf("/p/%d/%d", g, i)
				res, err := caller.Call(context.Background(), path, body)
				if err != nil {
					errs <- err
					return
				}
				if want := append([]byte(path+":"), body...); !bytes.Equal(res, want) {
					errs <- fmt.Errorf("call %s: answer of %d bytes is not its own", path, len(res))
					return
				}
			}
		}(g)
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
}

// Many goroutines calling at once (their frames written in groups, large
// ones among them): every answer is its own call's, intact.
func TestGroupedWritesKeepEveryFrameIntact(t *testing.T) {
	caller, _ := echoPair(t)
	callEchoes(t, caller, 64, 50, func(g, i int) int {
		return 10 + (g*50+i)%7*40000 // up to ~240 KB: some pass maxSpare's buffer
	})
}

// A write that fails closes the connection: calls waiting for answers
// fail instead of waiting for ever, and later calls fail at once.
func TestFailedWriteFailsTheCalls(t *testing.T) {
	a, b := socketPair(t)
	caller := NewConn(a, 1<<20, 1<<20, nil, nil).Start()
	defer caller.Close()
	// The peer reads nothing and goes away.
	b.Close()
	_, err := caller.Call(context.Background(), "/x", []byte("y"))
	if err == nil {
		t.Fatal("a call to a closed peer succeeded")
	}
	// A later call fails at once: refused before anything is written once
	// the connection is known closed (ErrNotSent: the pool sends such a
	// call again elsewhere), or by its own failed write before then.
	if _, err := caller.Call(context.Background(), "/x", nil); !errors.Is(err, ErrNotSent) && !errors.Is(err, errConnClosed) {
		t.Fatalf("a later call: %v, want ErrNotSent or errConnClosed", err)
	}
	<-caller.Done()
	if _, err := caller.Call(context.Background(), "/x", nil); !errors.Is(err, ErrNotSent) {
		t.Fatalf("a call after the connection ended: %v, want ErrNotSent", err)
	}
}

// go test ./workers -run '^$' -bench GroupedCalls: 32 goroutines
// calling at once through one connection.
func BenchmarkGroupedCalls(b *testing.B) {
	caller, _ := echoPair(b)
	body := []byte(`{"id":"h","name":"fetch","request":{"method":"GET","url":"http://x/"}}`)
	b.SetParallelism(16)
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			if _, err := caller.Call(context.Background(), "/invoke", body); err != nil {
				b.Fatal(err)
			}
		}
	})
}

// Frames written while the connection is corked are held back, then leave
// together, in order, when it is uncorked.
func TestCorkedWritesLeaveTogether(t *testing.T) {
	a, b := socketPair(t)
	defer a.Close()
	defer b.Close()
	c := NewConn(a, 1<<20, 1<<20, nil, nil)
	c.Cork()
	for i := 1; i <= 3; i++ {
		c.reply(uint64(i), PathInvoke, []byte(fmt.Sprint("answer ", i)))
	}
	b.SetReadDeadline(time.Now().Add(100 * time.Millisecond))
	if n, err := b.Read(make([]byte, 1)); n > 0 || err == nil {
		t.Fatal("a frame left while corked")
	}
	c.Uncork()
	b.SetReadDeadline(time.Now().Add(5 * time.Second))
	readAnswers(t, bufio.NewReader(b), 1, 3)
}

// countingConn counts the system calls that write.
type countingConn struct {
	net.Conn
	writes atomic.Int32
}

func (c *countingConn) Write(b []byte) (int, error) {
	c.writes.Add(1)
	return c.Conn.Write(b)
}

// readAnswers reads n frames and checks they are answers first..first+n-1.
func readAnswers(t *testing.T, r *bufio.Reader, first, n int) {
	t.Helper()
	for i := first; i < first+n; i++ {
		var size [4]byte
		if _, err := io.ReadFull(r, size[:]); err != nil {
			t.Fatal(err)
		}
		frame := make([]byte, binary.BigEndian.Uint32(size[:]))
		if _, err := io.ReadFull(r, frame); err != nil {
			t.Fatal(err)
		}
		if id := binary.BigEndian.Uint64(frame[:8]); id != uint64(i) || string(frame[frameHeader:]) != fmt.Sprint("answer ", i) {
			t.Fatalf("frame %d: id %d, %q", i, id, frame[frameHeader:])
		}
	}
}

// An answer with more right behind it waits for the next one's write: the
// answers leave together, in order, in one system call; never more than
// maxHeld wait; and one that nothing follows leaves at holdFor.
func TestHeldAnswersLeaveWithTheNext(t *testing.T) {
	a, b := socketPair(t)
	defer a.Close()
	defer b.Close()
	conn := &countingConn{Conn: a}
	c := NewConn(conn, 1<<20, 1<<20, nil, nil)
	c.holdFor = time.Hour // only a write lets them out, for the counts below
	b.SetReadDeadline(time.Now().Add(10 * time.Second))
	r := bufio.NewReader(b)

	c.ReplyLater(1, PathInvoke, []byte("answer 1"), true)
	c.ReplyLater(2, PathInvoke, []byte("answer 2"), true)
	if n := conn.writes.Load(); n != 0 {
		t.Fatalf("%d writes before the last answer", n)
	}
	c.ReplyLater(3, PathInvoke, []byte("answer 3"), false)
	if n := conn.writes.Load(); n != 1 {
		t.Fatalf("three answers took %d writes, want 1", n)
	}
	readAnswers(t, r, 1, 3)

	for i := 4; i < 4+maxHeld+1; i++ {
		c.ReplyLater(uint64(i), PathInvoke, []byte(fmt.Sprint("answer ", i)), true)
	}
	if n := conn.writes.Load(); n != 2 {
		t.Fatalf("%d answers, all with more behind, took %d writes in all, want 2 (at most %d wait)", maxHeld+1, n, maxHeld)
	}
	readAnswers(t, r, 4, maxHeld+1)

	// Nothing follows: the timer lets it out.
	c.holdFor = time.Millisecond
	c.ReplyLater(100, PathInvoke, []byte("answer 100"), true)
	readAnswers(t, r, 100, 1)
}

// A held call's frame waits for the next write and leaves with it, in one
// system call; one that nothing follows leaves at holdFor.
func TestHeldCallsLeaveWithTheNext(t *testing.T) {
	a, b := socketPair(t)
	const max = 1 << 20
	peer := NewConn(b, max, max, func(_ context.Context, path string, body []byte) ([]byte, error) {
		return []byte(path), nil
	}, nil).Start()
	conn := &countingConn{Conn: a}
	caller := NewConn(conn, max, max, nil, nil).Start()
	defer func() { caller.Close(); peer.Close() }()
	caller.holdFor = time.Hour // only a write lets them out
	call := func(path string, hold bool) {
		res, err := caller.CallOrdered(context.Background(), path, nil, nil, nil, hold)
		if err != nil || string(res) != path {
			t.Errorf("call %s: %v %q", path, err, res)
		}
	}
	var wg sync.WaitGroup
	for i := 0; i < 3; i++ {
		wg.Add(1)
		go func() { defer wg.Done(); call(fmt.Sprint("held ", i), true) }()
	}
	held := func() int {
		caller.wmu.Lock()
		defer caller.wmu.Unlock()
		return caller.held
	}
	if !waitfor.Within(30*time.Second, func() bool { return held() == 3 }) {
		t.Fatalf("%d frames held, want 3", held())
	}
	if n := conn.writes.Load(); n != 0 {
		t.Fatalf("%d writes while the frames were held", n)
	}
	call("next", false)
	wg.Wait()
	if n := conn.writes.Load(); n != 1 {
		t.Fatalf("four calls took %d writes, want 1", n)
	}
	caller.holdFor = time.Millisecond
	call("alone", true)
}

// A side with LimitCalls never has more requests at once than the peer
// serves (budgets.WireRequestsServing, past which the peer calls it a flood and closes):
// 3*MaxCalls calls at once, a third of them given up while they wait or
// while the peer still serves them, all leave without a flood, the peer
// never serves more than MaxCalls, and the rest are answered.
func TestLimitCallsNeverFloodsThePeer(t *testing.T) {
	a, b := socketPair(t)
	const max = 1 << 20
	release := make(chan struct{})
	var serving, most atomic.Int64
	var bad atomic.Value
	peer := NewConn(b, max, max, func(_ context.Context, path string, body []byte) ([]byte, error) {
		n := serving.Add(1)
		for m := most.Load(); n > m && !most.CompareAndSwap(m, n); m = most.Load() {
		}
		<-release
		serving.Add(-1)
		return body, nil
	}, func(reason string) { bad.Store(reason) }).Start()
	caller := NewConn(a, max, max, nil, nil)
	caller.LimitCalls(MaxCalls)
	caller.Start()
	t.Cleanup(func() { caller.Close(); peer.Close() })

	const calls = 3 * MaxCalls
	var wg sync.WaitGroup
	var answered, gaveUp atomic.Int64
	for i := 0; i < calls; i++ {
		wg.Add(1)
		go func(i int) {
			defer wg.Done()
			ctx := context.Background()
			if i%3 == 0 {
				var cancel context.CancelFunc
				ctx, cancel = context.WithTimeout(ctx, 200*time.Millisecond)
				defer cancel()
			}
			res, err := caller.Call(ctx, "host", []byte(fmt.Sprint(i)))
			switch {
			case err == nil && string(res) == fmt.Sprint(i):
				answered.Add(1)
			case errors.Is(err, context.DeadlineExceeded):
				gaveUp.Add(1)
			default:
				t.Errorf("call %d: %q %v", i, res, err)
			}
		}(i)
	}
	// Every call sent or waiting; the given-up ones gone (a flood ends
	// the wait: it fails below).
	waitfor.Within(30*time.Second, func() bool {
		return bad.Load() != nil || gaveUp.Load() == MaxCalls && serving.Load() == MaxCalls
	})
	close(release)
	wg.Wait()
	if r := bad.Load(); r != nil {
		t.Fatalf("the peer saw a flood: %v", r)
	}
	if m := most.Load(); m > MaxCalls {
		t.Fatalf("the peer served %d at once, past MaxCalls %d", m, MaxCalls)
	}
	if answered.Load()+gaveUp.Load() != calls || answered.Load() < 2*MaxCalls {
		t.Fatalf("%d answered, %d gave up, of %d", answered.Load(), gaveUp.Load(), calls)
	}
	// Every place came back: a new call goes through at once.
	if res, err := caller.Call(context.Background(), "host", []byte("after")); err != nil || string(res) != "after" {
		t.Fatalf("a call after: %q %v", res, err)
	}
}

// Calls wait on channels the connection reuses (answers): many callers at
// once, a third of them giving up before a slow peer answers, then calling
// again; every answer a caller gets is its own call's, never one meant
// for a call that gave up (a channel given back on that path is sent
// that call's answer while its next holder waits on it).
func TestCancelOfOneOfManyKeepsTheAnswersApart(t *testing.T) {
	a, b := socketPair(t)
	const max = 1 << 20
	peer := NewConn(b, max, max, func(ctx context.Context, path string, body []byte) ([]byte, error) {
		if body[0] == 's' { // slow: answered about when its caller leaves
			time.Sleep(time.Duration(rand.IntN(2000)) * time.Microsecond)
		}
		return body, nil
	}, nil).Start()
	caller := NewConn(a, max, max, nil, nil).Start()
	t.Cleanup(func() { caller.Close(); peer.Close() })
	var wg sync.WaitGroup
	errs := make(chan error, 32)
	for g := 0; g < 32; g++ {
		wg.Add(1)
		go func(g int) {
			defer wg.Done()
			for i := 0; i < 200; i++ {
				want := fmt.Sprintf("f%d-%d", g, i)
				if (g+i)%3 == 0 {
					ctx, cancel := context.WithTimeout(context.Background(), time.Millisecond)
					_, err := caller.Call(ctx, "p", []byte("s"+want))
					cancel()
					if err != nil && !errors.Is(err, context.DeadlineExceeded) {
						errs <- err
						return
					}
					continue
				}
				got, err := caller.Call(context.Background(), "p", []byte(want))
				if err != nil {
					errs <- err
					return
				}
				if string(got) != want {
					errs <- fmt.Errorf("call %s answered %q", want, got)
					return
				}
			}
		}(g)
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
}
