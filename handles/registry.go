package handles

import (
	"context"
	"encoding/json"
	"errors"
	"sort"
	"sync"
	"time"

	"github.com/retainer-gw/retainer/budgets"
	"github.com/retainer-gw/retainer/fault"
	"github.com/retainer-gw/retainer/program"
	"github.com/retainer-gw/retainer/store"
	"github.com/retainer-gw/retainer/workers"
)

// RegistryConfig is a registry's limits; a config reload may change them
// and they apply to the next run or invocation.
type RegistryConfig struct {
	// IdleBound closes a handle that has not been invoked for this long.
	// Default budgets.DefaultIdle (the defaults below are budgets' too).
	IdleBound time.Duration
	// BoundStrikes is how many bound hits (or crashes as a suspect) in a
	// row close a handle. Default 3.
	BoundStrikes int
	// MaxHandlesPerTenant answers QUOTA_EXCEEDED past it. Default 100.
	MaxHandlesPerTenant int
	// Limits are the gateway's run limits (budgets.Limits): here a handle's
	// queue, and the bound of a streamed body the API reads whole (the
	// data plane counts what it sends itself).
	Limits budgets.Limits
	// HandleConcurrency is a deploy's concurrency when it names none.
	// Default 1 (one invocation at a time).
	HandleConcurrency int
	// Providers are the tools programs may be granted: provider → tool →
	// upstream URL.
	Providers map[string]map[string]string
	// OutboundAllowPrivate lets granted fetch reach internal addresses.
	OutboundAllowPrivate bool
	// StreamTimeout bounds a whole streamed response. Default 5m.
	StreamTimeout time.Duration
	// RequestBodyIdle ends a visitor's request body that stops arriving
	// for this long: the handler's body stream errors, and the visitor gets
	// 408 unless the handler caught it. Default 10s.
	RequestBodyIdle time.Duration
	// RequestBodyTimeout ends a visitor's request body that is not
	// complete this long after its request arrived, as RequestBodyIdle
	// does. Default 60s.
	RequestBodyTimeout time.Duration
	// WebsocketsPerHandle and WebsocketsPerTenant cap open WebSockets
	// (sockets.go). Defaults 1,000 and 10,000.
	WebsocketsPerHandle int
	WebsocketsPerTenant int
	// VersionRetention is how long a route's replaced version is kept,
	// parked, for a rollback (versions.go). Default 7 days.
	VersionRetention time.Duration
}

// defaults fills what a caller left zero with the app's defaults, from
// budgets (the app passes every field; tests may not).
func (c *RegistryConfig) defaults() {
	if c.IdleBound <= 0 {
		c.IdleBound = budgets.DefaultIdle
	}
	if c.BoundStrikes <= 0 {
		c.BoundStrikes = budgets.DefaultBoundStrikes
	}
	if c.MaxHandlesPerTenant <= 0 {
		c.MaxHandlesPerTenant = budgets.DefaultHandlesPerTenant
	}
	c.Limits = c.Limits.WithDefaults()
	if c.RequestBodyIdle <= 0 {
		c.RequestBodyIdle = budgets.DefaultRequestBodyIdle
	}
	if c.RequestBodyTimeout <= 0 {
		c.RequestBodyTimeout = budgets.DefaultRequestBodyTimeout
	}
	if c.StreamTimeout <= 0 {
		c.StreamTimeout = budgets.DefaultStreamTimeout
	}
	if c.WebsocketsPerHandle <= 0 {
		c.WebsocketsPerHandle = budgets.WebsocketsPerHandle
	}
	if c.WebsocketsPerTenant <= 0 {
		c.WebsocketsPerTenant = budgets.WebsocketsPerTenant
	}
	if c.VersionRetention <= 0 {
		c.VersionRetention = budgets.DefaultVersionRetention
	}
}

// Registry is one site's set of handles and routes.
type Registry struct {
	store *Store
	name  string

	mu  sync.Mutex // guards cfg
	cfg RegistryConfig
}

// configure sets the limits; the capability settings stay as
// SetCapabilities left them (only the control plane declares them).
func (r *Registry) configure(cfg RegistryConfig) {
	cfg.defaults()
	r.mu.Lock()
	cfg.Providers, cfg.OutboundAllowPrivate = r.cfg.Providers, r.cfg.OutboundAllowPrivate
	r.cfg = cfg
	r.mu.Unlock()
}

// SetCapabilities declares the registry's provider tools and whether fetch
// may reach internal addresses.
func (r *Registry) SetCapabilities(providers map[string]map[string]string, allowPrivate bool) {
	r.mu.Lock()
	r.cfg.Providers, r.cfg.OutboundAllowPrivate = providers, allowPrivate
	r.mu.Unlock()
}

