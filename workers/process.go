package workers

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strconv"
	"sync"
	"syscall"
	"time"

	"golang.org/x/time/rate"

	"github.com/retainer-gw/retainer/budgets"
	"github.com/retainer-gw/retainer/fault"
	"github.com/retainer-gw/retainer/internal/wirejson"
	"github.com/retainer-gw/retainer/program"
	"github.com/retainer-gw/retainer/workers/wire"
)

// process is one worker process as the gateway sees it.
type process struct {
	pool  *Pool
	index int
	cmd   *exec.Cmd
	pid   int
	rpc   *wire.Conn
	// exited is closed once the process has been reaped.
	exited chan struct{}
	// mem is its memory as last measured (memory.go).
	mem memUse
	// fromStartup: it started from the pool's startup (startup.go).
	fromStartup bool

	mu         sync.Mutex             // guards everything below
	tenant     string                 // cordoned: the tenant it hosts ("" while spare)
	lastActive time.Time              // when work here last began or ended (recycling: cordon.go)
	busyUntil  time.Time              // waitUntil work of an answered invocation may run until then
	streams    map[string]bool        // response streams open here (handle id and stream)
	retiring   bool                   // taken out of service (unroute): calls here never start
	retired    string                 // why the pool let it go (its isolates are lost without blame)
	retained   map[string]isolateInfo // live isolates here
	pending    map[string]bool        // slots reserved by runs that may retain
	running    map[uint64]*callRecord // in-flight calls
	seq        uint64
	dead       bool
	overrunner uint64 // the call whose overrun made the gateway kill this worker
	// overrunNotCaused: the worker used less than half the overrunning
	// call's bound in CPU during its grace period (blame: no strike).
	overrunNotCaused bool
	// killedBy is why the gateway killed it ("" until it does);
	// operatorKill that it was an operator's word (Pool.KillWorker), which
	// strikes nobody, as a kill from outside does.
	killedBy     string
	operatorKill bool
	// visitor is, per handle, the time its isolate spent waiting for
	// visitors' request bodies (body.read calls): the worker moves the
	// bound by it, and so does the kill clock.
	visitor map[string]*visitorTime
}

// visitorTime is one handle's body.read time: the total of those ended,
// and how many are in flight since when.
type visitorTime struct {
	total   time.Duration
	pending int
	since   time.Time
}

// visitorWaited is handle id's body.read time so far. p.mu is held.
func (p *process) visitorWaited(id string) time.Duration {
	v := p.visitor[id]
	if v == nil {
		return 0
	}
	if v.pending > 0 {
		return v.total + time.Since(v.since)
	}
	return v.total
}

// bodyRead notes a body.read of handle id starting; the answer ends it.
func (p *process) bodyRead(id string) (end func()) {
	p.mu.Lock()
	v := p.visitor[id]
	if v == nil {
		v = &visitorTime{}
		p.visitor[id] = v
	}
	if v.pending++; v.pending == 1 {
		v.since = time.Now()
	}
	p.mu.Unlock()
	return func() {
		p.mu.Lock()
		if v.pending--; v.pending == 0 {
			v.total += time.Since(v.since)
		}
		p.mu.Unlock()
	}
}

// isolateInfo is what the gateway keeps of a retained isolate.
type isolateInfo struct {
	bound       time.Duration // its run bound
	concurrency int           // invocations in progress at once (≤ 1: one)
	// window holds a slot for each invocation sent to the worker and not
	// yet answered (Pool.Invoke): concurrency plus a few, by its pace.
	window *sendWindow
}

type callRecord struct {
	handleID string // "" for a computation
	timer    *time.Timer
}

