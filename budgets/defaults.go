package budgets

import "time"

// The defaults of the retainer app's options that a lower layer would
// otherwise repeat (README.md, Caddyfile), one place for all: the app
// applies them (caddymodule/app.go, setDefaults) and passes every value
// down; a worker pool (workers) or a registry (handles) started
// without the app, as tests do, takes the same row for a field left
// zero. The pool's modes (isolation, worker_cpus) have no row: the app
// sets them (tenant, auto) and the pool refuses a configuration without
// them rather than pick others.
const (
	// workers with isolation "shared"; max_workers, the ceiling of
	// `workers auto`; isolates_per_worker; queue, the calls waiting per
	// worker; recycle_idle.
	DefaultSharedWorkers     = 8
	DefaultMaxWorkers        = 1000
	DefaultIsolatesPerWorker = 64
	DefaultWorkerQueue       = 256
	DefaultRecycleIdle       = 60 * time.Second
	// A registry's: idle, bound_strikes, max_handles_per_tenant,
	// stream_timeout, request_body_idle, request_body_timeout,
	// version_retention.
	DefaultIdle               = 10 * time.Minute
	DefaultBoundStrikes       = 3
	DefaultHandlesPerTenant   = 100
	DefaultStreamTimeout      = 5 * time.Minute
	DefaultRequestBodyIdle    = 10 * time.Second
	DefaultRequestBodyTimeout = 60 * time.Second
	DefaultVersionRetention   = 7 * 24 * time.Hour
)
