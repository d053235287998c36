package caddymodule

import (
	"errors"
	"fmt"
	"net/http"
	"path/filepath"
	"sync/atomic"
	"time"

	"github.com/caddyserver/caddy/v2"
	"github.com/caddyserver/caddy/v2/modules/caddyevents"
	"go.uber.org/zap"

	"github.com/retainer-gw/retainer/budgets"
	"github.com/retainer-gw/retainer/capability"
	"github.com/retainer-gw/retainer/fault"
	"github.com/retainer-gw/retainer/handles"
	"github.com/retainer-gw/retainer/store"
	"github.com/retainer-gw/retainer/workers"
)

func init() {
	caddy.RegisterModule(App{})
}

// App is the `retainer` app: the worker processes, the store and the limits
// every `retainer` and `retainer_api` directive shares. Configure it with the
// `retainer` global option; without one, the defaults apply.
type App struct {
	// Store is the bbolt file that holds the registries. Default: a file
	// under Caddy's data directory (retainer/registry.db).
	Store string `json:"store,omitempty"`
	// StoreEtcd, ReceiptsPostgres and Cluster make the gateway one of a
	// cluster on etcd (docs/cluster.md): all three or none.
	StoreEtcd        *EtcdStore        `json:"store_etcd,omitempty"`
	ReceiptsPostgres *PostgresReceipts `json:"receipts_postgres,omitempty"`
	Cluster          *ClusterConfig    `json:"cluster,omitempty"`
	// ObjectsS3 keeps tenants' objects in an S3-compatible service
	// (docs/objects-s3.md). Default: files under Caddy's data directory.
	ObjectsS3 *ObjectsS3 `json:"objects_s3,omitempty"`
	// Workers is the number of worker processes, the spare included (with
	// isolation "tenant", the most). 0, the default, is `workers auto`:
	// with isolation "tenant", as many as WorkerMemory allows, up to
	// MaxWorkers; with isolation "shared", 8.
	Workers int `json:"workers,omitempty"`
	// WorkerMemory is `workers auto`'s budget in bytes: the workers' own
	// memory (PSS) summed stays under it. Default: half of what the
	// machine or its cgroup has.
	WorkerMemory int64 `json:"worker_memory,omitempty"`
	// TenantWorkerMemory is the most one tenant's workers hold while
	// another tenant waits for a worker. Default: a quarter of
	// WorkerMemory.
	TenantWorkerMemory int64 `json:"tenant_worker_memory,omitempty"`
	// MaxWorkers is `workers auto`'s ceiling. Default 1000.
	MaxWorkers int `json:"max_workers,omitempty"`
	// RecycleIdle is how long a worker must have had nothing of its tenant
	// in progress before it may be taken for another tenant. Default 60s.
	RecycleIdle caddy.Duration `json:"recycle_idle,omitempty"`
	// RequestBodyIdle errors a handler's request body stream when the
	// visitor sends nothing for this long (408 unless the handler catches
	// it). Default 10s.
	RequestBodyIdle caddy.Duration `json:"request_body_idle,omitempty"`
	// RequestBodyTimeout answers 408 to a visitor's request body that is
	// not complete this long after the request arrived (the handler's body
	// stream errors if it was called). Default 60s.
	RequestBodyTimeout caddy.Duration `json:"request_body_timeout,omitempty"`
	// Isolation is "tenant" (default: a worker hosts one tenant's isolates
	// at a time, one spare worker is kept started ahead, the least recently
	// active tenant's worker is recycled when all are held) or "shared"
	// (every worker hosts every tenant: one trust domain).
	Isolation string `json:"isolation,omitempty"`
	// IsolatesPerWorker is how many retained isolates one worker holds.
	// Default 64.
	IsolatesPerWorker int `json:"isolates_per_worker,omitempty"`
	// Queue is how many invocations may wait per worker before OVERLOADED.
	// Default 256.
	Queue int `json:"queue,omitempty"`
	// Prewarm is how many fresh isolates each worker keeps ready for
	// computations (refilled off the request path). Default 2; 0 turns it
	// off.
	Prewarm *int `json:"prewarm,omitempty"`
	// Timeout is the default run and invocation bound. Default 500ms.
	Timeout caddy.Duration `json:"timeout,omitempty"`
	// MaxTimeout is the most a request may ask for. Default 30s.
	MaxTimeout caddy.Duration `json:"max_timeout,omitempty"`
	// MemoryMiB is the default heap bound of an isolate. Default 64.
	MemoryMiB int `json:"memory_mib,omitempty"`
	// MaxMemoryMiB is the most a request may ask for. Default 256.
	MaxMemoryMiB int `json:"max_memory_mib,omitempty"`
	// Idle closes a handle not invoked for this long, unless a route, a
	// domain or a route's kept version points at it: such a deployment
	// parks instead (docs/deployments.md). Default 10m.
	Idle caddy.Duration `json:"idle,omitempty"`
	// MaxIdle is the most a deploy's idleMs may ask for. Default 24h (or
	// Idle, when that is longer).
	MaxIdle caddy.Duration `json:"max_idle,omitempty"`
	// VersionRetention is how long a route's replaced version stays,
	// parked, for a rollback (docs/deployments.md). Default 168h.
	VersionRetention caddy.Duration `json:"version_retention,omitempty"`
	// MaxRequestBody bounds a POST /executions body and a data-plane
	// request body, in bytes. Default 1 MiB.
	MaxRequestBody int64 `json:"max_request_body,omitempty"`
	// MaxResponseBody bounds a handler's response body, in bytes.
	// Default 8 MiB.
	MaxResponseBody int64 `json:"max_response_body,omitempty"`
	// SQLQuota bounds one tenant's SQL database, in bytes (docs/sql.md).
	// Default 1 GiB. The databases are files in a folder beside Store
	// (its name and ".sql").
	SQLQuota int64 `json:"sql_quota,omitempty"`
	// MaxObject bounds one object, in bytes (docs/objects.md): a
	// bucket.put, a PUT /objects/{key}, and an object's body relayed to a
	// visitor. Default 1 GiB.
	MaxObject int64 `json:"max_object,omitempty"`
	// ObjectsQuota bounds one tenant's objects in a registry, in bytes
	// (docs/objects.md). Default 10 GiB. On one machine the objects are
	// files in a folder beside Store (its name and ".objects").
	ObjectsQuota int64 `json:"objects_quota,omitempty"`
	// SecretsKey seals tenants' secrets (docs/secrets.md): at least 32
	// bytes, raw or base64, usually a placeholder such as
	// {env.RETAINER_SECRETS_KEY}. Empty: the secrets API answers 501.
	SecretsKey string `json:"secrets_key,omitempty"`
	secretsKey []byte
	// StreamTimeout bounds a whole streamed response (README.md, API): past it
	// the stream is cancelled and the visitor's connection ends.
	// Default 5m.
	StreamTimeout caddy.Duration `json:"stream_timeout,omitempty"`
	// MaxHandlesPerTenant answers QUOTA_EXCEEDED past it. Default 100.
	MaxHandlesPerTenant int `json:"max_handles_per_tenant,omitempty"`
	// WebsocketsPerHandle and WebsocketsPerTenant cap open WebSockets to
	// handles (docs/websockets.md); past them an upgrade answers 429.
	// Defaults 1,000 and 10,000.
	WebsocketsPerHandle int `json:"websockets_per_handle,omitempty"`
	WebsocketsPerTenant int `json:"websockets_per_tenant,omitempty"`
	// WebsocketIdle closes (1001) a WebSocket with no message either way
	// for this long. Default 5m.
	WebsocketIdle caddy.Duration `json:"websocket_idle,omitempty"`
	// HandleConcurrency is a deploy's concurrency when it names none
	// (invocations of one handle in progress at once). Default 1.
	HandleConcurrency int `json:"handle_concurrency,omitempty"`
	// BoundStrikes is how many bound hits in a row close a handle.
	// Default 3.
	BoundStrikes int `json:"bound_strikes,omitempty"`
	// IssuancePerHour is how many new certificates on-demand TLS may get
	// for one tenant's domains in a clock hour (docs/domains.md); past it
	// handshakes for its new hosts fail until the hour turns. Default 20.
	IssuancePerHour int `json:"issuance_per_hour,omitempty"`
	// ReceiptRetention is how long run receipts are kept. Default 168h.
	ReceiptRetention caddy.Duration `json:"receipt_retention,omitempty"`
	// LogRetention is how long handles' stored log entries are kept
	// (docs/logs.md). Default 168h.
	LogRetention caddy.Duration `json:"log_retention,omitempty"`
	// LogBytes is a tenant's stored log; past it its oldest entries go
	// first (docs/logs.md). Default 64 MiB.
	LogBytes int64 `json:"log_bytes,omitempty"`
	// Plans are tenants' daily caps (docs/usage.md); nil: none.
	Plans *Plans `json:"plans,omitempty"`
	// JIT lets V8 compile to machine code (weakens the worker sandbox).
	JIT bool `json:"jit,omitempty"`
	// Wasm exposes WebAssembly; it needs JIT.
	Wasm bool `json:"wasm,omitempty"`
	// WorkerCPUs is where worker processes run: "shared" (any CPU),
	// "pinned" (each on one CPU, placed and moved by the gateway: cheaper
	// hand-offs inside a worker, at most one CPU for each) or "auto"
	// (pinned while one CPU is enough for it). Default auto
	// (docs/decisions.md).
	WorkerCPUs string `json:"worker_cpus,omitempty"`
	// NoLandlock runs workers without Landlock (kernels that lack it).
	NoLandlock bool `json:"no_landlock,omitempty"`

	// live holds the shared runtime once Start has loaded it (nil before,
	// and always under `caddy validate`, which never starts apps).
	live   *started
	logger *zap.Logger
	ctx    caddy.Context
	events *caddyevents.App
	// onStart are the handlers' wiring to the runtime (their registries),
	// run by Start: handlers provision before any app starts.
	onStart []func(*runtime)
	// claims are the ports this config serves (startlock.go).
	claims []string
	// checked are the served ports sharedListeners has checked, by
	// network and port ("tcp/443", "udp/443").
	checked map[string]bool
	// ready closes once Start has wired the handlers (awaitStart).
	ready chan struct{}
}

