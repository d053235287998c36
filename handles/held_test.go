package handles

import (
	"context"
	"testing"
	"time"

	"github.com/retainer-gw/retainer/budgets"
	"github.com/retainer-gw/retainer/fault"
	"github.com/retainer-gw/retainer/program"
	"github.com/retainer-gw/retainer/workers"
)

// Answers held whole for the API are charged to their tenant: past its
// share it gets QUOTA_EXCEEDED, past the gateway's cap the one who asked
// gets OVERLOADED, and a release gives the bytes back.
func TestHeldBodiesAreChargedToTheirTenant(t *testing.T) {
	g := newGateway(t, workers.Config{Workers: 0, WorkerMemory: 8 << 30})
	defer g.stop()
	g.store.held = budgets.NewBytes(3<<20+1000, 2<<20)
	reg := g.store.Registry("apps", RegistryConfig{})
	big := func(tenant string) string {
		res, err := reg.Execute(context.Background(), tenant, ExecRequest{RetainHandles: true, Timeout: 2 * time.Second,
			Program: program.Program{Code: `async () => ({ fetch() { return new Response('x'.repeat(1536 << 10)) } })`}})
		if err != nil {
			t.Fatal(err)
		}
		return res.ExecutionID
	}
	a, b, c := big("alice"), big("bob"), big("carol")
	req := program.NewWireRequest("GET", "https://x/", nil, nil)
	res, releaseA, err := reg.InvokeHeld(context.Background(), "alice", a, "fetch", req)
	if err != nil || len(res.Body) != 1536<<10 {
		t.Fatalf("first: %d %v", len(res.Body), err)
	}
	if _, _, err := reg.InvokeHeld(context.Background(), "alice", a, "fetch", req); fault.CodeOf(err) != fault.QuotaExceeded {
		t.Fatalf("past alice's share: %v", err)
	}
	_, releaseB, err := reg.InvokeHeld(context.Background(), "bob", b, "fetch", req)
	if err != nil {
		t.Fatalf("bob, within the gateway's cap: %v", err)
	}
	if _, _, err := reg.InvokeHeld(context.Background(), "carol", c, "fetch", req); fault.CodeOf(err) != fault.Overloaded {
		t.Fatalf("past the gateway's cap: %v", err)
	}
	releaseA()
	releaseB()
	if _, err := reg.Invoke(context.Background(), "carol", c, "fetch", req); err != nil {
		t.Fatalf("after the releases: %v", err)
	}
	if held, total := g.store.held.Held("alice"); held != 0 || total != 0 {
		t.Fatalf("still held: %d %d", held, total)
	}
}
