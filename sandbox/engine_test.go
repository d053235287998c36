package sandbox

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/retainer-gw/retainer/budgets"
	"github.com/retainer-gw/retainer/fault"
	"github.com/retainer-gw/retainer/internal/waitfor"
	"github.com/retainer-gw/retainer/program"
)

var (
	sharedOnce   sync.Once
	sharedEngine *Engine
	handleLogsMu sync.Mutex
	handleLogs   = map[string][]program.LogEntry{}
	lostMu       sync.Mutex
	lost         = map[string]error{}
)

// engine is one engine for the package's tests (V8 flags are process-wide).
func engine(t testing.TB) *Engine {
	sharedOnce.Do(func() {
		sharedEngine = New(Config{
			Prewarm: 2,
			OnLog: func(id string, e program.LogEntry) {
				handleLogsMu.Lock()
				handleLogs[id] = append(handleLogs[id], e)
				handleLogsMu.Unlock()
			},
			OnLost: func(id string, err error) {
				lostMu.Lock()
				lost[id] = err
				lostMu.Unlock()
			},
		})
	})
	return sharedEngine
}

func run(t testing.TB, code string) (program.Outcome, error) {
	t.Helper()
	return engine(t).Run(context.Background(), program.Job{Program: program.Program{Code: code}})
}

// jsCase is a computation and the JSON result it must answer.
type jsCase struct{ name, code, want string }

// runCases runs each case with run, as a subtest of its own.
func runCases(t *testing.T, cases []jsCase) {
	t.Helper()
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			out, err := run(t, c.code)
			if err != nil {
				t.Fatal(err)
			}
			if string(out.Result) != c.want {
				t.Fatalf("got %s, want %s", out.Result, c.want)
			}
		})
	}
}

func mustRun(t testing.TB, code string) program.Outcome {
	t.Helper()
	return mustRunIn(t, engine(t), code)
}

// mustRunIn is mustRun in engine e.
func mustRunIn(t testing.TB, e *Engine, code string) program.Outcome {
	t.Helper()
	out, err := e.Run(context.Background(), program.Job{Program: program.Program{Code: code}})
	if err != nil {
		t.Fatalf("run %q: %v", code, err)
	}
	return out
}

func wantFault(t *testing.T, err error, code fault.Code, text string) {
	t.Helper()
	if err == nil {
		t.Fatalf("want %s, got success", code)
	}
	f := fault.As(err)
	if f.Code != code {
		t.Fatalf("want %s, got %s: %s", code, f.Code, f.Message)
	}
	if text != "" && !strings.Contains(f.Message, text) {
		t.Fatalf("want text containing %q, got %q", text, f.Message)
	}
}

// afterHostile checks that an ordinary run still works.
func afterHostile(t *testing.T) {
	t.Helper()
	out := mustRun(t, `async () => 6 * 7`)
	if string(out.Result) != "42" {
		t.Fatalf("ordinary run after a hostile one answered %s", out.Result)
	}
}

func TestComputations(t *testing.T) {
	cases := []struct {
		code, want string
	}{
		{`async () => 1 + 1`, `2`},
		{`() => ({a: [1, "x", null, true]})`, `{"a":[1,"x",null,true]}`},
		{`async () => { await new Promise(r => setTimeout(r, 5)); return "later" }`, `"later"`},
		{`async () => undefined`, ``},
		{`async () => { const s = new Set([1]); return structuredClone({d: 1}) }`, `{"d":1}`},
		{`async () => typeof process + typeof require + typeof SharedArrayBuffer + typeof Atomics.wait`, `"undefinedundefinedundefinedundefined"`},
		{"async () => btoa('hi') + atob('aGk=')", `"aGk=hi"`},
		{"async () => new TextDecoder().decode(new TextEncoder().encode('héllo €'))", `"héllo €"`},
		{"async () => crypto.randomUUID().length", `36`},
	}
	for _, c := range cases {
		out := mustRun(t, c.code)
		if string(out.Result) != c.want {
			t.Errorf("%s: got %s, want %s", c.code, out.Result, c.want)
		}
		if out.Handler || out.Retained {
			t.Errorf("%s: a computation was taken for a handler", c.code)
		}
	}
}

