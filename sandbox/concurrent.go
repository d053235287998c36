package sandbox

import (
	"errors"
	"time"

	v8 "rogchap.com/v8go"

	"github.com/retainer-gw/retainer/fault"
	"github.com/retainer-gw/retainer/program"
)

// Concurrent invocations (docs/architecture.md): a handle deployed with concurrency N > 1
// has up to N invocations in progress on its isolate, interleaving where
// the handler awaits (a host call, a timer), as a Workers isolate serves
// concurrent requests. JavaScript still runs on the isolate's one
// goroutine: a new invocation starts, in arrival order, only from the loop,
// that is when no JavaScript of the handle is running.
//
// While any invocation is in progress the isolate is in one busy period:
// its host calls share one activity (they survive between JavaScript
// entries), each entry into JavaScript runs under a watchdog set at the
// earliest deadline of the invocations in progress, and each invocation
// keeps its own deadline. A bound hit disposes the isolate: every
// invocation in progress answers that bound's error, and only one of them
// (the one whose bound it was) is marked as the cause; the others carry
// fault.ErrCollateral so the gateway charges no strike for them.
//
// Console output of the JavaScript that starts an invocation is that
// invocation's, and so is the output of its continuations while it is the
// only one in progress; with several in progress, a continuation's output
// cannot be told apart without async context tracking, which V8 10.9 lacks:
// it goes to the handle's log as the isolate's.

// invocation is one invocation in progress; loop-owned.
type invocation struct {
	deadline time.Time
	promise  *v8.Value
	respond  func(program.WireResponse, []program.LogEntry, error)
	logs     *logBuffer
	answered bool
	cpuStart int64 // the isolate's CPU account when it began (blame)
}

// busyPeriod is the time an isolate has invocations in progress.
type busyPeriod struct {
	invs      []*invocation
	waitUntil []time.Time // deadlines of answered invocations' waitUntil work
}

// startConcurrent begins one invocation on the loop: it enters the
// handler, and if the handler awaits, leaves it in progress.
func (m *vm) startConcurrent(wire string, body any, respond func(program.WireResponse, []program.LogEntry, error)) {
	if m.dead {
		respond(program.WireResponse{}, nil, m.goneErr())
		return
	}
	if m.busy == nil {
		m.beginBusy()
	}
	inv := &invocation{deadline: time.Now().Add(m.timeout), cpuStart: m.hold.mark(), respond: respond, logs: &logBuffer{}}
	m.busy.invs = append(m.busy.invs, inv)
	bodyArg := any(v8.Null(m.iso))
	if body != nil {
		bodyArg = body
	}
	var p *v8.Value
	var callErr error
	saved := m.sink
	m.sink = func(level, msg string) { inv.logs.add(level, msg) }
	bound := m.entry(func() {
		p, callErr = m.call(m.js.invoke, wire, bodyArg)
	})
	m.sink = saved
	if bound != nil {
		m.failBusy(bound, inv)
		return
	}
	if callErr != nil {
		m.answer(inv, program.WireResponse{}, m.handlerFault(callErr))
	} else {
		inv.promise = p
	}
	m.checkInvocations()
}

// pumpBusy runs what is due (host call answers, timers, microtasks), then
// answers the invocations that settled and enforces the deadlines.
func (m *vm) pumpBusy() {
	// With one invocation in progress, the output of its continuations is
	// its own; with several, whose it is cannot be told (see above).
	if len(m.busy.invs) == 1 {
		inv, saved := m.busy.invs[0], m.sink
		m.sink = func(level, msg string) { inv.logs.add(level, msg) }
		defer func() { m.sink = saved }()
	}
	bound := m.entry(func() {
		if _, err := m.host.settle(); err != nil && m.boundHit() == nil {
			m.sink("error", "Uncaught "+jsErrorMessage(err))
		}
		if err := m.fireDue(m.earliestDeadline()); err != nil && m.boundHit() == nil && !errors.Is(err, fault.ErrTimeout) {
			m.sink("error", jsErrorMessage(err))
		}
		m.ctx.PerformMicrotaskCheckpoint()
		m.releaseReturned()
	})
	if bound != nil {
		m.failBusy(bound, m.busy.earliest())
		return
	}
	m.checkInvocations()
}

// entry runs f (a call into JavaScript) under a watchdog at the earliest
// deadline in progress, and answers the bound it hit, if any.
func (m *vm) entry(f func()) error {
	id := m.watch.begin()
	m.watch.arm(id, m.earliestDeadline())
	f()
	m.watch.end()
	return m.boundHit()
}

