package sandbox

import (
	"context"
	"encoding/json"
	"errors"
	"sync"
	"time"

	v8 "rogchap.com/v8go"

	"github.com/retainer-gw/retainer/budgets"
	"github.com/retainer-gw/retainer/fault"
	"github.com/retainer-gw/retainer/program"
)

// HostCall is how a program reaches anything outside its isolate (kv,
// outbound fetch, provider tools): the runtime calls host.call(op, args),
// the engine hands it to Config.HostCall off the isolate's goroutine, and
// the answer settles a promise on the next turn of the event loop. The
// engine grants nothing itself: whoever implements HostCall checks every
// call against the run's grants (in the product, the gateway does, on the
// other side of the worker boundary).
type HostCall func(ctx context.Context, runID, op string, args json.RawMessage) (json.RawMessage, error)

// hostCompletion is a finished host call waiting for the loop.
type hostCompletion struct {
	activity uint64
	id       int32
	result   json.RawMessage
	err      error
	visitor  bool // a body.read: the wait was the visitor's (visitor.go)
}

// hostCalls are an isolate's host calls: the calls in flight, the answers
// waiting for the loop, and the activity they belong to. mu guards done
// (written by the goroutines that run calls); the rest is loop-owned. What
// it is given (init): the engine's HostCall and HostCallNow and its
// request body bound, and two hooks back to the isolate: wake wakes the
// loop when an answer arrived, deliver settles a call's promise in the
// runtime.
type hostCalls struct {
	call        HostCall
	callNow     func(runID, op string, args json.RawMessage, due func() time.Time) (json.RawMessage, bool)
	requestBody int
	wake        func()
	deliver     func(id int32, ok bool, payload, code string) error
	// due answers when the current activity's bound ends (zero: none):
	// each call carries it (program.WithDue). dueNow is dueAt, made once
	// (a method value passed on each call would be allocated each time).
	due    func() time.Time
	dueNow func() time.Time

	mu      sync.Mutex
	done    []hostCompletion
	pending int
	cancel  context.CancelFunc
	ctx     context.Context
	// activity tags the calls: answers of another activity are dropped
	// (an activity is a bounded run, or a busy period).
	activity uint64
	// visitors counts the body reads in flight: a wait then is the
	// visitor's time (visitor.go).
	visitors int
	runID    string // whose grants the calls use: the job's id or the handle's
}

func (h *hostCalls) init(cfg *Config, wake func(), deliver func(id int32, ok bool, payload, code string) error) {
	h.call, h.callNow, h.requestBody = cfg.HostCall, cfg.HostCallNow, cfg.Limits.RequestBody
	h.wake, h.deliver = wake, deliver
	h.dueNow = h.dueAt
}

// reading answers whether a body read is in flight: a wait of the loop's is
// then the visitor's time (visitor.go).
func (h *hostCalls) reading() bool { return h.visitors > 0 }

// inFlight is how many calls have not been settled.
func (h *hostCalls) inFlight() int { return h.pending }

// now is host.now(op, argsJSON): the answer of a host call that can be
// answered at once (HostCallNow: a worker's kv cache), as JSON text, or
// false when the call must go to the host. The program's await then needs
// no trip through the event loop's host-call machinery.
func (h *hostCalls) now(args []*v8.Value) (json.RawMessage, bool) {
	now := h.callNow
	if now == nil || len(args) < 2 {
		return nil, false
	}
	op, raw := args[0].String(), json.RawMessage(args[1].String())
	if limit, _ := hostArgsBound(op, h.requestBody); len(raw) > limit {
		return nil, false // host.call refuses it with its message
	}
	return now(h.runID, op, raw, h.dueNow)
}

// dueAt answers when the current activity's bound ends (zero: none).
func (h *hostCalls) dueAt() time.Time {
	if h.due == nil {
		return time.Time{}
	}
	return h.due()
}