// spawn starts a worker process and completes the handshake.
func (pool *Pool) spawn(index int) (*process, error) {
	conn, child, err := wire.NewLink()
	if err != nil {
		return nil, err
	}
	defer func() {
		for _, f := range child {
			f.Close()
		}
	}()
	stderr, err := pool.stderrSink(index)
	if err != nil {
		conn.Close()
		return nil, err
	}
	cmd := exec.Command("/proc/self/exe", pool.cfg.Command...)
	cmd.Env = []string{} // nothing of the gateway's environment crosses
	cmd.Dir = "/"
	cmd.ExtraFiles = child // wire.FdIn, wire.FdOut
	cmd.Stdin = nil
	cmd.Stdout = stderr
	cmd.Stderr = stderr
	cmd.SysProcAttr = &syscall.SysProcAttr{
		Pdeathsig: syscall.SIGKILL, // dies with the gateway
		Setpgid:   true,            // its own process group: kill(0) reaches no one else
	}
	netns := pool.netnsAvailable()
	if netns {
		setNetNamespace(cmd.SysProcAttr)
	}
	cpu := pool.cpus.reserve()
	err = startPinned(cmd, cpu)
	if err != nil && netns {
		// The kernel (or a container around us) refuses new namespaces:
		// say so once, and start workers without them.
		pool.noNetns.Store(true)
		pool.logf("workers start without a network namespace of their own (%v); the seccomp filter still refuses sockets", err)
		cmd = exec.Command("/proc/self/exe", pool.cfg.Command...)
		cmd.Env, cmd.Dir, cmd.ExtraFiles, cmd.Stdout, cmd.Stderr = []string{}, "/", child, stderr, stderr
		cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL, Setpgid: true}
		err = startPinned(cmd, cpu)
	}
	if err != nil {
		pool.cpus.started(cpu, nil)
		conn.Close()
		stderr.Close()
		return nil, fmt.Errorf("starting a worker: %w", err)
	}
	stderr.Close() // the child holds its copy
	p := &process{
		pool:     pool,
		index:    index,
		cmd:      cmd,
		pid:      cmd.Process.Pid,
		exited:   make(chan struct{}),
		retained: map[string]isolateInfo{},
		pending:  map[string]bool{},
		running:  map[uint64]*callRecord{},
		streams:  map[string]bool{},
		visitor:  map[string]*visitorTime{},
	}
	p.rpc = wire.NewConn(conn, wire.WorkerFrameCap(pool.cfg.Engine), wire.MaxGatewayFrame, p.serveWorker, func(reason string) { p.kill("sent " + reason) })
	p.rpc.Start()
	go p.reap()
	if err := p.handshake(); err != nil {
		pool.cpus.started(cpu, nil)
		p.kill("handshake failed")
		<-p.exited
		return nil, err
	}
	pool.cpus.started(cpu, p)
	return p, nil
}

// stderrSink forwards a worker's output to the pool's log, line by line and
// bounded: it is the output of a process that may be hostile. At most
// stderrBurst lines at once and one a second after them are relayed (a
// crash's stack trace, ~400 lines, once went whole into the gateway's
// log); the lines left out are counted in the log.
func (pool *Pool) stderrSink(index int) (*os.File, error) {
	r, w, err := os.Pipe()
	if err != nil {
		return nil, err
	}
	go func() {
		defer r.Close()
		s := bufio.NewScanner(io.LimitReader(r, 1<<20))
		s.Buffer(make([]byte, 4096), 4096)
		lines := newStderrLimiter()
		left := 0
		for s.Scan() {
			if !lines.Allow() {
				left++
				continue
			}
			if left > 0 {
				pool.logf("worker %d: %d lines of its output were not logged", index, left)
				left = 0
			}
			pool.logf("worker %d: %s", index, s.Text())
		}
		if left > 0 {
			pool.logf("worker %d: %d lines of its output were not logged", index, left)
		}
		io.Copy(io.Discard, r)
	}()
	return w, nil
}

// stderrBurst is how many lines of a worker's output are relayed at once.
const stderrBurst = 64

// newStderrLimiter relays stderrBurst lines at once and one a second
// after them.
func newStderrLimiter() *rate.Limiter {
	return rate.NewLimiter(rate.Every(time.Second), stderrBurst)
}

func (p *process) handshake() error {
	var rep wire.HelloReply
	ctx, cancel := context.WithTimeout(context.Background(), wire.HandshakeTimeout)
	defer cancel()
	hello := wire.HelloRequest{Version: wire.ProtocolVersion, Config: p.pool.workerConfig()}
	// The first worker's snapshot and caches (startup.go).
	hello.Startup = p.pool.startup.Load()
	hello.WantStartup = hello.Startup == nil
	err := p.post(ctx, wire.PathHello, hello, &rep)
	if err == nil && rep.Error != "" {
		err = fmt.Errorf("worker start-up: %s", rep.Error)
	} else if err != nil {
		err = fmt.Errorf("worker handshake: %w", err)
	}
	if err != nil {
		// Whatever failed, the next worker makes its own startup.
		p.pool.dropStartup(hello.Startup)
		return err
	}
	if rep.Version != wire.ProtocolVersion {
		return fmt.Errorf("worker speaks %q, want %q", rep.Version, wire.ProtocolVersion)
	}
	if rep.PID != p.pid {
		return fmt.Errorf("worker says it is pid %d, it is %d", rep.PID, p.pid)
	}
	if hello.WantStartup {
		p.pool.keepStartup(rep.Startup)
	}
	p.fromStartup = rep.FromStartup
	return nil
}

