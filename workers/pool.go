package workers

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/retainer-gw/retainer/budgets"
	"github.com/retainer-gw/retainer/fault"
	"github.com/retainer-gw/retainer/internal/gctarget"
	"github.com/retainer-gw/retainer/internal/hostcache"
	"github.com/retainer-gw/retainer/program"
	"github.com/retainer-gw/retainer/workers/wire"
)

// The protocol's names the pool's callers use (package wire defines them):
// the subcommand a worker process runs under, and the engine's
// configuration a worker is started with.
const Subcommand = wire.Subcommand

type EngineConfig = wire.EngineConfig

// Config sets up a Pool. Zero values take the defaults.
type Config struct {
	// Workers is the number of worker processes. With IsolationTenant it
	// is the most, the spare included, and 0 (the default there) means
	// auto: as many as WorkerMemory allows, up to MaxWorkers (memory.go).
	// With IsolationShared the default is budgets.DefaultSharedWorkers.
	Workers int
	// WorkerMemory is the budget of `workers auto`: the workers' own
	// memory (PSS) summed stays under it. Default: half of what the
	// machine or its cgroup has.
	WorkerMemory int64
	// TenantWorkerMemory is the most one tenant's workers hold (PSS
	// summed) while another tenant waits for a worker (cordon.go).
	// Default: a quarter of WorkerMemory.
	TenantWorkerMemory int64
	// MaxWorkers is the ceiling of `workers auto`. Default
	// budgets.DefaultMaxWorkers.
	MaxWorkers int
	// RecycleIdle is how long a cordoned worker must have had nothing of
	// its tenant in progress before it may be taken for another tenant.
	// Default budgets.DefaultRecycleIdle.
	RecycleIdle time.Duration
	// Isolation is IsolationShared (every worker hosts any tenant) or
	// IsolationTenant (a worker hosts one tenant's isolates at a time; see
	// cordon.go). Required: the app's default is tenant.
	Isolation string
	// IsolatesPerWorker is how many retained isolates one worker holds.
	// Default budgets.DefaultIsolatesPerWorker.
	IsolatesPerWorker int
	// Queue is how many calls may wait per worker beyond one per isolate
	// slot; past it calls fail at once with OVERLOADED. Default
	// budgets.DefaultWorkerQueue.
	Queue int
	// Engine configures the engine inside each worker.
	Engine wire.EngineConfig
	// DisableLandlock and DisableSeccomp weaken the worker sandbox (tests
	// on kernels without Landlock; never the default).
	DisableLandlock bool
	DisableSeccomp  bool
	// RlimitData bounds a worker's data segment. Default 8 GiB.
	RlimitData uint64
	// Grace is how long past its bound a call may run before its worker is
	// killed. Default 2s.
	Grace time.Duration
	// Command is the argument list that starts the binary in worker mode.
	// Default [wire.Subcommand].
	Command []string
	// CPUs is where workers run: CPUsShared (anywhere), CPUsPinned (each
	// on one CPU, placed and moved by the gateway) or CPUsAuto (pinned
	// while one CPU is enough); cpus.go. Required: the app's default is
	// auto.
	CPUs string
	// Probe enables the worker's /probe call (tests only).
	Probe bool
	// Logf receives the pool's operational messages.
	Logf func(format string, args ...any)
	// OnLog receives retained handlers' console output.
	OnLog func(id string, e program.LogEntry)
	// OnLost is told when a retained isolate ends on its own in a worker.
	OnLost func(id string, err error)
	// OnCrash is told when a worker dies, with the isolates it held.
	OnCrash func(Crash)
	// OnHostCall serves a program's kv, fetch and tool requests. id is the
	// run's id or the retained isolate's; the pool has already checked that
	// it is running or living in the worker that asks. tenant is the tenant
	// that worker hosts ("" when shared): a call for another tenant's id
	// must be refused.
	OnHostCall func(ctx context.Context, tenant, id, op string, args json.RawMessage) (json.RawMessage, error)
	// HostCache is the gateway's side of what workers cache of host
	// calls' answers (kv/cache): the pool hands it every host call and
	// what a worker's cache sends, carries its notes and messages, and
	// tells it of each worker's end. nil: workers cache nothing.
	HostCache hostcache.Gateway
}