// CaddyModule returns the Caddy module information.
func (App) CaddyModule() caddy.ModuleInfo {
	return caddy.ModuleInfo{ID: "retainer", New: func() caddy.Module { return new(App) }}
}

func (a *App) setDefaults() {
	a.clusterDefaults()
	if a.Store == "" {
		a.Store = filepath.Join(caddy.AppDataDir(), "retainer", "registry.db")
	}
	if a.Workers < 0 {
		a.Workers = 0
	}
	if a.MaxWorkers <= 0 {
		a.MaxWorkers = budgets.DefaultMaxWorkers
	}
	if a.WorkerMemory <= 0 {
		a.WorkerMemory = workers.DefaultWorkerMemory()
	}
	if a.TenantWorkerMemory <= 0 {
		a.TenantWorkerMemory = budgets.DefaultTenantWorkerMemory(a.WorkerMemory)
	}
	if a.RecycleIdle <= 0 {
		a.RecycleIdle = caddy.Duration(budgets.DefaultRecycleIdle)
	}
	if a.RequestBodyIdle <= 0 {
		a.RequestBodyIdle = caddy.Duration(budgets.DefaultRequestBodyIdle)
	}
	if a.RequestBodyTimeout <= 0 {
		a.RequestBodyTimeout = caddy.Duration(budgets.DefaultRequestBodyTimeout)
	}
	if a.Prewarm == nil {
		n := budgets.DefaultPrewarm
		a.Prewarm = &n
	}
	if a.Isolation == "" {
		a.Isolation = workers.IsolationTenant
	}
	if a.Workers == 0 && a.Isolation == workers.IsolationShared {
		a.Workers = budgets.DefaultSharedWorkers
	}
	if a.WorkerCPUs == "" {
		a.WorkerCPUs = workers.CPUsAuto
	}
	if a.IsolatesPerWorker <= 0 {
		a.IsolatesPerWorker = budgets.DefaultIsolatesPerWorker
	}
	if a.Queue <= 0 {
		a.Queue = budgets.DefaultWorkerQueue
	}
	// The run limits take their defaults in one place (budgets.Limits);
	// the fields then show them as they apply.
	l := a.limits().WithDefaults()
	a.Timeout, a.MemoryMiB = caddy.Duration(l.Timeout), l.MemoryMiB
	a.MaxRequestBody, a.MaxResponseBody = int64(l.RequestBody), int64(l.ResponseBody)
	if a.MaxObject <= 0 {
		a.MaxObject = budgets.DefaultMaxObject
	}
	if a.ObjectsQuota <= 0 {
		a.ObjectsQuota = budgets.DefaultObjectsQuota
	}
	if a.MaxTimeout <= 0 {
		a.MaxTimeout = caddy.Duration(budgets.DefaultMaxTimeout)
	}
	if a.MaxMemoryMiB <= 0 {
		a.MaxMemoryMiB = budgets.DefaultMaxMemoryMiB
	}
	if a.Idle <= 0 {
		a.Idle = caddy.Duration(budgets.DefaultIdle)
	}
	if a.MaxIdle <= 0 {
		a.MaxIdle = max(caddy.Duration(budgets.DefaultMaxIdle), a.Idle)
	}
	if a.VersionRetention <= 0 {
		a.VersionRetention = caddy.Duration(budgets.DefaultVersionRetention)
	}
	if a.StreamTimeout <= 0 {
		a.StreamTimeout = caddy.Duration(budgets.DefaultStreamTimeout)
	}
	if a.MaxHandlesPerTenant <= 0 {
		a.MaxHandlesPerTenant = budgets.DefaultHandlesPerTenant
	}
	if a.WebsocketIdle <= 0 {
		a.WebsocketIdle = caddy.Duration(budgets.DefaultWebsocketIdle)
	}
	if a.BoundStrikes <= 0 {
		a.BoundStrikes = budgets.DefaultBoundStrikes
	}
	if a.ReceiptRetention <= 0 {
		a.ReceiptRetention = caddy.Duration(budgets.DefaultReceiptRetention)
	}
	if a.IssuancePerHour <= 0 {
		a.IssuancePerHour = budgets.DefaultIssuancePerHour
	}
	if a.LogRetention <= 0 {
		a.LogRetention = caddy.Duration(budgets.DefaultLogRetention)
	}
	if a.LogBytes <= 0 {
		a.LogBytes = budgets.DefaultLogBytes
	}
}