func (r *Registry) config() RegistryConfig {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.cfg
}

// Name is the registry's name.
func (r *Registry) Name() string { return r.name }

// ExecRequest is one POST /executions, already validated by the caller.
type ExecRequest struct {
	Program       program.Program
	RetainHandles bool
	Timeout       time.Duration
	MemoryMiB     int
	Env           map[string]string
	Grants        Grants
	// Concurrency is a retained handle's invocations in progress at once;
	// 0 takes the registry's default.
	Concurrency int
	// Idle is the handle's idle bound while nothing points at it
	// (deployments.go); 0 takes the registry's.
	Idle time.Duration
	// Schedules are a handle's cron expressions (schedules.go); its
	// program must answer a handler with a scheduled method.
	Schedules []string
	// Budget is the top-level run's spawn budget (nil: spawn refuses);
	// Depth is 0 for a top-level run, more for a spawned child.
	Budget *SpawnBudget
	Depth  int
	// Caller answers the tools of the run's caller providers (nil: the run
	// has none, or its caller is not connected).
	Caller CallerTools
}

// CallerTools answers a caller provider's tool (docs/protocol.md): it runs in the
// process of the host that started the run, on the other side of its
// executor connection. args are the call's arguments, each JSON.
type CallerTools func(ctx context.Context, provider, tool string, args []json.RawMessage) (json.RawMessage, error)

// ExecResult is a run's answer; ExecutionID is set when a handle was kept.
type ExecResult struct {
	Outcome     program.Outcome
	ExecutionID string
	// Denials are the capability denials the run met, for its receipt.
	Denials []string
}

