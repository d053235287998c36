package handles

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"sync"
	"sync/atomic"
	"time"

	"github.com/retainer-gw/retainer/budgets"
	"github.com/retainer-gw/retainer/capability"
	"github.com/retainer-gw/retainer/program"
	"github.com/retainer-gw/retainer/store"
	"github.com/retainer-gw/retainer/workers"
)

// Executor holds live isolates; *workers.Pool is the product's.
type Executor interface {
	// RunFor runs a job for a tenant (with tenant cordons, in a worker
	// that hosts that tenant alone).
	RunFor(ctx context.Context, tenant string, job program.Job) (program.Outcome, error)
	Invoke(ctx context.Context, id, name string, req program.WireRequest) (program.WireResponse, error)
	Close(id string) error
	Holds(id string) bool
	// ReadStream and CancelStream serve a streamed response (README.md, API).
	ReadStream(ctx context.Context, id string, stream int64) ([]byte, bool, error)
	CancelStream(id string, stream int64)
}

// The registry's tables in the store, each keyed by registry and name
// (key): records by id, routes by name, reserved names and domains by host.
const (
	tableHandles  = "handles"
	tableRoutes   = "routes"
	tableReserved = "reserved"
	tableDomains  = "domains"
)

// Event is one end of a handle, published once.
type Event struct {
	Registry string
	ID       string
	Tenant   string
	Reason   string // "closed", "idle", "bound_strikes", "crashes", "rebuild_failed", "version_retention"
	Message  string
}

// Reasons a handle ends.
const (
	ReasonClosed        = "closed"
	ReasonIdle          = "idle"
	ReasonBoundStrikes  = "bound_strikes"
	ReasonCrashes       = "crashes"
	ReasonRebuildFailed = "rebuild_failed"
)

// Options configure a Store.
type Options struct {
	// Executor runs programs and holds isolates. Required.
	Executor Executor
	// Now is the clock (tests inject one). Default time.Now.
	Now func() time.Time
	// OnEnd is told once about every end of a handle.
	OnEnd func(Event)
	// OnLog receives every handle log entry (the Caddy module rate-limits
	// them into its log).
	OnLog func(registry, id, tenant string, e program.LogEntry)
	// OnRequest is told of every invocation of a handle, as it ends (the
	// request entries of its stored log, docs/logs.md).
	OnRequest func(registry, id, tenant string, r Request)
	// Admit, when set, may refuse an invocation of a tenant's handle before
	// it runs (a plan's daily cap, docs/usage.md): its error is the
	// answer, and the refused invocation is neither run nor told to
	// OnRequest. Called on every invocation: it must be cheap.
	Admit func(registry, id, tenant string) error
	// OnSocketEvent, if set, is told of each WebSocket event delivered to
	// a handler (sockets.go) and the isolate CPU time it took, at most its
	// wall time (usage metering, docs/usage.md).
	OnSocketEvent func(registry, id, tenant string, cpu time.Duration)
	// OnRun, if set, is told of the isolate CPU time of each run of a
	// tenant's program (a computation, a deploy, a rebuild), at most its
	// wall time (usage metering, docs/usage.md).
	OnRun func(registry, tenant string, cpu time.Duration)
	// FlushEvery is how often coalesced lastInvokedAt writes are flushed.
	// Default 2s.
	FlushEvery time.Duration
	// Host serves programs' kv, fetch and tool calls; nil grants nothing.
	Host *capability.Host
	// OnRebuild is told of every rebuild of a handle's isolate.
	OnRebuild func(registry, id string)
	// Own makes this gateway the owner of a space (store.Space) or
	// answers why not (another gateway owns it; this one lost its lease):
	// a cluster's (ownership.go). Nil on one machine.
	Own func(ctx context.Context, space string) error
	// OnDomainsGone is told of hosts that stopped being domains (deleted,
	// or ended with their handle), so their certificates can be evicted.
	OnDomainsGone func(registry string, hosts []string)
	// ScheduleEvery is how often due cron ticks are looked for
	// (schedules.go). Default 1s.
	ScheduleEvery time.Duration
	// ScheduleRetries are the waits before a failed firing tries again;
	// nil is 1 s, 10 s and 60 s (tests shorten them).
	ScheduleRetries []time.Duration
	// OnFiring is told of every firing of a schedule and answers the id
	// of the receipt it wrote ("" for none).
	OnFiring func(FiringReceipt) string
	// WriteBound, when set (a cluster's etcd, docs/cluster.md), is the
	// longest an API write of the registry waits for the store before it
	// is answered 503 OVERLOADED (writes.go). Zero waits for the store.
	WriteBound time.Duration
}

