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

// The app's other defaults (README.md, Caddyfile), each taken where the
// app sets it and, for a package started without the app (tests), by
// that package for a field left zero: prewarm; max_object and
// objects_quota (objects); max_timeout and max_memory, the most a caller
// may ask of a run; max_idle, at least idle; websocket_idle;
// receipt_retention; issuance_per_hour; log_retention and log_bytes
// (logstore); and worker_memory where the machine's memory cannot be
// read (workers.DefaultWorkerMemory takes half the machine's) and
// tenant_worker_memory's share of it (DefaultTenantWorkerMemory).
const (
	DefaultPrewarm             = 2
	DefaultMaxObject           = 1 << 30
	DefaultObjectsQuota        = 10 << 30
	DefaultMaxTimeout          = 30 * time.Second
	DefaultMaxMemoryMiB        = 256
	DefaultMaxIdle             = 24 * time.Hour
	DefaultWebsocketIdle       = 5 * time.Minute
	DefaultReceiptRetention    = 7 * 24 * time.Hour
	DefaultIssuancePerHour     = 20
	DefaultLogRetention        = 7 * 24 * time.Hour
	DefaultLogBytes            = 64 << 20
	DefaultWorkerMemoryUnknown = 1 << 30
)

// A cluster member's lease in etcd (the cluster block's lease;
// docs/cluster.md).
const DefaultClusterLease = 10 * time.Second

// A retainer_api site's spawn budget (README.md, API): spawn_depth and
// spawn_children, a top-level run's depth of spawned children and their
// number (a chain's steps share it).
const (
	DefaultSpawnDepth    = 3
	DefaultSpawnChildren = 50
)

// DefaultTenantWorkerMemory is tenant_worker_memory's default for a
// worker_memory of workerMemory: a quarter of it.
func DefaultTenantWorkerMemory(workerMemory int64) int64 { return workerMemory / 4 }