// Crash describes a worker's death for the handles layer: Lost are the
// retained isolates that lived there; Suspects those of them that were
// running at the time (never when it was Killed from outside: a signal
// the gateway did not send, or an operator's kill).
type Crash struct {
	Worker   int
	PID      int
	Lost     []string
	Suspects []string
	Reason   string
	Killed   bool
}

// ErrNoCapacity is answered by Run for a retaining run when every isolate
// slot is taken: the caller parks an idle isolate (Close) and tries again.
var ErrNoCapacity = errors.New("every worker isolate slot is taken")

// defaults fills what a caller left zero with the app's defaults, from
// budgets (the app passes every field but TenantWorkerMemory, which it
// sets once the pool runs; tests may not). The modes have none: check
// refuses a configuration without them.
func (c *Config) defaults() {
	if c.Workers < 0 {
		c.Workers = 0
	}
	if c.Workers == 0 && c.Isolation == IsolationShared {
		c.Workers = budgets.DefaultSharedWorkers
	}
	if c.MaxWorkers <= 0 {
		c.MaxWorkers = budgets.DefaultMaxWorkers
	}
	if c.WorkerMemory <= 0 {
		c.WorkerMemory = DefaultWorkerMemory()
	}
	if c.TenantWorkerMemory <= 0 {
		c.TenantWorkerMemory = budgets.DefaultTenantWorkerMemory(c.WorkerMemory)
	}
	if c.RecycleIdle <= 0 {
		c.RecycleIdle = budgets.DefaultRecycleIdle
	}
	if c.IsolatesPerWorker <= 0 {
		c.IsolatesPerWorker = budgets.DefaultIsolatesPerWorker
	}
	if c.Queue <= 0 {
		c.Queue = budgets.DefaultWorkerQueue
	}
	if c.RlimitData == 0 {
		c.RlimitData = 8 << 30
	}
	if c.Grace <= 0 {
		c.Grace = 2 * time.Second
	}
	if len(c.Command) == 0 {
		c.Command = []string{wire.Subcommand}
	}
	c.Engine.Limits = c.Engine.Limits.WithDefaults()
}

// check refuses a configuration without its modes: the app always sets
// them, and a pool that picked its own would run otherwise than the
// gateway's documented defaults.
func (c *Config) check() error {
	if c.Isolation != IsolationShared && c.Isolation != IsolationTenant {
		return fmt.Errorf("worker pool: isolation must be %q or %q, not %q", IsolationTenant, IsolationShared, c.Isolation)
	}
	if c.CPUs != CPUsShared && c.CPUs != CPUsPinned && c.CPUs != CPUsAuto {
		return fmt.Errorf("worker pool: cpus must be %q, %q or %q, not %q", CPUsShared, CPUsPinned, CPUsAuto, c.CPUs)
	}
	return nil
}