// Provision sets defaults and checks them, and the store (read only,
// store.CheckBolt). It opens nothing and starts nothing (README.md, Caddyfile):
// `caddy validate` beside a running gateway must not wait for the store's
// lock or leave a worker behind.
func (a *App) Provision(ctx caddy.Context) error {
	a.logger = ctx.Logger()
	a.ctx = ctx
	a.live = new(started)
	a.ready = make(chan struct{})
	a.setDefaults()
	if err := a.Validate(); err != nil {
		return err
	}
	// A store OpenBolt would refuse (a journal that lost answered
	// entries, a file of another application or schema) refuses the
	// start here, before any app starts: Caddy starts its apps in no set
	// order, and its HTTP server answered while Start opened the store
	// (the second red team's L3). It only reads, never waiting for the
	// store's lock: a reload, whose store this process holds, skips it
	// (docs/decisions.md, "A deploy's record is journalled"). A store
	// another process holds refuses a start here too, at once (OpenBolt
	// would wait 5 s for its lock while deploys answered 503), but not
	// `caddy validate` beside a running gateway (startlock.go).
	if _, held := runtimes.References(a.storeKey()); !held && !a.clustered() {
		err := store.CheckBolt(a.Store)
		if errors.Is(err, store.ErrLocked) {
			if validating() {
				err = nil
			} else {
				err = fmt.Errorf("%w: another gateway runs on this store; stop it first, or give this one a store of its own", err)
			}
		}
		if err != nil {
			return fmt.Errorf("retainer: %w", err)
		}
	}
	// Two starts on one store at the same instant both pass CheckBolt
	// (neither holds the lock yet): the store's claim refuses the later
	// at once (startlock.go).
	if err := a.claimStore(); err != nil {
		return fmt.Errorf("retainer: %w", err)
	}
	// A port this process listens on (at a start, the admin endpoint,
	// bound before the apps provision) that another process listens on
	// too refuses the start (startlock.go).
	if !validating() {
		if err := sharedListeners(nil, "tcp", ""); err != nil {
			return fmt.Errorf("retainer: %w", err)
		}
	}
	// The events app is looked up now, while apps are being provisioned.
	if ev, err := ctx.App("events"); err == nil {
		a.events, _ = ev.(*caddyevents.App)
	}
	return nil
}

