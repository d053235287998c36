package handles

import (
	"context"
	"testing"
	"time"

	"github.com/retainer-gw/retainer/fault"
	"github.com/retainer-gw/retainer/sandbox"
	"github.com/retainer-gw/retainer/sandbox/worker"
)

// An open WebSocket keeps its handle from idling out (docs/websockets.md);
// once it closes, the idle bound applies again. The caps answer
// QUOTA_EXCEEDED per handle and per tenant.
func TestOpenSocketsKeepTheirHandle(t *testing.T) {
	g := newGateway(t, worker.Config{Workers: 1})
	defer g.stop()
	reg := g.store.Registry("apps", RegistryConfig{IdleBound: time.Minute, WebsocketsPerHandle: 1, WebsocketsPerTenant: 1})
	res, err := reg.Execute(context.Background(), "alice", ExecRequest{RetainHandles: true, Timeout: time.Second,
		Program: sandbox.Program{Code: `async () => ({ fetch() {
			const [client, server] = Object.values(new WebSocketPair());
			server.accept();
			return new Response(null, { status: 101, webSocket: client });
		} })`}})
	if err != nil {
		t.Fatal(err)
	}
	id := res.ExecutionID
	answer, st, err := reg.ServeStream(context.Background(), id, ResolveIDs, sandbox.NewWireRequest("GET", "https://x/", [][2]string{{"upgrade", "websocket"}}, nil), nil)
	if err != nil || answer.Status != 101 || st == nil {
		t.Fatalf("upgrade: %+v %v", answer, err)
	}
	release, err := reg.AcquireSocket(id)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := reg.AcquireSocket(id); fault.CodeOf(err) != fault.QuotaExceeded {
		t.Fatalf("a second socket past the caps: %v", err)
	}
	g.clock.Add(time.Hour)
	g.store.SweepIdle()
	if reg.Ended(id) {
		t.Fatal("a handle with an open socket idled out")
	}
	st.Close(true)
	release()
	g.clock.Add(time.Hour)
	g.store.SweepIdle()
	if !reg.Ended(id) {
		t.Fatal("the handle outlived its idle bound once its socket closed")
	}
}