// Pool supervises the worker processes. Safe for concurrent use.
type Pool struct {
	cfg Config

	mu       sync.Mutex   // guards workers, starting, where, inflight, closed
	workers  []*process   // by index; nil while a replacement starts (or, cordoned, while empty)
	starting map[int]bool // cordoned slots whose process is being started
	// startingFor holds, per tenant, a start under way for it; closed when
	// it ends. The tenant's other requests wait for it instead of each
	// recycling another tenant's worker.
	startingFor map[string]chan struct{}
	// spareStarts are the spares being started that no newcomer has
	// claimed yet, the first begun first (spares.go).
	spareStarts []*spareStart
	// outran holds when picks found no spare ready, in the last
	// spareWindow; surplusSince when more spares than wanted were first
	// up (spares.go). spareEvery and spareLinger are spares.go's, lowered
	// by tests.
	outran       []time.Time
	surplusSince time.Time
	spareEvery   int
	spareLinger  time.Duration
	where        map[string]*process
	inflight     map[string]int // per retained isolate: its invocations in flight
	sendTurns    *turns         // each handle's invocation frames in arrival order
	// onTicket (tests) sees each invocation\'s place in its handle\'s order.
	onTicket func(req program.WireRequest, tk ticket)
	// answered counts, per retained isolate, its invocations answered:
	// the kill clock's evidence that the calls queued ahead progress.
	answered map[string]uint64
	closed   bool
	restarts int
	// waiters counts, per tenant under its share, its calls waiting for a
	// worker (cordon.go; made when first needed).
	waiters map[string]int

	noNetns atomic.Bool // workers could not get a network namespace
	// startup is what the first worker made that the others start from
	// (startup.go); nil until one answered it.
	startup atomic.Pointer[wire.Startup]
	cpus    *cpuPlacement

	stop chan struct{}
	wg   sync.WaitGroup
}

// Start launches the workers and waits for each handshake.
func Start(cfg Config) (*Pool, error) {
	if err := cfg.check(); err != nil {
		return nil, err
	}
	cfg.defaults()
	pool := &Pool{
		cfg:       cfg,
		workers:   make([]*process, initialSlots(cfg)),
		where:     map[string]*process{},
		inflight:  map[string]int{},
		sendTurns: newTurns(),
		answered:  map[string]uint64{},
		starting:  map[int]bool{}, startingFor: map[string]chan struct{}{},
		stop:       make(chan struct{}),
		cpus:       newCPUPlacement(cfg.CPUs),
		spareEvery: spareEvery, spareLinger: spareWindow,
	}
	if len(pool.cpus.cpus) > 1 {
		pool.wg.Add(1)
		go pool.balanceLoop()
	}
	if pool.cordoned() {
		// Workers start when tenants need them; spares are started
		// ahead so a new tenant does not wait for a process start
		// (spares.go).
		pool.wg.Add(1)
		go pool.memoryLoop()
		p, err := pool.spawn(0)
		if err != nil {
			pool.Shutdown()
			return nil, err
		}
		pool.mu.Lock() // the memory loop reads the slots already
		pool.workers[0] = p
		pool.mu.Unlock()
		return pool, nil
	}
	for i := range pool.workers {
		p, err := pool.spawn(i)
		if err != nil {
			pool.Shutdown()
			return nil, err
		}
		pool.workers[i] = p
	}
	return pool, nil
}

func (pool *Pool) workerConfig() wire.WorkerConfig {
	c := wire.WorkerConfig{
		Engine:     pool.cfg.Engine,
		Landlock:   !pool.cfg.DisableLandlock,
		Seccomp:    !pool.cfg.DisableSeccomp,
		RlimitData: pool.cfg.RlimitData,
		Probe:      pool.cfg.Probe,
		FrameCap:   wire.WorkerFrameCap(pool.cfg.Engine),
	}
	c.GCPercent, c.GCHeadroom = gctarget.Policy()
	return c
}

func (pool *Pool) logf(format string, args ...any) {
	if pool.cfg.Logf != nil {
		pool.cfg.Logf(format, args...)
	}
}

// pick chooses the least loaded live worker; for a retaining run, only one
// with a free isolate slot.
func (pool *Pool) pick(retaining bool) (*process, error) {
	pool.mu.Lock()
	defer pool.mu.Unlock()
	if pool.closed {
		return nil, fault.New(fault.Overloaded, "The gateway is stopping.")
	}
	var best *process
	bestScore := 0
	anyAlive := false
	for _, p := range pool.workers {
		if p == nil || !p.alive() {
			continue
		}
		anyAlive = true
		retained, inflight := p.load()
		if retaining && retained >= pool.cfg.IsolatesPerWorker {
			continue
		}
		if inflight >= pool.callLimit() {
			continue
		}
		score := retained + inflight
		if best == nil || score < bestScore {
			best, bestScore = p, score
		}
	}
	if best != nil {
		return best, nil
	}
	if !anyAlive {
		return nil, fault.CrashedWorker()
	}
	if retaining {
		return nil, ErrNoCapacity
	}
	return nil, fault.Overload()
}

