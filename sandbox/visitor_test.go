package sandbox

import (
	"context"
	"encoding/json"
	"fmt"
	"testing"
	"time"

	"github.com/retainer-gw/retainer/program"
)

// Waiting for the visitor's body is not the handler's time (visitor.go),
// on the one-at-a-time path too, where one watchdog covers the whole call:
// a handler with a 200 ms bound whose body.read waits 400 ms (the body
// arrives slowly) answers every time, its isolate and its count intact.
// (In a worker the watchdog could fire at the bound just before the loop,
// woken at the same moment, noted its wait: caddymodule's
// TestStalledBodiesAnswer408 has the one-at-a-time case.)
func TestSlowBodyIsNotTheHandlersTime(t *testing.T) {
	e := New(Config{Prewarm: 0, HostCall: func(ctx context.Context, runID, op string, args json.RawMessage) (json.RawMessage, error) {
		if op != "body.read" {
			return nil, fmt.Errorf("no %s here", op)
		}
		time.Sleep(400 * time.Millisecond)
		return json.RawMessage(`{"data":"slow","done":true}`), nil
	}})
	id := "slow-body"
	code := `async () => { let n = 0; return { async fetch(req) { const text = await req.text(); return new Response(text + ' ' + (++n)); } } }`
	if _, err := e.Run(context.Background(), program.Job{ID: id, RetainHandles: true, Timeout: 200 * time.Millisecond, Program: program.Program{Code: code}}); err != nil {
		t.Fatal(err)
	}
	defer e.Close(id)
	for i := 1; i <= 8; i++ {
		req := program.NewWireRequest("POST", "https://x.test/", nil, nil)
		req.BodyStream = "token"
		res, err := e.Invoke(context.Background(), id, "fetch", req)
		if err != nil || string(res.BodyBytes()) != fmt.Sprintf("slow %d", i) {
			t.Fatalf("call %d: %q %v", i, res.BodyBytes(), err)
		}
	}
}
