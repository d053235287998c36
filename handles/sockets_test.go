package handles

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/retainer-gw/retainer/budgets"
	"github.com/retainer-gw/retainer/fault"
	"github.com/retainer-gw/retainer/program"
	"github.com/retainer-gw/retainer/sandbox/webapi/websocket"
	"github.com/retainer-gw/retainer/workers"
	"github.com/retainer-gw/retainer/workers/wire"
)

// An open WebSocket keeps its handle from idling out (docs/websockets.md);
// once it closes, the idle bound applies again. The caps answer
// QUOTA_EXCEEDED per handle and per tenant.
func TestOpenSocketsKeepTheirHandle(t *testing.T) {
	g := newGateway(t, workers.Config{Workers: 1})
	defer g.stop()
	reg := g.store.Registry("apps", RegistryConfig{IdleBound: time.Minute, WebsocketsPerHandle: 1, WebsocketsPerTenant: 1})
	res, err := reg.Execute(context.Background(), "alice", ExecRequest{RetainHandles: true, Timeout: time.Second,
		Program: program.Program{Code: `async () => ({ fetch() {
			const [client, server] = Object.values(new WebSocketPair());
			server.accept();
			return new Response(null, { status: 101, webSocket: client });
		} })`}})
	if err != nil {
		t.Fatal(err)
	}
	id := res.ExecutionID
	answer, st, err := reg.ServeStream(context.Background(), id, ResolveIDs, program.NewWireRequest("GET", "https://x/", [][2]string{{"upgrade", "websocket"}}, nil), nil)
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

// A handle's socket events wait for their turn when its queue is full,
// never answering OVERLOADED (docs/websockets.md: the gateway then stops
// reading the visitors), and leave half the queue to requests.
func TestSocketEventsWaitTheirTurn(t *testing.T) {
	limits := budgets.Limits{HandleQueue: 4}
	g := newGateway(t, workers.Config{Workers: 1, Engine: wire.EngineConfig{Limits: limits}})
	defer g.stop()
	reg := g.store.Registry("apps", RegistryConfig{Limits: limits})
	res, err := reg.Execute(context.Background(), "alice", ExecRequest{RetainHandles: true, Timeout: time.Second,
		Program: program.Program{Code: `async () => { let received = 0; return { fetch(request) {
			if (request.url.endsWith('/count')) return new Response(String(received));
			const [client, server] = Object.values(new WebSocketPair());
			server.accept();
			server.addEventListener('message', () => { const until = Date.now() + 2; while (Date.now() < until) {} received++; });
			return new Response(null, { status: 101, webSocket: client });
		} } }`}})
	if err != nil {
		t.Fatal(err)
	}
	id := res.ExecutionID
	const sockets, each = 12, 5
	var streams []*Stream
	for range sockets {
		answer, st, err := reg.ServeStream(context.Background(), id, ResolveIDs, program.NewWireRequest("GET", "https://x/", [][2]string{{"upgrade", "websocket"}}, nil), nil)
		if err != nil || answer.Status != 101 || st == nil {
			t.Fatalf("upgrade: %+v %v", answer, err)
		}
		release, err := reg.AcquireSocket(id)
		if err != nil {
			t.Fatal(err)
		}
		defer release()
		defer st.Close(true)
		streams = append(streams, st)
	}
	var wg sync.WaitGroup
	errs := make(chan error, sockets*each)
	for _, st := range streams {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range each {
				if err := reg.SocketEvent(context.Background(), st, websocket.Text, 0, []byte("x")); err != nil {
					errs <- err
				}
			}
		}()
	}
	// Requests beside them find room in the queue.
	for range 10 {
		if _, err := call(reg, "alice", id, "/count"); err != nil {
			t.Fatalf("a request beside the socket events: %v", err)
		}
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatalf("a socket event: %v", err)
	}
	if got, err := call(reg, "alice", id, "/count"); err != nil || got != "60" {
		t.Fatalf("received %q %v, want 60", got, err)
	}
	// A wait that its context ends is not delivered.
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	turns := g.store.sockets.turnsFor(id, false)
	for range socketEventSlots(limits, 1) {
		turns.acquire(context.Background(), socketEventSlots(limits, 1))
	}
	if err := reg.SocketEvent(ctx, streams[0], websocket.Text, 0, []byte("x")); err == nil {
		t.Fatal("an event whose wait was given up was delivered")
	}
}
