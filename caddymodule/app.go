package caddymodule

import (
	"fmt"
	"path/filepath"
	"time"

	"github.com/caddyserver/caddy/v2"
	"go.uber.org/zap"

	"github.com/retainer-gw/retainer/handles"
	"github.com/retainer-gw/retainer/sandbox/worker"
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
	// Workers is the most worker processes (with isolation "shared", the
	// number). Default 8.
	Workers int `json:"workers,omitempty"`
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
	// computations. Default 0.
	Prewarm int `json:"prewarm,omitempty"`
	// Timeout is the default run and invocation bound. Default 500ms.
	Timeout caddy.Duration `json:"timeout,omitempty"`
	// MaxTimeout is the most a request may ask for. Default 30s.
	MaxTimeout caddy.Duration `json:"max_timeout,omitempty"`
	// MemoryMiB is the default heap bound of an isolate. Default 64.
	MemoryMiB int `json:"memory_mib,omitempty"`
	// MaxMemoryMiB is the most a request may ask for. Default 256.
	MaxMemoryMiB int `json:"max_memory_mib,omitempty"`
	// Idle closes a handle not invoked for this long. Default 10m.
	Idle caddy.Duration `json:"idle,omitempty"`
	// MaxRequestBody bounds a POST /executions body and a data-plane
	// request body, in bytes. Default 1 MiB.
	MaxRequestBody int64 `json:"max_request_body,omitempty"`
	// MaxResponseBody bounds a handler's response body, in bytes.
	// Default 8 MiB.
	MaxResponseBody int64 `json:"max_response_body,omitempty"`
	// MaxHandlesPerTenant answers QUOTA_EXCEEDED past it. Default 100.
	MaxHandlesPerTenant int `json:"max_handles_per_tenant,omitempty"`
	// BoundStrikes is how many bound hits in a row close a handle.
	// Default 3.
	BoundStrikes int `json:"bound_strikes,omitempty"`
	// ReceiptRetention is how long run receipts are kept. Default 168h.
	ReceiptRetention caddy.Duration `json:"receipt_retention,omitempty"`
	// JIT lets V8 compile to machine code (weakens the worker sandbox).
	JIT bool `json:"jit,omitempty"`
	// Wasm exposes WebAssembly; it needs JIT.
	Wasm bool `json:"wasm,omitempty"`
	// NoLandlock runs workers without Landlock (kernels that lack it).
	NoLandlock bool `json:"no_landlock,omitempty"`

	rt     *runtime
	logger *zap.Logger
}

// CaddyModule returns the Caddy module information.
func (App) CaddyModule() caddy.ModuleInfo {
	return caddy.ModuleInfo{ID: "retainer", New: func() caddy.Module { return new(App) }}
}

func (a *App) setDefaults() {
	if a.Store == "" {
		a.Store = filepath.Join(caddy.AppDataDir(), "retainer", "registry.db")
	}
	if a.Workers <= 0 {
		a.Workers = 8
	}
	if a.Isolation == "" {
		a.Isolation = worker.IsolationTenant
	}
	if a.IsolatesPerWorker <= 0 {
		a.IsolatesPerWorker = 64
	}
	if a.Queue <= 0 {
		a.Queue = 256
	}
	if a.Timeout <= 0 {
		a.Timeout = caddy.Duration(500 * time.Millisecond)
	}
	if a.MaxTimeout <= 0 {
		a.MaxTimeout = caddy.Duration(30 * time.Second)
	}
	if a.MemoryMiB <= 0 {
		a.MemoryMiB = 64
	}
	if a.MaxMemoryMiB <= 0 {
		a.MaxMemoryMiB = 256
	}
	if a.Idle <= 0 {
		a.Idle = caddy.Duration(10 * time.Minute)
	}
	if a.MaxRequestBody <= 0 {
		a.MaxRequestBody = 1 << 20
	}
	if a.MaxResponseBody <= 0 {
		a.MaxResponseBody = 8 << 20
	}
	if a.MaxHandlesPerTenant <= 0 {
		a.MaxHandlesPerTenant = 100
	}
	if a.BoundStrikes <= 0 {
		a.BoundStrikes = 3
	}
	if a.ReceiptRetention <= 0 {
		a.ReceiptRetention = caddy.Duration(7 * 24 * time.Hour)
	}
}

// Provision sets defaults and takes (or starts) the shared runtime.
func (a *App) Provision(ctx caddy.Context) error {
	a.logger = ctx.Logger()
	a.setDefaults()
	if err := a.Validate(); err != nil {
		return err
	}
	rt, err := loadRuntime(a)
	if err != nil {
		return fmt.Errorf("retainer: %w", err)
	}
	a.rt = rt
	rt.bind(ctx, a)
	// A reload that changes the worker count or slots applies it to the
	// running pool; nothing else of the pool changes on a reload.
	rt.pool.Resize(a.Workers, a.IsolatesPerWorker)
	return nil
}

// Validate checks the configuration.
func (a *App) Validate() error {
	if a.Isolation != worker.IsolationTenant && a.Isolation != worker.IsolationShared {
		return fmt.Errorf("retainer: isolation must be tenant or shared, not %q", a.Isolation)
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
	if a.MemoryMiB < 8 {
		return fmt.Errorf("retainer: memory must be at least 8 MiB")
	}
	return nil
}

// Start is a no-op: the runtime started in Provision (it is shared with the
// configs before and after this one).
func (a *App) Start() error { return nil }

// Stop is a no-op; Cleanup releases the runtime.
func (a *App) Stop() error { return nil }

// Cleanup releases this config's hold on the runtime; the last one ends the
// workers and closes the store.
func (a *App) Cleanup() error {
	if a.rt != nil {
		return releaseRuntime(a.rt)
	}
	return nil
}

// registryConfig is a registry's limits from the app.
func (a *App) registryConfig() handles.RegistryConfig {
	return handles.RegistryConfig{
		IdleBound:           time.Duration(a.Idle),
		BoundStrikes:        a.BoundStrikes,
		MaxHandlesPerTenant: a.MaxHandlesPerTenant,
	}
}

// registry is the named registry, configured with this config's limits.
func (a *App) registry(name string) *handles.Registry {
	return a.rt.store.Registry(name, a.registryConfig())
}

// Interface guards.
var (
	_ caddy.App          = (*App)(nil)
	_ caddy.Provisioner  = (*App)(nil)
	_ caddy.Validator    = (*App)(nil)
	_ caddy.CleanerUpper = (*App)(nil)
)