// whenStarted wires a handler to the runtime once the app has started (at
// once if it has).
func (a *App) whenStarted(f func(*runtime)) {
	if rt := a.live.rt.Load(); rt != nil {
		f(rt)
		return
	}
	a.onStart = append(a.onStart, f)
}

// Validate checks the configuration.
func (a *App) Validate() error {
	if err := a.validateCluster(); err != nil {
		return err
	}
	key, err := capability.ParseSecretsKey(caddy.NewReplacer().ReplaceAll(a.SecretsKey, ""))
	if err != nil {
		return fmt.Errorf("retainer: %w", err)
	}
	a.secretsKey = key
	if a.Isolation != workers.IsolationTenant && a.Isolation != workers.IsolationShared {
		return fmt.Errorf("retainer: isolation must be tenant or shared, not %q", a.Isolation)
	}
	if a.WorkerCPUs != workers.CPUsShared && a.WorkerCPUs != workers.CPUsPinned && a.WorkerCPUs != workers.CPUsAuto {
		return fmt.Errorf("retainer: worker_cpus must be shared, pinned or auto, not %q", a.WorkerCPUs)
	}
	if a.Wasm && !a.JIT {
		return fmt.Errorf("retainer: wasm needs jit")
	}
	if a.Timeout > a.MaxTimeout {
		return fmt.Errorf("retainer: timeout %v is over max_timeout %v", time.Duration(a.Timeout), time.Duration(a.MaxTimeout))
	}
	if a.MemoryMiB > a.MaxMemoryMiB {
		return fmt.Errorf("retainer: memory %d MiB is over max_memory %d MiB", a.MemoryMiB, a.MaxMemoryMiB)
	}
	if a.HandleConcurrency < 0 || a.HandleConcurrency > 1000 {
		return fmt.Errorf("retainer: handle_concurrency must be between 1 and 1000")
	}
	if a.MemoryMiB < 8 {
		return fmt.Errorf("retainer: memory must be at least 8 MiB")
	}
	if a.MaxIdle < caddy.Duration(time.Second) {
		return fmt.Errorf("retainer: max_idle must be at least 1s")
	}
	return nil
}