func TestConsoleLogs(t *testing.T) {
	out := mustRun(t, `async () => { console.log('x'); console.info('a', 1, {b: [2]}); console.error(new Error('boom').message); return 1 }`)
	want := []string{"x", `a 1 { b: [ 2 ] }`, "boom"}
	if fmt.Sprint(out.Logs) != fmt.Sprint(want) {
		t.Fatalf("logs %q, want %q", out.Logs, want)
	}
}

func TestLogBounds(t *testing.T) {
	out := mustRun(t, `async () => { for (let i = 0; i < 5000; i++) console.log('line ' + i); return 1 }`)
	if len(out.Logs) != budgets.LogLines {
		t.Fatalf("got %d log lines, want %d", len(out.Logs), budgets.LogLines)
	}
	if last := out.Logs[len(out.Logs)-1]; !strings.Contains(last, "truncated") {
		t.Fatalf("last line %q does not say the logs were truncated", last)
	}
	out = mustRun(t, `async () => { console.log('y'.repeat(100000)); return 1 }`)
	total := 0
	for _, l := range out.Logs {
		total += len(l)
	}
	if total > budgets.LogBytes+300 {
		t.Fatalf("logs hold %d bytes", total)
	}
}

func TestBadPrograms(t *testing.T) {
	_, err := run(t, "async () => {\n  return 1 +;\n}")
	wantFault(t, err, fault.Syntax, "SyntaxError")
	if !strings.Contains(fault.As(err).Message, "program.js:2") {
		t.Fatalf("syntax error %q does not name line 2", fault.As(err).Message)
	}
	_, err = run(t, "async () => 'a\x00b'")
	wantFault(t, err, fault.BadRequest, "NUL")
	_, err = run(t, `async () => { throw new Error("kaput") }`)
	wantFault(t, err, fault.Runtime, "Error: kaput")
	_, err = run(t, `async () => { null.x }`)
	wantFault(t, err, fault.Runtime, "TypeError")
	_, err = run(t, `async () => await new Promise(() => {})`)
	wantFault(t, err, fault.Runtime, "nothing can settle")
	afterHostile(t)
}

func TestModules(t *testing.T) {
	e := engine(t)
	out, err := e.Run(context.Background(), program.Job{Program: program.Program{
		Code: "import { next } from './counter.js';\n// a comment\nimport * as m from \"./lib/math.js\";\nasync () => next() + next() + m.double(10)",
		Modules: map[string]string{
			"./counter.js":  "import { one } from './lib/math.js'; let n = 0; export function next() { n += one; return n; }",
			"./lib/math.js": "export const one = 1; export function double(x) { return 2 * x; }",
		},
	}})
	if err != nil {
		t.Fatal(err)
	}
	if string(out.Result) != "23" {
		t.Fatalf("got %s, want 23", out.Result)
	}
	_, err = e.Run(context.Background(), program.Job{Program: program.Program{Code: "import x from 'lodash';\nasync () => x"}})
	wantFault(t, err, fault.Syntax, `"lodash"`)
	_, err = e.Run(context.Background(), program.Job{Program: program.Program{
		Code:    "import x from './a.js';\nasync () => x",
		Modules: map[string]string{"./a.js": "import y from '../../etc/passwd'; export default y"},
	}})
	wantFault(t, err, fault.Syntax, "outside")
	_, err = e.Run(context.Background(), program.Job{Program: program.Program{
		Code:    "import x from './a.js';\nasync () => x",
		Modules: map[string]string{"./a.js": "export default (;"},
	}})
	wantFault(t, err, fault.Syntax, "a.js:1")
}

