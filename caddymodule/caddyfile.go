package caddymodule

import (
	"strconv"

	"github.com/caddyserver/caddy/v2"
	"github.com/caddyserver/caddy/v2/caddyconfig"
	"github.com/caddyserver/caddy/v2/caddyconfig/caddyfile"
	"github.com/caddyserver/caddy/v2/caddyconfig/httpcaddyfile"
	"github.com/dustin/go-humanize"

	"github.com/retainer-gw/retainer/workers"
)

func init() {
	httpcaddyfile.RegisterGlobalOption("retainer", parseGlobal)
	httpcaddyfile.RegisterHandlerDirective("retainer_jwt", parseJWT)
	httpcaddyfile.RegisterHandlerDirective("retainer_api", parseAPI)
	httpcaddyfile.RegisterHandlerDirective("retainer", parseRetainer)
	// Authentication first, then the handlers that answer requests; so a
	// Caddyfile needs no `order` option.
	httpcaddyfile.RegisterDirectiveOrder("retainer_jwt", httpcaddyfile.After, "basic_auth")
	httpcaddyfile.RegisterDirectiveOrder("retainer_api", httpcaddyfile.Before, "respond")
	httpcaddyfile.RegisterDirectiveOrder("retainer", httpcaddyfile.Before, "respond") // after retainer_api
}

// parseGlobal parses the `retainer` global option:
//
//	retainer {
//		store <path> | store etcd { endpoints ...; prefix; tls {...}; username; password }
//		receipts postgres { dsn <dsn> }
//		cluster { name; listen; advertise; secret; lease }
//		objects s3 { endpoint; bucket; region; access_key; secret_key; prefix }
//		workers auto|<n>
//		worker_memory <size>
//		tenant_worker_memory <size>
//		max_workers <n>
//		recycle_idle <duration>
//		request_body_idle <duration>
//		request_body_timeout <duration>
//		isolation tenant|shared
//		worker_cpus shared|pinned|auto
//		handle_concurrency <n>
//		isolates_per_worker <n>
//		queue <n>
//		prewarm <n>
//		timeout <duration>
//		max_timeout <duration>
//		memory <size>
//		max_memory <size>
//		idle <duration>
//		max_idle <duration>
//		version_retention <duration>
//		max_request_body <size>
//		max_response_body <size>
//		sql_quota <size>
//		max_object <size>
//		objects_quota <size>
//		secrets_key <key>
//		stream_timeout <duration>
//		max_handles_per_tenant <n>
//		websockets_per_handle <n>
//		websockets_per_tenant <n>
//		websocket_idle <duration>
//		bound_strikes <n>
//		receipt_retention <duration>
//		log_retention <duration>
//		log_bytes <size>
//		plans { plan_claim <claim>; <name> { <limit>_per_day <n> ... } }
//		issuance_per_hour <n>
//		jit
//		wasm
//		landlock off
//	}
func parseGlobal(d *caddyfile.Dispenser, _ any) (any, error) {
	app := new(App)
	d.Next() // the option's name
	if d.NextArg() {
		return nil, d.ArgErr()
	}
	for d.NextBlock(0) {
		name := d.Val()
		switch name {
		case "jit":
			app.JIT = true
			if d.NextArg() {
				return nil, d.ArgErr()
			}
			continue
		case "wasm":
			app.Wasm = true
			if d.NextArg() {
				return nil, d.ArgErr()
			}
			continue
		case "store":
			if d.CountRemainingArgs() == 1 && d.NextArg() && d.Val() == "etcd" {
				var err error
				if app.StoreEtcd, err = parseStoreEtcd(d); err != nil {
					return nil, err
				}
				continue
			}
			d.Prev()
		case "receipts":
			if !d.NextArg() || d.Val() != "postgres" || d.NextArg() {
				return nil, d.Err("receipts: the one form is `receipts postgres { dsn <dsn> }`")
			}
			var err error
			if app.ReceiptsPostgres, err = parseReceiptsPostgres(d); err != nil {
				return nil, err
			}
			continue
		case "plans":
			if d.NextArg() {
				return nil, d.ArgErr()
			}
			var err error
			if app.Plans, err = parsePlans(d); err != nil {
				return nil, err
			}
			continue
		case "cluster":
			if d.NextArg() {
				return nil, d.ArgErr()
			}
			var err error
			if app.Cluster, err = parseCluster(d); err != nil {
				return nil, err
			}
			continue
		case "objects":
			var err error
			if app.ObjectsS3, err = parseObjects(d); err != nil {
				return nil, err
			}
			continue
		}
		if !d.NextArg() {
			return nil, d.ArgErr()
		}
		val := d.Val()
		if d.NextArg() {
			return nil, d.ArgErr()
		}
		var err error
		switch name {
		case "store":
			app.Store = val
		case "workers":
			if val == "auto" {
				app.Workers = 0
			} else {
				app.Workers, err = positive(d, val)
			}
		case "worker_memory":
			app.WorkerMemory, err = size(d, val)
		case "tenant_worker_memory":
			app.TenantWorkerMemory, err = size(d, val)
		case "max_workers":
			app.MaxWorkers, err = positive(d, val)
		case "recycle_idle":
			app.RecycleIdle, err = duration(d, val)
		case "request_body_idle":
			app.RequestBodyIdle, err = duration(d, val)
		case "request_body_timeout":
			app.RequestBodyTimeout, err = duration(d, val)
		case "isolates_per_worker":
			app.IsolatesPerWorker, err = positive(d, val)
		case "queue":
			app.Queue, err = positive(d, val)
		case "prewarm":
			var n int
			n, err = strconv.Atoi(val)
			app.Prewarm = &n
			if err != nil || n < 0 {
				return nil, d.Errf("prewarm: %q is not a number of isolates", val)
			}
		case "timeout":
			app.Timeout, err = duration(d, val)
		case "max_timeout":
			app.MaxTimeout, err = duration(d, val)
		case "idle":
			app.Idle, err = duration(d, val)
		case "max_idle":
			app.MaxIdle, err = duration(d, val)
		case "version_retention":
			app.VersionRetention, err = duration(d, val)
		case "stream_timeout":
			app.StreamTimeout, err = duration(d, val)
		case "receipt_retention":
			app.ReceiptRetention, err = duration(d, val)
		case "log_retention":
			app.LogRetention, err = duration(d, val)
		case "log_bytes":
			app.LogBytes, err = size(d, val)
		case "memory", "max_memory":
			var b int64
			if b, err = size(d, val); err == nil {
				if b%(1<<20) != 0 || b < 8<<20 {
					return nil, d.Errf("%s: %q must be a whole number of MiB, at least 8MiB", name, val)
				}
				if name == "memory" {
					app.MemoryMiB = int(b >> 20)
				} else {
					app.MaxMemoryMiB = int(b >> 20)
				}
			}
		case "max_request_body":
			app.MaxRequestBody, err = size(d, val)
		case "max_response_body":
			app.MaxResponseBody, err = size(d, val)
		case "sql_quota":
			app.SQLQuota, err = size(d, val)
		case "max_object":
			app.MaxObject, err = size(d, val)
		case "objects_quota":
			app.ObjectsQuota, err = size(d, val)
		case "secrets_key":
			app.SecretsKey = val
		case "max_handles_per_tenant":
			app.MaxHandlesPerTenant, err = positive(d, val)
		case "websockets_per_handle":
			app.WebsocketsPerHandle, err = positive(d, val)
		case "websockets_per_tenant":
			app.WebsocketsPerTenant, err = positive(d, val)
		case "websocket_idle":
			app.WebsocketIdle, err = duration(d, val)
		case "bound_strikes":
			app.BoundStrikes, err = positive(d, val)
		case "issuance_per_hour":
			app.IssuancePerHour, err = positive(d, val)
		case "handle_concurrency":
			app.HandleConcurrency, err = positive(d, val)
		case "isolation":
			if val != "tenant" && val != "shared" {
				return nil, d.Errf("isolation: %q is not tenant or shared", val)
			}
			app.Isolation = val
		case "worker_cpus":
			if val != workers.CPUsShared && val != workers.CPUsPinned && val != workers.CPUsAuto {
				return nil, d.Errf("worker_cpus: %q is not shared, pinned or auto", val)
			}
			app.WorkerCPUs = val
		case "landlock":
			if val != "off" {
				return nil, d.Errf("landlock: only `landlock off` is accepted (it is on by default)")
			}
			app.NoLandlock = true
		default:
			return nil, d.Errf("unknown subdirective %q in the retainer global option", name)
		}
		if err != nil {
			return nil, err
		}
	}
	if app.Wasm && !app.JIT {
		return nil, d.Err("wasm needs jit")
	}
	return httpcaddyfile.App{Name: "retainer", Value: caddyconfig.JSON(app, nil)}, nil
}