// callLimit is how many calls one worker may have in flight or waiting:
// one per isolate slot plus the queue. pool.mu must be held (Resize changes
// the slots).
func (pool *Pool) callLimit() int {
	return pool.cfg.IsolatesPerWorker + pool.cfg.Queue
}

// Run runs a job in any worker (no tenant: tests and shared pools).
func (pool *Pool) Run(ctx context.Context, job program.Job) (program.Outcome, error) {
	return pool.RunFor(ctx, "", job)
}

// RunFor runs a job for tenant in a worker. A retaining run that answers a
// handler keeps its isolate in that worker under job.ID. With
// IsolationTenant the worker is one that hosts tenant alone; when none is
// free the run waits for one within its own bound. A run its worker never
// started (the worker died or was taken out of service first) is sent
// again, once.
func (pool *Pool) RunFor(ctx context.Context, tenant string, job program.Job) (program.Outcome, error) {
	bound := job.Timeout
	if bound <= 0 {
		bound = pool.cfg.Engine.Limits.Timeout
	}
	out, err := pool.runOnce(ctx, tenant, job, bound)
	if errors.Is(err, fault.ErrNotStarted) {
		out, err = pool.runOnce(ctx, tenant, job, bound)
	}
	return out, err
}

func (pool *Pool) runOnce(ctx context.Context, tenant string, job program.Job, bound time.Duration) (program.Outcome, error) {
	var p *process
	var err error
	if pool.cordoned() && tenant != "" {
		p, err = pool.pickFor(ctx, tenant, job.RetainHandles, bound)
	} else {
		p, err = pool.pick(job.RetainHandles)
	}
	if err != nil {
		return program.Outcome{Logs: []string{}}, err
	}
	if job.RetainHandles {
		p.mu.Lock()
		p.pending[job.ID] = true
		p.mu.Unlock()
		defer func() {
			p.mu.Lock()
			delete(p.pending, job.ID)
			p.mu.Unlock()
		}()
	}
	var rep wire.RunReply
	if err := p.call(ctx, wire.PathRun, job, &rep, job.ID, bound); err != nil {
		return program.Outcome{Logs: []string{}}, err
	}
	if rep.Outcome.Logs == nil {
		rep.Outcome.Logs = []string{}
	}
	if rep.Outcome.Retained {
		if !job.RetainHandles {
			p.kill("claimed to retain an isolate it was not asked to")
			return program.Outcome{Logs: []string{}}, fault.CrashedWorker()
		}
		p.mu.Lock()
		dead := p.dead || p.retiring
		if !dead {
			p.retained[job.ID] = isolateInfo{bound: bound, concurrency: job.Concurrency, window: newSendWindow(job.Concurrency)}
		}
		p.mu.Unlock()
		if dead {
			return program.Outcome{Logs: []string{}}, fault.CrashedWorker()
		}
		pool.mu.Lock()
		pool.where[job.ID] = p
		pool.mu.Unlock()
	}
	return rep.Outcome, rep.Fault.Err()
}