func TestTimeouts(t *testing.T) {
	want := fault.TimedOut(100).Message
	if want != "Execution timed out at its 100 ms bound. Do less work per run and return the part that is already finished." {
		t.Fatalf("timeout text drifted: %q", want)
	}
	for name, code := range map[string]string{
		"endless loop":            `async () => { while (true) {} }`,
		"endless microtask loop":  `async () => { for (;;) await null }`,
		"microtask chain":         `async () => { const f = () => Promise.resolve().then(f); f(); await new Promise(() => {}) }`,
		"catastrophic backtrack":  `async () => /^(a+)+$/.test('a'.repeat(40) + 'b')`,
		"timers forever":          `async () => { await new Promise(r => { const f = () => setTimeout(f, 1); f() }) }`,
		"sync loop in a callback": `async () => { await new Promise(r => setTimeout(() => { for(;;){} }, 1)) }`,
	} {
		t.Run(name, func(t *testing.T) {
			_, err := engine(t).Run(context.Background(), program.Job{Program: program.Program{Code: code}, Timeout: 100 * time.Millisecond})
			wantFault(t, err, fault.Timeout, want)
			afterHostile(t)
		})
	}
}

// TestHeapGuardCatchesBombs: heap bombs end in MEMORY in-process, thanks to
// the near-heap-limit callback. Bombs outside the V8 heap (a huge
// ArrayBuffer) are stopped by the worker boundary's rlimits, not here.
func TestHeapGuardCatchesBombs(t *testing.T) {
	want := fault.OutOfMemory(64).Message
	if want != "Execution exceeded its 64 MiB memory bound. Hold less in memory per run." {
		t.Fatalf("memory text drifted: %q", want)
	}
	for name, code := range map[string]string{
		"growing array":   `async () => { const a = []; for (;;) a.push({i: a.length, s: 'x' + a.length}) }`,
		"string doubling": `async () => { let s = 'x'; const keep = []; for (;;) { s = s + s; keep.push(s.slice(1)); } }`,
		"object map":      `async () => { const m = new Map(); for (let i = 0;; i++) m.set(i, [i, i, i]) }`,
	} {
		t.Run(name, func(t *testing.T) {
			_, err := engine(t).Run(context.Background(), program.Job{Program: program.Program{Code: code}, Timeout: 10 * time.Second})
			wantFault(t, err, fault.Memory, want)
			afterHostile(t)
		})
	}
}

func deploy(t *testing.T, code string) string {
	t.Helper()
	id := fmt.Sprintf("test-%d", time.Now().UnixNano())
	out, err := engine(t).Run(context.Background(), program.Job{ID: id, Program: program.Program{Code: code}, RetainHandles: true, Timeout: 200 * time.Millisecond})
	if err != nil {
		t.Fatalf("deploy: %v", err)
	}
	if !out.Retained || !out.Handler || out.Result != nil {
		t.Fatalf("deploy answered %+v", out)
	}
	return id
}

func get(t *testing.T, id, url string) (program.WireResponse, error) {
	t.Helper()
	return engine(t).Invoke(context.Background(), id, "fetch", program.NewWireRequest("GET", url, nil, nil))
}