func positive(d *caddyfile.Dispenser, val string) (int, error) {
	n, err := strconv.Atoi(val)
	if err != nil || n <= 0 {
		return 0, d.Errf("%q is not a positive whole number", val)
	}
	return n, nil
}

func duration(d *caddyfile.Dispenser, val string) (caddy.Duration, error) {
	dur, err := caddy.ParseDuration(val)
	if err != nil || dur <= 0 {
		return 0, d.Errf("%q is not a positive duration", val)
	}
	return caddy.Duration(dur), nil
}

func size(d *caddyfile.Dispenser, val string) (int64, error) {
	b, err := humanize.ParseBytes(val)
	if err != nil || b == 0 {
		return 0, d.Errf("%q is not a size (e.g. 1MiB)", val)
	}
	return int64(b), nil
}

// blockOptions reads a block whose options each take one value (`name
// value` a line), handing each value to the setter its name selects; what
// names the block in errors and doc the page that lists its options. The
// cluster's, etcd's, PostgreSQL's and S3's blocks are all of this shape.
func blockOptions(d *caddyfile.Dispenser, what, doc string, set map[string]func(string) error) error {
	for nesting := d.Nesting(); d.NextBlock(nesting); {
		name := d.Val()
		setter, ok := set[name]
		if !ok {
			if doc == "" {
				return d.Errf("%s: unknown option %q", what, name)
			}
			return d.Errf("%s: unknown option %q (%s)", what, name, doc)
		}
		var v string
		if !d.AllArgs(&v) {
			return d.ArgErr()
		}
		if err := setter(v); err != nil {
			return err
		}
	}
	return nil
}

// into is the setter of a string option.
func into(field *string) func(string) error {
	return func(v string) error { *field = v; return nil }
}
