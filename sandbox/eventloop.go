package sandbox

import (
	_ "embed"
	"time"

	v8 "rogchap.com/v8go"

	"github.com/retainer-gw/retainer/fault"
)

// The event loop is where the isolate's sub-states meet the runtime: the
// timers (timers.go), host calls (hostcall.go) and streams (stream.go) own
// their state and know no isolate; the calls into JavaScript they lead to
// (a timer fired, a host call settled, a stream's pump resumed or
// cancelled) are made here, each under its bound.

// call invokes a runtime function with Go arguments, releasing what it made.
func (m *vm) call(fn *v8.Function, args ...any) (*v8.Value, error) {
	vals := make([]v8.Valuer, len(args))
	made := make([]*v8.Value, 0, len(args))
	for i, a := range args {
		if v, ok := a.(*v8.Value); ok {
			vals[i] = v
			continue
		}
		v, err := v8.NewValue(m.iso, a)
		if err != nil {
			return nil, err
		}
		vals[i] = v
		made = append(made, v)
	}
	res, err := fn.Call(v8.Undefined(m.iso), vals...)
	for _, v := range made {
		v.Release()
	}
	m.releaseReturned()
	return res, err
}

func (m *vm) releaseReturned() {
	for _, v := range m.released {
		v.Release()
	}
	m.released = m.released[:0]
}

// settle drives the event loop until promise-like v settles, the deadline
// passes, or nothing could ever settle it. It answers the fulfilled value.
func (m *vm) settle(v *v8.Value, deadline time.Time) (*v8.Value, error) {
	// One call into V8 asks (AsPromise would ask again).
	if !v.IsPromise() {
		return v, nil
	}
	p := &v8.Promise{Object: &v8.Object{Value: v}}
	// V8's default policy already ran the microtasks when the call that made
	// the promise returned, so the state is read before a checkpoint.
	checkpoint := false
	for {
		if checkpoint {
			m.ctx.PerformMicrotaskCheckpoint()
			m.releaseReturned()
		}
		if err := m.boundHit(); err != nil {
			return nil, err
		}
		switch p.State() {
		case v8.Fulfilled:
			return p.Result(), nil
		case v8.Rejected:
			r := p.Result()
			defer r.Release()
			return nil, &jsThrow{message: describeThrown(r)}
		}
		if checkpoint {
			if err := m.waitForWork(deadline); err != nil {
				return nil, err
			}
		}
		checkpoint = true
	}
}

// drain keeps the loop going after a response while ctx.waitUntil work is
// pending, within the same deadline.
func (m *vm) drain(deadline time.Time) error {
	for {
		n, err := m.call(m.js.pendingWork)
		if err != nil {
			return err
		}
		pending := n.Int32()
		n.Release()
		if pending == 0 {
			return nil
		}
		if err := m.waitForWork(deadline); err != nil {
			return err
		}
	}
}

// waitForWork sleeps until a timer is due or a host event arrives, and runs
// what is due. With nothing pending it answers RUNTIME at once: the program
// waits on a promise that nothing can settle.
func (m *vm) waitForWork(deadline time.Time) error {
	// Answers that already arrived come first: they may settle what the
	// caller waits for.
	if delivered, err := m.host.settle(); err != nil || delivered {
		return err
	}
	deadline = deadline.Add(m.watch.visitorExtra()) // the visitor's time (visitor.go)
	due, ok := m.timers.next()
	if !ok {
		if m.host.inFlight() == 0 {
			return fault.New(fault.Runtime, "The program awaits a promise that nothing can settle (no timer or request is pending).")
		}
		due = deadline
	}
	if due.After(deadline) {
		due = deadline
	}
	if d := time.Until(due); d > 0 {
		t := time.NewTimer(d)
		m.hold.drop() // a wait: leave the thread free (threadhold.go)
		start := m.watch.blocks(m.host.reading())
		select {
		case <-t.C:
		case <-m.wake:
		}
		waited := time.Since(start)
		m.watch.waited(start, m.host.reading())
		m.hold.take()
		t.Stop()
		if m.host.reading() {
			deadline = deadline.Add(waited)
		}
	}
	if !time.Now().Before(deadline) {
		return m.timeoutFault()
	}
	if _, err := m.host.settle(); err != nil {
		return err
	}
	return m.fireDue(deadline)
}

// fireDue runs every timer that is due, in due order.
func (m *vm) fireDue(deadline time.Time) error {
	for {
		id, ok := m.timers.popDue(time.Now())
		if !ok {
			return nil
		}
		v, err := m.call(m.js.fireTimer, int32(id))
		if err := m.boundHit(); err != nil {
			return err
		}
		if err != nil {
			return fault.Wrap(fault.Runtime, err, "a timer callback failed")
		}
		v.Release()
		if time.Now().After(deadline) {
			return m.timeoutFault()
		}
	}
}

// settleCall settles host call id's promise in the runtime (hostCalls'
// deliver).
func (m *vm) settleCall(id int32, ok bool, payload, code string) error {
	v, err := m.call(m.js.settleHost, id, ok, payload, code)
	if bound := m.boundHit(); bound != nil {
		return bound
	}
	if err != nil {
		return err
	}
	v.Release()
	return nil
}

// runStreamWork resumes and cancels, on the loop, what readers asked for;
// each entry into JavaScript is bounded like a timer callback.
func (m *vm) runStreamWork() {
	drained, cancels := m.streams.takeWork()
	callback := func(fn *v8.Function, id int64) {
		m.callback(func() {
			if _, err := m.call(fn, float64(id)); err != nil && m.boundHit() == nil {
				m.sink("error", "Uncaught "+jsErrorMessage(err))
			}
		})
	}
	for _, id := range cancels {
		callback(m.js.cancelStream, id)
	}
	for _, id := range drained {
		callback(m.js.streamDrained, id)
	}
}

// callback runs f (an entry into JavaScript outside an invocation's own
// settle) under the invocation timeout: within a busy period under its
// watchdog, else as a bounded activity of its own, like timers between
// invocations. A bound hit disposes the isolate.
func (m *vm) callback(f func()) {
	if m.dead {
		return
	}
	if m.busy != nil {
		bound := m.entry(func() {
			f()
			m.ctx.PerformMicrotaskCheckpoint()
			m.releaseReturned()
		})
		if bound != nil {
			m.failBusy(bound, nil)
			return
		}
		m.checkInvocations()
		return
	}
	if err := m.bounded(m.timeout, func(time.Time) error {
		f()
		m.ctx.PerformMicrotaskCheckpoint()
		m.releaseReturned()
		return nil
	}); err != nil {
		m.kill()
		if m.handleID != "" && m.eng.cfg.OnLost != nil {
			m.eng.cfg.OnLost(m.handleID, err)
		}
	}
}
