package sandbox

import (
	_ "embed"
	"fmt"
	"runtime"
	"sync"
	"time"

	v8 "rogchap.com/v8go"

	"github.com/retainer-gw/retainer/fault"
)

// flagsMu serializes SetFlags with NewIsolate where the heap bound must go
// through V8's flags (a build that does not wrap V8's constructors:
// snapshot.go): V8 reads --max-old-space-size when an isolate is created,
// so the flag and the creation must not interleave with another isolate's.
var flagsMu sync.Mutex

// vm is one V8 isolate with its context and runtime. It is owned by exactly
// one goroutine, its loop: every V8 call on it happens there, including
// Value.Release. Other goroutines reach it only by queuing closures (submit),
// and the watchdog only through watch (bounds.go).
type vm struct {
	eng       *Engine
	iso       *v8.Isolate
	ctx       *v8.Context
	guard     heapGuard
	hold      threadHold // the loop thread's outer Locker (threadhold.cc)
	restored  bool       // the runtime came from the startup snapshot (snapshot.go)
	memoryMiB int

	js entryPoints // the runtime's functions the engine calls (install.go)

	streams streamSet // streamed responses in flight (stream.go)

	host hostCalls // host calls in flight and their answers (hostcall.go)

	queue jobQueue      // closures run on the loop, in arrival order (queue.go)
	wake  chan struct{} // a host event is ready (capabilities use it)
	done  chan struct{} // closed once the isolate is disposed

	// Loop-owned state (no lock: only the loop goroutine touches it).
	timers       timers      // pending timers (timers.go)
	uncached     uncached    // scripts whose code cache the training makes (codecache.go)
	released     []*v8.Value // values handed back to V8, released after the call
	sink         func(level, msg string)
	activityCPU  int64       // the CPU account when the current activity began (blame: bounds.go)
	activityLogs logBuffer   // a retained isolate's timer and waitUntil output, per bounded activity
	conc         int         // invocations in progress at once; ≤ 1: one at a time (docs/architecture.md)
	busy         *busyPeriod // concurrent invocations in progress (concurrent.go)
	sessions     sessions    // the web APIs' state in this isolate (install.go)
	dead         bool        // a bound was hit or the engine closed: dispose after this job
	handleID     string
	timeout      time.Duration

	// watch is the bounds' state the watchdog timers and cancels share
	// with the loop (bounds.go).
	watch watchdog
}

// newVM creates an isolate with a heap bounded at memoryMiB, installs the
// runtime, and starts its loop. A warm vm (prewarm, made before any caller
// waits for it) also makes its first call then (warmUp).
func newVM(e *Engine, memoryMiB int, warm bool) (*vm, error) {
	m := &vm{
		eng:       e,
		memoryMiB: memoryMiB,
		queue:     newJobQueue(e.cfg.Limits.HandleQueue),
		wake:      make(chan struct{}, 1),
		done:      make(chan struct{}),
		streams:   newStreamSet(),
		timers:    newTimers(),
		uncached:  newUncached(),
	}
	m.watch.terminate = func() { m.iso.TerminateExecution() }
	m.watch.wake = m.wakeLoop
	m.host.init(&e.cfg, m.wakeLoop, m.settleCall)
	m.host.due = m.watch.dueAt
	ready := make(chan error, 1)
	go m.loop(ready, warm)
	if err := <-ready; err != nil {
		return nil, err
	}
	return m, nil
}

func (m *vm) loop(ready chan<- error, warm bool) {
	if err := m.create(); err != nil {
		m.hold.drop()
		close(m.done)
		ready <- err
		return
	}
	var err error
	switch {
	case m.uncached.bootstrap != nil:
		// The process's first isolate: its calls decide what the code
		// caches hold (codecache.go).
		err = m.trainBootstrap()
	case m.restored && modulesUntrained():
		// The first isolate made from the snapshot trains the modules'
		// caches (the bootstrap needs none).
		err = m.trainFromSnapshot()
	case warm:
		err = m.warmUp()
	}
	if err != nil {
		m.dispose()
		ready <- err
		return
	}
	ready <- nil
	defer func() {
		if m.handleID != "" {
			m.eng.forget(m.handleID, m)
		}
		m.end()
		// The loop's last job has usually just answered (a computation),
		// and V8's teardown is ~0.6 ms of CPU: made later, it does not
		// take a core from that answer's way out (docs/history/performance-log.md,
		// round 9).
		time.AfterFunc(teardownDelay, m.teardown)
	}()
	idle := time.NewTimer(time.Hour)
	defer idle.Stop()
	for !m.dead {
		var timerC <-chan time.Time
		due, ok := m.timers.next()
		if m.busy != nil {
			if d := m.earliestDeadline(); !ok || d.Before(due) {
				due, ok = d, true
			}
		}
		if ok {
			idle.Reset(time.Until(due))
			timerC = idle.C
		}
		// A concurrent handle takes a new invocation only while it has a
		// slot; the rest wait in the queue, in arrival order.
		jobs := m.queue.jobs
		var wake <-chan struct{}
		if m.busy != nil {
			wake = m.wake
			if m.busy.full(m.conc) {
				jobs = nil
			}
		}
		// Each turn of work runs under the isolate's outer Locker
		// (threadhold.go); the wait for work does not. Work that is
		// already waiting runs under the hold the last turn took: under
		// load a handle's invocations follow one another without the
		// thread being unpinned and the Locker set up again between them.
		// (Only this loop receives from these buffered channels, so what
		// len sees waiting is still there for the select.)
		if len(jobs) == 0 && len(wake) == 0 && len(m.streams.ready()) == 0 {
			m.hold.drop()
			m.watch.idle()
		}
		var work func()
		var blocked time.Time
		if m.busy != nil {
			blocked = m.watch.blocks(m.host.reading())
		}
		select {
		case f, ok := <-jobs:
			if !ok {
				return
			}
			work = f
		case <-wake:
			work = m.pumpBusy
		case <-m.streams.ready():
			work = m.runStreamWork
		case <-timerC:
			work = m.timerTurn
		case <-m.eng.closing:
			work = m.kill
		}
		if m.busy != nil {
			m.watch.waited(blocked, m.host.reading()) // the visitor's time (visitor.go)
		}
		m.hold.take()
		work()
	}
	if m.busy != nil {
		m.failBusy(fault.New(fault.HandlesClosed, "The isolate ended."), nil)
	}
}