// Store is every registry of one backing store (package store), held in
// memory and written through. Safe for concurrent use.
type Store struct {
	w    *store.Writer
	opts Options

	// routeMu serializes the writers of routes (bind, unbind, end) so
	// that none of them holds mu across a store commit.
	routeMu sync.Mutex
	// rebuilds tracks detached rebuilds, so Close waits for them.
	rebuilds sync.WaitGroup
	// metaMu serializes the writers of records' meta (the flusher,
	// updateRecord for a strike or its reset, and route binds and unbinds,
	// which take it after routeMu): each takes the records'
	// state when it holds metaMu and commits it before letting go, so the
	// last write stored is the newest state. Without it a flush that took
	// its copies first could commit last, over a newer one (measured: a
	// handle's invocations read 2 after a restart, not 3).
	metaMu sync.Mutex

	mu         sync.Mutex // guards registries, records, routes, live, dirty
	registries map[string]*Registry
	records    map[string]*Record                  // by id, all registries
	routes     map[string]map[string]string        // registry → route name → id
	reserved   map[string]map[string]reservation   // registry → freed route name or host → its tenant (reserve.go)
	domains    map[string]map[string]hostClaimList // registry → host → its tenants' claims (domains.go)
	history    map[string]map[string]*routeHistory // registry → route name → its versions (versions.go)
	live       map[string]*liveState               // by id: the runtime side of a record
	runs       map[string]*runState                // runs in progress, by run id
	dirty      map[string]bool                     // ids whose counters await a flush
	bodies     bodySet                             // request bodies streaming into invocations (body.go)
	sockets    socketCount                         // open WebSockets (sockets.go)
	held       *budgets.Bytes                      // answers' bodies held whole for the API (invoke.go)
	sched      scheduleState                       // cron ticks claimed, firings (schedules.go)
	commits    commitsUnderWay                     // registry commits waiting for the store (writes.go)
	takeBacks  takeBacks                           // deploys answered 503 whose take-back has not landed (writes.go)
	// deploying counts the deploys whose runs are under way
	// (runWithCapacity).
	deploying atomic.Int64

	// ownMu guards owned, the spaces this gateway owns and has reloaded,
	// loading, the spaces whose reload is under way (closed when it
	// ends), and ownGen, moved whenever spaces leave owned. It is never
	// held while the store is read: every request takes it (ownership.go).
	ownMu   sync.Mutex
	owned   map[string]bool
	loading map[string]chan struct{}
	ownGen  uint64
	// reloads holds a place for each reload under way, reloadsAtOnce at
	// most: each reads the registry's records from the store (before,
	// ownMu made them one at a time).
	reloads chan struct{}

	stop chan struct{}
	done chan struct{}
}