// reap waits for the process to end and reports its death.
func (p *process) reap() {
	err := p.cmd.Wait()
	p.rpc.Close()
	p.mu.Lock()
	p.dead = true
	lost := make([]string, 0, len(p.retained))
	for id := range p.retained {
		lost = append(lost, id)
	}
	// Blame (docs/architecture.md): when the gateway killed the worker because one call
	// overran, that call answers TIMEOUT and its handle alone takes the
	// strike; the other isolates lost here are rebuilt without one. A
	// worker killed from outside (a signal the gateway did not send) or on
	// an operator's word strikes nobody. Only a death the worker raised
	// itself (a native crash, a V8 abort, an exit, or a protocol violation
	// the gateway killed it for) makes the running isolates suspects.
	operator := p.operatorKill
	outside := operator || p.killedBy == "" && killedFromOutside(p.cmd.ProcessState)
	suspects := []string{}
	seen := map[string]bool{}
	for _, c := range p.running {
		if p.overrunner == 0 && !outside && c.handleID != "" && !seen[c.handleID] {
			seen[c.handleID] = true
			suspects = append(suspects, c.handleID)
		}
		c.timer.Stop()
	}
	p.retained = map[string]isolateInfo{}
	p.mu.Unlock()
	close(p.exited)
	reason := "exited"
	if err != nil {
		reason = err.Error()
	}
	switch {
	case operator:
		reason = "by the gateway, as an operator asked"
	case outside:
		reason += ", a signal the gateway did not send: the kernel's OOM killer or an operator"
	}
	p.pool.died(p, Crash{Worker: p.index, PID: p.pid, Lost: lost, Suspects: suspects, Reason: reason, Killed: outside})
}

// killedFromOutside reports a process ended by a signal that someone else
// sent it: SIGKILL (the kernel's OOM killer, an operator) or SIGTERM (an
// operator). A worker's own crash ends it with SIGSEGV, SIGBUS, SIGILL or
// SIGABRT, or (the Go runtime catching those in V8's code, or its own
// fatal errors) with an exit status; the caller knows whether the gateway
// sent the signal.
func killedFromOutside(ps *os.ProcessState) bool {
	if ps == nil {
		return false
	}
	ws, ok := ps.Sys().(syscall.WaitStatus)
	return ok && ws.Signaled() && (ws.Signal() == syscall.SIGKILL || ws.Signal() == syscall.SIGTERM)
}

// kill ends the process (SIGKILL); reap reports it.
func (p *process) kill(reason string) {
	p.mu.Lock()
	already := p.dead
	if !already && p.killedBy == "" {
		p.killedBy = reason
	}
	p.mu.Unlock()
	if already {
		return
	}
	p.pool.logf("worker %d (pid %d) killed: %s", p.index, p.pid, reason)
	p.cmd.Process.Kill()
}

// touch notes work in progress here now (a host call, a log line): the
// worker is not idle. An open response stream keeps it busy by itself
// (streamOpened).
func (p *process) touch() {
	p.mu.Lock()
	p.lastActive = time.Now()
	p.mu.Unlock()
}

// streamOpened and streamEnded keep count of the response streams open
// here: a worker with one open is never recycled.
func (p *process) streamOpened(id string, stream int64) {
	p.mu.Lock()
	if !p.dead {
		p.streams[streamKey(id, stream)] = true
	}
	p.mu.Unlock()
}

func (p *process) streamEnded(id string, stream int64) {
	p.mu.Lock()
	delete(p.streams, streamKey(id, stream))
	p.lastActive = time.Now()
	p.mu.Unlock()
}

func streamKey(id string, stream int64) string { return id + "/" + strconv.FormatInt(stream, 10) }

// owner is the tenant a cordoned worker hosts ("" while spare or shared).
func (p *process) owner() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.tenant
}

// inService reports whether calls may still be sent here.
func (p *process) inService() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return !p.dead && !p.retiring
}

func (p *process) alive() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return !p.dead
}

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
}