// ReadStream takes the next chunk of a streamed response of handle id
// (README.md, API): the chunk (empty when none came within the worker's wait),
// whether the stream ended, and its fault. A read is not a call on the
// kill clock: the worker answers within its wait whatever the isolate does.
// While a stream is open its worker is never recycled.
func (pool *Pool) ReadStream(ctx context.Context, id string, stream int64) ([]byte, bool, error) {
	pool.mu.Lock()
	p := pool.where[id]
	pool.mu.Unlock()
	if p == nil {
		return nil, true, fault.New(fault.HandlesClosed, "The handle's isolate ended during its response stream.")
	}
	ctx, cancel := context.WithTimeout(ctx, wire.StreamWait+pool.cfg.Grace+5*time.Second)
	defer cancel()
	var rep wire.StreamReply
	if err := p.post(ctx, wire.PathStreamRead, wire.StreamRequest{ID: id, Stream: stream, WaitMs: wire.StreamWait.Milliseconds()}, &rep); err != nil {
		if ctx.Err() != nil {
			return nil, false, ctx.Err()
		}
		p.streamEnded(id, stream)
		return nil, true, fault.CrashedWorker()
	}
	if len(rep.Data) > budgets.StreamWindow {
		p.kill("sent a stream chunk over the window")
		return nil, true, fault.CrashedWorker()
	}
	if rep.Done {
		p.streamEnded(id, stream)
	}
	return rep.Data, rep.Done, rep.Fault.Err()
}

// CancelStream gives a streamed response up; its source's cancel runs.
func (pool *Pool) CancelStream(id string, stream int64) {
	pool.mu.Lock()
	p := pool.where[id]
	pool.mu.Unlock()
	if p == nil {
		return
	}
	defer p.streamEnded(id, stream)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	var rep wire.StreamReply
	p.post(ctx, wire.PathStreamCancel, wire.StreamRequest{ID: id, Stream: stream}, &rep)
}

// progress answers how many invocations of handle id were answered while
// others were in flight, and whether any other is in flight now.
func (pool *Pool) progress(id string) (uint64, bool) {
	pool.mu.Lock()
	defer pool.mu.Unlock()
	return pool.answered[id], pool.inflight[id] > 1
}

// windowAhead is the most invocations that wait in the worker beyond
// those in progress (sendWindow sizes it by the handle's pace): a hot
// handle needs that many queued there to keep its pipelining (one handle
// at 32 connections: plus eight served a fifth less, plus sixteen as much
// as no window), and more would fail more calls when a worker dies
// (docs/history/performance-log.md, round 16).
const windowAhead = 16

