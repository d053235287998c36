package workers

import (
	"context"
	"errors"
	"fmt"
	"math"
	"testing"
	"time"

	"github.com/retainer-gw/retainer/fault"
	"github.com/retainer-gw/retainer/internal/waitfor"
)

// tryAcquire takes a slot if one is free and nobody waits for one: an
// acquire that may not wait.
func (w *sendWindow) tryAcquire() bool {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	return w.acquire(ctx, nil, math.MaxInt) == nil
}

// limit is the window's current size (concurrency plus ahead).
func (w *sendWindow) limit() int {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.conc + w.ahead
}

// fakeClock is a sendWindow's clock that moves only when told.
type fakeClock struct{ t time.Time }

func (c *fakeClock) now() time.Time       { return c.t }
func (c *fakeClock) move(d time.Duration) { c.t = c.t.Add(d) }
func windowOn(conc int) (*sendWindow, *fakeClock) {
	c := &fakeClock{t: time.Unix(1, 0)}
	w := newSendWindow(conc)
	w.now = c.now
	return w, c
}

// serveBusy plays a handle kept busy: n answers, each service apart, with
// the window full of invocations throughout.
func serveBusy(t *testing.T, w *sendWindow, c *fakeClock, n int, service time.Duration) {
	t.Helper()
	for w.tryAcquire() {
	}
	for i := 0; i < n; i++ {
		c.move(service)
		w.release(true)
		for w.tryAcquire() {
		}
	}
}

// A handle that answers every 20 ms keeps no invocation queued behind
// the one in progress: a worker kill can fail only the started one, not
// seventeen. One that answers every 30 µs keeps windowAhead queued, for
// its pipelining; and the window follows a handle that changes pace.
func TestSendWindowFollowsThePace(t *testing.T) {
	w, c := windowOn(1)
	if got := w.limit(); got != 1+initialAhead {
		t.Fatalf("a new handle's window is %d", got)
	}
	serveBusy(t, w, c, 20, 20*time.Millisecond)
	if got := w.limit(); got != 1 {
		t.Fatalf("a 20 ms handle's window is %d, want 1", got)
	}
	serveBusy(t, w, c, 60, 30*time.Microsecond)
	if got := w.limit(); got != 1+windowAhead {
		t.Fatalf("a 30 µs handle's window is %d, want %d", got, 1+windowAhead)
	}
	serveBusy(t, w, c, 60, 250*time.Microsecond)
	if got := w.limit(); got != 1+4 {
		t.Fatalf("a 250 µs handle's window is %d, want 5", got)
	}

	serveBusy(t, w, c, 60, time.Millisecond)
	if got := w.limit(); got != 2 {
		t.Fatalf("a 1 ms handle's window is %d, want 2", got)
	}

	// With concurrency 8, answers every 5 ms (each call 40 ms): the eight
	// in progress only.
	w8, c8 := windowOn(8)
	serveBusy(t, w8, c8, 40, 5*time.Millisecond)
	if got := w8.limit(); got != 8 {
		t.Fatalf("concurrency 8 at 5 ms an answer: window %d, want 8", got)
	}
}

// Answers a busy worker writes together (several in one system call)
// come as one long interval and a few near zero: the window keeps the
// mean pace, not the last interval.
func TestSendWindowAveragesGroupedAnswers(t *testing.T) {
	w, c := windowOn(1)
	for w.tryAcquire() {
	}
	for round := 0; round < 40; round++ {
		for i := 0; i < 8; i++ {
			if i == 0 {
				c.move(8 * 40 * time.Microsecond)
			}
			w.release(true)
			for w.tryAcquire() {
			}
			if round > 4 && w.limit() < 1+windowAhead/2 {
				t.Fatalf("round %d answer %d: window %d for a 40 µs handle", round, i, w.limit())
			}
		}
	}
}

// An answer after the window was empty measures the round trip; calls
// that never reached the worker (released unanswered) measure nothing.
func TestSendWindowMeasuresOnlyAnswers(t *testing.T) {
	w, c := windowOn(1)
	for i := 0; i < 10; i++ {
		if !w.tryAcquire() {
			t.Fatal("an idle window refused a call")
		}
		c.move(100 * time.Microsecond)
		w.release(true)
		c.move(time.Second) // idle: not part of any interval
	}
	if got := w.limit(); got != 1+10 {
		t.Fatalf("after answers 100 µs after an idle send: window %d, want 11", got)
	}
	for i := 0; i < 10; i++ {
		w.tryAcquire()
		c.move(time.Second)
		w.release(false)
	}
	if got := w.limit(); got != 1+10 {
		t.Fatalf("unanswered calls moved the window to %d", got)
	}
}

// Waiters are served in arrival order, each freed slot to the first; a
// waiter that gives up leaves the line, and a slot handed to it as it
// gave up goes on to the next; a worker's exit frees every waiter with
// fault.NotStarted.
func TestSendWindowServesWaitersInOrder(t *testing.T) {
	w, _ := windowOn(1)
	for w.tryAcquire() {
	}
	exited := make(chan struct{})
	const n = 5
	order := make(chan int, n)
	cancels := make([]context.CancelFunc, n)
	errs := make([]chan error, n)
	for i := 0; i < n; i++ {
		ctx, cancel := context.WithCancel(context.Background())
		cancels[i] = cancel
		errs[i] = make(chan error, 1)
		go func() {
			err := w.acquire(ctx, exited, 100)
			if err == nil {
				order <- i
			}
			errs[i] <- err
		}()
		// Each in line before the next starts.
		waitfor.Until(t, 30*time.Second, fmt.Sprintf("waiter %d queued", i), func() bool {
			w.mu.Lock()
			defer w.mu.Unlock()
			return len(w.waiters) == i+1
		})
	}
	cancels[1]()
	if err := <-errs[1]; !errors.Is(err, context.Canceled) {
		t.Fatalf("a cancelled waiter answered %v", err)
	}
	w.release(false)
	if got := <-order; got != 0 {
		t.Fatalf("the first slot went to waiter %d", got)
	}
	w.release(false)
	if got := <-order; got != 2 {
		t.Fatalf("the second slot went to waiter %d, not the next in line", got)
	}
	close(exited)
	for _, i := range []int{3, 4} {
		if err := <-errs[i]; !errors.Is(err, fault.ErrNotStarted) {
			t.Fatalf("waiter %d at the worker's exit: %v", i, err)
		}
	}
	w.mu.Lock()
	sent, waiting := w.sent, len(w.waiters)
	w.mu.Unlock()
	if sent != 1 || waiting != 0 {
		t.Fatalf("after the line: %d sent, %d waiting", sent, waiting)
	}
	// The queue counts the sent and the waiting: at most, refused at once.
	if err := w.acquire(context.Background(), nil, 1); fault.CodeOf(err) != fault.Overloaded {
		t.Fatalf("a call past the queue: %v", err)
	}
}
