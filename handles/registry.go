package handles

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"regexp"
	"sort"
	"sync"
	"time"

	bolt "go.etcd.io/bbolt"

	"github.com/retainer-gw/retainer/fault"
	"github.com/retainer-gw/retainer/sandbox"
	"github.com/retainer-gw/retainer/sandbox/worker"
)

// RegistryConfig is a registry's limits; a config reload may change them
// and they apply to the next run or invocation.
type RegistryConfig struct {
	// IdleBound closes a handle that has not been invoked for this long.
	// Default 10m.
	IdleBound time.Duration
	// BoundStrikes is how many bound hits (or crashes as a suspect) in a
	// row close a handle. Default 3.
	BoundStrikes int
	// MaxHandlesPerTenant answers QUOTA_EXCEEDED past it. Default 100.
	MaxHandlesPerTenant int
	// HandleQueue is how many invocations may wait for one handle. Default 64.
	HandleQueue int
	// Providers are the tools programs may be granted: provider → tool →
	// upstream URL.
	Providers map[string]map[string]string
	// OutboundAllowPrivate lets granted fetch reach internal addresses.
	OutboundAllowPrivate bool
}

func (c *RegistryConfig) defaults() {
	if c.IdleBound <= 0 {
		c.IdleBound = 10 * time.Minute
	}
	if c.BoundStrikes <= 0 {
		c.BoundStrikes = 3
	}
	if c.MaxHandlesPerTenant <= 0 {
		c.MaxHandlesPerTenant = 100
	}
	if c.HandleQueue <= 0 {
		c.HandleQueue = 64
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
	Program       sandbox.Program
	RetainHandles bool
	Timeout       time.Duration
	MemoryMiB     int
	Env           map[string]string
	Grants        Grants
}

// ExecResult is a run's answer; ExecutionID is set when a handle was kept.
type ExecResult struct {
	Outcome     sandbox.Outcome
	ExecutionID string
	// Denials are the capability denials the run met, for its receipt.
	Denials []string
}

// Execute runs a program. With RetainHandles, a program that answers a
// request handler becomes a handle: its record is committed before the id
// is returned. A computation leaves no record.
func (r *Registry) Execute(ctx context.Context, tenant string, req ExecRequest) (ExecResult, error) {
	s := r.store
	job := sandbox.Job{Program: req.Program, Timeout: req.Timeout, MemoryMiB: req.MemoryMiB, Env: req.Env, Bindings: bindings(req.Grants)}
	cfg := r.config()
	job.RetainHandles = req.RetainHandles
	job.ID = newRunID()
	rs := &runState{registry: r, tenant: tenant, grants: req.Grants}
	s.beginRun(job.ID, rs)
	out, err := r.runWithCapacity(ctx, job)
	s.endRun(job.ID)
	s.mu.Lock()
	denials := append([]string(nil), rs.denials...)
	recorded := append([]ToolAnswer(nil), rs.recorded...)
	s.mu.Unlock()
	if err != nil || !out.Retained {
		// A computation with retainHandles is harmless: no record, no quota.
		return ExecResult{Outcome: out, Denials: denials}, err
	}
	now := s.opts.Now()
	rec := &Record{
		ID: job.ID, Registry: r.name, Tenant: tenant,
		Program: req.Program, Env: req.Env, Grants: req.Grants,
		TimeoutMs: req.Timeout.Milliseconds(), MemoryMiB: req.MemoryMiB,
		CreatedAt: now, LastInvokedAt: now, ToolAnswers: recorded,
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
		return ExecResult{Outcome: sandbox.Outcome{Logs: out.Logs}, Denials: denials}, fault.New(fault.QuotaExceeded, "The tenant holds %d handles, the most this registry allows. Close one first.", count)
	}
	s.records[rec.ID] = rec
	s.mu.Unlock()
	if err := s.putRecord(rec); err != nil {
		s.mu.Lock()
		delete(s.records, rec.ID)
		s.mu.Unlock()
		s.opts.Executor.Close(job.ID)
		return ExecResult{Outcome: out, Denials: denials}, fault.Wrap(fault.Internal, err, "The handle could not be saved.")
	}
	return ExecResult{Outcome: out, ExecutionID: rec.ID, Denials: denials}, nil
}

// runWithCapacity runs a job, parking the least recently used idle handle
// when every isolate slot is taken.
func (r *Registry) runWithCapacity(ctx context.Context, job sandbox.Job) (sandbox.Outcome, error) {
	for attempt := 0; ; attempt++ {
		out, err := r.store.opts.Executor.Run(ctx, job)
		if !errors.Is(err, worker.ErrNoCapacity) {
			return out, err
		}
		if attempt >= 8 || !r.store.parkOne(job.ID) {
			return out, fault.Overload()
		}
	}
}

// parkOne disposes the isolate of the least recently used idle handle; its
// record stays and it is rebuilt on its next request.
func (s *Store) parkOne(except string) bool {
	s.mu.Lock()
	var victim *Record
	for id, rec := range s.records {
		if id == except || !s.opts.Executor.Holds(id) {
			continue
		}
		if ls := s.live[id]; ls != nil && !ls.idle() {
			continue
		}
		if victim == nil || rec.LastInvokedAt.Before(victim.LastInvokedAt) {
			victim = rec
		}
	}
	s.mu.Unlock()
	if victim == nil {
		return false
	}
	s.opts.Executor.Close(victim.ID)
	if reg := s.registryOf(victim.ID); reg != nil {
		reg.systemLog(victim.ID, "Parked: every isolate slot was needed; the handle is rebuilt on its next request.")
	}
	return true
}

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

// Invoke calls a tenant's handle through the API.
func (r *Registry) Invoke(ctx context.Context, tenant, id, name string, req sandbox.WireRequest) (sandbox.WireResponse, error) {
	rec, err := r.owned(tenant, id)
	if err != nil {
		return sandbox.WireResponse{}, err
	}
	if name != "fetch" {
		return sandbox.WireResponse{}, fault.UnknownHandle(id, name)
	}
	return r.invoke(ctx, rec, req)
}

// Resolve says which keys the data plane accepts.
type Resolve int

const (
	ResolveBoth Resolve = iota
	ResolveRoutes
	ResolveIDs
)

// Serve routes data-plane traffic to the handle whose route name or
// executionId is key. Anyone who reaches the route may send it traffic.
func (r *Registry) Serve(ctx context.Context, key string, resolve Resolve, req sandbox.WireRequest) (sandbox.WireResponse, error) {
	s := r.store
	s.mu.Lock()
	var rec *Record
	if resolve != ResolveIDs {
		if id, ok := s.routes[r.name][key]; ok {
			rec = s.records[id]
		}
	}
	if rec == nil && resolve != ResolveRoutes {
		if cand := s.records[key]; cand != nil && cand.Registry == r.name {
			rec = cand
		}
	}
	s.mu.Unlock()
	if rec == nil {
		return sandbox.WireResponse{}, fault.New(fault.NotFound, "No handler is deployed here.")
	}
	return r.invoke(ctx, rec, req)
}

// invoke serves one invocation: in arrival order per handle, rebuilding the
// isolate first when it is gone, and counting bound strikes.
func (r *Registry) invoke(ctx context.Context, rec *Record, req sandbox.WireRequest) (sandbox.WireResponse, error) {
	s := r.store
	cfg := r.config()
	ls := s.liveFor(rec.ID)
	if ls == nil {
		return sandbox.WireResponse{}, fault.Closed(rec.ID)
	}
	// Invocations of a live isolate go straight to the executor, which runs
	// them one at a time in arrival order; only a rebuild is exclusive, so
	// the invocations behind it wait for it instead of rebuilding again.
	if n := ls.inflight.Add(1); n > int64(cfg.HandleQueue) {
		ls.inflight.Add(-1)
		return sandbox.WireResponse{}, fault.Overload()
	}
	defer ls.inflight.Add(-1)
	for attempt := 0; attempt < 2; attempt++ {
		if !s.exists(rec.ID) {
			return sandbox.WireResponse{}, fault.Closed(rec.ID)
		}
		if !s.opts.Executor.Holds(rec.ID) {
			if err := r.rebuildOnce(ctx, rec, ls, cfg); err != nil {
				return sandbox.WireResponse{}, err
			}
		}
		res, err := s.opts.Executor.Invoke(ctx, rec.ID, "fetch", req)
		switch fault.CodeOf(err) {
		case "", fault.HandlerError, fault.BadResponse:
			s.touch(rec.ID, true)
			if errors.Is(err, fault.ErrBadResponse) {
				r.systemLog(rec.ID, errText(err))
			}
			return res, err
		case fault.Timeout, fault.Memory:
			s.touch(rec.ID, false)
			r.strike(rec.ID, "bound", errText(err))
			return res, err
		case fault.HandlesClosed:
			// The isolate vanished between the check and the call (a crash,
			// parking, a bound hit of the invocation ahead): rebuild once.
			continue
		default:
			return res, err
		}
	}
	return sandbox.WireResponse{}, fault.CrashedWorker()
}

// rebuildOnce rebuilds under the handle's exclusive lock; whoever waited
// for it finds the isolate back and does nothing.
func (r *Registry) rebuildOnce(ctx context.Context, rec *Record, ls *liveState, cfg RegistryConfig) error {
	if err := ls.queue.acquire(ctx, cfg.HandleQueue); err != nil {
		return err
	}
	defer ls.queue.release()
	if !r.store.exists(rec.ID) {
		return fault.Closed(rec.ID)
	}
	if r.store.opts.Executor.Holds(rec.ID) {
		return nil
	}
	return r.rebuild(ctx, rec)
}

// rebuild runs the handle's program again to get a fresh isolate.
func (r *Registry) rebuild(ctx context.Context, rec *Record) error {
	s := r.store
	s.mu.Lock()
	job := rec.job()
	replay := append([]ToolAnswer{}, rec.ToolAnswers...)
	grants := rec.Grants
	s.mu.Unlock()
	start := time.Now()
	rs := &runState{registry: r, tenant: rec.Tenant, grants: grants, replay: replay}
	s.beginRun(job.ID, rs)
	out, err := r.runWithCapacity(ctx, job)
	s.endRun(job.ID)
	s.mu.Lock()
	mismatch := rs.mismatch
	s.mu.Unlock()
	if mismatch && err == nil {
		s.opts.Executor.Close(job.ID)
		r.end(rec.ID, ReasonRebuildFailed, "Rebuild failed: the program's tool calls no longer match the ones recorded when it was deployed.")
		return fault.Closed(rec.ID)
	}
	switch fault.CodeOf(err) {
	case "":
		if !out.Retained {
			r.end(rec.ID, ReasonRebuildFailed, "The program no longer answers a request handler.")
			return fault.Closed(rec.ID)
		}
		r.systemLog(rec.ID, fmt.Sprintf("Rebuilt in %d ms: the isolate was gone; state kept in closures starts afresh.", time.Since(start).Milliseconds()))
		if f := s.opts.OnRebuild; f != nil {
			f(r.name, rec.ID)
		}
		return nil
	case fault.Timeout, fault.Memory:
		r.strike(rec.ID, "bound", "Rebuild: "+errText(err))
		return err
	case fault.WorkerCrashed, fault.Overloaded:
		return err
	default:
		r.end(rec.ID, ReasonRebuildFailed, "Rebuild failed: "+errText(err))
		return fault.Closed(rec.ID)
	}
}

// strike counts a bound hit (or a crash as a suspect); at bound_strikes the
// handle ends.
func (r *Registry) strike(id, kind, msg string) {
	s := r.store
	cfg := r.config()
	s.mu.Lock()
	rec := s.records[id]
	if rec == nil {
		s.mu.Unlock()
		return
	}
	rec.Strikes++
	n := rec.Strikes
	memory := rec.MemoryMiB
	copyRec := *rec
	s.mu.Unlock()
	r.systemLog(id, fmt.Sprintf("%s (strike %d of %d)", msg, n, cfg.BoundStrikes))
	if n < cfg.BoundStrikes {
		s.putRecord(&copyRec)
		return
	}
	if kind == "crash" {
		if memory <= 0 {
			memory = 64
		}
		r.end(id, ReasonCrashes, fault.OutOfMemory(memory).Message)
		return
	}
	r.end(id, ReasonBoundStrikes, msg)
}

// touch records an invocation; ok resets the strike count.
func (s *Store) touch(id string, ok bool) {
	s.mu.Lock()
	rec := s.records[id]
	if rec == nil {
		s.mu.Unlock()
		return
	}
	rec.LastInvokedAt = s.opts.Now()
	rec.Invocations++
	s.dirty[id] = true
	reset := ok && rec.Strikes != 0
	if reset {
		rec.Strikes = 0
	}
	copyRec := *rec
	s.mu.Unlock()
	if reset {
		s.putRecord(&copyRec)
	}
}

func (s *Store) exists(id string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.records[id] != nil
}

// end deletes a handle: record and routes in one transaction, its isolate
// disposed, and one event published. Only the first end of an id does
// anything.
func (r *Registry) end(id, reason, message string) bool {
	s := r.store
	s.mu.Lock()
	rec := s.records[id]
	if rec == nil {
		s.mu.Unlock()
		return false
	}
	delete(s.records, id)
	delete(s.dirty, id)
	for _, name := range rec.Routes {
		if s.routes[rec.Registry][name] == id {
			delete(s.routes[rec.Registry], name)
		}
	}
	delete(s.live, id)
	s.mu.Unlock()
	s.db.Update(func(tx *bolt.Tx) error {
		tx.Bucket(bucketHandles).Delete(key(rec.Registry, id))
		routes := tx.Bucket(bucketRoutes)
		for _, name := range rec.Routes {
			if string(routes.Get(key(rec.Registry, name))) == id {
				routes.Delete(key(rec.Registry, name))
			}
		}
		return nil
	})
	s.opts.Executor.Close(id)
	if s.opts.OnEnd != nil {
		s.opts.OnEnd(Event{Registry: rec.Registry, ID: id, Tenant: rec.Tenant, Reason: reason, Message: message})
	}
	return true
}

// Close ends a tenant's handle through the API.
func (r *Registry) Close(tenant, id string) error {
	if _, err := r.owned(tenant, id); err != nil {
		return err
	}
	if !r.end(id, ReasonClosed, "Closed through the API.") {
		return fault.Closed(id)
	}
	return nil
}

// SweepIdle ends every handle idle past its registry's bound. The
// background loop calls it; tests call it with an injected clock.
func (s *Store) SweepIdle() {
	now := s.opts.Now()
	type victim struct {
		reg *Registry
		id  string
	}
	var victims []victim
	s.mu.Lock()
	for id, rec := range s.records {
		reg := s.registries[rec.Registry]
		if reg == nil {
			continue
		}
		if ls := s.live[id]; ls != nil && !ls.idle() {
			continue
		}
		if now.Sub(rec.LastInvokedAt) > reg.config().IdleBound {
			victims = append(victims, victim{reg, id})
		}
	}
	s.mu.Unlock()
	for _, v := range victims {
		v.reg.end(v.id, ReasonIdle, "Idle past the idle bound.")
	}
}

func (r *Registry) info(rec *Record) Info {
	routes := append([]string{}, rec.Routes...)
	sort.Strings(routes)
	return Info{
		ExecutionID: rec.ID, Handles: []string{"fetch"},
		CreatedAt: rec.CreatedAt, LastInvokedAt: rec.LastInvokedAt,
		Invocations: rec.Invocations, IdleBoundMs: r.config().IdleBound.Milliseconds(),
		Routes: routes,
	}
}

// List is the tenant's live handles, oldest first.
func (r *Registry) List(tenant string) []Info {
	s := r.store
	s.mu.Lock()
	defer s.mu.Unlock()
	out := []Info{}
	for _, rec := range s.records {
		if rec.Registry == r.name && rec.Tenant == tenant {
			out = append(out, r.info(rec))
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
	r.store.mu.Lock()
	defer r.store.mu.Unlock()
	return r.info(rec), nil
}

// routeName is a DNS label.
var routeName = regexp.MustCompile(`^[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?$`)

// uuidShaped matches any 8-4-4-4-12 hex string, whatever its version.
var uuidShaped = regexp.MustCompile(`^[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}$`)

// ValidRouteName checks a route name (SPEC §5).
func ValidRouteName(name string) error {
	if !routeName.MatchString(name) {
		return fault.New(fault.BadRequest, "A route name is a DNS label: lower-case letters, digits and inner hyphens, at most 63 characters.")
	}
	if uuidShaped.MatchString(name) {
		return fault.New(fault.BadRequest, "A route name may not be shaped like an executionId.")
	}
	return nil
}

// BindRoute points name at the tenant's handle id. A later bind moves the
// name atomically: requests resolve either to the old or to the new handle,
// never to nothing.
func (r *Registry) BindRoute(tenant, name, id string) (Route, error) {
	if err := ValidRouteName(name); err != nil {
		return Route{}, err
	}
	s := r.store
	rec, err := r.owned(tenant, id)
	if err != nil {
		return Route{}, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	var prev *Record
	if prevID, ok := s.routes[r.name][name]; ok {
		prev = s.records[prevID]
		if prev != nil && prev.Tenant != tenant {
			return Route{}, fault.New(fault.Conflict, "The route name %q is taken.", name)
		}
	}
	if s.records[id] == nil {
		return Route{}, fault.Closed(id)
	}
	newRec := *rec
	newRec.Routes = appendUnique(rec.Routes, name)
	var newPrev Record
	if prev != nil && prev.ID != id {
		newPrev = *prev
		newPrev.Routes = without(prev.Routes, name)
	}
	err = s.db.Update(func(tx *bolt.Tx) error {
		if err := tx.Bucket(bucketRoutes).Put(key(r.name, name), []byte(id)); err != nil {
			return err
		}
		if err := putTx(tx, &newRec); err != nil {
			return err
		}
		if prev != nil && prev.ID != id {
			return putTx(tx, &newPrev)
		}
		return nil
	})
	if err != nil {
		return Route{}, fault.Wrap(fault.Internal, err, "The route could not be saved.")
	}
	rec.Routes = newRec.Routes
	if prev != nil && prev.ID != id {
		prev.Routes = newPrev.Routes
	}
	s.routes[r.name][name] = id
	return Route{Name: name, ExecutionID: id}, nil
}

// UnbindRoute removes the tenant's route name.
func (r *Registry) UnbindRoute(tenant, name string) error {
	s := r.store
	s.mu.Lock()
	defer s.mu.Unlock()
	id, ok := s.routes[r.name][name]
	rec := s.records[id]
	if !ok || rec == nil || rec.Tenant != tenant {
		return fault.New(fault.NotFound, "No route named %q.", name)
	}
	newRec := *rec
	newRec.Routes = without(rec.Routes, name)
	err := s.db.Update(func(tx *bolt.Tx) error {
		if err := tx.Bucket(bucketRoutes).Delete(key(r.name, name)); err != nil {
			return err
		}
		return putTx(tx, &newRec)
	})
	if err != nil {
		return fault.Wrap(fault.Internal, err, "The route could not be removed.")
	}
	rec.Routes = newRec.Routes
	delete(s.routes[r.name], name)
	return nil
}

// Routes lists the tenant's routes.
func (r *Registry) Routes(tenant string) []Route {
	s := r.store
	s.mu.Lock()
	defer s.mu.Unlock()
	out := []Route{}
	for name, id := range s.routes[r.name] {
		if rec := s.records[id]; rec != nil && rec.Tenant == tenant {
			out = append(out, Route{Name: name, ExecutionID: id})
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out
}

func putTx(tx *bolt.Tx, rec *Record) error {
	data, err := json.Marshal(rec)
	if err != nil {
		return err
	}
	return tx.Bucket(bucketHandles).Put(key(rec.Registry, rec.ID), data)
}

func appendUnique(list []string, s string) []string {
	for _, x := range list {
		if x == s {
			return append([]string{}, list...)
		}
	}
	return append(append([]string{}, list...), s)
}

func without(list []string, s string) []string {
	out := []string{}
	for _, x := range list {
		if x != s {
			out = append(out, x)
		}
	}
	return out
}

func errText(err error) string { return fault.As(err).Message }
