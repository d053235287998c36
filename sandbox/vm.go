package sandbox

import (
	"crypto/rand"
	_ "embed"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	v8 "rogchap.com/v8go"

	"github.com/retainer-gw/retainer/fault"
)

//go:embed js/bootstrap.js
var bootstrapSource string

// flagsMu serializes SetFlags with NewIsolate: V8 reads
// --max-old-space-size when an isolate is created, so the flag and the
// creation must not interleave with another isolate's.
var flagsMu sync.Mutex

// bootstrapCache is the V8 code cache of the runtime bootstrap, made by the
// first isolate and reused by every later one so the runtime is not parsed
// again per isolate.
var (
	bootstrapCacheMu sync.Mutex
	bootstrapCache   *v8.CompilerCachedData
)

// vm is one V8 isolate with its context and runtime. It is owned by exactly
// one goroutine, its loop: every V8 call on it happens there, including
// Value.Release. Other goroutines reach it only by sending closures on jobs,
// and the watchdog only through terminate (which takes mu).
type vm struct {
	eng       *Engine
	iso       *v8.Isolate
	ctx       *v8.Context
	guard     heapGuard
	memoryMiB int

	runProgram, invoke, setEnv, fireTimer, pendingWork, settleHost, setGrants *v8.Function

	host  hostCalls // loop-owned, but for host.mu
	runID string    // whose grants host calls use: the job's id or the handle's

	jobs chan func()   // closures run on the loop, in arrival order
	wake chan struct{} // a host event is ready (capabilities use it)
	done chan struct{} // closed once the isolate is disposed

	// Loop-owned state (no lock: only the loop goroutine touches it).
	timers            map[int32]time.Time
	uncached          map[string]*v8.UnboundScript // runtime modules whose code cache is not made yet
	uncachedBootstrap *v8.UnboundScript
	released          []*v8.Value // values handed back to V8, released after the call
	sink              func(level, msg string)
	activityLogs      logBuffer // a retained isolate's timer and waitUntil output, per bounded activity
	dead              bool      // a bound was hit or the engine closed: dispose after this job
	handleID          string
	timeout           time.Duration

	// mu guards the watchdog's view: which run is current, whether the
	// watchdog terminated it, and whether the isolate is gone.
	mu         sync.Mutex
	runSeq     uint64
	current    uint64
	terminated bool
	disposed   bool
}

// newVM creates an isolate with a heap bounded at memoryMiB, installs the
// runtime, and starts its loop.
func newVM(e *Engine, memoryMiB int) (*vm, error) {
	m := &vm{
		eng:       e,
		memoryMiB: memoryMiB,
		jobs:      make(chan func(), e.cfg.HandleQueue),
		wake:      make(chan struct{}, 1),
		done:      make(chan struct{}),
		timers:    map[int32]time.Time{},
		uncached:  map[string]*v8.UnboundScript{},
	}
	ready := make(chan error, 1)
	go m.loop(ready)
	if err := <-ready; err != nil {
		return nil, err
	}
	return m, nil
}

func (m *vm) loop(ready chan<- error) {
	// Not pinned with runtime.LockOSThread: measured, a pinned loop made a
	// trivial invocation's p50 113 µs instead of 39 µs (every hand-off then
	// wakes a specific OS thread). v8go's Locker makes thread moves safe.
	defer close(m.done)
	if err := m.create(); err != nil {
		ready <- err
		return
	}
	ready <- nil
	defer func() {
		if m.handleID != "" {
			m.eng.forget(m.handleID, m)
		}
		m.dispose()
	}()
	idle := time.NewTimer(time.Hour)
	defer idle.Stop()
	for !m.dead {
		var timerC <-chan time.Time
		if due, ok := m.nextTimer(); ok {
			idle.Reset(time.Until(due))
			timerC = idle.C
		}
		select {
		case f, ok := <-m.jobs:
			if !ok {
				return
			}
			f()
		case <-timerC:
			// A retained isolate's timers run between invocations, each
			// batch under a fresh bound.
			if err := m.bounded(m.timeout, func(deadline time.Time) error {
				return m.fireDue(deadline)
			}); err != nil {
				m.kill()
				if m.handleID != "" && m.eng.cfg.OnLost != nil {
					m.eng.cfg.OnLost(m.handleID, err)
				}
			}
		case <-m.eng.closing:
			m.kill()
		}
	}
}

