package handles

import (
	"context"
	"errors"
	"time"

	"github.com/retainer-gw/retainer/fault"
	"github.com/retainer-gw/retainer/program"
)

// Invoke calls a tenant's handle through the API.
func (r *Registry) Invoke(ctx context.Context, tenant, id, name string, req program.WireRequest) (program.WireResponse, error) {
	res, release, err := r.InvokeHeld(ctx, tenant, id, name, req)
	release()
	return res, err
}

// InvokeHeld is Invoke for a caller that holds the answer's body until it
// has written it (the API, the executor socket): the body is charged to the
// tenant in the store's body budget (budgets.BodyBytes) until release.
func (r *Registry) InvokeHeld(ctx context.Context, tenant, id, name string, req program.WireRequest) (program.WireResponse, func(), error) {
	rec, err := r.owned(tenant, id)
	if err != nil {
		return program.WireResponse{}, func() {}, err
	}
	if name != "fetch" {
		return program.WireResponse{}, func() {}, fault.UnknownHandle(id, name)
	}
	res, err := r.invoke(ctx, rec, "fetch", req)
	if fault.CodeOf(err) == fault.HandlerError {
		if lost := r.stillOwned(ctx, rec.Tenant); lost != nil {
			err = lost // as below: nothing its isolate threw either
		}
	}
	if err != nil {
		return res, func() {}, err
	}
	if lost := r.stillOwned(ctx, rec.Tenant); lost != nil {
		// As ServeStream: nothing from an isolate of a lease that ended.
		if res.Stream != 0 || res.Relay != "" {
			r.OpenStream(id, res).Close(true)
		}
		return program.WireResponse{}, func() {}, lost
	}
	if res.Stream == 0 && res.Relay == "" {
		s := r.store
		n := int64(len(res.Body))
		if err := s.held.Take(rec.Tenant, n); err != nil {
			return program.WireResponse{}, func() {}, err
		}
		return res, func() { s.held.Give(rec.Tenant, n) }, nil
	}
	// The API's answer is one document: a streamed body is read whole.
	return r.readStreamedHeld(ctx, r.OpenStream(id, res), res)
}

// HoldAnswer charges n bytes of an answer the API builds itself (a page of
// a handle's log) to tenant in the store's body budget (budgets.BodyBytes)
// until release: past the tenant's share QUOTA_EXCEEDED, past the
// gateway's OVERLOADED.
func (r *Registry) HoldAnswer(tenant string, n int64) (func(), error) {
	s := r.store
	if err := s.held.Take(tenant, n); err != nil {
		return func() {}, err
	}
	return func() { s.held.Give(tenant, n) }, nil
}

// readStreamed reads a streamed body whole, within the response bound and
// the stream timeout.
func (r *Registry) readStreamed(ctx context.Context, st *Stream, res program.WireResponse) (program.WireResponse, error) {
	res, release, err := r.readStreamedHeld(ctx, st, res)
	release()
	return res, err
}

// readStreamedHeld is readStreamed for a caller that holds the body until
// release.
func (r *Registry) readStreamedHeld(ctx context.Context, st *Stream, res program.WireResponse) (program.WireResponse, func(), error) {
	if res.Status == 101 {
		// A WebSocket the handler accepted: only the data plane upgrades
		// (docs/websockets.md); the API's invoke and the executor socket
		// answer 501.
		st.Close(true)
		return program.WireResponse{}, func() {}, fault.New(fault.NotImplemented, "WebSockets reach a handler through the data plane only.")
	}
	cfg := r.config()
	sctx, cancel := context.WithTimeout(ctx, cfg.StreamTimeout)
	defer cancel()
	body, release, err := st.readWhole(sctx, cfg.Limits.ResponseBody)
	if err != nil {
		if sctx.Err() != nil && ctx.Err() == nil {
			return program.WireResponse{}, release, fault.New(fault.Timeout, "The response stream did not end within its %v bound.", cfg.StreamTimeout)
		}
		return program.WireResponse{}, release, err
	}
	res.Stream, res.Relay = 0, ""
	if body == nil {
		body = []byte{}
	}
	res.Body = body
	return res, release, nil
}

// Resolve says which keys the data plane accepts: a set of these bits.
type Resolve uint8

const (
	// ResolveRoutes accepts route names.
	ResolveRoutes Resolve = 1 << iota
	// ResolveIDs accepts executionIds.
	ResolveIDs
	// ResolveDomains accepts the active domains of tenants (domains.go).
	ResolveDomains
	// ResolveBoth accepts route names and executionIds (the default).
	ResolveBoth = ResolveRoutes | ResolveIDs
)

// Serve routes data-plane traffic to the handle whose route name or
// executionId is key, reading a streamed body whole.
func (r *Registry) Serve(ctx context.Context, key string, resolve Resolve, req program.WireRequest) (program.WireResponse, error) {
	res, st, err := r.ServeStream(ctx, key, resolve, req, nil)
	if err != nil || st == nil {
		return res, err
	}
	return r.readStreamed(ctx, st, res)
}

