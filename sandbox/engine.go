package sandbox

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"runtime"
	"strings"
	"sync"
	"time"

	v8 "rogchap.com/v8go"

	"github.com/retainer-gw/retainer/budgets"
	"github.com/retainer-gw/retainer/fault"
	"github.com/retainer-gw/retainer/internal/wirejson"
	"github.com/retainer-gw/retainer/program"
	"github.com/retainer-gw/retainer/sandbox/webapi/websocket"
)

// Config sets an Engine's defaults and hooks. Zero values take the defaults
// of README.md, Caddyfile.
type Config struct {
	// Prewarm is how many fresh isolates with the default memory bound are
	// kept ready for computations. Default 0 (none).
	Prewarm int
	// Limits are the default run bounds (timeout, heap), a handler's
	// response body, an outbound fetch's request body and a handle's queue;
	// zero fields take their defaults (budgets.Limits).
	Limits budgets.Limits
	// JIT lets V8 compile to machine code; off, V8 runs --jitless.
	JIT bool
	// Wasm exposes WebAssembly (needs JIT).
	Wasm bool
	// CompiledRuntime makes isolates compile and install the runtime from
	// its bundle instead of restoring it from the process's startup
	// snapshot (snapshot.go), as they do anyway when the snapshot could not
	// be made. For tests and measurements of that path.
	CompiledRuntime bool
	// OnLog receives console output of a retained handler after its
	// deploying run, with the handle's id.
	OnLog func(handleID string, e LogEntry)
	// OnLost is told when a retained isolate ends on its own (a timer
	// callback hit a bound), with the fault.
	OnLost func(handleID string, err error)
	// HostCall serves the program's requests for kv, fetch and provider
	// tools. Without it, those requests fail.
	HostCall HostCall
	// HostCallNow, when set, may answer a host call at once, on the
	// isolate's goroutine (a worker's kv read cache): ok false sends the
	// call to HostCall as usual. It must not block.
	HostCallNow func(runID, op string, args json.RawMessage) (res json.RawMessage, ok bool)
}

func (c *Config) defaults() {
	c.Limits = c.Limits.WithDefaults()
}

// Job, Bindings and Outcome are the program package's: a run's request
// and answer, which the gateway names without linking V8.
type (
	Job      = program.Job
	Bindings = program.Bindings
	Outcome  = program.Outcome
)

// Engine runs programs in V8 isolates inside the current process. It owns
// the prewarmed isolates and the retained ones. Safe for concurrent use.
type Engine struct {
	cfg     Config
	closing chan struct{}
	once    sync.Once

	warm chan *vm

	mu      sync.Mutex // guards handles
	handles map[string]*vm
}

var processFlagsOnce sync.Once

// New starts an engine. The V8 flags that are process-wide (--jitless,
// WebAssembly) are fixed by the first engine of the process.
func New(cfg Config) *Engine {
	cfg.defaults()
	processFlagsOnce.Do(func() {
		flags := []string{}
		if !cfg.JIT {
			flags = append(flags, "--jitless")
		}
		if !cfg.Wasm {
			flags = append(flags, "--no-expose-wasm")
		}
		flags = append(flags, fmt.Sprintf("--max-semi-space-size=%d", semiSpaceMiB))
		if len(flags) > 0 {
			v8.SetFlags(flags...)
		}
	})
	makeProcessSnapshot()
	e := &Engine{
		cfg:     cfg,
		closing: make(chan struct{}),
		handles: map[string]*vm{},
		warm:    make(chan *vm, cfg.Prewarm),
	}
	if cfg.Prewarm > 0 {
		// Two refillers when the pool holds two or more: making an
		// isolate takes ~3.5 ms of CPU, so one refiller kept up with
		// fewer than ~280 runs a second, and back to back on one
		// connection the pool ran dry and runs made their isolates on
		// their own path. With two, p50 fell in each of 11 interleaved
		// rounds, and p99 rose (docs/history/performance-log.md, round 7).
		for i := 0; i < min(cfg.Prewarm, 2); i++ {
			go e.prewarm()
		}
	}
	return e
}

