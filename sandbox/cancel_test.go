package sandbox

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/retainer-gw/retainer/fault"
	"github.com/retainer-gw/retainer/program"
)

// A run whose caller gives up ends where it runs: spinning or waiting, it
// answers errCancelled, long before its own bound.
func TestCancelledRunEnds(t *testing.T) {
	for _, code := range []string{
		`async () => { for (;;) {} }`,
		`async () => { await new Promise(r => setTimeout(r, 20000)); return 'late' }`,
	} {
		ctx, cancel := context.WithCancel(context.Background())
		time.AfterFunc(100*time.Millisecond, cancel)
		_, err := engine(t).Run(ctx, program.Job{Program: program.Program{Code: code}, Timeout: 20 * time.Second})
		if fault.CodeOf(err) != fault.Timeout || !strings.Contains(err.Error(), "cancelled") {
			t.Fatalf("%s: %v", code, err)
		}
	}
	// A run cancelled before it began (its job waiting for the isolate)
	// never runs its program.
	ctx0, cancel0 := context.WithCancel(context.Background())
	cancel0()
	if _, err := engine(t).Run(ctx0, program.Job{Program: program.Program{Code: `async () => { for (;;) {} }`}, Timeout: 20 * time.Second}); fault.CodeOf(err) != fault.Timeout || !strings.Contains(err.Error(), "cancelled") {
		t.Fatalf("cancelled before it began: %v", err)
	}
	// A cancel after the run ended touches nothing it retained.
	ctx, cancel := context.WithCancel(context.Background())
	out, err := engine(t).Run(ctx, program.Job{ID: "kept-after-cancel", RetainHandles: true, Program: program.Program{Code: `async () => ({ fetch() { return new Response('still here') } })`}})
	if err != nil || !out.Retained {
		t.Fatal(out, err)
	}
	cancel()
	time.Sleep(50 * time.Millisecond)
	if r, err := get(t, "kept-after-cancel", "https://x/"); err != nil || string(r.BodyBytes()) != "still here" {
		t.Fatalf("the retained handle after a late cancel: %v %v", r, err)
	}
}
