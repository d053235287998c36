package workers

// Calls between the gateway and a worker: the gateway's calls in order
// under its send window, and the worker's requests the gateway serves.

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/retainer-gw/retainer/fault"
	"github.com/retainer-gw/retainer/internal/wirejson"
	"github.com/retainer-gw/retainer/program"
	"github.com/retainer-gw/retainer/workers/wire"
)

// call posts one call to the worker under a hard deadline: if the worker has
// not answered by bound + grace, its isolate is stuck in something V8
// cannot interrupt, and the whole worker is killed.
func (p *process) call(ctx context.Context, path string, body, out any, handleID string, bound time.Duration) error {
	return p.callQueued(ctx, path, body, out, handleID, bound, 0)
}

// callQueued is call for an invocation that has ahead invocations of the
// same handle in flight before it: the worker runs them first, each within
// its own bound (the worker's watchdog), so the kill clock allows for them
// (docs/architecture.md, Blame: time queued behind them is not this call's run time). A
// call ahead that overruns without end meets its own, earlier kill clock
// and takes the blame.
func (p *process) callQueued(ctx context.Context, path string, body, out any, handleID string, bound time.Duration, ahead int) error {
	return p.callOrdered(ctx, path, body, out, handleID, bound, ahead, nil)
}

// sendOrder puts a turn around a call's write (turns.go).
type sendOrder struct {
	before, after func()
	// seen is the handle's answered calls when the call was counted
	// (Pool.progress, read by the caller under the pool's lock already).
	seen uint64
	// picked: the call holds its pick's reservation (pool.go, reserve),
	// released once the call is on record or refused.
	picked bool
}

// callOrdered is callQueued whose frame is written in order's turn.
func (p *process) callOrdered(ctx context.Context, path string, body, out any, handleID string, bound time.Duration, ahead int, order *sendOrder) error {
	var seen uint64 // the handle's answered calls when the clock was set
	if order != nil {
		seen = order.seen
	} else if handleID != "" {
		seen, _ = p.pool.progress(handleID)
	}
	p.mu.Lock()
	if order != nil && order.picked {
		p.picks--
		order.picked = false
	}
	if p.dead || p.retiring {
		// Nothing was sent: the call had no effect and may go elsewhere.
		p.mu.Unlock()
		return fault.NotStarted()
	}
	p.seq++
	id := p.seq
	start := time.Now()
	p.lastActive = start
	allowed := time.Duration(ahead+1) * bound
	rec := &callRecord{handleID: handleID, id: id, bound: bound, allowed: allowed, due: start.Add(allowed), seen: seen, cpuAtBound: -1}
	if handleID != "" {
		rec.credited = p.visitorWaited(handleID) // p.mu is held
	}
	// The worker's one clock (killclock.go) looks at the call at its
	// bound and again after the grace period; a call that ends before its
	// bound costs no more.
	p.running[id] = rec
	p.armClock(rec.due)
	p.mu.Unlock()
	err := p.postOrdered(ctx, path, body, out, order)
	if err != nil && ctx.Err() == nil {
		// A broken connection usually means the process is dying: keep this
		// call on record until it is reaped, so the crash report names the
		// isolate it was running.
		select {
		case <-p.exited:
		case <-time.After(time.Second):
			p.kill("its connection broke")
		}
	}
	p.mu.Lock()
	delete(p.running, id)
	// Idleness counts from when work ends; an invocation's ctx.waitUntil
	// work may go on within its bound after its answer.
	now := time.Now()
	p.lastActive = now
	if until := now.Add(bound); path == wire.PathInvoke && until.After(p.busyUntil) {
		p.busyUntil = until
	}
	overran, notCaused := p.overrunner == id, p.overrunNotCaused
	p.mu.Unlock()
	if err == nil {
		return nil
	}
	if errors.Is(err, wire.ErrNotSent) {
		return fault.NotStarted()
	}
	if overran {
		f := fault.TimedOut(bound.Milliseconds())
		if notCaused {
			f.Cause = fault.ErrNotCaused
		}
		return f
	}
	var f *fault.Fault
	if errors.As(err, &f) {
		return f
	}
	if ctx.Err() != nil {
		return ctx.Err()
	}
	return fault.CrashedWorker()
}

// post is one call to the worker. A malformed answer kills the worker.
func (p *process) post(ctx context.Context, path string, body, out any) error {
	return p.postOrdered(ctx, path, body, out, nil)
}