// prewarm keeps the warm channel full. Each warm isolate serves exactly one
// run, so no state passes from one run to the next.
func (e *Engine) prewarm() {
	for {
		m, err := newVM(e, e.cfg.Limits.MemoryMiB, true)
		if err != nil {
			select {
			case <-e.closing:
				return
			case <-time.After(100 * time.Millisecond):
				continue
			}
		}
		select {
		case e.warm <- m:
			continue
		default:
		}
		// The pool was full: the space this push waited for was made by
		// a run taking an isolate, whose answer is still on its way. The
		// next isolate is made refillDelay later, so that the making
		// (~3.5 ms of CPU) does not take a core from that answer on a
		// two-core machine. Paired slices at the default prewarm 2, one
		// connection (docs/history/performance-log.md, round 9): p50 20 ms apart
		// 2.39 -> 2.08 ms (8 of 8), back to back 1.59 -> 1.41 ms (7 of
		// 8); 3 ms against 1.5 ms was within noise. A pool that is not
		// full is refilled at once.
		select {
		case e.warm <- m:
		case <-e.closing:
			m.submit(func() { m.kill() })
			return
		}
		select {
		case <-time.After(refillDelay):
		case <-e.closing:
			return
		}
	}
}

// refillDelay is how long the refill of a full pool waits after a run took
// from it (prewarm).
const refillDelay = 1500 * time.Microsecond

func (e *Engine) isolateFor(memoryMiB int) (*vm, error) {
	if memoryMiB == e.cfg.Limits.MemoryMiB {
		select {
		case m := <-e.warm:
			return m, nil
		default:
		}
	}
	return newVM(e, memoryMiB, false)
}

// Run runs a program once in a fresh isolate. A program that answers a
// request handler with job.RetainHandles keeps its isolate under job.ID.
// Failures are *fault.Fault values; the outcome carries the logs either way.
func (e *Engine) Run(ctx context.Context, job Job) (Outcome, error) {
	out := Outcome{Logs: []string{}}
	c, err := compile(job.Program)
	if err != nil {
		return out, err
	}
	if job.Timeout <= 0 {
		job.Timeout = e.cfg.Limits.Timeout
	}
	if job.MemoryMiB <= 0 {
		job.MemoryMiB = e.cfg.Limits.MemoryMiB
	}
	envJSON := []byte("{}")
	if job.Env != nil {
		envJSON, _ = json.Marshal(job.Env)
	}
	if job.RetainHandles && job.ID == "" {
		return out, fault.New(fault.BadRequest, "a retained run needs an execution id")
	}
	m, err := e.isolateFor(job.MemoryMiB)
	if err != nil {
		return out, fault.Wrap(fault.Internal, err, "Internal error.")
	}
	type reply struct {
		out Outcome
		err error
	}
	ch := make(chan reply, 1)
	token := new(runTicket)
	stop := m.watch.cancelOnDone(ctx, token)
	defer stop()
	// Every job submit accepts runs, on the loop or in the final drain
	// after disposal (vm.submit), so the answer always comes; a job that
	// finds the isolate already dead (the engine closing) must not touch it.
	if err := m.submit(func() {
		if m.dead {
			ch <- reply{out, m.goneErr()}
			return
		}
		m.watch.beginRun(token)
		o, err := m.execute(job, c, string(envJSON))
		m.watch.endRun()
		ch <- reply{o, err}
		if m.dead {
			m.yieldBeforeDispose()
		}
	}); err != nil {
		return out, err
	}
	r := <-ch
	if r.out.Retained {
		e.mu.Lock()
		e.handles[job.ID] = m
		e.mu.Unlock()
	}
	return r.out, r.err
}