// callOrdered is callQueued whose frame is written in order's turn.
func (p *process) callOrdered(ctx context.Context, path string, body, out any, handleID string, bound time.Duration, ahead int, order *sendOrder) error {
	var seen uint64 // the handle's answered calls when the clock was set
	if handleID != "" {
		seen, _ = p.pool.progress(handleID)
	}
	p.mu.Lock()
	if p.dead || p.retiring {
		// Nothing was sent: the call had no effect and may go elsewhere.
		p.mu.Unlock()
		return fault.NotStarted()
	}
	p.seq++
	id := p.seq
	p.lastActive = time.Now()
	rec := &callRecord{handleID: handleID}
	allowed := time.Duration(ahead+1) * bound
	// Calls of one handle can reach the worker in another order than they
	// were counted (they are sent, and served in the worker, from separate
	// goroutines), so a call may wait behind more than its ahead. While
	// other calls of its handle are in flight and answered since the clock
	// was last set, the clock is set again for one more bound: the call is
	// queued behind work that progresses. A stuck call answers nothing
	// more, and the next firing kills.
	cpuAtBound := int64(-1) // the worker's CPU time at the bound (guarded by p.mu)
	credited := time.Duration(0)
	if handleID != "" {
		credited = p.visitorWaited(handleID) // p.mu is held
	}
	var fire func()
	fire = func() {
		p.mu.Lock()
		_, still := p.running[id]
		visitor := time.Duration(0)
		if handleID != "" {
			visitor = p.visitorWaited(handleID)
		}
		p.mu.Unlock()
		if !still {
			return
		}
		if visitor > credited {
			// Time the handle waited for a visitor's body is not run time
			// (docs/architecture.md, Blame); the worker moved its bound by as much.
			allowed += visitor - credited
			p.mu.Lock()
			rec.timer = time.AfterFunc(visitor-credited, fire)
			p.mu.Unlock()
			credited = visitor
			return
		}
		if handleID != "" {
			if n, others := p.pool.progress(handleID); others && n != seen {
				seen = n
				allowed += bound
				p.mu.Lock()
				rec.timer = time.AfterFunc(bound, fire)
				p.mu.Unlock()
				return
			}
		}
		now := processCPU(p.pid)
		p.mu.Lock()
		if p.overrunner == 0 {
			p.overrunner = id
			// Half of what the grace period could show: a bound longer
			// than the grace period would otherwise never be charged.
			p.overrunNotCaused = cpuAtBound >= 0 && now >= 0 && now-cpuAtBound < min(bound, p.pool.cfg.Grace).Nanoseconds()/2
		}
		p.mu.Unlock()
		p.kill(fmt.Sprintf("a call overran its %v bound (%v with the calls queued ahead of it) by the %v grace period", bound, allowed, p.pool.cfg.Grace))
	}
	// One timer a call: at the bound it reads the worker's CPU time (blame
	// for a hard kill looks at the CPU spent over the grace period, an
	// upper bound of the stuck isolate's) and sets itself again for the
	// grace period; a call that ends before its bound costs no more.
	rec.timer = time.AfterFunc(allowed, func() {
		c := processCPU(p.pid)
		p.mu.Lock()
		defer p.mu.Unlock()
		if _, still := p.running[id]; still {
			cpuAtBound = c
			rec.timer = time.AfterFunc(p.pool.cfg.Grace, fire)
		}
	})
	p.running[id] = rec
	p.mu.Unlock()
	err := p.postOrdered(ctx, path, body, out, order)
	p.mu.Lock()
	rec.timer.Stop()
	p.mu.Unlock()
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

// Tenant is the tenant the worker hosts ("" when shared). (hostcache.Peer)
func (p *process) Tenant() string { return p.owner() }

// Holds reports whether id is a run or handle of this worker.
// (hostcache.Peer)
func (p *process) Holds(id string) bool { return p.holdsOrRuns(id) }

// recordLogs hands an invocation's console lines to OnLog, capped and
// checked like every other word of a worker.
func (p *process) recordLogs(id string, logs []program.LogEntry) {
	f := p.pool.cfg.OnLog
	if f == nil {
		return
	}
	if len(logs) > 1000 {
		logs = logs[:1000]
	}
	now := time.Now()
	for _, e := range logs {
		if len(e.Message) > budgets.LogBytes {
			e.Message = e.Message[:budgets.LogBytes]
		}
		if !validLevel(e.Level) {
			e.Level = "log"
		}
		e.Time = now
		f(id, e)
	}
}

func validLevel(l string) bool {
	switch l {
	case "log", "info", "warn", "error", "debug":
		return true
	}
	return false
}

// holdsOrRuns reports whether id lives in this worker or is being run or
// invoked there right now.
func (p *process) holdsOrRuns(id string) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if _, ok := p.retained[id]; ok {
		return true
	}
	for _, c := range p.running {
		if c.handleID == id {
			return true
		}
	}
	return false
}

func (p *process) holds(id string) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	_, ok := p.retained[id]
	return ok
}

// release drops id from this process's records; false if it was not there.
func (p *process) release(id string) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	_, ok := p.retained[id]
	delete(p.retained, id)
	if v := p.visitor[id]; v != nil && v.pending == 0 {
		delete(p.visitor, id)
	}
	return ok
}

// load is what placement compares: live isolates plus in-flight calls.
func (p *process) load() (retained, inflight int) {
	p.mu.Lock()
	defer p.mu.Unlock()
	return len(p.retained) + len(p.pending), len(p.running)
}
