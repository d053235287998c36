package sandbox

import (
	"context"
	"testing"
	"time"

	"github.com/retainer-gw/retainer/program"
)

// Buffers freed by one isolate serve the next ones (bufferpool.cc), and a
// buffer handed out again is zeroed: an isolate fills thousands of 1 KB
// buffers with 0xAA and drops them, then another reads thousands of new
// ones, every byte of which must be 0, while the pool hands blocks out
// again.
func TestArrayBuffersArePooledAndZeroed(t *testing.T) {
	e := engine(t)
	before := arrayBuffersReused()
	fill := `async () => { let kept = 0; for (let i = 0; i < 20000; i++) { const b = new Uint8Array(1000 + (i % 7) * 500); b.fill(0xaa); kept += b[0]; } return kept > 0 }`
	read := `async () => { let dirty = 0; for (let i = 0; i < 20000; i++) { const b = new Uint8Array(1000 + (i % 7) * 500); for (let j = 0; j < b.length; j += 97) dirty += b[j]; b.fill(0xbb); } return dirty }`
	for range 3 {
		for _, code := range []string{fill, read} {
			out, err := e.Run(context.Background(), program.Job{Timeout: 20 * time.Second, Program: program.Program{Code: code}})
			if err != nil {
				t.Fatal(err)
			}
			if code == read && string(out.Result) != "0" {
				t.Fatalf("new buffers held %s of old bytes", out.Result)
			}
		}
	}
	if arrayBuffersReused() == before {
		t.Fatal("no buffer was handed out again: the pool is not in front of the isolates' allocator")
	}
	t.Logf("%d blocks handed out again", arrayBuffersReused()-before)
}