// Execute runs a program. With RetainHandles, a program that answers a
// request handler becomes a handle: its record is committed before the id
// is returned. A computation leaves no record.
func (r *Registry) Execute(ctx context.Context, tenant string, req ExecRequest) (ExecResult, error) {
	s := r.store
	cfg := r.config()
	if err := CheckSchedules(req.Schedules); err != nil {
		return ExecResult{}, err
	}
	if len(req.Schedules) > 0 && !req.RetainHandles {
		return ExecResult{}, fault.New(fault.BadRequest, "Schedules need retainHandles: only a retained handler can be called at a tick.")
	}
	if req.Concurrency <= 0 {
		req.Concurrency = max(cfg.HandleConcurrency, 1)
	}
	job := program.Job{Program: req.Program, Timeout: req.Timeout, MemoryMiB: req.MemoryMiB, Env: req.Env, Bindings: bindings(req.Grants), Concurrency: req.Concurrency}
	job.RetainHandles = req.RetainHandles
	job.ID = newRunID()
	timeout := req.Timeout
	if timeout <= 0 {
		timeout = budgets.RunTimeout
	}
	rs := &runState{registry: r, tenant: tenant, grants: req.Grants, records: job.RetainHandles,
		budget: req.Budget, depth: req.Depth, caller: req.Caller, timeout: timeout, deadline: time.Now().Add(timeout), memoryMiB: req.MemoryMiB}
	s.beginRun(job.ID, rs)
	if job.RetainHandles && s.opts.Own == nil {
		// The record's commit (keepRecord) is under the tenant's fence,
		// and a new tenant's first claims it: a transaction of its own,
		// which under 200 tenants' load waited 5-40 ms for the file and
		// held it 1-20 ms more. It is claimed while the program runs
		// (docs/decisions.md, "A newcomer's fence is claimed while its
		// deploy runs"); the commit waits for that claim if it is still
		// under way (store.Writer.Fence). In a cluster, Own has claimed it.
		go s.w.Fence(context.WithoutCancel(ctx), store.Space(r.name, tenant))
	}
	runCtx := ctx
	if job.RetainHandles {
		// A deploy finishes even if its caller goes away, so the worker
		// never keeps an isolate the gateway does not know of; the isolate
		// is closed below instead.
		runCtx = context.WithoutCancel(ctx)
	}
	if job.RetainHandles {
		// Its handle, once retained, has served nothing (runWithCapacity).
		s.deploying.Add(1)
	}
	out, err := r.runWithCapacity(runCtx, tenant, job, job.RetainHandles)
	if job.RetainHandles {
		s.deploying.Add(-1)
	}
	s.endRun(job.ID)
	// The output gate: the answer waits for the run's kv writes.
	if gateErr := s.outputGate(runCtx, job.ID); gateErr != nil && err == nil {
		if out.Retained {
			s.opts.Executor.Close(job.ID)
		}
		return ExecResult{Outcome: out}, gateErr
	}
	if err == nil && out.Retained && ctx.Err() != nil {
		s.opts.Executor.Close(job.ID)
		return ExecResult{Outcome: out}, ctx.Err()
	}
	s.mu.Lock()
	denials := append([]string(nil), rs.denials...)
	recorded := append([]ToolAnswer(nil), rs.recorded...)
	overRecord := rs.overRecord
	s.mu.Unlock()
	if overRecord {
		// A handle whose rebuild could not replay its deploy is not kept,
		// and the deploy fails with the budget's fault whatever the
		// program did with the error (caught it and answered a handler,
		// threw its own, answered a value): its answer was shaped by a
		// tool call that never happened.
		if err == nil && out.Retained {
			s.opts.Executor.Close(job.ID)
		}
		return ExecResult{Outcome: program.Outcome{Logs: out.Logs}, Denials: denials}, recordFault()
	}
	if err == nil && len(req.Schedules) > 0 && (!out.Retained || !out.Scheduled) {
		// Schedules need a handler object with a scheduled method.
		if out.Retained {
			s.opts.Executor.Close(job.ID)
		}
		return ExecResult{Outcome: program.Outcome{Logs: out.Logs}, Denials: denials}, fault.New(fault.BadRequest, "The program has schedules, so it must answer a handler object with a scheduled(controller, env, ctx) method.")
	}
	if err != nil || !out.Retained {
		// A computation with retainHandles is harmless: no record, no quota.
		return ExecResult{Outcome: out, Denials: denials}, err
	}
	now := s.opts.Now()
	rec := &Record{
		ID: job.ID, Registry: r.name, Tenant: tenant,
		Program: req.Program, Env: req.Env, Grants: req.Grants,
		TimeoutMs: req.Timeout.Milliseconds(), MemoryMiB: req.MemoryMiB, Concurrency: req.Concurrency,
		CreatedAt: now, LastInvokedAt: now, ToolAnswers: recorded,
		IdleMs: req.Idle.Milliseconds(), Schedules: req.Schedules,
	}
	body, err := withBody(rec)
	if err != nil {
		s.opts.Executor.Close(job.ID)
		return ExecResult{Outcome: out, Denials: denials}, fault.Wrap(fault.Internal, err, "The handle could not be saved.")
	}
	// The quota is checked and the slot taken under one lock, so concurrent
	// deploys cannot both pass it.
	s.mu.Lock()
	count := 0
	for _, other := range s.records {
		if other.Registry == r.name && other.Tenant == tenant {
			count++
		}
	}
	if count >= cfg.MaxHandlesPerTenant {
		s.mu.Unlock()
		s.opts.Executor.Close(job.ID)
		return ExecResult{Outcome: program.Outcome{Logs: out.Logs}, Denials: denials}, fault.New(fault.QuotaExceeded, "The tenant holds %d handles, the most this registry allows. Close one first.", count)
	}
	s.records[rec.ID] = rec
	s.mu.Unlock()
	if _, err := bounded(s, func(ctx context.Context) (struct{}, error) { return struct{}{}, s.keepRecord(ctx, rec, body) }); err != nil {
		if errors.Is(err, errWriteAbandoned) {
			// Given up on while etcd holds its record: marked at once, so
			// whoever loads the space next skips it (writes.go).
			s.markTakeBack(rec)
		}
		// Whatever the failure, the record leaves memory here, the one
		// place that does: a deploy answered 503 is never listed or served
		// from now on, not only once the store answers (keepRecord takes
		// the record back from the store then, or it was never sent): etcd
		// may stay paused for a lease.
		s.mu.Lock()
		delete(s.records, rec.ID)
		s.mu.Unlock()
		s.opts.Executor.Close(job.ID)
		return ExecResult{Outcome: out, Denials: denials}, storeFault(err, "The handle could not be saved.")
	}
	return ExecResult{Outcome: out, ExecutionID: rec.ID, Denials: denials}, nil
}

// keepRecord stores a deploy's record, already in memory, within the
// store's write bound (writes.go). A record that could not be stored, or
// whose deploy was answered 503 meanwhile (given up on while its commit
// waited for the store), leaves the store: a deploy answered 503 never
// appears later. Every error of it is its caller's too (bounded answers
// it, or an earlier 503), and Execute drops the record from memory and
// closes its isolate for any.
func (s *Store) keepRecord(ctx context.Context, rec *Record, body []store.Op) error {
	err := s.insertRecord(ctx, rec, body)
	if err == nil && !settle(ctx) {
		// Taken back now, or retried until it lands (writes.go).
		s.takeBackUntilLanded(rec)
		err = errWriteDropped
	}
	return err
}

