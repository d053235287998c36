package workers

// The pool's configuration: what a caller sets, the defaults it leaves to
// budgets, and what a worker's crash reports.

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	"github.com/retainer-gw/retainer/budgets"
	"github.com/retainer-gw/retainer/internal/hostcache"
	"github.com/retainer-gw/retainer/program"
	"github.com/retainer-gw/retainer/workers/wire"
)

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
