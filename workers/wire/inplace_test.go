package wire

import (
	"bytes"
	"context"
	"fmt"
	"reflect"
	"sync"
	"testing"
	"time"

	"github.com/retainer-gw/retainer/program"
)

// Frames are read in place, in the reader's buffer, when they fit it
// (rpc.go, read): a frame taken (Take) is valid while Take runs, and
// every payload that outlives its turn of the read loop (a request served
// on a goroutine of its own, an answer to a call) is its own copy. Long
// frames (past the buffer, read into one of their own) and short ones
// alternate, in both directions, and a request served slowly is read
// only after the frames behind it have gone through the buffer: each
// answer is its own frame's bytes, none of a frame before or after it.
func TestFramesReadInPlaceAreNeverSharedPastTheirTurn(t *testing.T) {
	a, b := socketPair(t)
	const max = 16 << 20
	var peer *Conn
	peer = NewConn(b, max, max, func(_ context.Context, path string, body []byte) ([]byte, error) {
		if path == "/slow" {
			// Frames behind this one pass through the reader's
			// buffer meanwhile.
			time.Sleep(20 * time.Millisecond)
		}
		return append([]byte(path+":"), body...), nil
	}, nil)
	var taken sync.Map // payloads seen by Take, copied while it ran
	peer.Take = func(id uint64, path string, payload []byte) bool {
		if path != "/take" {
			return false
		}
		own := append([]byte(path+":"), payload...)
		taken.Store(id, true)
		go peer.ReplyLater(id, path, own, false)
		return true
	}
	peer.Start()
	caller := NewConn(a, max, max, func(_ context.Context, path string, body []byte) ([]byte, error) {
		return append([]byte(path+":"), body...), nil
	}, nil).Start()
	t.Cleanup(func() { caller.Close(); peer.Close() })

	sizes := []int{100 << 10, 10, 70 << 10, 1, 0, 3000, 200 << 10, 5}
	var wg sync.WaitGroup
	errs := make(chan error, 3*len(sizes)+1)
	call := func(c *Conn, path string, body []byte) {
		defer wg.Done()
		res, err := c.Call(context.Background(), path, body)
		if err != nil {
			errs <- err
			return
		}
		if want := append([]byte(path+":"), body...); !bytes.Equal(res, want) {
			errs <- fmt.Errorf("%s with %d bytes: the answer (%d bytes) is not its own", path, len(body), len(res))
		}
	}
	for i, n := range sizes {
		body := bytes.Repeat([]byte{byte('a' + i)}, n)
		wg.Add(3)
		go call(caller, "/slow", body)
		go call(caller, "/take", body)
		// The peer calls back: answers (kindResponse) read in place too.
		go call(peer, "/back", body)
		time.Sleep(time.Millisecond)
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	n := 0
	taken.Range(func(any, any) bool { n++; return true })
	if n != len(sizes) {
		t.Fatalf("Take took %d frames, want %d", n, len(sizes))
	}
}

// An InvokeRequest decoded again (the worker decodes every invocation
// into one, its headers' array reused) holds what one decoded fresh
// would: nothing of an earlier frame, whichever parts each frame has.
func TestInvokeRequestDecodedAgainHoldsOnlyItsFrame(t *testing.T) {
	reqs := []InvokeRequest{
		{ID: "a", Name: "fetch", Request: program.WireRequest{Method: "POST", URL: "https://x.test/long", Headers: [][2]string{{"a", "1"}, {"b", "2"}, {"c", "3"}}, Body: []byte("a body")}},
		{ID: "b", Name: "fetch", Request: program.WireRequest{Method: "GET", URL: "https://x.test/", Headers: [][2]string{{"d", "4"}}}},
		{ID: "c", Name: "other", Request: program.WireRequest{Method: "POST", URL: "https://x.test/s", Headers: [][2]string{}, BodyStream: "s1"}},
		{ID: "d", Name: "fetch", Request: program.WireRequest{Method: "PUT", URL: "https://x.test/e", Headers: [][2]string{{"e", "5"}, {"f", "6"}}, Body: []byte{}}},
		{ID: "e", Name: "fetch", Request: program.WireRequest{Method: "GET", URL: "https://x.test/", Headers: [][2]string{}}},
	}
	var again InvokeRequest
	for _, q := range append(reqs, reqs...) {
		frame := q.EncodeFrame()
		var fresh InvokeRequest
		if err := fresh.DecodeFrame(frame); err != nil {
			t.Fatal(err)
		}
		if err := again.DecodeFrame(frame); err != nil {
			t.Fatal(err)
		}
		if !reflect.DeepEqual(fresh, again) {
			t.Fatalf("decoded again: %+v, fresh: %+v", again, fresh)
		}
	}
}