// yieldBeforeDispose lets the goroutine an answer just woke run before the
// loop disposes of the isolate. The woken goroutine waits on this P (Go
// readies it there), and disposal is one long cgo call: with the other P
// busy too (creating the next prewarmed isolate), it waited until sysmon
// took the P back, up to 10 ms later (measured: the answer of a
// computation reached its caller 0.3-3.2 ms after it was ready). Unpinned,
// Gosched runs the woken goroutine on this thread at once, and the loop
// goes on right after it. (The teardown itself now runs teardownDelay
// later, off the loop: vm.go; the loop's own end is short, but the answer
// still goes first.)
func (m *vm) yieldBeforeDispose() {
	m.hold.drop()
	runtime.Gosched()
}

// execute is the run itself, on the isolate's loop.
func (m *vm) execute(job Job, c compiled, envJSON string) (Outcome, error) {
	logs := &logBuffer{}
	m.sink = func(level, msg string) { logs.add(level, msg) }
	m.timeout = job.Timeout
	m.host.runID = job.ID
	out := Outcome{}
	bindings, _ := json.Marshal(job.Bindings)
	err := m.bounded(job.Timeout, func(deadline time.Time) error {
		g, err := m.call(m.js.setGrants, string(bindings))
		if err != nil {
			return fault.Wrap(fault.Internal, err, "Internal error.")
		}
		g.Release()
		if js := c.where.runtimeJSON(); js != "" {
			v, err := m.call(m.js.setSource, js)
			if err != nil {
				return fault.Wrap(fault.Internal, err, "Internal error.")
			}
			v.Release()
		}
		fnVal, err := m.ctx.RunScript(c.source, entryName)
		m.releaseReturned()
		if bound := m.boundHit(); bound != nil {
			return bound
		}
		if err != nil {
			return scriptFault(err, c.where)
		}
		defer fnVal.Release()
		p, err := m.call(m.js.runProgram, fnVal, c.module)
		if bound := m.boundHit(); bound != nil {
			return bound
		}
		if err != nil {
			return fault.New(fault.Runtime, "%s", jsErrorMessage(err))
		}
		defer p.Release()
		res, err := m.settle(p, deadline)
		if err != nil {
			if f := (*fault.Fault)(nil); errors.As(err, &f) {
				return err
			}
			return fault.New(fault.Runtime, "%s", jsErrorMessage(err))
		}
		defer res.Release()
		s := res.String()
		switch {
		case s == "H" || s == "HS":
			out.Handler = true
			out.Scheduled = s == "HS"
		case strings.HasPrefix(s, "J"):
			if len(s)-1 > budgets.ResultBytes {
				// JSON.stringify escapes nothing that wirejson grows, so
				// this is the size that would cross.
				return fault.New(fault.Runtime, "The result is larger than its %d MiB bound.", budgets.ResultBytes>>20)
			}
			out.Result = json.RawMessage(s[1:])
		}
		if out.Handler && job.RetainHandles {
			env, err := m.call(m.js.setEnv, envJSON)
			if err != nil {
				return fault.New(fault.Runtime, "%s", jsErrorMessage(err))
			}
			env.Release()
		}
		return nil
	})
	out.CPUNs = max(m.hold.mark()-m.activityCPU, 0)
	out.Logs = logs.lines()
	if err != nil || !out.Handler || !job.RetainHandles {
		m.kill()
		return out, err
	}
	// Retained: later console output goes to the handle's log.
	m.handleID = job.ID
	m.conc = job.Concurrency
	onLog := m.eng.cfg.OnLog
	// Timer callbacks and waitUntil work log within the bound of their own
	// activity (m.activityLogs, reset by bounded).
	m.sink = func(level, msg string) {
		if onLog != nil && m.activityLogs.add(level, msg) {
			onLog(job.ID, m.activityLogs.entries[len(m.activityLogs.entries)-1])
		}
	}
	out.Retained = true
	return out, nil
}

func scriptFault(err error, where positions) error {
	var je *v8.JSError
	if errors.As(err, &je) && strings.HasPrefix(je.Message, "SyntaxError") {
		msg := je.Message
		if je.Location != "" {
			msg += " (" + where.location(je.Location) + ")"
		}
		return fault.New(fault.Syntax, "%s", msg)
	}
	return fault.New(fault.Runtime, "%s", jsErrorMessage(err))
}