// Open loads every registry from w's store and serves them, writing
// through w. The store stays the caller's: Close does not close it.
func Open(w *store.Writer, opts Options) (*Store, error) {
	if opts.Executor == nil {
		return nil, errors.New("handles: no executor")
	}
	if opts.Now == nil {
		opts.Now = time.Now
	}
	if opts.FlushEvery <= 0 {
		opts.FlushEvery = 2 * time.Second
	}
	if opts.ScheduleEvery <= 0 {
		opts.ScheduleEvery = time.Second
	}
	s := &Store{
		w: w, opts: opts,
		registries: map[string]*Registry{},
		records:    map[string]*Record{},
		routes:     map[string]map[string]string{},
		reserved:   map[string]map[string]reservation{},
		domains:    map[string]map[string]hostClaimList{},
		history:    map[string]map[string]*routeHistory{},
		held:       budgets.NewBytes(budgets.BodyBytes, budgets.BodyBytesPerTenant),
		live:       map[string]*liveState{},
		runs:       map[string]*runState{},
		dirty:      map[string]bool{},
		owned:      map[string]bool{},
		loading:    map[string]chan struct{}{},
		reloads:    make(chan struct{}, reloadsAtOnce),
		sched:      scheduleState{last: map[string]int64{}, firings: map[string]storedFirings{}, pending: map[string][]Firing{}, dirty: map[string]*Record{}, done: make(chan struct{}), chains: map[string]chan struct{}{}, firingNow: map[string]bool{}},
		stop:       make(chan struct{}),
		done:       make(chan struct{}),
	}
	if err := s.load(); err != nil {
		return nil, fmt.Errorf("loading the registry: %w", err)
	}
	go s.background()
	go s.scheduleLoop()
	return s, nil
}

func (s *Store) load() error {
	ctx := context.Background()
	if err := s.loadRecords(ctx); err != nil {
		return err
	}
	var corrupt error
	err := s.w.Scan(ctx, tableRoutes, store.Range{}, func(k, v []byte) bool {
		reg, name, ok := splitKey(k)
		if !ok {
			corrupt = fmt.Errorf("route key %q is corrupt", k)
			return false
		}
		// A route whose record is gone was left by an end that stopped
		// half done (its names are removed after its record): it serves
		// nothing.
		if s.records[string(v)] == nil {
			return true
		}
		if s.routes[reg] == nil {
			s.routes[reg] = map[string]string{}
		}
		s.routes[reg][name] = string(v)
		return true
	})
	if err != nil {
		return err
	}
	if corrupt != nil {
		return corrupt
	}
	if err := s.loadReservations(ctx); err != nil {
		return err
	}
	if err := s.loadDomains(ctx); err != nil {
		return err
	}
	return s.loadHistories(ctx)
}

// commit applies conds and ops in the space of a registry's tenant, under
// the writer's fence for it. ctx carries the API write it serves, if any
// (writes.go): one its caller gave up on before it was sent sends
// nothing. A commit sent is never cut short (etcd may apply it anyway).
func (s *Store) commit(ctx context.Context, registry, tenant string, conds []store.Cond, ops []store.Op) error {
	if !sending(ctx) {
		return errWriteDropped
	}
	defer s.commits.began()()
	ctx = context.WithoutCancel(ctx)
	f, err := s.w.Fence(ctx, store.Space(registry, tenant))
	if err != nil {
		return err // nothing sent
	}
	err = s.w.Commit(ctx, store.Txn{Fences: []store.Fence{f}, If: conds, Then: ops})
	s.unsure(registry, tenant, err)
	return err
}

// commitChunked applies ops in the space of a registry's tenant in as few
// transactions as the store allows (store.CommitChunked), like commit.
func (s *Store) commitChunked(ctx context.Context, registry, tenant string, ops []store.Op) error {
	if !sending(ctx) {
		return errWriteDropped
	}
	defer s.commits.began()()
	ctx = context.WithoutCancel(ctx)
	f, err := s.w.Fence(ctx, store.Space(registry, tenant))
	if err != nil {
		return err // nothing sent
	}
	err = store.CommitChunked(ctx, s.w.Store, []store.Fence{f}, ops)
	s.unsure(registry, tenant, err)
	return err
}

func key(registry, name string) []byte { return []byte(registry + "\x00" + name) }

func splitKey(k []byte) (string, string, bool) {
	for i, c := range k {
		if c == 0 {
			return string(k[:i]), string(k[i+1:]), true
		}
	}
	return "", "", false
}

// SetHost sets what serves programs' kv, fetch and tool calls (it may need
// the store's own file, so it comes after Open).
func (s *Store) SetHost(h *capability.Host) {
	s.mu.Lock()
	s.opts.Host = h
	s.mu.Unlock()
}

