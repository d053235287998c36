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

// hostCalls is a vm's host-call state; mu guards done (written by the
// goroutines that run calls); the rest is loop-owned.
type hostCalls struct {
	mu      sync.Mutex
	done    []hostCompletion
	pending int
	cancel  context.CancelFunc
	ctx     context.Context
}

// hostNowFn is host.now(op, argsJSON): the answer of a host call that can
// be answered at once (HostCallNow: a worker's kv cache), as JSON text, or
// undefined when the call must go to the host. The program's await then
// needs no trip through the event loop's host-call machinery.
func (m *vm) hostNowFn(args []*v8.Value) (*v8.Value, error) {
	now := m.eng.cfg.HostCallNow
	if now == nil || len(args) < 2 {
		return nil, nil
	}
	op, raw := args[0].String(), json.RawMessage(args[1].String())
	if limit, _ := hostArgsBound(op, m.eng.cfg.Limits.RequestBody); len(raw) > limit {
		return nil, nil // host.call refuses it with its message
	}
	res, ok := now(m.runID, op, raw)
	if !ok {
		return nil, nil
	}
	return v8.NewValue(m.iso, string(res))
}

// hostCallFn is host.call(op, argsJSON, id): it starts the call and
// returns at once.
func (m *vm) hostCallFn(args []*v8.Value) (*v8.Value, error) {
	if len(args) < 3 {
		return nil, errors.New("call needs an op, arguments and an id")
	}
	hc := m.eng.cfg.HostCall
	if hc == nil {
		return nil, errors.New("this engine reaches no host services")
	}
	if m.host.pending >= budgets.HostCallsPerIsolate {
		return nil, errors.New("too many host calls in flight")
	}
	op, raw, id := args[0].String(), json.RawMessage(args[1].String()), args[2].Int32()
	// Measured where built: the arguments cross as they are (wirejson
	// escapes nothing JSON.stringify did not).
	if limit, msg := hostArgsBound(op, m.eng.cfg.Limits.RequestBody); len(raw) > limit {
		return nil, errors.New(msg)
	}
	activity := m.hostActivity
	runID := m.runID
	ctx := m.host.ctx
	m.host.pending++
	if now := m.eng.cfg.HostCallNow; now != nil {
		if res, ok := now(runID, op, raw); ok {
			// Settled on the loop's next turn, like any answer, but with
			// no goroutine and no wake-up in between.
			m.host.mu.Lock()
			m.host.done = append(m.host.done, hostCompletion{activity: activity, id: id, result: res})
			m.host.mu.Unlock()
			select {
			case m.wake <- struct{}{}:
			default:
			}
			return nil, nil
		}
	}
	visitor := VisitorOp(op)
	if visitor {
		m.visitor.pending++
	}
	go func() {
		res, err := safeHostCall(hc, ctx, runID, op, raw)
		m.host.mu.Lock()
		m.host.done = append(m.host.done, hostCompletion{activity: activity, id: id, result: res, err: err, visitor: visitor})
		m.host.mu.Unlock()
		select {
		case m.wake <- struct{}{}:
		default:
		}
	}()
	return nil, nil
}

func safeHostCall(hc HostCall, ctx context.Context, runID, op string, raw json.RawMessage) (res json.RawMessage, err error) {
	defer func() {
		if r := recover(); r != nil {
			err = errors.New("the host call failed")
		}
	}()
	return hc(ctx, runID, op, raw)
}

// settleHostCalls delivers finished calls of the current activity into the
// isolate (calls of an ended activity are dropped) and says whether it
// delivered any.
func (m *vm) settleHostCalls() (bool, error) {
	m.host.mu.Lock()
	done := m.host.done
	m.host.done = nil
	m.host.mu.Unlock()
	delivered := false
	for _, c := range done {
		m.host.pending--
		if c.visitor {
			m.visitor.pending--
		}
		if c.activity != m.hostActivity {
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
		v, err := m.call(m.settleHost, c.id, ok, payload, code)
		if bound := m.boundHit(); bound != nil {
			return delivered, bound
		}
		if err != nil {
			return delivered, err
		}
		v.Release()
		delivered = true
	}
	return delivered, nil
}

// beginHostScope gives an activity its own context for host calls, so that
// calls still in flight when it ends are cancelled.
//
// The scope ends with its activity (endHostScope), not at a fixed time: the
// activity's bound may move with the visitor's time (visitor.go).
func (m *vm) beginHostScope(time.Duration) {
	m.host.ctx, m.host.cancel = context.WithCancel(context.Background())
}

func (m *vm) endHostScope() {
	if m.host.cancel != nil {
		m.host.cancel()
	}
}
