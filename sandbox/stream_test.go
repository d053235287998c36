package sandbox

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/retainer-gw/retainer/budgets"
	"github.com/retainer-gw/retainer/fault"
	"github.com/retainer-gw/retainer/internal/waitfor"
	"github.com/retainer-gw/retainer/program"
)

// A producer faster than its reader is held at the window: the stream's
// source is pulled only as far as the buffer has room, and every read
// lets it go on by about one window.
func TestStreamBackpressure(t *testing.T) {
	id := deploy(t, `async () => { let pulls = 0; return { fetch(req) {
		if (req.url.endsWith('/pulls')) return new Response(String(pulls));
		return new Response(new ReadableStream({ pull(c) { pulls++; c.enqueue(new Uint8Array(1024)); } }));
	} } }`)
	res, err := get(t, id, "https://x/stream")
	if err != nil || res.Stream == 0 || res.Body != nil {
		t.Fatalf("head: %+v %v", res, err)
	}
	pulls := func() int {
		time.Sleep(100 * time.Millisecond)
		r, err := get(t, id, "https://x/pulls")
		if err != nil {
			t.Fatal(err)
		}
		n, _ := strconv.Atoi(string(r.BodyBytes()))
		return n
	}
	before := pulls()
	if before < 64 || before > 200 {
		t.Fatalf("an unread stream was pulled %d times (the window holds 64 chunks)", before)
	}
	total := 0
	for total < budgets.StreamWindow {
		chunk, done, err := engine(t).ReadStream(context.Background(), id, res.Stream, time.Second)
		if err != nil || done {
			t.Fatalf("read: %v %v", done, err)
		}
		total += len(chunk)
	}
	after := pulls()
	if after <= before || after > before+200 {
		t.Fatalf("reading a window let the producer go from %d to %d pulls", before, after)
	}
	t.Logf("pulls: %d unread, %d after one window was read", before, after)
	engine(t).CancelStream(id, res.Stream)
	if _, done, err := engine(t).ReadStream(context.Background(), id, res.Stream, time.Second); !done || err == nil || !strings.Contains(err.Error(), "stream") {
		t.Fatalf("a read after cancel: %v %v", done, err)
	}
}

// A chunk that is not bytes fails the stream with the runtime's TypeError.
func TestStreamOfStringsFails(t *testing.T) {
	id := deploy(t, `async () => ({ fetch() {
		return new Response(new ReadableStream({ start(c) { c.enqueue('text'); c.close(); } }));
	} })`)
	res, err := get(t, id, "https://x/")
	if err != nil || res.Stream == 0 {
		t.Fatalf("head: %+v %v", res, err)
	}
	_, done, err := engine(t).ReadStream(context.Background(), id, res.Stream, time.Second)
	if !done || err == nil || !strings.Contains(err.Error(), "Uint8Array") {
		t.Fatalf("a stream of strings: %v %v", done, err)
	}
}