// Invoke calls a retained isolate's handle. Invocations of one isolate are
// served in arrival order by the worker; past the per-isolate queue they
// fail at once with OVERLOADED. An invocation its worker never started
// answers fault.NotStarted: the caller sends it again.
func (pool *Pool) Invoke(ctx context.Context, id, name string, req program.WireRequest) (program.WireResponse, error) {
	pool.mu.Lock()
	p := pool.where[id]
	if p == nil {
		pool.mu.Unlock()
		return program.WireResponse{}, fault.Closed(id)
	}
	p.mu.Lock()
	info, ok := p.retained[id]
	ok = ok && !p.dead && !p.retiring
	p.mu.Unlock()
	if !ok {
		pool.mu.Unlock()
		return program.WireResponse{}, fault.Closed(id)
	}
	conc := max(info.concurrency, 1)
	// The window (isolateInfo, sendWindow): at most conc plus a few of the
	// handle's invocations are sent to the worker and unanswered; the rest
	// wait here, and when the worker dies they are known never to have
	// started (docs/architecture.md): they answer fault.NotStarted and are
	// sent again. Past the handle's queue (those sent and those waiting to
	// be) a call is refused at once.
	pool.mu.Unlock()
	if err := info.window.acquire(ctx, p.exited, pool.cfg.Engine.Limits.HandleQueue+conc-1); err != nil {
		return program.WireResponse{}, err
	}
	pool.mu.Lock()
	if pool.where[id] != p {
		// The isolate moved or ended while this call waited.
		pool.mu.Unlock()
		info.window.release(false)
		return program.WireResponse{}, fault.NotStarted()
	}
	answered := false
	defer func() { info.window.release(answered) }()
	// Invocations are pipelined to the worker (its isolate runs them in
	// order); ahead is how many of this handle's are in flight before this
	// one, for the kill clock.
	ahead := pool.inflight[id]
	pool.inflight[id]++
	// The frame is written in the order ahead was counted (turns.go).
	ticket := pool.sendTurns.take(id)
	if pool.onTicket != nil {
		pool.onTicket(req, ticket)
	}
	defer pool.sendTurns.done(id, ticket) // the paths that never send
	limit := pool.callLimit()
	pool.mu.Unlock()
	defer func() {
		pool.mu.Lock()
		if pool.inflight[id]--; pool.inflight[id] <= 0 {
			delete(pool.inflight, id)
			delete(pool.answered, id)
		} else {
			pool.answered[id]++
		}
		pool.mu.Unlock()
	}()
	p.mu.Lock()
	inflight := len(p.running)
	p.mu.Unlock()
	if inflight >= limit {
		return program.WireResponse{}, fault.Overload()
	}
	// With concurrency N, the calls ahead run N at a time, and JavaScript
	// of the others may hold this one for up to a bound more.
	queued := ahead
	if conc > 1 {
		queued = ahead/conc + 1
	}
	var rep wire.InvokeReply
	order := &sendOrder{before: func() { pool.sendTurns.wait(id, ticket) }, after: func() { pool.sendTurns.done(id, ticket) }}
	if err := p.callOrdered(ctx, wire.PathInvoke, wire.InvokeRequest{ID: id, Name: name, Request: req}, &rep, id, info.bound, queued, order); err != nil {
		return program.WireResponse{}, err
	}
	answered = true
	if len(rep.Response.Body) > pool.cfg.Engine.Limits.ResponseBody {
		// The worker checks the bound (sandbox's parseWireResponse); one
		// that sent more is not the code it was.
		p.kill(fmt.Sprintf("answered an invocation with a %d byte body, over the %d byte bound", len(rep.Response.Body), pool.cfg.Engine.Limits.ResponseBody))
		return program.WireResponse{}, fault.CrashedWorker()
	}
	p.recordLogs(id, rep.Logs)
	err := rep.Fault.Err()
	if err == nil && rep.Response.Stream != 0 {
		p.streamOpened(id, rep.Response.Stream)
	}
	if errors.Is(err, fault.ErrTimeout) || errors.Is(err, fault.ErrMemory) || errors.Is(err, fault.ErrHandlesClosed) {
		// The worker disposed the isolate.
		p.release(id)
		pool.forget(id, p)
	}
	if errors.Is(err, fault.ErrHandlesClosed) {
		err = fault.Closed(id) // the worker's word is not the text
	}
	return rep.Response, err
}

// Close disposes a retained isolate (closing a handle, or parking it). It
// answers HANDLES_CLOSED for an id that holds nothing.
func (pool *Pool) Close(id string) error {
	pool.mu.Lock()
	p := pool.where[id]
	delete(pool.where, id)
	pool.mu.Unlock()
	if p == nil || !p.release(id) {
		return fault.Closed(id)
	}
	var rep wire.CloseReply
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	// A failure to close leaves the isolate in a worker that will be
	// replaced anyway; the record is already gone.
	_ = p.call(ctx, wire.PathClose, wire.CloseRequest{ID: id}, &rep, "", 5*time.Second)
	return nil
}

// Holds reports whether id has a live isolate.
func (pool *Pool) Holds(id string) bool {
	pool.mu.Lock()
	p := pool.where[id]
	pool.mu.Unlock()
	return p != nil && p.inService()
}

func (pool *Pool) forget(id string, p *process) {
	pool.mu.Lock()
	if pool.where[id] == p {
		delete(pool.where, id)
	}
	pool.mu.Unlock()
}