// runWithCapacity runs a job, parking the least recently used idle handle
// when every isolate slot is taken (parkOne): one that served nothing
// since it was built first; another tenant's that has served only when no
// other deploy's run is under way, or once the job has waited half its
// bound: those runs hold slots that become handles that served nothing,
// or free, within it. When none can be parked (the slots are held by runs
// under way, or by handles in use), the job waits for one within its
// bound, looking again every capacityRetry, then answers OVERLOADED
// (docs/architecture.md, "The pool's queues"). deploy says the job is a
// deploy's run, counted in deploying (a rebuild's is not).
func (r *Registry) runWithCapacity(ctx context.Context, tenant string, job program.Job, deploy bool) (program.Outcome, error) {
	bound := job.Timeout
	if bound <= 0 {
		bound = budgets.RunTimeout // Execute's default
	}
	var began time.Time
	for {
		start := time.Now()
		out, err := r.store.opts.Executor.RunFor(ctx, tenant, job)
		if r.store.opts.OnRun != nil && out.CPUNs > 0 {
			// Never more than the wall time the gateway saw.
			r.store.opts.OnRun(r.name, tenant, min(time.Duration(out.CPUNs), time.Since(start)))
		}
		if !errors.Is(err, workers.ErrNoCapacity) {
			return out, err
		}
		if began.IsZero() {
			began = start
		}
		waited := time.Since(began)
		if waited >= bound {
			// Each look may park a handle whose slot another run then
			// takes: the job looks within its bound, never past it.
			return out, fault.Overload()
		}
		others := r.store.deploying.Load()
		if deploy {
			others-- // this one
		}
		if r.store.parkOne(job.ID, tenant, errors.Is(err, workers.ErrTenantFull), others == 0 || waited >= bound/2) {
			continue
		}
		if bound-waited < capacityRetry {
			return out, fault.Overload()
		}
		select {
		case <-ctx.Done():
			return out, fault.Overload()
		case <-time.After(capacityRetry):
		}
	}
}

// capacityRetry is how often a run that found every isolate slot taken,
// and none it could park, looks again.
const capacityRetry = 20 * time.Millisecond

// owned answers the tenant's record id, or HANDLES_CLOSED exactly as for an
// id that never existed.
func (r *Registry) owned(tenant, id string) (*Record, error) {
	s := r.store
	s.mu.Lock()
	defer s.mu.Unlock()
	rec := s.records[id]
	if rec == nil || rec.Registry != r.name || rec.Tenant != tenant {
		return nil, fault.Closed(id)
	}
	return rec, nil
}

// info is what the API shows of rec; kept is the registry's deployments
// (keptLocked). s.mu is held.
func (r *Registry) info(rec *Record, kept map[string]bool) Info {
	routes := append([]string{}, rec.Routes...)
	sort.Strings(routes)
	names := []string{"fetch"}
	if len(rec.Schedules) > 0 {
		names = append(names, program.ScheduledEvent)
	}
	return Info{
		ExecutionID: rec.ID, Handles: names,
		CreatedAt: rec.CreatedAt, LastInvokedAt: rec.LastInvokedAt,
		Invocations: rec.Invocations, IdleBoundMs: idleBound(r.config(), rec).Milliseconds(),
		Routes: routes, Concurrency: max(rec.Concurrency, 1),
		InProgress: r.store.inProgress(rec.ID),
		Deployment: kept[rec.ID],
	}
}

// List is the tenant's live handles, oldest first.
func (r *Registry) List(tenant string) []Info {
	s := r.store
	s.mu.Lock()
	defer s.mu.Unlock()
	out := []Info{}
	kept := s.keptLocked(r.name, s.opts.Now(), r.config().VersionRetention)
	for _, rec := range s.records {
		if rec.Registry == r.name && rec.Tenant == tenant {
			out = append(out, r.info(rec, kept))
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].CreatedAt.Before(out[j].CreatedAt) })
	return out
}

// Get is one of the tenant's handles.
func (r *Registry) Get(tenant, id string) (Info, error) {
	rec, err := r.owned(tenant, id)
	if err != nil {
		return Info{}, err
	}
	s := r.store
	s.mu.Lock()
	defer s.mu.Unlock()
	return r.info(rec, s.keptLocked(r.name, s.opts.Now(), r.config().VersionRetention)), nil
}

func errText(err error) string { return fault.As(err).Message }
