package sandbox

import (
	"encoding/json"
	"errors"
	"fmt"
	"sync"
	"time"

	v8 "rogchap.com/v8go"

	"github.com/retainer-gw/retainer/budgets"
	"github.com/retainer-gw/retainer/fault"
	"github.com/retainer-gw/retainer/program"
)

// Config sets an Engine's defaults and hooks. Zero values take the defaults
// of README.md, Caddyfile.
type Config struct {
	// Prewarm is how many fresh isolates with the default memory bound are
	// kept ready for computations. Default 0 (none).
	Prewarm int
	// Limits are the default run bounds (timeout, heap), a handler's
	// response body, an outbound fetch's request body and a handle's queue;
	// zero fields take their defaults (budgets.Limits).
	Limits budgets.Limits
	// JIT lets V8 compile to machine code; off, V8 runs --jitless.
	JIT bool
	// Wasm exposes WebAssembly (needs JIT).
	Wasm bool
	// CompiledRuntime makes isolates compile and install the runtime from
	// its bundle instead of restoring it from the process's startup
	// snapshot (snapshot.go), as they do anyway when the snapshot could not
	// be made. For tests and measurements of that path.
	CompiledRuntime bool
	// OnLog receives console output of a retained handler after its
	// deploying run, with the handle's id.
	OnLog func(handleID string, e program.LogEntry)
	// OnLost is told when a retained isolate ends on its own (a timer
	// callback hit a bound), with the fault.
	OnLost func(handleID string, err error)
	// HostCall serves the program's requests for kv, fetch and provider
	// tools. Without it, those requests fail.
	HostCall HostCall
	// HostCallNow, when set, may answer a host call at once, on the
	// isolate's goroutine (a worker's kv read cache): ok false sends the
	// call to HostCall as usual. It must not block. due answers when the
	// calling activity's bound ends (zero: none), as HostCall's ctx
	// carries it (program.WithDue): a write answered at once and sent
	// later carries it to the gateway.
	HostCallNow func(runID, op string, args json.RawMessage, due func() time.Time) (res json.RawMessage, ok bool)
}

func (c *Config) defaults() {
	c.Limits = c.Limits.WithDefaults()
}

// Engine runs programs in V8 isolates inside the current process. It owns
// the prewarmed isolates and the retained ones. Safe for concurrent use.
type Engine struct {
	cfg     Config
	closing chan struct{}
	once    sync.Once

	warm chan *vm

	mu      sync.Mutex // guards handles
	handles map[string]*vm
}

var processFlagsOnce sync.Once

// New starts an engine. The V8 flags that are process-wide (--jitless,
// WebAssembly) are fixed by the first engine of the process.
func New(cfg Config) *Engine {
	cfg.defaults()
	processFlagsOnce.Do(func() {
		flags := []string{}
		if !cfg.JIT {
			flags = append(flags, "--jitless")
		}
		if !cfg.Wasm {
			flags = append(flags, "--no-expose-wasm")
		}
		flags = append(flags, fmt.Sprintf("--max-semi-space-size=%d", semiSpaceMiB))
		if len(flags) > 0 {
			v8.SetFlags(flags...)
		}
	})
	makeProcessSnapshot()
	e := &Engine{
		cfg:     cfg,
		closing: make(chan struct{}),
		handles: map[string]*vm{},
		warm:    make(chan *vm, cfg.Prewarm),
	}
	if cfg.Prewarm > 0 {
		// Two refillers when the pool holds two or more: making an
		// isolate takes ~3.5 ms of CPU, so one refiller kept up with
		// fewer than ~280 runs a second, and back to back on one
		// connection the pool ran dry and runs made their isolates on
		// their own path. With two, p50 fell in each of 11 interleaved
		// rounds, and p99 rose (docs/history/performance-log.md, round 7).
		for i := 0; i < min(cfg.Prewarm, 2); i++ {
			go e.prewarm()
		}
	}
	return e
}

// prewarm keeps the warm channel full. Each warm isolate serves exactly one
// run, so no state passes from one run to the next.
func (e *Engine) prewarm() {
	for {
		m, err := newVM(e, e.cfg.Limits.MemoryMiB, true)
		if err != nil {
			select {
			case <-e.closing:
				return
			case <-time.After(100 * time.Millisecond):
				continue
			}
		}
		select {
		case e.warm <- m:
			continue
		default:
		}
		// The pool was full: the space this push waited for was made by
		// a run taking an isolate, whose answer is still on its way. The
		// next isolate is made refillDelay later, so that the making
		// (~3.5 ms of CPU) does not take a core from that answer on a
		// two-core machine. Paired slices at the default prewarm 2, one
		// connection (docs/history/performance-log.md, round 9): p50 20 ms apart
		// 2.39 -> 2.08 ms (8 of 8), back to back 1.59 -> 1.41 ms (7 of
		// 8); 3 ms against 1.5 ms was within noise. A pool that is not
		// full is refilled at once.
		select {
		case e.warm <- m:
		case <-e.closing:
			m.submit(func() { m.kill() })
			return
		}
		select {
		case <-time.After(refillDelay):
		case <-e.closing:
			return
		}
	}
}

// refillDelay is how long the refill of a full pool waits after a run took
// from it (prewarm).
const refillDelay = 1500 * time.Microsecond

func (e *Engine) isolateFor(memoryMiB int) (*vm, error) {
	if memoryMiB == e.cfg.Limits.MemoryMiB {
		select {
		case m := <-e.warm:
			return m, nil
		default:
		}
	}
	return newVM(e, memoryMiB, false)
}

// forget drops id from the retained set if it still names m.
func (e *Engine) forget(id string, m *vm) {
	e.mu.Lock()
	if e.handles[id] == m {
		delete(e.handles, id)
	}
	e.mu.Unlock()
}

// Close disposes the retained isolate id. It answers HANDLES_CLOSED for an
// id that holds nothing.
func (e *Engine) Close(id string) error {
	e.mu.Lock()
	m := e.handles[id]
	delete(e.handles, id)
	e.mu.Unlock()
	if m == nil {
		return fault.Closed(id)
	}
	if err := m.submit(func() { m.kill() }); err != nil && !errors.Is(err, fault.ErrHandlesClosed) {
		// Queue full: the isolate dies after the jobs ahead of the close.
		go m.queue.pushWhenRoom(func() { m.kill() }, m.done)
	}
	return nil
}

// Shutdown disposes every isolate and stops prewarming.
func (e *Engine) Shutdown() {
	e.once.Do(func() { close(e.closing) })
	e.mu.Lock()
	vms := make([]*vm, 0, len(e.handles))
	for _, m := range e.handles {
		vms = append(vms, m)
	}
	e.handles = map[string]*vm{}
	e.mu.Unlock()
	for _, m := range vms {
		<-m.done
	}
	for {
		select {
		case m := <-e.warm:
			<-m.done
		default:
			return
		}
	}
}