func (m *vm) create() (err error) {
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("creating an isolate: %v", r)
		}
	}()
	flagsMu.Lock()
	v8.SetFlags(fmt.Sprintf("--max-old-space-size=%d", oldSpaceMiB(m.memoryMiB)), fmt.Sprintf("--max-semi-space-size=%d", semiSpaceMiB))
	m.iso = v8.NewIsolate()
	flagsMu.Unlock()
	m.guard = installHeapGuard(m.iso)
	m.ctx = v8.NewContext(m.iso)
	return m.installRuntime()
}

// installRuntime gives a fresh context the host functions and the runtime
// bootstrap (BenchmarkRuntimeInstall measures it alone).
func (m *vm) installRuntime() error {
	host := v8.NewObjectTemplate(m.iso)
	m.hostFunc(host, "log", m.hostLog)
	m.hostFunc(host, "setTimer", m.hostSetTimer)
	m.hostFunc(host, "clearTimer", m.hostClearTimer)
	m.hostFunc(host, "random", m.hostRandom)
	m.hostFunc(host, "load", m.hostLoad)
	m.hostFunc(host, "digest", m.hostDigest)
	m.hostFunc(host, "hmac", m.hostHMAC)
	m.hostFunc(host, "call", m.hostCallFn)
	m.hostFunc(host, "importPublic", m.hostImportPublic)
	m.hostFunc(host, "verifySig", m.hostVerify)
	hostObj, err := host.NewInstance(m.ctx)
	if err != nil {
		return err
	}
	boot, err := m.compileBootstrap()
	if err != nil {
		return err
	}
	bootVal, err := boot.Run(m.ctx)
	if err != nil {
		return fmt.Errorf("running the runtime bootstrap: %w", err)
	}
	bootFn, err := bootVal.AsFunction()
	if err != nil {
		return err
	}
	internals, err := bootFn.Call(v8.Undefined(m.iso), hostObj)
	if err != nil {
		return fmt.Errorf("installing the runtime: %w", err)
	}
	obj, err := internals.AsObject()
	if err != nil {
		return err
	}
	for name, dst := range map[string]**v8.Function{
		"runProgram": &m.runProgram, "invoke": &m.invoke, "setEnv": &m.setEnv,
		"fireTimer": &m.fireTimer, "pendingWork": &m.pendingWork,
		"settleHost": &m.settleHost, "setGrants": &m.setGrants,
	} {
		v, err := obj.Get(name)
		if err != nil {
			return err
		}
		if *dst, err = v.AsFunction(); err != nil {
			return fmt.Errorf("runtime entry %s: %w", name, err)
		}
	}
	bootVal.Release()
	hostObj.Release()
	if m.uncachedBootstrap != nil {
		bootstrapCacheMu.Lock()
		if bootstrapCache == nil {
			bootstrapCache = m.uncachedBootstrap.CreateCodeCache()
		}
		bootstrapCacheMu.Unlock()
		m.uncachedBootstrap = nil
	}
	return nil
}

func (m *vm) compileBootstrap() (*v8.UnboundScript, error) {
	bootstrapCacheMu.Lock()
	cache := bootstrapCache
	bootstrapCacheMu.Unlock()
	opts := v8.CompileOptions{}
	if cache != nil {
		opts.CachedData = cache
	}
	s, err := m.iso.CompileUnboundScript(bootstrapSource, "runtime.js", opts)
	if err != nil {
		return nil, fmt.Errorf("compiling the runtime bootstrap: %w", err)
	}
	if cache == nil {
		// Made once the bootstrap has run (flushCodeCaches), so that it
		// holds the functions the installation compiled.
		m.uncachedBootstrap = s
	}
	return s, nil
}

// semiSpaceMiB bounds each of V8's young-generation semi-spaces. V8's
// default (16 MiB each, 48 MiB for the young generation) would by itself
// nearly fill a 64 MiB bound; small isolates do not need it.
const semiSpaceMiB = 1