// warmUp makes a prewarmed isolate's first calls before any caller's run:
// the first call into a fresh isolate cost ~0.4 ms of a computation's ~0.7
// ms in the isolate, runProgram's first another ~0.07 ms (measured with
// BenchmarkComputationPrewarmed; 670 -> 175 µs together). They are the same
// calls for every program and leave nothing behind: empty grants (each run
// sets its own), and runProgram on a value in module form (nothing is
// called; its answer "J0" is settled and dropped).
func (m *vm) warmUp() error {
	v, err := m.call(m.js.setGrants, "{}")
	if err != nil {
		return err
	}
	v.Release()
	p, err := m.call(m.js.runProgram, int32(0), true)
	if err != nil {
		return err
	}
	defer p.Release()
	res, err := m.settle(p, time.Now().Add(time.Second))
	if err != nil {
		return err
	}
	res.Release()
	return nil
}

// timerTurn is the loop's turn when its timer fires: a concurrent handle's
// invocations move on (or meet their deadlines); a retained isolate's timers
// run between invocations, each batch under a fresh bound.
func (m *vm) timerTurn() {
	if m.busy != nil {
		m.pumpBusy()
		return
	}
	if err := m.bounded(m.timeout, func(deadline time.Time) error {
		return m.fireDue(deadline)
	}); err != nil {
		m.kill()
		if m.handleID != "" && m.eng.cfg.OnLost != nil {
			m.eng.cfg.OnLost(m.handleID, err)
		}
	}
}

func (m *vm) create() (err error) {
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("creating an isolate: %v", r)
		}
	}()
	// One thread from the isolate's making to its context's: the snapshot's
	// context is restored on it, and the heap bound given for it
	// (snapshot.go).
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	snapshot := snapshotOn && !m.eng.cfg.CompiledRuntime
	if isolateParamsWrapped {
		// The bound goes with this isolate's own parameters, so isolates
		// are made side by side.
		nextIsolateHeap(oldSpaceMiB(m.memoryMiB))
		if snapshot {
			askRuntimeContext()
		}
		m.iso = v8.NewIsolate()
	} else {
		flagsMu.Lock()
		v8.SetFlags(fmt.Sprintf("--max-old-space-size=%d", oldSpaceMiB(m.memoryMiB)))
		m.iso = v8.NewIsolate()
		flagsMu.Unlock()
	}
	poolArrayBuffers()
	m.guard = installHeapGuard(m.iso)
	m.guard.boundBuffers(m.memoryMiB)
	m.hold = newThreadHold(m.iso)
	m.hold.take()
	if snapshot {
		// The runtime is in the snapshot's context, installed already
		// (snapshot.go); only this isolate's host functions are added.
		m.ctx = v8.NewContext(m.iso)
		if m.restoreRuntime() == nil {
			m.restored = true
			return nil
		}
		// Not restored: this isolate installs the compiled runtime in a
		// context of its own.
		m.ctx.Close()
	}
	m.ctx = v8.NewContext(m.iso)
	return m.installRuntime()
}

// kill marks the isolate dead; the loop disposes it after the current job
// (calls still queued answer HANDLES_CLOSED: see goneErr).
func (m *vm) kill() {
	m.dead = true
}

// dispose ends the isolate and tears it down at once.
func (m *vm) dispose() {
	m.end()
	m.teardown()
}

// teardownDelay is how long an ended isolate waits for its teardown.
const teardownDelay = 1500 * time.Microsecond

// end is the loop's last act on the isolate: streams and the web APIs'
// sessions (compression streams, decoders) end, the
// watchdog stops reaching it (disposed), the loop's hold is dropped, and
// whatever was still queued is failed (each job sees m.dead) while later
// submits are refused. What is left, V8's own teardown, needs no thread in
// particular.
func (m *vm) end() {
	m.sessions.close()
	m.streams.endAll()
	m.watch.dispose()
	m.hold.drop()
	m.dead = true
	m.queue.closeAndDrain()
}

// teardown disposes of an ended isolate and then closes done. Nothing else
// touches the isolate by then, so its values are released here.
func (m *vm) teardown() {
	m.releaseReturned()
	m.ctx.Close()
	m.iso.Dispose()
	m.guard.free()
	close(m.done)
}

// submit queues f on the loop. It fails at once when the isolate's queue is
// full (OVERLOADED) or the isolate is gone.
func (m *vm) submit(f func()) error {
	switch queued, closed := m.queue.push(f); {
	case closed:
		return m.goneErr()
	case !queued:
		return fault.Overload()
	}
	return nil
}

// wakeLoop wakes the loop if it waits for work (a host call answered, a
// run was cancelled).
func (m *vm) wakeLoop() {
	select {
	case m.wake <- struct{}{}:
	default:
	}
}

// goneErr answers calls that reach an isolate after it ended: at this level
// the id simply holds nothing any more (the handles layer rebuilds).
func (m *vm) goneErr() error {
	return fault.Closed(m.handleID)
}