// ServeStream routes data-plane traffic to the handle whose route name or
// executionId is key. Anyone who reaches the route may send it traffic. A
// streamed response comes with its Stream, which the caller reads and
// closes.
//
// body, when not nil, is a request body the visitor is still sending: it
// streams into the handler's request.body (req.Body must be nil).
func (r *Registry) ServeStream(ctx context.Context, key string, resolve Resolve, req program.WireRequest, body *RequestBody) (program.WireResponse, *Stream, error) {
	s := r.store
	tenant, err := r.locate(ctx, key, resolve)
	if err != nil {
		return program.WireResponse{}, nil, err
	}
	rec, err := r.servable(key, resolve, tenant)
	if err != nil {
		return program.WireResponse{}, nil, err
	}
	split, pinned := false, false
	if rec != nil {
		s.mu.Lock()
		rec, split, pinned = r.splitLocked(key, resolve, rec, req)
		s.mu.Unlock()
	}
	if rec == nil {
		return program.WireResponse{}, nil, fault.New(fault.NotFound, "No handler is deployed here.")
	}
	detach := func() {}
	var bs *bodyStream
	if body != nil {
		req.BodyStream, bs, detach = s.attachBody(rec.ID, body)
	}
	res, err := r.invoke(ctx, rec, "fetch", req)
	if err == nil && split && !pinned {
		res.Headers = append(res.Headers, pinCookie(rec.ID))
	}
	if err != nil && bs != nil && bs.late.Load() != nil {
		// The visitor's body stopped arriving, or came too slowly, and the
		// handler did not answer despite it: the visitor's doing, answered
		// 408; the handle keeps its isolate and takes no strike.
		err = bs.late.Load()
	}
	if err == nil || fault.CodeOf(err) == fault.HandlerError {
		if lost := r.stillOwned(ctx, tenant); lost != nil {
			// A paused owner woke past its lease: what its isolate
			// answered, or threw (a write refused because the space
			// moved, say), is not sent (another gateway may serve the
			// space by now).
			if err == nil && (res.Stream != 0 || res.Relay != "") {
				r.OpenStream(rec.ID, res).Close(true)
			}
			detach()
			return program.WireResponse{}, nil, lost
		}
	}
	if err != nil || res.Stream == 0 && res.Relay == "" {
		detach()
		return res, nil, err
	}
	st := r.OpenStream(rec.ID, res)
	st.detach = detach
	return res, st, nil
}

// invoke serves one invocation: in arrival order per handle, rebuilding the
// isolate first when it is gone, and counting bound strikes.
func (r *Registry) invoke(ctx context.Context, rec *Record, name string, req program.WireRequest) (res program.WireResponse, err error) {
	s := r.store
	if s.opts.Admit != nil {
		if err := s.opts.Admit(r.name, rec.ID, rec.Tenant); err != nil {
			return program.WireResponse{}, err
		}
	}
	if s.opts.OnRequest != nil {
		// One request entry per invocation in the handle's stored log
		// (docs/logs.md); a streamed answer's duration is to its head.
		start := s.opts.Now()
		defer func() {
			status := res.Status
			if err != nil {
				status = fault.As(err).HTTPStatus()
			}
			end := s.opts.Now()
			wall := end.Sub(start)
			// What the worker says its isolate spent, never more than the
			// wall time the gateway saw (a worker is not trusted).
			cpu := min(max(time.Duration(res.CPUNs), 0), wall)
			s.opts.OnRequest(r.name, rec.ID, rec.Tenant, Request{Time: end, Method: req.Method, URL: req.URL,
				Status: status, DurationMs: float64(wall.Microseconds()) / 1000, Bytes: int64(len(res.Body)),
				CPUMs: float64(cpu.Microseconds()) / 1000})
		}()
	}
	cfg := r.config()
	ls := s.liveFor(rec.ID)
	if ls == nil {
		return program.WireResponse{}, fault.Closed(rec.ID)
	}
	// Invocations of a live isolate go straight to the executor, which runs
	// them one at a time in arrival order; only a rebuild is exclusive, so
	// the invocations behind it wait for it instead of rebuilding again.
	if n := ls.inflight.Add(1); n > int64(cfg.Limits.HandleQueue+max(rec.Concurrency, 1)-1) {
		ls.inflight.Add(-1)
		return program.WireResponse{}, fault.Overload()
	}
	defer ls.inflight.Add(-1)
	for attempt := 0; attempt < 2; attempt++ {
		if !s.exists(rec.ID) {
			return program.WireResponse{}, fault.Closed(rec.ID)
		}
		if !s.opts.Executor.Holds(rec.ID) {
			if err := r.rebuildOnce(ctx, rec, ls); err != nil {
				return program.WireResponse{}, err
			}
		}
		started := time.Now().UnixNano()
		res, err := s.opts.Executor.Invoke(ctx, rec.ID, name, req)
		// The output gate: the response waits for the kv writes the
		// invocation made (the handle's next invocation need not).
		if gateErr := s.outputGate(ctx, rec.ID); gateErr != nil {
			return program.WireResponse{}, gateErr
		}
		switch fault.CodeOf(err) {
		case "", fault.HandlerError, fault.BadResponse:
			s.touch(rec.ID, true)
			if errors.Is(err, fault.ErrBadResponse) {
				r.systemLog(rec.ID, errText(err))
			}
			if fault.CodeOf(err) == fault.HandlerError && ls.kvUnanswered.Load() >= started {
				// It threw after one of its kv calls went unanswered (the
				// store unreachable, docs/cluster.md): the visitor may
				// retry, as with any request that needs the store.
				return program.WireResponse{}, fault.Wrap(fault.Overloaded, err, "The handler failed when the kv store did not answer in time; retry shortly.")
			}
			return res, err
		case fault.Timeout, fault.Memory:
			s.touch(rec.ID, false)
			r.strikeIfCharged(rec.ID, "", err)
			return res, err
		case fault.HandlesClosed:
			// The isolate vanished between the check and the call (a crash,
			// parking, a bound hit of the invocation ahead): rebuild once.
			continue
		case fault.WorkerCrashed:
			if errors.Is(err, fault.ErrNotStarted) {
				// Its worker died or was recycled before it started this
				// call, which therefore had no effect: sent again, once,
				// to the isolate's rebuild (docs/architecture.md).
				continue
			}
			return res, err
		default:
			return res, err
		}
	}
	return program.WireResponse{}, fault.CrashedWorker()
}