// Start takes the shared runtime (the store, the worker pool, the sweeps),
// starting it if this is the first config to need it: a reload finds the
// running one in the UsagePool and keeps every worker and isolate.
func (a *App) Start() error {
	tuneGC()
	rt, err := loadRuntime(a)
	if err != nil {
		return fmt.Errorf("retainer: %w", err)
	}
	rt.bind(a)
	// A reload that changes the worker count or slots, or worker_cpus,
	// applies it to the running pool; nothing else of the pool changes on
	// a reload.
	rt.pool.Resize(a.Workers, a.IsolatesPerWorker)
	rt.pool.SetBudget(a.WorkerMemory, a.MaxWorkers, time.Duration(a.RecycleIdle))
	rt.pool.SetTenantWorkerMemory(a.TenantWorkerMemory)
	rt.pool.SetCPUs(a.WorkerCPUs)
	a.live.rt.Store(rt)
	for _, f := range a.onStart {
		f(rt)
	}
	a.onStart = nil
	close(a.ready)
	return nil
}

// startWait is the most a request that arrived before the app started
// waits for it (awaitStart).
const startWait = 5 * time.Second

// awaitStart holds a request that arrived before this config's app had
// started (Caddy starts its apps in no set order: the HTTP app's
// listeners may take connections first, at a start and at each reload,
// whose new handlers the new config's app wires as it starts) until it
// has, its config was given up (a refused start, a failed reload), the
// request ended, or startWait passed; the caller answers 503 "starting"
// if the app has still not started. A reload served such requests 503.
func (a *App) awaitStart(r *http.Request) {
	t := time.NewTimer(startWait)
	defer t.Stop()
	select {
	case <-a.ready:
	case <-a.ctx.Done():
	case <-r.Context().Done():
	case <-t.C:
	}
}