// checkInvocations answers the invocations whose promise settled, fails
// the first one past its deadline, and ends the busy period when nothing
// is left in progress.
func (m *vm) checkInvocations() {
	if m.busy == nil {
		return
	}
	now := time.Now()
	keep := m.busy.invs[:0]
	for _, inv := range m.busy.invs {
		if inv.answered {
			continue
		}
		if inv.promise != nil {
			if p, err := inv.promise.AsPromise(); err == nil {
				switch p.State() {
				case v8.Fulfilled:
					m.finish(inv, p.Result())
					continue
				case v8.Rejected:
					r := p.Result()
					msg := describeThrown(r)
					r.Release()
					m.answer(inv, program.WireResponse{}, m.handlerFault(&jsThrow{message: msg}))
					continue
				}
			}
		}
		keep = append(keep, inv)
	}
	m.busy.invs = keep
	extra := m.watch.visitorExtra()
	if inv := m.busy.overdue(now, extra); inv != nil {
		m.failBusy(m.timeoutSince(inv.cpuStart), inv)
		return
	}
	if m.busy.waitUntilOverdue(now, extra) {
		// waitUntil work past its invocation's bound: a bound hit,
		// the handle's own (no invocation is its cause).
		m.failBusy(m.timeoutFault(), nil)
		if m.handleID != "" && m.eng.cfg.OnLost != nil {
			m.eng.cfg.OnLost(m.handleID, m.timeoutFault())
		}
		return
	}
	if len(m.busy.waitUntil) > 0 {
		n, err := m.call(m.js.pendingWork)
		if err == nil {
			if n.Int32() == 0 {
				m.busy.waitUntil = nil
			}
			n.Release()
		}
	}
	if len(m.busy.invs) == 0 && len(m.busy.waitUntil) == 0 {
		m.endBusy()
	}
}

// finish reads a settled invocation's answer and answers it.
func (m *vm) finish(inv *invocation, v *v8.Value) {
	s := v.String()
	v.Release()
	if s == "" || s[0] != 'R' && s[0] != 'W' {
		m.answer(inv, program.WireResponse{}, fault.NotAResponse())
		return
	}
	res, err := parseWireResponse(s[1:], m.eng.cfg.Limits.ResponseBody)
	if err != nil && res.Stream != 0 {
		m.streams.drop(res.Stream)
		res = program.WireResponse{}
	}
	if err == nil {
		if err = m.streams.refusedAnswer(res.Stream); err != nil {
			res = program.WireResponse{}
		}
	}
	if s[0] == 'W' && err == nil {
		m.busy.waitUntil = append(m.busy.waitUntil, inv.deadline)
	}
	m.answer(inv, res, err)
}

func (m *vm) answer(inv *invocation, res program.WireResponse, err error) {
	if inv.answered {
		return
	}
	inv.answered = true
	// With several invocations in progress, each is charged the isolate's
	// CPU while it was in progress (docs/usage.md).
	res.CPUNs = max(m.hold.mark()-inv.cpuStart, 0)
	if inv.promise != nil {
		inv.promise.Release()
		inv.promise = nil
	}
	inv.respond(res, inv.logs.logEntries(), err)
}

// failBusy disposes the isolate after a bound hit (or its end): cause
// answers the bound's error; the other invocations in progress answer it
// as collateral (no strike at the gateway).
func (m *vm) failBusy(bound error, cause *invocation) {
	m.dead = true
	f := fault.As(bound)
	for _, inv := range m.busy.invs {
		if inv == cause {
			m.answer(inv, program.WireResponse{}, bound)
			continue
		}
		m.answer(inv, program.WireResponse{}, &fault.Fault{Code: f.Code, Message: f.Message, Cause: fault.ErrCollateral})
	}
	m.endBusy()
}

func (m *vm) beginBusy() {
	m.host.beginScope(m.watch.next())
	m.busy = &busyPeriod{}
	m.watch.resetVisitor()
	m.activityCPU = m.hold.begin()
	m.activityLogs = logBuffer{}
}

func (m *vm) endBusy() {
	m.busy = nil
	m.host.endScope()
	m.noteDroppedLogs()
}

// earliestDeadline is the nearest deadline in progress (an invocation's,
// or an answered one's waitUntil work), at most a timeout from now.
func (m *vm) earliestDeadline() time.Time {
	d := time.Now().Add(m.timeout)
	if m.busy == nil {
		return d
	}
	return m.busy.earliestDeadline(d, m.watch.visitorExtra())
}

// full answers whether conc invocations are in progress: a new one waits
// in the queue.
func (b *busyPeriod) full(conc int) bool { return len(b.invs) >= conc }

// earliest is the invocation in progress whose deadline comes first.
func (b *busyPeriod) earliest() *invocation {
	var first *invocation
	for _, inv := range b.invs {
		if first == nil || inv.deadline.Before(first.deadline) {
			first = inv
		}
	}
	return first
}

// earliestDeadline is the nearest of d and the deadlines in progress, each
// moved by the visitor's time extra.
func (b *busyPeriod) earliestDeadline(d time.Time, extra time.Duration) time.Time {
	for _, inv := range b.invs {
		if e := inv.deadline.Add(extra); e.Before(d) {
			d = e
		}
	}
	for _, w := range b.waitUntil {
		if e := w.Add(extra); e.Before(d) {
			d = e
		}
	}
	return d
}

// overdue is the first invocation in progress past its deadline (moved by
// extra) at now, if any.
func (b *busyPeriod) overdue(now time.Time, extra time.Duration) *invocation {
	for _, inv := range b.invs {
		if !now.Before(inv.deadline.Add(extra)) {
			return inv
		}
	}
	return nil
}

// waitUntilOverdue answers whether waitUntil work of an answered
// invocation is past that invocation's deadline (moved by extra) at now.
func (b *busyPeriod) waitUntilOverdue(now time.Time, extra time.Duration) bool {
	for _, d := range b.waitUntil {
		if !now.Before(d.Add(extra)) {
			return true
		}
	}
	return false
}