// died handles a worker's death: its records go, the handles layer hears
// what was lost, and a replacement starts with backoff.
func (pool *Pool) died(p *process, c Crash) {
	pool.cpus.forget(p)
	if hc := pool.cfg.HostCache; hc != nil {
		hc.Gone(p)
	}
	pool.mu.Lock()
	for _, id := range c.Lost {
		if pool.where[id] == p {
			delete(pool.where, id)
		}
	}
	closed := pool.closed
	current := p.index < len(pool.workers) && pool.workers[p.index] == p
	if current {
		pool.workers[p.index] = nil
	}
	pool.mu.Unlock()
	if closed {
		return
	}
	if !current {
		// Retired by Resize: its isolates are rebuilt elsewhere on their
		// next request; nobody was at fault, so nobody is a suspect.
		p.mu.Lock()
		why := p.retired
		p.mu.Unlock()
		if why == "" {
			why = "retired"
		}
		pool.logf("worker %d (pid %d) %s; %d isolates will be rebuilt on their next request", c.Worker, c.PID, why, len(c.Lost))
		if f := pool.cfg.OnCrash; f != nil {
			f(Crash{Worker: c.Worker, PID: c.PID, Lost: c.Lost, Reason: why})
		}
		if pool.cordoned() {
			pool.ensureSpare()
		}
		return
	}
	pool.logf("worker %d (pid %d) died (%s); %d isolates lost, %d running", c.Worker, c.PID, c.Reason, len(c.Lost), len(c.Suspects))
	if f := pool.cfg.OnCrash; f != nil {
		f(c)
	}
	if pool.cordoned() {
		// The slot stays empty until a tenant needs it; the spare is kept.
		pool.ensureSpare()
		return
	}
	// The replacement is counted under the lock that Shutdown sets closed
	// under, so Shutdown's Wait can never start before this Add (the race
	// detector caught a worker dying while the pool shut down).
	pool.mu.Lock()
	if pool.closed {
		pool.mu.Unlock()
		return
	}
	pool.wg.Add(1)
	pool.mu.Unlock()
	go pool.replace(p.index)
}

func (pool *Pool) replace(index int) {
	defer pool.wg.Done()
	backoff := 50 * time.Millisecond
	for {
		p, err := pool.spawn(index)
		if err == nil {
			pool.mu.Lock()
			if pool.closed || index >= len(pool.workers) {
				pool.mu.Unlock()
				p.kill("pool closed or resized")
				return
			}
			pool.workers[index] = p
			pool.restarts++
			pool.mu.Unlock()
			return
		}
		pool.logf("worker %d: replacement failed: %v (next try in %v)", index, err, backoff)
		select {
		case <-pool.stop:
			return
		case <-time.After(backoff):
		}
		if backoff *= 2; backoff > 5*time.Second {
			backoff = 5 * time.Second
		}
	}
}

// initialSlots is how many worker slots a pool starts with: every worker
// of a shared pool, the spare of a cordoned one (its slots fill, and with
// `workers auto` grow, as tenants need them).
func initialSlots(cfg Config) int {
	if cfg.Isolation == IsolationTenant && cfg.Workers == 0 {
		return 1
	}
	return cfg.Workers
}

// Resize applies a changed number of workers or isolates per worker (a
// config reload): extra workers start; surplus ones are retired one at a
// time, and the isolates they held are rebuilt lazily elsewhere. A
// cordoned pool takes 0 for `workers auto`.
func (pool *Pool) Resize(workers, isolatesPerWorker int) {
	if workers < 0 || isolatesPerWorker <= 0 || workers == 0 && !pool.cordoned() {
		return
	}
	pool.mu.Lock()
	if pool.closed {
		pool.mu.Unlock()
		return
	}
	pool.cfg.IsolatesPerWorker = isolatesPerWorker
	pool.cfg.Workers = workers
	old, target := len(pool.workers), workers
	if workers == 0 {
		target = old // auto: slots grow as needed, never retired here
	}
	var retire []*process
	if target > old {
		for i := old; i < target; i++ {
			pool.workers = append(pool.workers, nil)
			if !pool.cordoned() { // cordoned slots fill as tenants need them
				pool.wg.Add(1)
				go pool.replace(i)
			}
		}
	} else if target < old {
		for i, p := range pool.workers[target:] {
			if p != nil {
				retire = append(retire, p)
			}
			delete(pool.starting, target+i)
		}
		pool.workers = pool.workers[:target]
	}
	pool.mu.Unlock()
	for _, p := range retire {
		p.kill("retired: the configuration has fewer workers")
		<-p.exited
	}
}