// start is host.call(op, argsJSON, id): it starts the call and returns at
// once.
func (h *hostCalls) start(args []*v8.Value) error {
	if len(args) < 3 {
		return errors.New("call needs an op, arguments and an id")
	}
	hc := h.call
	if hc == nil {
		return errors.New("this engine reaches no host services")
	}
	if h.pending >= budgets.HostCallsPerIsolate {
		return errors.New("too many host calls in flight")
	}
	op, raw, id := args[0].String(), json.RawMessage(args[1].String()), args[2].Int32()
	// Measured where built: the arguments cross as they are (wirejson
	// escapes nothing JSON.stringify did not).
	if limit, msg := hostArgsBound(op, h.requestBody); len(raw) > limit {
		return errors.New(msg)
	}
	activity := h.activity
	runID := h.runID
	h.pending++
	if now := h.callNow; now != nil {
		if res, ok := now(runID, op, raw, h.dueNow); ok {
			// Settled on the loop's next turn, like any answer, but with
			// no goroutine and no wake-up in between.
			h.mu.Lock()
			h.done = append(h.done, hostCompletion{activity: activity, id: id, result: res})
			h.mu.Unlock()
			h.wake()
			return nil
		}
	}
	visitor := VisitorOp(op)
	if visitor {
		h.visitors++
	}
	ctx := h.scope()
	if h.due != nil {
		if due := h.due(); !due.IsZero() {
			ctx = program.WithDue(ctx, due)
		}
	}
	go func() {
		res, err := safeHostCall(hc, ctx, runID, op, raw)
		h.mu.Lock()
		h.done = append(h.done, hostCompletion{activity: activity, id: id, result: res, err: err, visitor: visitor})
		h.mu.Unlock()
		h.wake()
	}()
	return nil
}

func safeHostCall(hc HostCall, ctx context.Context, runID, op string, raw json.RawMessage) (res json.RawMessage, err error) {
	defer func() {
		if r := recover(); r != nil {
			err = errors.New("the host call failed")
		}
	}()
	return hc(ctx, runID, op, raw)
}

// settle delivers finished calls of the current activity into the isolate
// (calls of an ended activity are dropped) and says whether it delivered
// any.
func (h *hostCalls) settle() (bool, error) {
	h.mu.Lock()
	done := h.done
	h.done = nil
	h.mu.Unlock()
	delivered := false
	for _, c := range done {
		h.pending--
		if c.visitor {
			h.visitors--
		}
		if c.activity != h.activity {
			continue
		}
		ok, payload, code := true, string(c.result), ""
		if c.err != nil {
			ok, payload, code = false, fault.As(c.err).Message, string(fault.As(c.err).Code)
			if f := (*fault.Fault)(nil); errors.As(c.err, &f) && f.Code == fault.Internal {
				payload = c.err.Error()
			}
		}
		if payload == "" && ok {
			payload = "null"
		}
		if err := h.deliver(c.id, ok, payload, code); err != nil {
			return delivered, err
		}
		delivered = true
	}
	return delivered, nil
}

// beginScope gives activity its own context for host calls, so that calls
// still in flight when it ends are cancelled. The context is made by the
// activity's first call that leaves the loop (start): most invocations
// make none, and two allocations an invocation were for nothing.
//
// The scope ends with its activity (endScope), not at a fixed time: the
// activity's bound may move with the visitor's time (visitor.go).
func (h *hostCalls) beginScope(activity uint64) {
	h.activity = activity
	h.ctx, h.cancel = nil, nil
}

// scope is the current activity's context for host calls, made by its
// first; outside an activity it is one already cancelled, as an ended
// activity's is.
func (h *hostCalls) scope() context.Context {
	if h.activity == 0 {
		return endedScope
	}
	if h.ctx == nil {
		h.ctx, h.cancel = context.WithCancel(context.Background())
	}
	return h.ctx
}

var endedScope = func() context.Context {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	return ctx
}()

// endScope cancels the calls of the activity that ends.
func (h *hostCalls) endScope() {
	if h.cancel != nil {
		h.cancel()
	}
	h.ctx, h.cancel = nil, nil
	h.activity = 0
}
