package client_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/coder/websocket"

	"github.com/retainer-gw/retainer/client"
	"github.com/retainer-gw/retainer/internal/waitfor"
)

func dial(t *testing.T, tenant string) *client.Executor {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	e, err := client.Dial(ctx, gatewayURL, client.Options{Token: token(tenant)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { e.Close() })
	return e
}

func run(t *testing.T, e *client.Executor, req client.Request) (client.Outcome, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	return e.Execute(ctx, req)
}

func codeOf(err error) string {
	var ce *client.Error
	if errors.As(err, &ce) {
		return ce.Code
	}
	return ""
}

// Arguments and answers cross the two process boundaries intact, every
// argument of a call arrives, and a tool's error is thrown in the program.
func TestCallerToolArgumentsAnswersAndErrors(t *testing.T) {
	e := dial(t, "tools-tenant")
	var got [][]json.RawMessage
	tools := client.Provider{Name: "host", Tools: map[string]client.ToolFunc{
		"echo": func(_ context.Context, args []json.RawMessage) (any, error) {
			got = append(got, args)
			return map[string]any{"args": args, "text": "<é & \u2028>"}, nil
		},
		"fail": func(context.Context, []json.RawMessage) (any, error) {
			return nil, errors.New("the warehouse is closed")
		},
	}}
	out, err := run(t, e, client.Request{Providers: []client.Provider{tools}, Code: `async () => {
		const a = await host.echo({n: 1, s: "x\u0000y", deep: [1, [2, {z: null}]]});
		const b = await host.echo("one", 2, [3]);
		const c = await host.echo();
		let thrown;
		try { await host.fail({}); } catch (e) { thrown = e instanceof Error ? e.message : String(e); }
		return {a, b, c, thrown};
	}`})
	if err != nil {
		t.Fatal(err)
	}
	var res struct {
		A, B, C struct {
			Args []json.RawMessage
			Text string
		}
		Thrown string
	}
	if err := json.Unmarshal(out.Result, &res); err != nil {
		t.Fatal(err, string(out.Result))
	}
	if string(res.A.Args[0]) != `{"n":1,"s":"x\u0000y","deep":[1,[2,{"z":null}]]}` || res.A.Text != "<é & \u2028>" {
		t.Fatalf("first call: %s", out.Result)
	}
	if len(res.B.Args) != 3 || string(res.B.Args[0]) != `"one"` || string(res.B.Args[2]) != `[3]` {
		t.Fatalf("several arguments: %s", out.Result)
	}
	if len(res.C.Args) != 0 {
		t.Fatalf("no arguments: %s", out.Result)
	}
	if !strings.Contains(res.Thrown, "the warehouse is closed") {
		t.Fatalf("the tool's error reached the program as %q", res.Thrown)
	}
	if len(got) != 3 {
		t.Fatalf("the host saw %d calls", len(got))
	}
}

// Calls of one execution overlap: 20 calls in flight at once are all
// answered (the tool holds each until all 20 have arrived).
func TestTwentyOverlappingCalls(t *testing.T) {
	e := dial(t, "overlap-tenant")
	var arrived atomic.Int32
	all := make(chan struct{})
	tools := client.Provider{Name: "t", Tools: map[string]client.ToolFunc{
		"wait": func(ctx context.Context, args []json.RawMessage) (any, error) {
			if arrived.Add(1) == 20 {
				close(all)
			}
			select {
			case <-all:
			case <-time.After(4 * time.Second):
				return nil, errors.New("the calls did not overlap")
			}
			var n int
			json.Unmarshal(args[0], &n)
			return n * n, nil
		},
	}}
	out, err := run(t, e, client.Request{Providers: []client.Provider{tools}, Code: `async () => {
		const xs = await Promise.all(Array.from({length: 20}, (_, i) => t.wait(i)));
		return xs.reduce((a, b) => a + b, 0);
	}`})
	if err != nil {
		t.Fatal(err)
	}
	if string(out.Result) != "2470" { // sum of squares 0..19
		t.Fatalf("result %s", out.Result)
	}
}

// A handle whose catalogue came from a caller tool at deploy time is served
// over HTTP and over another connection after its socket closed; from the
// handler, the caller tool answers the completion text.
func TestRetainedHandleOutlivesItsSocket(t *testing.T) {
	e := dial(t, "deploy-tenant")
	catalogue := client.Provider{Name: "store", Tools: map[string]client.ToolFunc{
		"listProducts": func(context.Context, []json.RawMessage) (any, error) {
			return []map[string]any{{"id": 1, "name": "tea"}, {"id": 2, "name": "coffee"}}, nil
		},
	}}
	out, err := run(t, e, client.Request{RetainHandles: true, Providers: []client.Provider{catalogue}, Code: `async () => {
		const products = await store.listProducts({});
		return { async fetch(request) {
			let late;
			try { await store.listProducts({}); } catch (e) { late = e.message; }
			return Response.json({products, late});
		} };
	}`})
	if err != nil {
		t.Fatal(err)
	}
	if out.ExecutionID == "" || len(out.Handles) != 1 || out.Handles[0] != "fetch" {
		t.Fatalf("outcome %+v", out)
	}
	e.Close()

	status, body := post(t, "deploy-tenant", "/handles/"+out.ExecutionID+"/fetch", `{"method":"GET","url":"https://x.example/","headers":[],"body":null}`)
	if status != 200 {
		t.Fatalf("HTTP invoke: %d %s", status, body)
	}
	var wire client.WireResponse
	json.Unmarshal([]byte(body), &wire)
	if !strings.Contains(string(wire.Body), `"coffee"`) || !strings.Contains(string(wire.Body), "Execution has already completed.") {
		t.Fatalf("HTTP invoke answered %s", wire.Body)
	}

	other := dial(t, "deploy-tenant")
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	res, err := other.InvokeHandle(ctx, out.ExecutionID, "fetch", client.WireRequest{Method: "GET", URL: "https://x.example/"})
	if err != nil || res.Status != 200 || !strings.Contains(string(res.Body), `"tea"`) {
		t.Fatalf("socket invoke: %v %d %s", err, res.Status, res.Body)
	}
	if err := other.CloseHandles(ctx, out.ExecutionID); err != nil {
		t.Fatal(err)
	}
	_, err = other.InvokeHandle(ctx, out.ExecutionID, "fetch", client.WireRequest{Method: "GET", URL: "https://x.example/"})
	if codeOf(err) != "HANDLES_CLOSED" {
		t.Fatalf("after close: %v", err)
	}
}

// A connection that closes while its run waits on a caller tool: the run
// is cancelled, in its worker too (docs/protocol.md): what it would do after
// its pending call threw never happens (a run that went on would write kv
// 300 ms later).
func TestConnectionClosedMidRun(t *testing.T) {
	e := dial(t, "midrun-tenant")
	called := make(chan struct{})
	tools := client.Provider{Name: "t", Tools: map[string]client.ToolFunc{
		"hang": func(ctx context.Context, _ []json.RawMessage) (any, error) {
			close(called)
			<-ctx.Done()
			return nil, ctx.Err()
		},
	}}
	done := make(chan error, 1)
	go func() {
		_, err := e.Execute(context.Background(), client.Request{Providers: []client.Provider{tools}, Capabilities: []string{"kvRead", "kvWrite"}, Code: `async () => {
			try { await t.hang() } catch (e) {}
			await new Promise(r => setTimeout(r, 300));
			await kv.put("after", "went on");
		}`})
		done <- err
	}()
	<-called
	e.Close()
	if err := <-done; err == nil {
		t.Fatal("the closed connection still answered an outcome")
	}
	time.Sleep(time.Second)
	again := dial(t, "midrun-tenant")
	out, err := run(t, again, client.Request{Capabilities: []string{"kvRead"}, Code: `async () => kv.get("after")`})
	if err != nil {
		t.Fatal(err)
	}
	if got := string(out.Result); got != "null" {
		t.Fatalf("the run went on after its connection closed: it wrote %s", got)
	}
}

// Every per-connection bound answers the message with its fault and the
// connection goes on serving.
func TestPerConnectionBounds(t *testing.T) {
	e := dial(t, "bounds-tenant")

	// Message size: a program over the request-body bound (64 KiB here).
	_, err := run(t, e, client.Request{Code: "async () => '" + strings.Repeat("x", 200<<10) + "'"})
	if codeOf(err) != "TOO_LARGE" {
		t.Fatalf("oversized message: %v", err)
	}

	// 17 executions in flight: one is refused as OVERLOADED.
	release := make(chan struct{})
	hold := client.Provider{Name: "t", Tools: map[string]client.ToolFunc{
		"hold": func(context.Context, []json.RawMessage) (any, error) { <-release; return 1, nil },
	}}
	errs := make(chan error, 17)
	for i := 0; i < 17; i++ {
		go func() {
			_, err := e.Execute(context.Background(), client.Request{Providers: []client.Provider{hold}, Code: `async () => t.hold()`})
			errs <- err
		}()
	}
	var refused error
	select {
	case refused = <-errs:
	case <-time.After(15 * time.Second):
		t.Fatal("no execution was refused")
	}
	if codeOf(refused) != "OVERLOADED" {
		t.Fatalf("the 17th execution answered %v", refused)
	}
	close(release)
	for i := 0; i < 16; i++ {
		if err := <-errs; err != nil {
			t.Fatalf("an execution within the bound failed: %v", err)
		}
	}

	// 66 calls pending on the connection (33 from each of two executions;
	// one isolate holds at most 64 of its own): two throw OVERLOADED in
	// their programs.
	var arrived atomic.Int32
	release2 := make(chan struct{})
	wait := client.Provider{Name: "t", Tools: map[string]client.ToolFunc{
		"wait": func(context.Context, []json.RawMessage) (any, error) {
			if arrived.Add(1) == 64 {
				// The last two calls are on their way through the
				// gateway; give them time to meet the bound.
				time.AfterFunc(time.Second, func() { close(release2) })
			}
			<-release2
			return "ok", nil
		},
	}}
	results := make(chan string, 2)
	for i := 0; i < 2; i++ {
		go func() {
			out, err := e.Execute(context.Background(), client.Request{Providers: []client.Provider{wait}, Code: `async () => {
				const rs = await Promise.allSettled(Array.from({length: 33}, () => t.wait()));
				return rs.filter(r => r.status === 'rejected').map(r => r.reason.message);
			}`})
			if err != nil {
				results <- err.Error()
				return
			}
			results <- string(out.Result)
		}()
	}
	all := <-results + <-results
	if strings.Count(all, "64 calls waiting") != 2 {
		t.Fatalf("66 pending calls: %s", all)
	}

	// Still serving.
	out, err := run(t, e, client.Request{Code: `async () => 1 + 1`})
	if err != nil || string(out.Result) != "2" {
		t.Fatalf("after the bounds: %v %s", err, out.Result)
	}
}

// Two tenants' sockets are isolated: one cannot invoke or close the
// other's handle (it answers as for an unknown id).
func TestTenantsSocketsIsolated(t *testing.T) {
	a := dial(t, "tenant-a")
	b := dial(t, "tenant-b")
	out, err := run(t, a, client.Request{RetainHandles: true, Code: `async () => ({ fetch: () => new Response("a's") })`})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, err := b.InvokeHandle(ctx, out.ExecutionID, "fetch", client.WireRequest{Method: "GET", URL: "https://x/"}); codeOf(err) != "HANDLES_CLOSED" {
		t.Fatalf("b invoked a's handle: %v", err)
	}
	if err := b.CloseHandles(ctx, out.ExecutionID); codeOf(err) != "HANDLES_CLOSED" {
		t.Fatalf("b closed a's handle: %v", err)
	}
	res, err := a.InvokeHandle(ctx, out.ExecutionID, "fetch", client.WireRequest{Method: "GET", URL: "https://x/"})
	if err != nil || string(res.Body) != "a's" {
		t.Fatalf("a's handle after b tried: %v %s", err, res.Body)
	}
}

// Caller providers need the socket; over HTTP they are refused.
func TestCallerProvidersRefusedOverHTTP(t *testing.T) {
	status, body := post(t, "http-tenant", "/executions", `{"code":"async () => 1","providers":[{"name":"t","tools":["x"],"caller":true}]}`)
	if status != 400 || !strings.Contains(body, "executor socket") {
		t.Fatalf("%d %s", status, body)
	}
}

// The socket refuses a client without the subprotocol and without a token.
func TestUpgradeNeedsTokenAndSubprotocol(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	_, err := client.Dial(ctx, gatewayURL, client.Options{})
	if codeOf(err) != "UNAUTHENTICATED" {
		t.Fatalf("no token: %v", err)
	}
	_, res, err := websocket.Dial(ctx, gatewayURL+"?", &websocket.DialOptions{HTTPHeader: map[string][]string{"Authorization": {"Bearer " + token("x")}}})
	if err == nil || res == nil || res.StatusCode != 400 {
		t.Fatalf("no subprotocol: %v %v", err, res)
	}
}

// A malformed message is answered with a fault; the connection stays.
func TestMalformedMessages(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	ws, _, err := websocket.Dial(ctx, gatewayURL, &websocket.DialOptions{Subprotocols: []string{client.Subprotocol},
		HTTPHeader: map[string][]string{"Authorization": {"Bearer " + token("raw-tenant")}}})
	if err != nil {
		t.Fatal(err)
	}
	defer ws.CloseNow()
	for _, msg := range []string{`not json`, `{"type":"bogus","id":7}`, `{"type":"execute"}`, `{"type":"execute","id":8,"request":{"code":1}}`} {
		if err := ws.Write(ctx, websocket.MessageText, []byte(msg)); err != nil {
			t.Fatal(err)
		}
		_, data, err := ws.Read(ctx)
		if err != nil {
			t.Fatalf("%s: %v", msg, err)
		}
		if !strings.Contains(string(data), `"BAD_REQUEST"`) {
			t.Fatalf("%s answered %s", msg, data)
		}
	}
	ws.Write(ctx, websocket.MessageText, []byte(`{"type":"execute","id":9,"request":{"code":"async () => 40 + 2"}}`))
	_, data, err := ws.Read(ctx)
	if err != nil || !strings.Contains(string(data), `"result":42`) {
		t.Fatalf("after the faults: %v %s", err, data)
	}
}

// A rebuild replays the caller tool's recorded answers: after a restart the
// handle is rebuilt with no caller connected, and its catalogue is the one
// the caller gave at deploy time.
func TestRebuildReplaysCallerAnswers(t *testing.T) {
	e := dial(t, "replay-tenant")
	calls := 0
	catalogue := client.Provider{Name: "store", Tools: map[string]client.ToolFunc{
		"listProducts": func(context.Context, []json.RawMessage) (any, error) {
			calls++
			return []string{"tea", fmt.Sprint("call ", calls)}, nil
		},
	}}
	out, err := run(t, e, client.Request{RetainHandles: true, Providers: []client.Provider{catalogue}, Code: `async () => {
		const products = await store.listProducts({page: 1});
		const started = Date.now();
		return { fetch: () => Response.json({products, started}) };
	}`})
	if err != nil {
		t.Fatal(err)
	}
	e.Close()
	invoke := func() string {
		status, body := post(t, "replay-tenant", "/handles/"+out.ExecutionID+"/fetch", `{"method":"GET","url":"https://x.example/","headers":[],"body":null}`)
		if status != 200 {
			t.Fatalf("invoke: %d %s", status, body)
		}
		var wire client.WireResponse
		json.Unmarshal([]byte(body), &wire)
		return string(wire.Body)
	}
	before := invoke()
	restartGateway(t)
	after := invoke()
	if !strings.Contains(after, `["tea","call 1"]`) || after == before || calls != 1 {
		t.Fatalf("before the restart %s, after %s, %d calls", before, after, calls)
	}
}

// A run's pending caller-tool calls are released when the run ends
// (docs/architecture.md, Budgets): after a run times out with 64 calls its
// caller never answered, the connection's next run calls a tool as before
// (it once answered "64 calls waiting" for ever).
func TestUnansweredCallsEndWithTheirRun(t *testing.T) {
	e := dial(t, "unanswered-tenant")
	release := make(chan struct{})
	defer close(release)
	tools := client.Provider{Name: "t", Tools: map[string]client.ToolFunc{
		"hang": func(ctx context.Context, _ []json.RawMessage) (any, error) {
			<-release
			return nil, nil
		},
		"ok": func(ctx context.Context, _ []json.RawMessage) (any, error) { return "answered", nil },
	}}
	for i := 0; i < 2; i++ {
		_, err := run(t, e, client.Request{Providers: []client.Provider{tools}, TimeoutMs: 300, Code: `async () => {
			await Promise.all(Array.from({length: 64}, () => t.hang()));
		}`})
		if codeOf(err) != "TIMEOUT" {
			t.Fatalf("run %d of 64 unanswered calls: %v", i+1, err)
		}
	}
	out, err := run(t, e, client.Request{Providers: []client.Provider{tools}, Code: `async () => t.ok()`})
	if err != nil || string(out.Result) != `"answered"` {
		t.Fatalf("a call after the runs ended: %s %v", out.Result, err)
	}
}

// One tenant holds at most 64 executor sockets (docs/architecture.md, Budgets): the
// 65th upgrade answers 429, another tenant connects as before, and a
// socket closed gives its place back.
func TestSocketsPerTenant(t *testing.T) {
	var open []*client.Executor
	for i := 0; i < 64; i++ {
		open = append(open, dial(t, "socket-tenant"))
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, err := client.Dial(ctx, gatewayURL, client.Options{Token: token("socket-tenant")}); err == nil || !strings.Contains(err.Error(), "429") && !strings.Contains(err.Error(), "QUOTA_EXCEEDED") {
		t.Fatalf("the 65th socket of one tenant: %v", err)
	}
	other := dial(t, "another-socket-tenant")
	if out, err := run(t, other, client.Request{Code: "async () => 1"}); err != nil || string(out.Result) != "1" {
		t.Fatalf("another tenant's socket: %s %v", out.Result, err)
	}
	open[0].Close()
	var err error
	if !waitfor.Within(30*time.Second, func() bool {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		var e *client.Executor
		if e, err = client.Dial(ctx, gatewayURL, client.Options{Token: token("socket-tenant")}); err == nil {
			e.Close()
		}
		return err == nil
	}) {
		t.Fatalf("a socket after one was closed: %v", err)
	}
}

// A socket lives no longer than its token (docs/architecture.md, Budgets): once the
// token has expired (plus the 1 s leeway this gateway allows), the socket
// is closed, and nothing more runs on it; a fresh token connects again.
func TestSocketEndsWithItsToken(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	e, err := client.Dial(ctx, gatewayURL, client.Options{Token: tokenFor("expiring-tenant", 2*time.Second)})
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close()
	if out, err := run(t, e, client.Request{Code: "async () => 1"}); err != nil || string(out.Result) != "1" {
		t.Fatalf("before the token expired: %s %v", out.Result, err)
	}
	time.Sleep(4 * time.Second)
	if out, err := run(t, e, client.Request{Code: "async () => 2"}); err == nil {
		t.Fatalf("a run on a socket whose token expired: %s", out.Result)
	}
	fresh := dial(t, "expiring-tenant")
	if out, err := run(t, fresh, client.Request{Code: "async () => 3"}); err != nil || string(out.Result) != "3" {
		t.Fatalf("with a fresh token: %s %v", out.Result, err)
	}
}

// A deploy through the socket can be TypeScript with its own idle bound:
// the types are stripped by the gateway, and an idle bound out of range is
// the gateway's 400, not dropped by the client.
func TestTypeScriptAndIdleBound(t *testing.T) {
	e := dial(t, "typescript-tenant")
	out, err := run(t, e, client.Request{Language: "typescript", IdleMs: 60000, RetainHandles: true, Code: `async () => {
		const greet = (name: string): string => "hello " + name;
		return { async fetch(request: Request): Promise<Response> { return new Response(greet("ts")); } };
	}`})
	if err != nil || out.ExecutionID == "" {
		t.Fatalf("typescript deploy: %+v %v", out, err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	res, err := e.InvokeHandle(ctx, out.ExecutionID, "fetch", client.WireRequest{Method: "GET", URL: "https://x.example/"})
	if err != nil || string(res.Body) != "hello ts" {
		t.Fatalf("invoke: %v %s", err, res.Body)
	}
	_, err = run(t, e, client.Request{IdleMs: 10, RetainHandles: true, Code: `async () => ({ fetch() { return new Response("x"); } })`})
	if codeOf(err) != "BAD_REQUEST" {
		t.Fatalf("idleMs 10: %v", err)
	}
}