// Count is the number of handle records (live or parked) in every registry.
func (s *Store) Count() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.records)
}

// Close flushes coalesced counters. The backing store is the caller's to
// close; live isolates are the executor's: neither is touched.
func (s *Store) Close() error {
	select {
	case <-s.stop:
	default:
		close(s.stop)
	}
	<-s.done
	<-s.sched.done
	s.sched.wg.Wait()
	s.flushFirings()
	s.rebuilds.Wait()
	s.flush()
	return nil
}

// background flushes counters and sweeps idle handles.
func (s *Store) background() {
	defer close(s.done)
	t := time.NewTicker(s.opts.FlushEvery)
	defer t.Stop()
	for {
		select {
		case <-s.stop:
			return
		case <-t.C:
			func() {
				defer func() { recover() }()
				s.flush()
				s.SweepIdle()
			}()
		}
	}
}

// flush writes the coalesced lastInvokedAt and invocation counts.
func (s *Store) flush() {
	served := s.servedFilter()
	s.metaMu.Lock()
	defer s.metaMu.Unlock()
	s.mu.Lock()
	if len(s.dirty) == 0 {
		s.mu.Unlock()
		return
	}
	recs := make([]Record, 0, len(s.dirty))
	for id := range s.dirty {
		if r := s.records[id]; r != nil && served(r.Registry, r.Tenant) {
			recs = append(recs, *r)
		}
	}
	s.dirty = map[string]bool{}
	s.mu.Unlock()
	// Every tenant's records in as few transactions as the store's
	// limits allow, each record written only if it is still stored. One
	// transaction a tenant, as before, was a commit (an fsync with bbolt)
	// for every active tenant at every flush: 100 a second at 200 tenants,
	// 3% of the gateway's CPU under load (docs/history/performance-log.md). When a
	// packed transaction fails on one of its records (a handle ended
	// meanwhile, a fence lost, the store's bytes), its records are written
	// one at a time, each on its own.
	sort.Slice(recs, func(a, b int) bool {
		if recs[a].Registry != recs[b].Registry {
			return recs[a].Registry < recs[b].Registry
		}
		return recs[a].Tenant < recs[b].Tenant
	})
	ctx := context.Background()
	l := s.w.Limits()
	var txn store.Txn
	var in []Record
	bytes, fenced := 0, ""
	commit := func() {
		if len(in) == 0 {
			return
		}
		// A registry commit like any other (writes.go): while the store
		// holds it, so is metaMu, and a route's bind waiting for that
		// lock sends nothing; writesOverdue must see this commit to
		// refuse the next writes at once.
		ended := s.commits.began()
		err := s.w.Commit(ctx, txn)
		ended()
		if errors.Is(err, store.ErrConflict) || errors.Is(err, store.ErrTooLarge) || errors.Is(err, store.ErrFenced) {
			for i := range in {
				s.writeMeta(&in[i])
			}
		}
		txn, in, bytes, fenced = store.Txn{}, nil, 0, ""
	}
	for i := range recs {
		r := &recs[i]
		space := store.Space(r.Registry, r.Tenant)
		cond, op := store.Exists(tableHandles, key(r.Registry, r.ID)), metaOp(r)
		b := len(cond.Table) + len(cond.Key) + len(op.Table) + len(op.Key) + len(op.Value)
		need := 2
		if space != fenced {
			need++
		}
		if len(in) > 0 && (len(txn.Fences)+len(txn.If)+len(txn.Then)+need > l.Ops || bytes+b > l.Bytes) {
			commit()
		}
		if space != fenced {
			f, err := s.w.Fence(ctx, space)
			if err != nil {
				continue // not this gateway's to write (or the store is away)
			}
			txn.Fences, fenced = append(txn.Fences, f), space
		}
		txn.If, txn.Then = append(txn.If, cond), append(txn.Then, op)
		in = append(in, *r)
		bytes += b
	}
	commit()
}