// A body over 1 MiB that the handler gave whole leaves as a stream that
// says its length (the gateway never holds it whole); one over the body
// bound is refused at once and its stream dropped.
func TestLargeBodiesLeaveAsStreams(t *testing.T) {
	id := deploy(t, `async () => ({ fetch(req) {
		const n = +new URL(req.url).searchParams.get('n');
		if (req.url.includes('text')) return new Response('é'.repeat(n));
		if (req.url.includes('ascii')) return new Response('x'.repeat(n));
		return new Response(new Uint8Array(n).fill(65));
	} })`)
	for _, c := range []struct {
		path string
		size int
	}{{"/?n=1000", 1000}, {"/?n=2097152", 2 << 20}, {"/text?n=600000", 1200000}} {
		res, err := get(t, id, "https://x"+c.path)
		if err != nil {
			t.Fatal(err)
		}
		if c.size <= 1<<20 && c.path != "/text?n=600000" {
			if res.Stream != 0 || len(res.BodyBytes()) != c.size {
				t.Fatalf("%s: a small body streamed (%d) or cut (%d)", c.path, res.Stream, len(res.BodyBytes()))
			}
			continue
		}
		length := ""
		for _, h := range res.Headers {
			if h[0] == "content-length" {
				length = h[1]
			}
		}
		if res.Stream == 0 || length != strconv.Itoa(c.size) {
			t.Fatalf("%s: stream %d, content-length %q", c.path, res.Stream, length)
		}
		total := 0
		for {
			chunk, done, err := engine(t).ReadStream(context.Background(), id, res.Stream, time.Second)
			if err != nil {
				t.Fatal(err)
			}
			total += len(chunk)
			if done {
				break
			}
		}
		if total != c.size {
			t.Fatalf("%s: streamed %d bytes of %d", c.path, total, c.size)
		}
	}
	if _, err := get(t, id, "https://x/ascii?n=9437184"); fault.CodeOf(err) != fault.BadResponse {
		t.Fatalf("a 9 MiB body: %v", err)
	}
	e := engine(t)
	e.mu.Lock()
	m := e.handles[id]
	e.mu.Unlock()
	if m == nil {
		t.Fatal("the handle's isolate ended with the refused answer")
	}
	ss := &m.streams
	ss.mu.Lock()
	open := len(ss.open)
	ss.mu.Unlock()
	if open != 0 {
		t.Fatalf("%d streams left open after the refused answer", open)
	}
}

// Past the isolate's 1,024 open streams an answer that would stream is
// refused with QUOTA_EXCEEDED (a 429 for the visitor), not a throw that
// answered 500 HANDLER_ERROR; the refused stream's source is cancelled,
// the isolate and its state go on, and a stream that ends gives its slot
// back. In a one-at-a-time handle and a concurrent one alike.
func TestStreamsPastTheCapAreQuotaExceeded(t *testing.T) {
	for _, conc := range []int{1, 4} {
		id := fmt.Sprintf("streams-cap-%d", conc)
		e := engine(t)
		if _, err := e.Run(context.Background(), program.Job{ID: id, RetainHandles: true, Concurrency: conc, Timeout: 5 * time.Second, Program: program.Program{Code: `async () => {
			let served = 0, cancelled = 0;
			return { fetch(req) {
				served++;
				if (req.url.endsWith('/state')) return new Response(served + ' ' + cancelled);
				if (req.url.endsWith('/big')) return new Response('x'.repeat(2 << 20));
				return new Response(new ReadableStream({ start(c) { c.enqueue(new Uint8Array(8)) }, cancel() { cancelled++ } }));
			} };
		}`}}); err != nil {
			t.Fatal(err)
		}
		var streams []int64
		for i := 0; i < budgets.StreamsPerHandle; i++ {
			res, err := get(t, id, "https://x/stream")
			if err != nil || res.Stream == 0 {
				t.Fatalf("concurrency %d, stream %d: %+v %v", conc, i+1, res, err)
			}
			streams = append(streams, res.Stream)
		}
		for _, path := range []string{"/stream", "/big"} {
			if res, err := get(t, id, "https://x"+path); fault.CodeOf(err) != fault.QuotaExceeded || res.Stream != 0 {
				t.Fatalf("concurrency %d: %s past the cap: %+v %v", conc, path, res, err)
			}
		}
		var state string
		if !waitfor.Within(30*time.Second, func() bool {
			res, err := get(t, id, "https://x/state")
			if err != nil {
				t.Fatal(err)
			}
			state = string(res.BodyBytes())
			return state == fmt.Sprintf("%d 1", budgets.StreamsPerHandle+3)
		}) {
			t.Fatalf("concurrency %d: served and cancelled %s, want %d 1", conc, state, budgets.StreamsPerHandle+3)
		}
		e.CancelStream(id, streams[0])
		if res, err := get(t, id, "https://x/stream"); err != nil || res.Stream == 0 {
			t.Fatalf("concurrency %d: a stream after one was cancelled: %+v %v", conc, res, err)
		}
		e.Close(id)
	}
}