// oldSpaceMiB is the --max-old-space-size that makes an isolate's whole heap
// limit (old space plus young generation, as V8 reports it in
// HeapSizeLimit) come out at memoryMiB; TestHeapLimitMatchesBound checks it.
func oldSpaceMiB(memoryMiB int) int {
	n := memoryMiB - 3*semiSpaceMiB
	if n < 8 {
		n = 8
	}
	return n
}

// hostFunc installs a Go function in the host object handed to the
// bootstrap. Every callback releases its arguments, and recovers a Go panic
// into a JavaScript exception (a panic would leave V8's lock held).
func (m *vm) hostFunc(tmpl *v8.ObjectTemplate, name string, f func(args []*v8.Value) (*v8.Value, error)) {
	fn := v8.NewFunctionTemplate(m.iso, func(info *v8.FunctionCallbackInfo) (ret *v8.Value) {
		defer info.Release()
		defer func() {
			if r := recover(); r != nil {
				ret = m.throw(fmt.Sprintf("host function %s failed", name))
			}
		}()
		v, err := f(info.Args())
		if err != nil {
			return m.throw(err.Error())
		}
		if v != nil {
			// V8 copies the returned handle; ours is released after the
			// outermost call returns (releasing it now would free it first).
			m.released = append(m.released, v)
		}
		return v
	})
	if err := tmpl.Set(name, fn, v8.ReadOnly); err != nil {
		panic(err)
	}
}

func (m *vm) throw(msg string) *v8.Value {
	v, err := v8.NewValue(m.iso, msg)
	if err != nil {
		return nil
	}
	m.released = append(m.released, v)
	// ThrowException makes a Value of its own: released with the others
	// after the outermost call (it leaked once per throw before).
	t := m.iso.ThrowException(v)
	if t != nil {
		m.released = append(m.released, t)
	}
	return t
}

func (m *vm) hostLog(args []*v8.Value) (*v8.Value, error) {
	if len(args) < 2 || m.sink == nil {
		return nil, nil
	}
	m.sink(args[0].String(), args[1].String())
	return nil, nil
}

// maxTimers bounds the pending timers of one isolate.
const maxTimers = 10000

func (m *vm) hostSetTimer(args []*v8.Value) (*v8.Value, error) {
	if len(args) < 2 {
		return nil, errors.New("setTimer needs an id and a delay")
	}
	id := args[0].Int32()
	if _, ok := m.timers[id]; !ok && len(m.timers) >= maxTimers {
		return nil, fmt.Errorf("too many pending timers (the bound is %d)", maxTimers)
	}
	ms := args[1].Number()
	if ms < 0 || ms != ms {
		ms = 0
	}
	if ms > float64(24*time.Hour/time.Millisecond) {
		ms = float64(24 * time.Hour / time.Millisecond)
	}
	m.timers[id] = time.Now().Add(time.Duration(ms * float64(time.Millisecond)))
	return nil, nil
}

func (m *vm) hostClearTimer(args []*v8.Value) (*v8.Value, error) {
	if len(args) > 0 {
		delete(m.timers, args[0].Int32())
	}
	return nil, nil
}

func (m *vm) hostRandom(args []*v8.Value) (*v8.Value, error) {
	if len(args) < 1 {
		return nil, errors.New("random needs a length")
	}
	n := int(args[0].Int32())
	if n < 0 || n > 65536 {
		return nil, errors.New("random length out of range")
	}
	b := make([]byte, n)
	if _, err := rand.Read(b); err != nil {
		return nil, err
	}
	return v8.NewValue(m.iso, latin1String(b))
}

func (m *vm) nextTimer() (time.Time, bool) {
	var first time.Time
	ok := false
	for _, due := range m.timers {
		if !ok || due.Before(first) {
			first, ok = due, true
		}
	}
	return first, ok
}

// fireDue runs every timer that is due, in due order.
func (m *vm) fireDue(deadline time.Time) error {
	for {
		var id int32
		var first time.Time
		found := false
		now := time.Now()
		for tid, due := range m.timers {
			if !due.After(now) && (!found || due.Before(first) || due.Equal(first) && tid < id) {
				id, first, found = tid, due, true
			}
		}
		if !found {
			return nil
		}
		delete(m.timers, id)
		v, err := m.call(m.fireTimer, int32(id))
		if err := m.boundHit(); err != nil {
			return err
		}
		if err != nil {
			return fault.Wrap(fault.Runtime, err, "a timer callback failed")
		}
		v.Release()
		if time.Now().After(deadline) {
			return m.timeoutFault()
		}
	}
}