// Registry returns the registry name, creating it on first use.
func (s *Store) Registry(name string, cfg RegistryConfig) *Registry {
	if name == "" {
		name = "default"
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	r := s.registries[name]
	if r == nil {
		r = &Registry{store: s, name: name}
		s.registries[name] = r
		if s.routes[name] == nil {
			s.routes[name] = map[string]string{}
		}
	}
	r.configure(cfg)
	return r
}

// registryOf finds the registry that holds id (for executor events).
func (s *Store) registryOf(id string) *Registry {
	s.mu.Lock()
	defer s.mu.Unlock()
	rec := s.records[id]
	if rec == nil {
		return nil
	}
	r := s.registries[rec.Registry]
	if r == nil {
		r = &Registry{store: s, name: rec.Registry}
		r.configure(RegistryConfig{})
		s.registries[rec.Registry] = r
	}
	return r
}

// WorkerCrashed is the executor's crash report: lost isolates are rebuilt
// lazily; each suspect takes a strike, and a suspect at bound_strikes is
// closed with the memory text. A worker killed from outside has no
// suspects (docs/architecture.md, Blame).
func (s *Store) WorkerCrashed(c workers.Crash) {
	for _, id := range c.Suspects {
		if r := s.registryOf(id); r != nil {
			r.strike(id, "crash", fmt.Sprintf("The worker serving this handle stopped while it ran (%s).", c.Reason))
		}
	}
	lost := "The worker holding this handle stopped; it is rebuilt on its next request."
	if c.Killed {
		// Nobody's doing that the gateway can see: no strike, and no bound
		// named that nobody measured.
		lost = fmt.Sprintf("The worker holding this handle was killed (%s); no strike: it is rebuilt on its next request, and state kept in closures starts afresh.", c.Reason)
	}
	for _, id := range c.Lost {
		if r := s.registryOf(id); r != nil {
			r.systemLog(id, lost)
		}
	}
}

// IsolateLost is the executor's notice that a retained isolate ended on its
// own (a timer callback hit a bound): a strike when the program is to blame.
func (s *Store) IsolateLost(id string, err error) {
	if r := s.registryOf(id); r != nil {
		if err == nil {
			r.strike(id, "bound", "The handle's isolate ended.")
			return
		}
		r.strikeIfCharged(id, "", err)
	}
}

// HandleLog appends a handler's console entry to its handle's log.
func (s *Store) HandleLog(id string, e program.LogEntry) {
	if r := s.registryOf(id); r != nil {
		r.appendLog(id, e)
	}
}

// Count is one tenant's handles in one registry.
type Count struct {
	Registry string
	Tenant   string
	Handles  int
	Live     int // holding an isolate now; the others are parked
}

// Counts is every tenant's handle count per registry, sorted (the
// operator's admin view).
func (s *Store) Counts() []Count {
	s.mu.Lock()
	type k struct{ reg, tenant string }
	counts := map[k]*Count{}
	ids := map[k][]string{}
	for id, rec := range s.records {
		key := k{rec.Registry, rec.Tenant}
		if counts[key] == nil {
			counts[key] = &Count{Registry: rec.Registry, Tenant: rec.Tenant}
		}
		counts[key].Handles++
		ids[key] = append(ids[key], id)
	}
	s.mu.Unlock()
	out := make([]Count, 0, len(counts))
	for key, c := range counts {
		for _, id := range ids[key] {
			if s.opts.Executor.Holds(id) {
				c.Live++
			}
		}
		out = append(out, *c)
	}
	sort.Slice(out, func(i, j int) bool {
		if out[i].Registry != out[j].Registry {
			return out[i].Registry < out[j].Registry
		}
		return out[i].Tenant < out[j].Tenant
	})
	return out
}

// tenantOf is the tenant of handle id ("" once it ended).
func (s *Store) tenantOf(id string) string {
	s.mu.Lock()
	defer s.mu.Unlock()
	if rec := s.records[id]; rec != nil {
		return rec.Tenant
	}
	return ""
}