// Invoke calls the retained handler id's handle name with a wire request.
// Invocations of one handle run one at a time in arrival order; a bound hit
// disposes the isolate and answers the bound's fault.
func (e *Engine) Invoke(ctx context.Context, id, name string, req WireRequest) (WireResponse, error) {
	res, logs, err := e.InvokeWithLogs(ctx, id, name, req)
	if e.cfg.OnLog != nil {
		for _, l := range logs {
			e.cfg.OnLog(id, l)
		}
	}
	return res, err
}

// InvokeWithLogs is Invoke that answers the console output of the
// invocation instead of sending it to OnLog, so that a caller across a
// process boundary can record it before it answers (a log read right after
// a response then holds that response's lines).
func (e *Engine) InvokeWithLogs(_ context.Context, id, name string, req WireRequest) (WireResponse, []LogEntry, error) {
	type reply struct {
		res  WireResponse
		logs []LogEntry
		err  error
	}
	ch := make(chan reply, 1)
	e.InvokeAsync(id, name, req, func(res WireResponse, logs []LogEntry, err error) {
		ch <- reply{res, logs, err}
	})
	r := <-ch
	return r.res, r.logs, r.err
}

// InvokeAsync queues one invocation of the retained handler id and returns
// at once. done is called exactly once with the answer and the
// invocation's console output: on the isolate's loop (so it must not
// block), or, for a call that fails before it is queued, on the caller's
// goroutine before InvokeAsync returns. Calls made one after another from
// one goroutine run in that order: the worker's read loop queues each
// frame as it arrives, which keeps a handle's arrival order (docs/architecture.md)
// without a goroutine, or a turn, per invocation.
func (e *Engine) InvokeAsync(id, name string, req WireRequest, done func(WireResponse, []LogEntry, error)) {
	e.mu.Lock()
	m := e.handles[id]
	e.mu.Unlock()
	if m == nil {
		done(WireResponse{}, nil, fault.Closed(id))
		return
	}
	if name != "fetch" && (name != SocketEvent || !websocket.IsEventURL(req.URL)) && (name != ScheduledEvent || !program.IsScheduledURL(req.URL)) {
		done(WireResponse{}, nil, fault.UnknownHandle(id, name))
		return
	}
	decoded, err := validateRequest(req)
	if err != nil {
		done(WireResponse{}, nil, err)
		return
	}
	// The body crosses separately (see js/runtime/22-entry-points.js): as its text when it
	// is UTF-8 (v8go makes the string from UTF-8), else as a Latin-1
	// string, a character a byte; requestLines says which.
	var body any // nil: no body
	kind := bodyKind(req)
	if req.Body != nil {
		if kind == bodyText {
			body = string(decoded)
		} else {
			body = wirejson.Latin1(decoded)
		}
	}
	raw := requestLines(req, kind)
	if name == SocketEvent || name == ScheduledEvent {
		raw = socketEventLines(raw)
	}
	var job func()
	if m.conc > 1 {
		job = func() { m.startConcurrent(raw, body, done) }
	} else {
		job = func() {
			collected := &logBuffer{}
			saved := m.sink
			replied := false
			m.sink = func(level, msg string) {
				if replied {
					// waitUntil work after the answer logs the usual way.
					saved(level, msg)
				} else {
					collected.add(level, msg)
				}
			}
			m.serve(raw, body, func(res WireResponse, err error) {
				replied = true
				// The isolate's CPU since the invocation began (its
				// activity, bounds.go), to its answer (docs/usage.md).
				res.CPUNs = max(m.hold.mark()-m.activityCPU, 0)
				done(res, collected.logEntries(), err)
			})
			m.sink = saved
		}
	}
	if err := m.submit(job); err != nil {
		done(WireResponse{}, nil, err)
	}
}

// Queued answers how many calls wait in the queue of the retained handle
// id, behind the one its isolate is running: called from an invocation's
// done, a number above 0 means more answers of this handle are right
// behind (the worker then lets this answer wait for theirs, rpc.go). A
// handle that serves invocations concurrently answers 0: its next answer
// may be an upstream's round trip away.
func (e *Engine) Queued(id string) int {
	e.mu.Lock()
	m := e.handles[id]
	e.mu.Unlock()
	if m == nil || m.conc > 1 {
		return 0
	}
	return m.queue.waiting()
}