// call invokes a runtime function with Go arguments, releasing what it made.
func (m *vm) call(fn *v8.Function, args ...any) (*v8.Value, error) {
	vals := make([]v8.Valuer, len(args))
	made := make([]*v8.Value, 0, len(args))
	for i, a := range args {
		if v, ok := a.(*v8.Value); ok {
			vals[i] = v
			continue
		}
		v, err := v8.NewValue(m.iso, a)
		if err != nil {
			return nil, err
		}
		vals[i] = v
		made = append(made, v)
	}
	res, err := fn.Call(v8.Undefined(m.iso), vals...)
	for _, v := range made {
		v.Release()
	}
	m.releaseReturned()
	return res, err
}

func (m *vm) releaseReturned() {
	for _, v := range m.released {
		v.Release()
	}
	m.released = m.released[:0]
}

// bounded runs f as one bounded activity: a fresh run id, a watchdog that
// terminates the isolate at the timeout (only while this run is current),
// and the heap guard. A bound hit makes the isolate dead.
func (m *vm) bounded(timeout time.Duration, f func(deadline time.Time) error) error {
	m.mu.Lock()
	m.runSeq++
	id := m.runSeq
	m.current = id
	m.terminated = false
	m.mu.Unlock()
	deadline := time.Now().Add(timeout)
	m.activityLogs = logBuffer{}
	m.beginHostScope(timeout)
	defer m.endHostScope()
	defer m.noteDroppedLogs()
	watchdog := time.AfterFunc(timeout, func() {
		m.mu.Lock()
		defer m.mu.Unlock()
		if m.current == id && !m.disposed {
			m.terminated = true
			m.iso.TerminateExecution()
		}
	})
	err := f(deadline)
	watchdog.Stop()
	m.flushCodeCaches()
	m.mu.Lock()
	m.current = 0
	m.mu.Unlock()
	if bound := m.boundHit(); bound != nil {
		err = bound
	}
	if errors.Is(err, fault.ErrTimeout) || errors.Is(err, fault.ErrMemory) {
		m.dead = true
	}
	return err
}

// noteDroppedLogs tells a retained handle's log that an activity's output
// passed its bound.
func (m *vm) noteDroppedLogs() {
	if m.activityLogs.dropped > 0 && m.handleID != "" && m.eng.cfg.OnLog != nil {
		m.eng.cfg.OnLog(m.handleID, LogEntry{Time: time.Now(), Level: "warn", Message: m.activityLogs.note()})
	}
}

// boundHit reports a bound that ended the current activity. V8 can report
// success for a run terminated inside a microtask loop, so this is checked
// after every call into V8, whatever the call returned.
func (m *vm) boundHit() error {
	if m.guard.hit() {
		return fault.OutOfMemory(m.memoryMiB)
	}
	m.mu.Lock()
	t := m.terminated
	m.mu.Unlock()
	if t {
		return m.timeoutFault()
	}
	return nil
}

func (m *vm) timeoutFault() error {
	return fault.TimedOut(m.timeout.Milliseconds())
}

// settle drives the event loop until promise-like v settles, the deadline
// passes, or nothing could ever settle it. It answers the fulfilled value.
func (m *vm) settle(v *v8.Value, deadline time.Time) (*v8.Value, error) {
	if !v.IsPromise() {
		return v, nil
	}
	p, err := v.AsPromise()
	if err != nil {
		return nil, err
	}
	// V8's default policy already ran the microtasks when the call that made
	// the promise returned, so the state is read before a checkpoint.
	checkpoint := false
	for {
		if checkpoint {
			m.ctx.PerformMicrotaskCheckpoint()
			m.releaseReturned()
		}
		if err := m.boundHit(); err != nil {
			return nil, err
		}
		switch p.State() {
		case v8.Fulfilled:
			return p.Result(), nil
		case v8.Rejected:
			r := p.Result()
			defer r.Release()
			return nil, &jsThrow{message: describeThrown(r)}
		}
		if checkpoint {
			if err := m.waitForWork(deadline); err != nil {
				return nil, err
			}
		}
		checkpoint = true
	}
}