func (p *process) postOrdered(ctx context.Context, path string, body, out any, order *sendOrder) error {
	var data []byte
	if enc, ok := body.(wire.FrameEncoder); ok {
		data = enc.EncodeFrame()
	} else {
		var err error
		if data, err = wirejson.Marshal(body); err != nil {
			return fault.Wrap(fault.Internal, err, "Internal error.")
		}
	}
	var before, after func()
	if order != nil {
		before, after = order.before, order.after
	}
	res, err := p.rpc.CallOrdered(ctx, path, data, before, after, false)
	if err != nil {
		return err
	}
	if dec, ok := out.(wire.FrameDecoder); ok {
		err = dec.DecodeFrame(res)
	} else {
		err = json.Unmarshal(res, out)
	}
	if err != nil {
		p.kill(fmt.Sprintf("answered %s with garbage: %v", path, err))
		return fault.CrashedWorker()
	}
	return nil
}

// serveWorker answers the worker's own requests, each checked against this
// process's records. An error kills the worker (the connection's onBad).
func (p *process) serveWorker(ctx context.Context, path string, body []byte) ([]byte, error) {
	p.touch()
	switch path {
	case wire.PathLog:
		var m wire.LogPost
		if err := wire.DecodeCapped(body, wire.MaxWorkerPost, &m); err != nil {
			return nil, fmt.Errorf("a malformed log line")
		}
		if p.holds(m.ID) {
			p.recordLogs(m.ID, []program.LogEntry{m.Entry})
		}
		return []byte("{}"), nil
	case wire.PathLost:
		var m wire.LostPost
		if err := wire.DecodeCapped(body, wire.MaxWorkerPost, &m); err != nil {
			return nil, fmt.Errorf("a malformed lost notice")
		}
		if p.release(m.ID) {
			p.pool.forget(m.ID, p)
			if f := p.pool.cfg.OnLost; f != nil {
				f(m.ID, m.Fault.Err())
			}
		}
		return []byte("{}"), nil
	case wire.PathHost:
		var m wire.HostPost
		if err := wire.DecodeCapped(body, p.rpc.MaxFrame, &m); err != nil {
			return nil, fmt.Errorf("a malformed host call")
		}
		var rep wire.HostReply
		f := p.pool.cfg.OnHostCall
		switch {
		case m.ID == "" || !p.holdsOrRuns(m.ID):
			rep.Fault = wire.ToWire(fault.New(fault.Forbidden, "No run of this worker has that id."))
		case f == nil:
			rep.Fault = wire.ToWire(fault.New(fault.Forbidden, "This gateway serves no host calls."))
		default:
			// The tenant this worker hosts ("" when shared): the host
			// answers only for that tenant's runs and handles.
			if program.VisitorOp(m.Op) {
				defer p.bodyRead(m.ID)()
			}
			if m.Left > 0 {
				// What was left of the invocation's bound as the call
				// left the worker.
				ctx = program.WithDue(ctx, time.Now().Add(time.Duration(m.Left)*time.Microsecond))
			}
			serve := func() (json.RawMessage, error) { return f(ctx, p.owner(), m.ID, m.Op, m.Args) }
			var res, note json.RawMessage
			var err error
			if hc := p.pool.cfg.HostCache; hc != nil {
				res, note, err = hc.Call(p, m.ID, m.Op, m.Args, serve)
			} else {
				res, err = serve()
			}
			rep = wire.HostReply{Result: res, Fault: wire.ToWire(err), Cache: note}
		}
		return wirejson.Marshal(rep)
	case wire.PathCacheBatch:
		hc := p.pool.cfg.HostCache
		if hc == nil {
			return nil, fmt.Errorf("a host cache's batch, and this gateway keeps none")
		}
		// The body is part of a frame the read loop already held to maxFrame.
		return hc.Batch(ctx, p, body)
	case wire.PathCacheAnswers:
		hc := p.pool.cfg.HostCache
		if hc == nil {
			return nil, fmt.Errorf("a host cache's batch, and this gateway keeps none")
		}
		answers, batch, err := wire.DecodeCarried(body)
		if err != nil {
			return nil, err
		}
		ids := make([]string, len(answers))
		for i, a := range answers {
			ids[i] = a.ID
		}
		reply, release, err := hc.Carry(ctx, p, batch, ids)
		if err != nil {
			return nil, err
		}
		// An answer released goes to its caller as if it had come in a
		// frame of its own, once the writes it waited for are applied;
		// the output gate then holds it until they are durable
		// (handles/invoke.go). The worker's word on which call and handle
		// an answer is for is trusted as its answer frames are: it could
		// answer any of its calls with anything (docs/threat-model.md).
		for i, a := range answers {
			if release[i] {
				p.rpc.Deliver(a.Call, a.Reply)
			}
		}
		return reply, nil
	}
	return nil, fmt.Errorf("an unknown request %q", path)
}

// Tell sends a message of the host cache to the worker's and waits for its
// answer; a worker that does not answer is killed (its cache would stay
// stale). (hostcache.Peer)
func (p *process) Tell(ctx context.Context, msg []byte) error {
	if _, err := p.rpc.Call(ctx, wire.PathCacheTell, msg); err != nil {
		p.kill("did not take a host cache's message")
		return err
	}
	return nil
}
