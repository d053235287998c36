package wire

import (
	"fmt"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/retainer-gw/retainer/internal/waitfor"
	"github.com/retainer-gw/retainer/program"
)

// The worker decodes every invocation into one InvokeRequest, reusing its
// headers' array: a large frame with many headers (read into a buffer of
// its own, not in place) must be collectable once a later frame with
// fewer headers was decoded, not kept by the entries past their count
// (red team, seventh session: an 8 MiB frame stayed reachable).
func TestAReusedRequestKeepsNoEarlierFrame(t *testing.T) {
	var q InvokeRequest
	hs := make([][2]string, 50)
	for i := range hs {
		hs[i] = [2]string{fmt.Sprintf("x-h%d", i), "v"}
	}
	big := InvokeRequest{ID: "h", Name: "fetch", Request: program.WireRequest{Method: "POST", URL: "http://a/", Body: []byte(strings.Repeat("B", 8<<20)), Headers: hs}}.EncodeFrame()
	freed := make(chan struct{})
	runtime.SetFinalizer(&big[0], func(*byte) { close(freed) })
	if err := q.DecodeFrame(big); err != nil {
		t.Fatal(err)
	}
	big = nil
	small := InvokeRequest{ID: "h", Name: "fetch", Request: program.WireRequest{Method: "GET", URL: "http://a/", Headers: [][2]string{{"x-one", "1"}}}}.EncodeFrame()
	if err := q.DecodeFrame(small); err != nil {
		t.Fatal(err)
	}
	if len(q.Request.Headers) != 1 || q.Request.Headers[0] != [2]string{"x-one", "1"} {
		t.Fatalf("the later frame's headers: %q", q.Request.Headers)
	}
	if !waitfor.Within(5*time.Second, func() bool {
		runtime.GC()
		select {
		case <-freed:
			return true
		default:
			return false
		}
	}) {
		t.Errorf("the 8 MiB frame is still reachable after a later decode: %d headers, array of %d, past the count %q", len(q.Request.Headers), cap(q.Request.Headers), q.Request.Headers[1:2:2])
	}
	runtime.KeepAlive(&q)
}