// drain keeps the loop going after a response while ctx.waitUntil work is
// pending, within the same deadline.
func (m *vm) drain(deadline time.Time) error {
	for {
		n, err := m.call(m.pendingWork)
		if err != nil {
			return err
		}
		pending := n.Int32()
		n.Release()
		if pending == 0 {
			return nil
		}
		if err := m.waitForWork(deadline); err != nil {
			return err
		}
	}
}

// waitForWork sleeps until a timer is due or a host event arrives, and runs
// what is due. With nothing pending it answers RUNTIME at once: the program
// waits on a promise that nothing can settle.
func (m *vm) waitForWork(deadline time.Time) error {
	// Answers that already arrived come first: they may settle what the
	// caller waits for.
	if delivered, err := m.settleHostCalls(); err != nil || delivered {
		return err
	}
	due, ok := m.nextTimer()
	if !ok {
		if m.host.pending == 0 {
			return fault.New(fault.Runtime, "The program awaits a promise that nothing can settle (no timer or request is pending).")
		}
		due = deadline
	}
	if due.After(deadline) {
		due = deadline
	}
	if d := time.Until(due); d > 0 {
		t := time.NewTimer(d)
		select {
		case <-t.C:
		case <-m.wake:
		}
		t.Stop()
	}
	if !time.Now().Before(deadline) {
		return m.timeoutFault()
	}
	if _, err := m.settleHostCalls(); err != nil {
		return err
	}
	return m.fireDue(deadline)
}

// kill marks the isolate dead; the loop disposes it after the current job
// (calls still queued answer HANDLES_CLOSED: see goneErr).
func (m *vm) kill() {
	m.dead = true
}

func (m *vm) dispose() {
	m.mu.Lock()
	m.disposed = true
	m.mu.Unlock()
	m.releaseReturned()
	m.ctx.Close()
	m.iso.Dispose()
	m.guard.free()
	// Fail whatever was still queued.
	for {
		select {
		case f := <-m.jobs:
			f()
		default:
			return
		}
	}
}

// submit queues f on the loop. It fails at once when the isolate's queue is
// full (OVERLOADED) or the isolate is gone.
func (m *vm) submit(f func()) error {
	select {
	case <-m.done:
		return m.goneErr()
	default:
	}
	select {
	case m.jobs <- f:
		return nil
	case <-m.done:
		return m.goneErr()
	default:
		return fault.Overload()
	}
}

// goneErr answers calls that reach an isolate after it ended: at this level
// the id simply holds nothing any more (the handles layer rebuilds).
func (m *vm) goneErr() error {
	return fault.Closed(m.handleID)
}

// jsThrow is a value a program threw.
type jsThrow struct{ message string }

func (e *jsThrow) Error() string { return e.message }

// describeThrown renders a thrown value: an Error's stack (which names only
// program.js frames), anything else as a string.
func describeThrown(v *v8.Value) string {
	if v.IsObject() && v.IsNativeError() {
		// AsObject casts; Object() would make a Value that lived until the
		// isolate ended, one per thrown error.
		obj, _ := v.AsObject()
		if st, err := obj.Get("stack"); err == nil {
			defer st.Release()
			if st.IsString() {
				return st.String()
			}
		}
	}
	return v.DetailString()
}

// jsError turns an error from a V8 call into the message a client reads.
// The text is cut at its bound (SPEC §3).
func jsErrorMessage(err error) string {
	var je *v8.JSError
	if errors.As(err, &je) {
		msg := je.Message
		if je.StackTrace != "" && strings.Contains(je.StackTrace, "\n") {
			msg = je.StackTrace
		} else if je.Location != "" {
			msg += " (" + je.Location + ")"
		}
		return cutThrown(msg)
	}
	var jt *jsThrow
	if errors.As(err, &jt) {
		return cutThrown(jt.message)
	}
	return cutThrown(err.Error())
}