// WorkerStatus is one worker's state for health checks.
type WorkerStatus struct {
	Index    int    `json:"index"`
	PID      int    `json:"pid,omitempty"`
	State    string `json:"state"` // "up", "starting" or (cordoned) "empty"
	Isolates int    `json:"isolates"`
	Queue    int    `json:"queue"`
	// Tenant is the tenant a cordoned worker hosts ("" for the spare). It
	// is shown on Caddy's admin endpoint only, never on /health.
	Tenant string `json:"-"`
	// RSS is the worker's resident memory in bytes (admin endpoint only).
	RSS int64 `json:"-"`
	// CPU is the CPU a pinned worker runs on, -1 when it is not pinned
	// (admin endpoint only).
	CPU int `json:"-"`
	// PSS and Private are its own memory as last measured, in bytes
	// (cordoned pools only; admin endpoint only).
	PSS, Private int64 `json:"-"`
}

// Status reports every configured worker.
func (pool *Pool) Status() []WorkerStatus {
	pool.mu.Lock()
	workers := append([]*process(nil), pool.workers...)
	starting := map[int]bool{}
	for i := range pool.starting {
		starting[i] = true
	}
	pool.mu.Unlock()
	out := make([]WorkerStatus, len(workers))
	for i, p := range workers {
		out[i] = WorkerStatus{Index: i, State: "starting", CPU: -1}
		if pool.cordoned() && p == nil && !starting[i] {
			out[i].State = "empty"
		}
		if p != nil && p.alive() {
			retained, inflight := p.load()
			out[i] = WorkerStatus{Index: i, PID: p.pid, State: "up", Isolates: retained, Queue: inflight, Tenant: p.owner(), RSS: rss(p.pid), CPU: pool.cpus.cpuOf(p),
				PSS: p.mem.pss.Load(), Private: p.mem.private.Load()}
		}
	}
	return out
}

// Restarts counts replacement workers started so far.
func (pool *Pool) Restarts() int {
	pool.mu.Lock()
	defer pool.mu.Unlock()
	return pool.restarts
}

// KillWorker kills worker index (operations and tests).
func (pool *Pool) KillWorker(index int) error {
	pool.mu.Lock()
	var p *process
	if index >= 0 && index < len(pool.workers) {
		p = pool.workers[index]
	}
	pool.mu.Unlock()
	if p == nil {
		return fmt.Errorf("worker %d is not up", index)
	}
	p.mu.Lock()
	p.operatorKill = true
	p.mu.Unlock()
	p.kill("asked to")
	<-p.exited
	return nil
}

// WorkerOf is the index of the worker holding id, or -1.
func (pool *Pool) WorkerOf(id string) int {
	pool.mu.Lock()
	defer pool.mu.Unlock()
	if p := pool.where[id]; p != nil {
		return p.index
	}
	return -1
}

// Shutdown ends every worker: closing a worker's connection makes it exit;
// stragglers are killed.
func (pool *Pool) Shutdown() {
	pool.mu.Lock()
	if pool.closed {
		pool.mu.Unlock()
		return
	}
	pool.closed = true
	close(pool.stop)
	workers := append([]*process(nil), pool.workers...)
	pool.mu.Unlock()
	pool.wg.Wait()
	for _, p := range workers {
		if p == nil {
			continue
		}
		p.rpc.Close()
		select {
		case <-p.exited:
		case <-time.After(2 * time.Second):
			p.kill("did not exit after its connection closed")
			<-p.exited
		}
	}
}
