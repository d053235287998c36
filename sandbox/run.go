package sandbox

import (
	"context"
	"encoding/json"
	"errors"
	"runtime"
	"strings"
	"time"

	v8 "rogchap.com/v8go"

	"github.com/retainer-gw/retainer/budgets"
	"github.com/retainer-gw/retainer/fault"
	"github.com/retainer-gw/retainer/program"
)

// A run (Engine.Run): a program once in a fresh isolate, which a handler
// answered with RetainHandles keeps (invoke.go serves it then).

// Run runs a program once in a fresh isolate. A program that answers a
// request handler with job.RetainHandles keeps its isolate under job.ID.
// Failures are *fault.Fault values; the outcome carries the logs either way.
func (e *Engine) Run(ctx context.Context, job program.Job) (program.Outcome, error) {
	out := program.Outcome{Logs: []string{}}
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
		out program.Outcome
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
func (m *vm) execute(job program.Job, c compiled, envJSON string) (program.Outcome, error) {
	logs := &logBuffer{}
	m.sink = func(level, msg string) { logs.add(level, msg) }
	m.timeout = job.Timeout
	m.host.runID = job.ID
	out := program.Outcome{}
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