// liveRegistry is the runtime another config of this process started on
// this config's store and its registry name, as that config's handlers
// were wired to it (nil, nil if there is none: a first start, a reload
// onto another store, a cluster). A reload's handlers serve from it
// before their own config starts, at once, instead of waiting for the
// start (awaitStart): their config shares that runtime and that registry
// once it starts, and a reload that fails (another app's Start, after
// Caddy's HTTP app took connections on the new listeners) leaves them
// as they are, so its visitors are answered as the running config's
// listeners answer them, not 503 "starting" (docs/decisions.md, "One
// gateway a store and a port").
func (a *App) liveRegistry(name string) (*runtime, *handles.Registry) {
	if a.clustered() {
		return nil, nil
	}
	key := a.storeKey()
	var rt *runtime
	runtimes.Range(func(k, v any) bool {
		if k == key {
			rt, _ = v.(*runtime)
			return false
		}
		return true
	})
	if rt == nil {
		return nil, nil
	}
	select {
	case <-rt.closing:
		return nil, nil
	default:
	}
	if reg, ok := rt.wired.Load(name); ok {
		return rt, reg.(*handles.Registry)
	}
	return nil, nil
}

// Stop is a no-op; Cleanup releases the runtime (after the next config, if
// any, has taken it).
func (a *App) Stop() error { return nil }

// Cleanup releases this config's hold on the runtime; the last one ends the
// workers and closes the store.
func (a *App) Cleanup() error {
	if a.live == nil {
		return nil // Provision never ran
	}
	a.releaseClaims()
	if rt := a.live.rt.Swap(nil); rt != nil {
		return releaseRuntime(rt)
	}
	return nil
}

// limits are the run limits as this configuration sets them, built here
// once and passed down whole: to the registries, the worker pool (and
// through it each worker's engine) and outbound fetch.
func (a *App) limits() budgets.Limits {
	return budgets.Limits{
		Timeout:      time.Duration(a.Timeout),
		MemoryMiB:    a.MemoryMiB,
		RequestBody:  int(a.MaxRequestBody),
		ResponseBody: int(a.MaxResponseBody),
	}
}

// registryConfig is a registry's limits from the app.
func (a *App) registryConfig() handles.RegistryConfig {
	return handles.RegistryConfig{
		IdleBound:           time.Duration(a.Idle),
		BoundStrikes:        a.BoundStrikes,
		HandleConcurrency:   a.HandleConcurrency,
		MaxHandlesPerTenant: a.MaxHandlesPerTenant,
		Limits:              a.limits(),
		StreamTimeout:       time.Duration(a.StreamTimeout),
		RequestBodyIdle:     time.Duration(a.RequestBodyIdle),
		RequestBodyTimeout:  time.Duration(a.RequestBodyTimeout),
		WebsocketsPerHandle: a.WebsocketsPerHandle,
		WebsocketsPerTenant: a.WebsocketsPerTenant,
		VersionRetention:    time.Duration(a.VersionRetention),
	}
}

// registry is the named registry of rt, configured with this config's
// limits.
func (a *App) registry(rt *runtime, name string) *handles.Registry {
	return rt.store.Registry(name, a.registryConfig())
}

// started is what a module holds of the running runtime: set once the app
// has started, behind a pointer so that the module values stay copyable.
type started struct {
	rt  atomic.Pointer[runtime]
	reg atomic.Pointer[handles.Registry]
}

// fromRunning wires a handler whose config has not started to the
// running config's runtime and registry of the same store (liveRegistry),
// unless its own start has wired it meanwhile, and reports whether it is
// wired.
func (l *started) fromRunning(a *App, name string) bool {
	rt, reg := a.liveRegistry(name)
	if reg == nil {
		return false
	}
	l.rt.CompareAndSwap(nil, rt)
	l.reg.CompareAndSwap(nil, reg)
	return true
}

// errStarting answers requests that arrive before the app has started (Caddy
// may start the HTTP app first) and waited for it in vain (awaitStart).
var errStarting = fault.New(fault.Overloaded, "The gateway is starting.")

// Interface guards.
var (
	_ caddy.App          = (*App)(nil)
	_ caddy.Provisioner  = (*App)(nil)
	_ caddy.Validator    = (*App)(nil)
	_ caddy.CleanerUpper = (*App)(nil)
)