func TestRetainedHandler(t *testing.T) {
	id := deploy(t, `async () => { let served = 0; return { async fetch(req, env, ctx) {
		served++;
		if (req.url.includes('throw')) throw new Error('visitor broke it');
		if (req.url.includes('plain')) return {status: 200, body: 'nope'};
		console.log('served', served);
		return new Response(JSON.stringify({served, method: req.method, secret: env.SECRET}), {headers: {'x-n': String(served)}});
	} } }`)
	for i := 1; i <= 3; i++ {
		res, err := get(t, id, "https://example.com/")
		if err != nil {
			t.Fatal(err)
		}
		if res.Status != 200 || !strings.Contains(string(res.BodyBytes()), fmt.Sprintf(`"served":%d`, i)) {
			t.Fatalf("invocation %d answered %d %s", i, res.Status, res.BodyBytes())
		}
	}
	_, err := get(t, id, "https://example.com/throw")
	wantFault(t, err, fault.HandlerError, "")
	if strings.Contains(fault.As(err).Message, "visitor broke it") {
		t.Fatalf("the thrown text reached the visitor: %q", fault.As(err).Message)
	}
	_, err = get(t, id, "https://example.com/plain")
	wantFault(t, err, fault.BadResponse, "The fetch handle answered with a value that is not a Response.")
	res, err := get(t, id, "https://example.com/")
	if err != nil || !strings.Contains(string(res.BodyBytes()), `"served":6`) {
		t.Fatalf("after a throw the handle answered %v %s", err, res.BodyBytes())
	}
	handleLogsMu.Lock()
	logs := handleLogs[id]
	handleLogsMu.Unlock()
	var msgs []string
	for _, l := range logs {
		msgs = append(msgs, l.Level+":"+l.Message)
	}
	joined := strings.Join(msgs, "|")
	if !strings.Contains(joined, "log:served 1") || !strings.Contains(joined, "error:Uncaught Error: visitor broke it") {
		t.Fatalf("handle log %q", joined)
	}
	_, err = engine(t).Invoke(context.Background(), id, "scheduled", program.NewWireRequest("GET", "https://example.com/", nil, nil))
	wantFault(t, err, fault.NoSuchHandle, `Execution "`+id+`" has no handle named "scheduled". The granted handles are: fetch.`)
	if err := engine(t).Close(id); err != nil {
		t.Fatal(err)
	}
	_, err = get(t, id, "https://example.com/")
	wantFault(t, err, fault.HandlesClosed, fault.Closed(id).Message)
	_, err = get(t, id+"-invented", "https://example.com/")
	if fault.As(err).Message != fault.Closed(id+"-invented").Message {
		t.Fatalf("invented id answered %v", err)
	}
}

func TestHandlerForms(t *testing.T) {
	e := engine(t)
	// The Workers module form deploys unchanged.
	out, err := e.Run(context.Background(), program.Job{ID: "workers-form", RetainHandles: true, Env: map[string]string{"GREETING": "hej"}, Program: program.Program{
		Code: "export default {\n  async fetch(request, env, ctx) {\n    return new Response(env.GREETING + ' ' + request.method);\n  }\n};",
	}})
	if err != nil || !out.Retained {
		t.Fatalf("workers module: %+v %v", out, err)
	}
	res, err := e.Invoke(context.Background(), "workers-form", "fetch", program.NewWireRequest("POST", "https://x.test/", nil, []byte("body")))
	if err != nil || string(res.BodyBytes()) != "hej POST" {
		t.Fatalf("workers module answered %v %q", err, res.BodyBytes())
	}
	e.Close("workers-form")
	// Module-level state lives as long as the isolate.
	if _, err := e.Run(context.Background(), program.Job{ID: "module-state", RetainHandles: true, Program: program.Program{
		Code: "let served = 0;\nexport default { async fetch() { return Response.json({served: ++served}); } }",
	}}); err != nil {
		t.Fatal(err)
	}
	for i := 1; i <= 2; i++ {
		res, err := e.Invoke(context.Background(), "module-state", "fetch", program.NewWireRequest("GET", "https://x.test/", nil, nil))
		if err != nil || string(res.BodyBytes()) != fmt.Sprintf(`{"served":%d}`, i) {
			t.Fatalf("module state: %v %s", err, res.BodyBytes())
		}
	}
	e.Close("module-state")
	// A plain function is a handler too.
	id := deploy(t, "async () => async (req) => Response.json({ok: true})")
	res, err = get(t, id, "https://x.test/")
	if err != nil || string(res.BodyBytes()) != `{"ok":true}` {
		t.Fatalf("function handler answered %v %q", err, res.BodyBytes())
	}
	e.Close(id)
	// A handler answered without retainHandles is disposed; nothing comes back.
	out, err = run(t, "async () => ({ fetch() {} })")
	if err != nil || out.Retained || !out.Handler || out.Result != nil {
		t.Fatalf("unretained handler answered %+v %v", out, err)
	}
}

