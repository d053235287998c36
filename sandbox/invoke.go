package sandbox

import (
	"context"
	"errors"
	"time"

	v8 "rogchap.com/v8go"

	"github.com/retainer-gw/retainer/fault"
	"github.com/retainer-gw/retainer/internal/wirejson"
	"github.com/retainer-gw/retainer/program"
	"github.com/retainer-gw/retainer/sandbox/webapi/websocket"
)

// An invocation of a retained handler (Engine.Invoke and the rest): one
// at a time in arrival order (serve), or up to the handle's concurrency at
// once (concurrent.go).

// Invoke calls the retained handler id's handle name with a wire request.
// Invocations of one handle run one at a time in arrival order; a bound hit
// disposes the isolate and answers the bound's fault.
func (e *Engine) Invoke(ctx context.Context, id, name string, req program.WireRequest) (program.WireResponse, error) {
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
func (e *Engine) InvokeWithLogs(_ context.Context, id, name string, req program.WireRequest) (program.WireResponse, []program.LogEntry, error) {
	type reply struct {
		res  program.WireResponse
		logs []program.LogEntry
		err  error
	}
	ch := make(chan reply, 1)
	e.InvokeAsync(id, name, req, func(res program.WireResponse, logs []program.LogEntry, err error) {
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
func (e *Engine) InvokeAsync(id, name string, req program.WireRequest, done func(program.WireResponse, []program.LogEntry, error)) {
	e.mu.Lock()
	m := e.handles[id]
	e.mu.Unlock()
	if m == nil {
		done(program.WireResponse{}, nil, fault.Closed(id))
		return
	}
	if name != "fetch" && (name != program.SocketEvent || !websocket.IsEventURL(req.URL)) && (name != program.ScheduledEvent || !program.IsScheduledURL(req.URL)) {
		done(program.WireResponse{}, nil, fault.UnknownHandle(id, name))
		return
	}
	decoded, err := validateRequest(req)
	if err != nil {
		done(program.WireResponse{}, nil, err)
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
	if name == program.SocketEvent || name == program.ScheduledEvent {
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
			m.serve(raw, body, func(res program.WireResponse, err error) {
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
		done(program.WireResponse{}, nil, err)
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

// serve runs one invocation on the loop. The answer is sent as soon as the
// response settles; ctx.waitUntil work keeps running within the same bound.
func (m *vm) serve(wire string, body any, respond func(program.WireResponse, error)) {
	if m.dead {
		m.activityCPU = m.hold.mark() // nothing to charge (docs/usage.md)
		respond(program.WireResponse{}, m.goneErr())
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
		if v != p { // settle answers a value that is no promise as itself
			v.Release()
		}
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
		respond(program.WireResponse{}, err)
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

// ReadStream takes the next chunk of a streamed response of handle id,
// waiting up to wait for one. It answers the chunk (empty when none came in
// time), whether the stream ended, and the stream's error if it failed.
func (e *Engine) ReadStream(ctx context.Context, id string, stream int64, wait time.Duration) ([]byte, bool, error) {
	e.mu.Lock()
	m := e.handles[id]
	e.mu.Unlock()
	if m == nil {
		return nil, true, fault.Wrap(fault.HandlesClosed, ErrStreamGone, "The handle's isolate ended during its response stream.")
	}
	return m.streams.read(ctx, stream, wait, m.done)
}

// CancelStream gives a streamed response up (the visitor went away, or a
// bound ended it): the stream's cancel runs in the isolate.
func (e *Engine) CancelStream(id string, stream int64) {
	e.mu.Lock()
	m := e.handles[id]
	e.mu.Unlock()
	if m != nil {
		m.streams.drop(stream)
	}
}
