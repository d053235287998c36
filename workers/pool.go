package workers

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/retainer-gw/retainer/budgets"
	"github.com/retainer-gw/retainer/fault"
	"github.com/retainer-gw/retainer/internal/gctarget"
	"github.com/retainer-gw/retainer/program"
	"github.com/retainer-gw/retainer/workers/wire"
)

// The protocol's names the pool's callers use (package wire defines them):
// the subcommand a worker process runs under, and the engine's
// configuration a worker is started with.
const Subcommand = wire.Subcommand

// ErrNoCapacity is answered by Run for a retaining run when every isolate
// slot is taken: the caller parks an idle isolate (Close) and tries again.
var ErrNoCapacity = errors.New("every worker isolate slot is taken")

// ErrTenantFull is the ErrNoCapacity of tenant cordons: every slot of the
// workers the tenant holds is taken and no other worker can be had. Only
// an idle isolate of the tenant's own frees a slot it can use; parking
// another tenant's would reset that tenant's state for nothing.
var ErrTenantFull = fmt.Errorf("%w in the tenant's own workers", ErrNoCapacity)

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
	// favours are the workers favoured while they serve their first run
	// (favour_linux.go).
	favours *favours
	// startHold (tests) is called with each process started, before its
	// handshake: a test holds a start there.
	startHold atomic.Pointer[func(pid int)]
	// pickHold (tests) is called with each run's worker once picked,
	// before its call.
	pickHold func(p *process)
	// takenRuns counts the first runs of spares taken, not answered yet;
	// takenIdle is closed when it falls to 0, spareDefer bounds the wait
	// (spares.go).
	takenRuns  int
	takenIdle  chan struct{}
	spareDefer time.Duration

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
		favours: newFavours(), spareDefer: spareDefer,
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
		best.reserve(retaining)
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

// reserve counts a run placed on p by a pick until its call is on record
// (callOrdered, sendOrder.picked) and, for a retaining run, its isolate's
// slot (pending): the pick releases pool.mu long before that, and the
// next pick must see p taken, or two runs arriving together both take the
// one worker that looked free while another stays idle.
func (p *process) reserve(retaining bool) {
	p.mu.Lock()
	p.picks++
	if retaining {
		p.pickRetains++
	}
	p.mu.Unlock()
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
	// The pick's reservation (reserve) is released by the call once it is
	// on record; here only if the call is never made.
	placed := &sendOrder{picked: true}
	defer func() {
		if placed.picked {
			p.mu.Lock()
			p.picks--
			p.mu.Unlock()
		}
	}()
	if pool.pickHold != nil {
		pool.pickHold(p)
	}
	if p.endTaken() {
		// The spares that replace it wait for this run (spares.go).
		defer pool.endTakenRun()
	}
	if pool.cordoned() && tenant != "" && p.firstRun() {
		// A newcomer's first request, most often (favour_linux.go).
		pool.favour(p)
		defer pool.unfavour(p)
	}
	if job.RetainHandles {
		p.mu.Lock()
		p.pending[job.ID] = true
		p.pickRetains-- // the slot is reserved by pending now
		p.mu.Unlock()
		defer func() {
			p.mu.Lock()
			delete(p.pending, job.ID)
			p.mu.Unlock()
		}()
	}
	var rep wire.RunReply
	placed.seen, _ = pool.progress(job.ID)
	if err := p.callOrdered(ctx, wire.PathRun, job, &rep, job.ID, bound, 0, placed); err != nil {
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
	seen := pool.answered[id] // progress, for the kill clock
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
	order := &sendOrder{before: func() { pool.sendTurns.wait(id, ticket) }, after: func() { pool.sendTurns.done(id, ticket) }, seen: seen}
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
