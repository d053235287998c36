package sandbox

import (
	_ "embed"
	"time"

	v8 "rogchap.com/v8go"

	"github.com/retainer-gw/retainer/fault"
)

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
	if !v.IsPromise() {
		return v, nil
	}
	p, err := v.AsPromise()
	if err != nil {
		return nil, err
	}
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
