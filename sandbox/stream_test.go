package sandbox

import (
	"context"
	"strconv"
	"strings"
	"testing"
	"time"
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
	for total < StreamWindow {
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