func TestHandlerTimeoutDisposesIsolate(t *testing.T) {
	id := deploy(t, `async () => { let n = 0; return { fetch(req) { n++; if (req.url.endsWith('/spin')) for(;;){} return new Response(String(n)) } } }`)
	if res, err := get(t, id, "https://x.test/"); err != nil || string(res.BodyBytes()) != "1" {
		t.Fatalf("first call: %v", err)
	}
	_, err := get(t, id, "https://x.test/spin")
	wantFault(t, err, fault.Timeout, "Execution timed out at its 200 ms bound.")
	_, err = get(t, id, "https://x.test/")
	wantFault(t, err, fault.HandlesClosed, "")
}

// An isolate has one watchdog timer for all its activities (visitor.go,
// arm), stopped while the isolate waits for work (idle). A spin asked 150
// ms after an invocation, and a spin queued behind an invocation that
// works 150 ms (the timer set for that one fires while the spin runs, and
// must move to the spin's own deadline, not end it), each run to their
// own 200 ms bound, blamed on the program; the bystander in the same
// engine still answers.
func TestAnEarlierInvocationsTimerDoesNotCutTheNext(t *testing.T) {
	bystander := deploy(t, `async () => { let n = 0; return { fetch() { return new Response(String(++n)) } } }`)
	defer engine(t).Close(bystander)
	code := `async () => ({ fetch(req) {
		if (req.url.endsWith('/spin')) for(;;){}
		if (req.url.endsWith('/work')) { const t = Date.now(); while (Date.now() - t < 150) {} }
		return new Response('ok') } })`
	for round := 0; round < 4; round++ {
		id := deploy(t, code)
		if res, err := get(t, id, "https://x.test/"); err != nil || string(res.BodyBytes()) != "ok" {
			t.Fatalf("before the spin: %v", err)
		}
		least := 195 * time.Millisecond
		var start time.Time
		if round%2 == 0 {
			time.Sleep(150 * time.Millisecond)
			start = time.Now()
		} else {
			// The spin waits behind 150 ms of work asked for just before
			// it: the spin cannot end before 350 ms after the work was
			// asked for, whereas the work's own timer would end it 200 ms
			// after. Measured from the work's ask, not the spin's: the
			// pause between the two asks is the machine's to stretch.
			start = time.Now()
			worked := make(chan error, 1)
			go func() { _, err := get(t, id, "https://x.test/work"); worked <- err }()
			time.Sleep(20 * time.Millisecond)
			least = 325 * time.Millisecond
			defer func() {
				if err := <-worked; err != nil {
					t.Errorf("the work before the spin: %v", err)
				}
			}()
		}
		_, err := get(t, id, "https://x.test/spin")
		took := time.Since(start)
		wantFault(t, err, fault.Timeout, "200 ms")
		if took < least {
			t.Fatalf("round %d: the spin was ended %v after it (or the work before it) was asked for, before its 200 ms bound (at least %v): an earlier invocation's timer ended it", round, took, least)
		}
		res, err := get(t, bystander, "https://x.test/")
		if err != nil || string(res.BodyBytes()) != strconv.Itoa(round+1) {
			t.Fatalf("round %d: the bystander answered %v %q", round, err, res.BodyBytes())
		}
	}
}