// forget drops id from the retained set if it still names m.
func (e *Engine) forget(id string, m *vm) {
	e.mu.Lock()
	if e.handles[id] == m {
		delete(e.handles, id)
	}
	e.mu.Unlock()
}

// serve runs one invocation on the loop. The answer is sent as soon as the
// response settles; ctx.waitUntil work keeps running within the same bound.
func (m *vm) serve(wire string, body any, respond func(WireResponse, error)) {
	if m.dead {
		m.activityCPU = m.hold.mark() // nothing to charge (docs/usage.md)
		respond(WireResponse{}, m.goneErr())
		return
	}
	responded := false
	err := m.bounded(m.timeout, func(deadline time.Time) error {
		bodyArg := any(v8.Null(m.iso))
		if body != nil {
			bodyArg = body
		}
		p, err := m.call(m.js.invoke, wire, bodyArg)
		if bound := m.boundHit(); bound != nil {
			return bound
		}
		if err != nil {
			return m.handlerFault(err)
		}
		defer p.Release()
		v, err := m.settle(p, deadline)
		if err != nil {
			if f := (*fault.Fault)(nil); errors.As(err, &f) {
				return err
			}
			return m.handlerFault(err)
		}
		s := v.String()
		v.Release()
		// "R": a response; "W": a response with ctx.waitUntil work pending.
		if s == "" || s[0] != 'R' && s[0] != 'W' {
			return fault.NotAResponse()
		}
		res, err := parseWireResponse(s[1:], m.eng.cfg.Limits.ResponseBody)
		if err != nil {
			if res.Stream != 0 {
				m.streams.drop(res.Stream)
			}
			return err
		}
		if err := m.streams.refusedAnswer(res.Stream); err != nil {
			return err
		}
		// The visitor gets the response now; waitUntil work goes on after
		// it, within the same bound, before the next invocation starts.
		respond(res, nil)
		responded = true
		if s[0] == 'W' {
			return m.drain(deadline)
		}
		return nil
	})
	if !responded {
		respond(WireResponse{}, err)
		return
	}
	if err != nil {
		// The response was sent; waitUntil work that failed only logs (a
		// bound hit still disposes the isolate, in bounded).
		m.sink("error", "waitUntil: "+jsErrorMessage(err))
	}
}

// handlerFault reports a thrown handler: the visitor gets a generic text,
// the thrown text goes to the handle's log.
func (m *vm) handlerFault(err error) error {
	msg := jsErrorMessage(err)
	m.sink("error", "Uncaught "+msg)
	return fault.Wrap(fault.HandlerError, errors.New(msg), "The handler threw an exception.")
}

// Close disposes the retained isolate id. It answers HANDLES_CLOSED for an
// id that holds nothing.
func (e *Engine) Close(id string) error {
	e.mu.Lock()
	m := e.handles[id]
	delete(e.handles, id)
	e.mu.Unlock()
	if m == nil {
		return fault.Closed(id)
	}
	if err := m.submit(func() { m.kill() }); err != nil && !errors.Is(err, fault.ErrHandlesClosed) {
		// Queue full: the isolate dies after the jobs ahead of the close.
		go m.queue.pushWhenRoom(func() { m.kill() }, m.done)
	}
	return nil
}

// Shutdown disposes every isolate and stops prewarming.
func (e *Engine) Shutdown() {
	e.once.Do(func() { close(e.closing) })
	e.mu.Lock()
	vms := make([]*vm, 0, len(e.handles))
	for _, m := range e.handles {
		vms = append(vms, m)
	}
	e.handles = map[string]*vm{}
	e.mu.Unlock()
	for _, m := range vms {
		<-m.done
	}
	for {
		select {
		case m := <-e.warm:
			<-m.done
		default:
			return
		}
	}
}