func TestRetainedInterval(t *testing.T) {
	id := deploy(t, `async () => { let ticks = 0; setInterval(() => { ticks++ }, 5);
		return { fetch(req) {
			if (req.url.endsWith('/spin')) { setTimeout(() => { for(;;){} }, 1); }
			return new Response(String(ticks));
		} } }`)
	time.Sleep(100 * time.Millisecond)
	res, err := get(t, id, "https://x.test/")
	if err != nil {
		t.Fatal(err)
	}
	var ticks int
	fmt.Sscan(string(res.BodyBytes()), &ticks)
	if ticks < 3 {
		t.Fatalf("the interval ran %d times in 100ms between invocations", ticks)
	}
	// A timer callback that never ends is stopped at the bound and the
	// isolate is reported lost.
	if _, err := get(t, id, "https://x.test/spin"); err != nil {
		t.Fatal(err)
	}
	waitfor.Within(30*time.Second, func() bool {
		lostMu.Lock()
		defer lostMu.Unlock()
		err = lost[id]
		return err != nil
	})
	wantFault(t, err, fault.Timeout, "200 ms")
	_, err = get(t, id, "https://x.test/")
	wantFault(t, err, fault.HandlesClosed, "")
}

func TestSerialInvocationsInOrder(t *testing.T) {
	id := deploy(t, `async () => { const seen = []; return { async fetch(req) {
		await new Promise(r => setTimeout(r, 1));
		seen.push(req.url); return Response.json(seen) } } }`)
	defer engine(t).Close(id)
	var wg sync.WaitGroup
	for i := 0; i < 20; i++ {
		wg.Add(1)
		go func(i int) {
			defer wg.Done()
			if _, err := get(t, id, fmt.Sprintf("https://x.test/%d", i)); err != nil {
				t.Error(err)
			}
		}(i)
	}
	wg.Wait()
	res, err := get(t, id, "https://x.test/last")
	if err != nil {
		t.Fatal(err)
	}
	if n := strings.Count(string(res.BodyBytes()), "https://"); n != 21 {
		t.Fatalf("handler saw %d requests, want 21 (interleaving would lose some)", n)
	}
}

func TestNoStateBetweenRuns(t *testing.T) {
	mustRun(t, `async () => { globalThis.leak = 'secret'; Array.prototype.evil = 1; Response.prototype.x = 2; return 1 }`)
	for i := 0; i < 4; i++ { // more than the prewarmed isolates
		out := mustRun(t, `async () => [typeof globalThis.leak, typeof [].evil, typeof Response.prototype.x]`)
		if string(out.Result) != `["undefined","undefined","undefined"]` {
			t.Fatalf("state crossed runs: %s", out.Result)
		}
	}
}

func TestRetainedValuesStayFlat(t *testing.T) {
	id := deploy(t, `async () => ({ fetch(req) { return new Response('ok') } })`)
	defer engine(t).Close(id)
	count := func() int {
		m := engine(t).handles[id]
		ch := make(chan int, 1)
		m.submit(func() { ch <- m.ctx.RetainedValueCount() })
		return <-ch
	}
	for i := 0; i < 100; i++ {
		get(t, id, "https://x.test/")
	}
	before := count()
	for i := 0; i < 2000; i++ {
		if _, err := get(t, id, "https://x.test/"); err != nil {
			t.Fatal(err)
		}
	}
	if after := count(); after > before {
		t.Fatalf("retained values grew from %d to %d over 2000 invocations", before, after)
	}
}

var _ = errors.New

// Runs racing the engine's shutdown each get an answer, and none runs in
// an isolate the shutdown disposed (a job the final drain ran used to
// execute on it).
func TestRunsRacingShutdownAnswer(t *testing.T) {
	for round := 0; round < 5; round++ {
		e := New(Config{Prewarm: 2})
		var wg sync.WaitGroup
		for i := 0; i < 8; i++ {
			wg.Add(1)
			go func() {
				defer wg.Done()
				e.Run(context.Background(), program.Job{Program: program.Program{Code: "async () => 1 + 1"}})
			}()
		}
		e.Shutdown()
		done := make(chan struct{})
		go func() { wg.Wait(); close(done) }()
		select {
		case <-done:
		case <-time.After(30 * time.Second):
			t.Fatal("a run racing the shutdown never answered")
		}
	}
}
