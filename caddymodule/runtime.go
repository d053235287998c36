package caddymodule

import (
	"context"
	"encoding/json"
	"sync"
	"sync/atomic"
	"time"

	"github.com/caddyserver/caddy/v2"
	"github.com/caddyserver/caddy/v2/modules/caddyevents"
	"go.uber.org/zap"
	"golang.org/x/time/rate"

	"github.com/retainer-gw/retainer/budgets"
	"github.com/retainer-gw/retainer/capability"
	"github.com/retainer-gw/retainer/cluster"
	"github.com/retainer-gw/retainer/fault"
	"github.com/retainer-gw/retainer/handles"
	"github.com/retainer-gw/retainer/kv"
	"github.com/retainer-gw/retainer/kv/cache"
	"github.com/retainer-gw/retainer/logstore"
	"github.com/retainer-gw/retainer/objects"
	"github.com/retainer-gw/retainer/program"
	"github.com/retainer-gw/retainer/receipts"
	"github.com/retainer-gw/retainer/sqldb"
	"github.com/retainer-gw/retainer/store"
	"github.com/retainer-gw/retainer/workers"
)

// runtimes holds what must outlive a config reload: the worker pool (and
// so every live isolate) and the bbolt store, keyed by the store's path.
// Caddy provisions the new config before it cleans up the old one, so the
// reference count never drops to zero on a reload and the store's file lock
// is never taken twice.
var runtimes = caddy.NewUsagePool()

// runtime is the pool and store of one store file.
type runtime struct {
	key     string
	pool    *workers.Pool
	backing *backends
	// cluster is the runtime's part in a cluster (forward.go); nil on one
	// machine. closing ends its lease watch.
	cluster  *clusterNode
	closing  chan struct{}
	store    *handles.Store
	receipts *receipts.Store
	// logs is the handles' stored logs and tails (docs/logs.md); nil
	// until the runtime is open.
	logs atomic.Pointer[logstore.Store]
	// usage counts tenants' invocations a UTC day (usage.go).
	usage   atomic.Pointer[usageMeter]
	kv      *kv.KV
	sql     *sqldb.DBs
	secrets *capability.Secrets
	ai      *capability.AI
	objects *objects.Buckets

	// The logger and limits of the newest config (re-bound on each
	// Provision; read by callbacks from workers).
	logger atomic.Pointer[zap.Logger]
	app    atomic.Pointer[App]
	events atomic.Pointer[eventSink]

	// wired are the registries the handlers of a started config were
	// wired to, by name: a reload's handlers serve from them until their
	// own config starts (App.liveRegistry).
	wired sync.Map

	// console decides which handlers' console lines reach Caddy's log
	// (consolelog.go).
	console *consoleLimiter
	// streams counts visitors' open streamed responses (visitors.go).
	streams visitorStreams
	// issuance counts tenants' new certificates this hour (tlspermission.go).
	issuance issuanceBook
	// bodies is what the gateway holds of request bodies it reads whole
	// (body.go).
	bodies visitorBodies
	// sockets counts visitors' open WebSockets (visitors.go).
	sockets visitorSockets
	// receiptFailures counts the receipt store's failures; receiptLog
	// logs them at most every receiptLogEvery (receiptStoreFailed).
	receiptFailures atomic.Int64
	receiptLog      rate.Sometimes
	// receiptDrops counts receipts dropped unwritten since receiptDropLog
	// last logged (receiptsDropped).
	receiptDrops   atomic.Int64
	receiptDropLog rate.Sometimes
}

// receiptLogEvery is how often a failing receipt store is logged at most
// (a stopped PostgreSQL fails every receipt read and write).
const receiptLogEvery = 10 * time.Second

// receiptStoreFailed logs a failure of the receipt store (PostgreSQL
// stopped or unreachable in a cluster): the first at once, then at most
// one line every receiptLogEvery with the failures counted since.
func (rt *runtime) receiptStoreFailed(what string, err error) {
	rt.receiptFailures.Add(1)
	rt.receiptLog.Do(func() {
		rt.logger.Load().Error("the receipt store failed: "+what,
			zap.Error(err), zap.Int64("failures", rt.receiptFailures.Swap(0)))
	})
}

// receiptsDropped counts and logs receipts dropped unwritten (the
// receipt store took none while budgets.ReceiptsWaitingBytes waited): at
// most one line every receiptLogEvery, with the count since.
func (rt *runtime) receiptsDropped(n int) {
	metricReceiptsDropped.Add(float64(n))
	rt.receiptDrops.Add(int64(n))
	rt.receiptDropLog.Do(func() {
		rt.logger.Load().Error("receipts dropped unwritten: the receipt store takes none, and past the bytes the gateway holds waiting the oldest are dropped first",
			zap.Int64("dropped", rt.receiptDrops.Swap(0)), zap.Int64("bound_bytes", budgets.ReceiptsWaitingBytes))
	})
}

// Destruct ends the workers and closes the store (the last config let go).
func (rt *runtime) Destruct() error {
	close(rt.closing)
	if rt.cluster != nil {
		rt.cluster.server.Close()
		rt.cluster.link.close()
	}
	rt.kv.Close() // commits what is pending
	rt.sql.Close()
	rt.receipts.Close()
	err := rt.store.Close()
	closeUsageAndLogs(rt.usage.Load(), rt.logs.Load())
	if cerr := rt.backing.close(); err == nil {
		err = cerr
	}
	rt.pool.Shutdown()
	return err
}

// closeUsageAndLogs stops the meter u and the log store l (either may be
// nil). The cut entries told in the background go to l, so l closes only
// once they are told or the meter gave up on them (tenantPlans.stop, at
// most planStopWait): a cut's row is written only once its entry is in l
// (docs/usage.md).
func closeUsageAndLogs(u *usageMeter, l *logstore.Store) {
	if u != nil {
		u.plans.stop()
	}
	if l != nil {
		l.Close() // writes what waits
	}
	if u != nil {
		u.close()
	}
}

func loadRuntime(a *App) (*runtime, error) {
	val, _, err := runtimes.LoadOrNew(a.storeKey(), func() (caddy.Destructor, error) {
		return newRuntime(a)
	})
	if err != nil {
		return nil, err
	}
	return val.(*runtime), nil
}

func releaseRuntime(rt *runtime) error {
	_, err := runtimes.Delete(rt.key)
	return err
}

func newRuntime(a *App) (*runtime, error) {
	rt := &runtime{key: a.storeKey(), closing: make(chan struct{}), console: newConsoleLimiter()}
	rt.logger.Store(zap.NewNop())
	rt.app.Store(a)
	// The gateway's side of the workers' kv caches (kv/cache): what each
	// worker may hold, and what a write must drop from the others.
	kvCache := cache.NewGateway(cache.GatewayConfig{
		Apply: func(ctx context.Context, tenant, id string, due time.Time, writes []cache.Write) error {
			s := rt.store
			if s == nil {
				return fault.New(fault.Overloaded, "The gateway is starting.")
			}
			if !due.IsZero() {
				// What was left of the writing invocation's bound as
				// the batch left the worker: the writes wait for the
				// store within half of it (handles' kvWait).
				ctx = program.WithDue(ctx, due)
			}
			ws := make([]handles.KVWrite, len(writes))
			for i, w := range writes {
				ws[i] = handles.KVWrite(w)
			}
			return s.KVWrites(ctx, tenant, id, ws)
		},
		SpaceOf: func(id string) (string, bool, bool) {
			if s := rt.store; s != nil {
				return s.KVSpace(id)
			}
			return "", false, false
		},
	})
	pool, err := workers.Start(workers.Config{
		Workers:           a.Workers,
		WorkerMemory:      a.WorkerMemory,
		MaxWorkers:        a.MaxWorkers,
		RecycleIdle:       time.Duration(a.RecycleIdle),
		Isolation:         a.Isolation,
		IsolatesPerWorker: a.IsolatesPerWorker,
		Queue:             a.Queue,
		Engine: workers.EngineConfig{
			Prewarm: *a.Prewarm,
			Limits:  a.limits(),
			JIT:     a.JIT,
			Wasm:    a.Wasm,
		},
		DisableLandlock: a.NoLandlock,
		CPUs:            a.WorkerCPUs,
		Logf: func(format string, args ...any) {
			rt.logger.Load().Sugar().Infof(format, args...)
		},
		OnLog: func(id string, e program.LogEntry) {
			if s := rt.store; s != nil {
				s.HandleLog(id, e)
			}
		},
		OnLost: func(id string, err error) {
			if s := rt.store; s != nil {
				s.IsolateLost(id, err)
			}
		},
		OnHostCall: func(ctx context.Context, tenant, id, op string, args json.RawMessage) (json.RawMessage, error) {
			if s := rt.store; s != nil {
				return s.HostCall(ctx, tenant, id, op, args)
			}
			return nil, fault.New(fault.Overloaded, "The gateway is starting.")
		},
		HostCache: kvCache,
		OnCrash: func(c workers.Crash) {
			metricWorkerRestarts.Inc()
			if s := rt.store; s != nil {
				s.WorkerCrashed(c)
			}
		},
	})
	if err != nil {
		return nil, err
	}
	backing, err := openBackends(a)
	if err != nil {
		pool.Shutdown()
		return nil, err
	}
	writer := backing.writer
	var own func(ctx context.Context, space string) error
	var writeBound time.Duration
	if a.clustered() {
		// The API's registry writes wait for etcd as long as a handler's
		// kv writes do (handles/writes.go).
		writeBound = budgets.ClusterKVBound
		own = func(ctx context.Context, space string) error {
			if !backing.member.Load().Serving() {
				return ownFault(cluster.ErrLost)
			}
			_, err := writer.Fence(ctx, space)
			return ownFault(err)
		}
	}
	registry, err := handles.Open(writer, handles.Options{
		Own:      own,
		Executor: pool,
		OnEnd: func(e handles.Event) {
			metricEnds.WithLabelValues(e.Reason).Inc()
			if sink := rt.events.Load(); sink != nil {
				sink.app.Emit(sink.ctx, "handle_ended", map[string]any{
					"registry": e.Registry, "execution_id": e.ID, "tenant": e.Tenant, "reason": e.Reason, "message": e.Message,
				})
			}
			if l := rt.logs.Load(); l != nil {
				// Its tails end with it (docs/logs.md), freeing their places.
				l.EndTails(logTenant(e.Registry, e.Tenant), e.ID, "the handle ended ("+e.Reason+")")
			}
			rt.logger.Load().Info("handle ended",
				zap.String("registry", e.Registry), zap.String("execution_id", e.ID),
				zap.String("tenant", e.Tenant), zap.String("reason", e.Reason), zap.String("message", e.Message))
		},
		OnLog: func(registry, id, tenant string, e program.LogEntry) {
			rt.logHandlerOutput(registry, id, tenant, e)
			if l := rt.logs.Load(); l != nil {
				l.Append(logTenant(registry, tenant), id, logstore.Entry{Time: e.Time, Level: e.Level, Message: e.Message})
			}
		},
		OnRequest: func(registry, id, tenant string, r handles.Request) {
			key := logTenant(registry, tenant)
			if u := rt.usage.Load(); u != nil {
				u.add(key, r.Time, r.DurationMs, r.CPUMs, r.Bytes)
			}
			if l := rt.logs.Load(); l != nil {
				l.Append(key, id, logstore.Entry{Time: r.Time, Level: "request",
					Method: r.Method, URL: r.URL, Status: r.Status, DurationMs: r.DurationMs, CPUMs: r.CPUMs})
			}
		},
		// A plan's daily caps (plans.go).
		Admit: rt.admit,
		OnSocketEvent: func(registry, _, tenant string, cpu time.Duration) {
			if u := rt.usage.Load(); u != nil && tenant != "" {
				u.addCPU(logTenant(registry, tenant), float64(cpu.Microseconds())/1000)
			}
		},
		OnRun: func(registry, tenant string, cpu time.Duration) {
			if u := rt.usage.Load(); u != nil && tenant != "" {
				u.addCPU(logTenant(registry, tenant), float64(cpu.Microseconds())/1000)
			}
		},
		OnRebuild: func(string, string) { metricRebuilds.Inc() },
		// A host that is no longer a domain loses its certificate at once.
		OnDomainsGone: func(_ string, hosts []string) { rt.forgetCertificates(hosts) },
		// Every firing of a schedule writes a receipt (docs/schedules.md).
		OnFiring: rt.firingReceipt,

		WriteBound: writeBound,
	})
	if err != nil {
		backing.close()
		pool.Shutdown()
		return nil, err
	}
	kvs, err := kv.NewKV(writer, 0)
	if err != nil {
		registry.Close()
		backing.close()
		pool.Shutdown()
		return nil, err
	}
	// Values read from writes a failed commit lost leave every cache.
	kvs.OnCommitFailed = kvCache.DropAll
	if a.clustered() {
		// A handler's kv call waits for etcd at most this long.
		kvs.Bound = budgets.ClusterKVBound
		// etcd's size is measured with or without kv_budget (the metric).
		full := &atomic.Bool{}
		if a.StoreEtcd.KVBudget > 0 {
			kvs.Full = full.Load
		}
		go rt.watchKVBudget(backing.etcd, a.StoreEtcd.KVBudget, full)
	}
	sqlOpts := sqldb.Options{Dir: a.Store + ".sql", Quota: a.SQLQuota}
	if a.clustered() {
		// The databases' pages are in the cluster's PostgreSQL, every
		// commit checked against this gateway's fence on the space
		// (docs/sql.md, "In a cluster"); the directory holds exports.
		sqlOpts.Pages = backing.pg
		sqlOpts.Fence = func(ctx context.Context, registry, tenant string) (uint64, error) {
			if !backing.member.Load().Serving() {
				return 0, ownFault(cluster.ErrLost)
			}
			f, err := writer.Fence(ctx, store.Space(registry, tenant))
			return f.Epoch, ownFault(err)
		}
	}
	sqls, err := sqldb.Open(sqlOpts)
	if err != nil {
		kvs.Close()
		registry.Close()
		backing.close()
		pool.Shutdown()
		return nil, err
	}
	rt.sql = sqls
	buckets, err := openBuckets(a)
	if err != nil {
		sqls.Close()
		kvs.Close()
		registry.Close()
		backing.close()
		pool.Shutdown()
		return nil, err
	}
	rt.objects = buckets
	fetchStreams := &capability.FetchStreams{}
	rt.secrets = capability.NewSecrets(writer)
	rt.ai = &capability.AI{OnTokens: func(registry, tenant string, n int64) {
		metricAITokens.Add(float64(n))
		if u := rt.usage.Load(); u != nil {
			u.addAITokens(logTenant(registry, tenant), n)
		}
	}}
	registry.SetHost(&capability.Host{KV: kvs, SQL: sqls, Secrets: rt.secrets, AI: rt.ai, SQLAnswer: int(a.MaxResponseBody), Fetcher: &capability.Fetcher{Limits: a.limits(), Streams: fetchStreams, StreamTimeout: time.Duration(a.StreamTimeout)}, Tools: &capability.Tools{},
		Objects: &capability.Objects{Buckets: buckets, Streams: fetchStreams},
		OnFetchBytes: func(registry, tenant string, n int64) {
			if u := rt.usage.Load(); u != nil {
				u.addEgress(logTenant(registry, tenant), n)
			}
		}})
	rs, err := receipts.Open(backing.receipts, time.Duration(a.ReceiptRetention), nil)
	if err != nil {
		sqls.Close()
		kvs.Close()
		registry.Close()
		backing.close()
		pool.Shutdown()
		return nil, err
	}
	node := ""
	if a.clustered() && a.Cluster != nil {
		node = a.Cluster.Name
	}
	objectsUsed := func(registry, tenant string) int64 {
		// The bucket counts a space's bytes once from a listing, then keeps
		// them (docs/objects.md); a backend that fails answers 0 here.
		n, _ := buckets.Used(context.Background(), objects.Space(registry, tenant))
		return n
	}
	rt.usage.Store(openUsage(backing.receipts, node, kvs.Used, sqls.Used, objectsUsed))
	rt.logs.Store(logstore.Open(backing.receipts, time.Duration(a.LogRetention), a.LogBytes, nil))
	rt.backing = backing
	rt.store = registry
	rt.pool = pool
	rt.kv = kvs
	rt.receipts = rs
	rt.receiptLog.Interval = receiptLogEvery
	rt.receiptDropLog.Interval = receiptLogEvery
	rs.SetFailed(func(err error) { rt.receiptStoreFailed("writing receipts (they wait for the next commit)", err) })
	rs.SetDropped(rt.receiptsDropped)
	if a.clustered() {
		if err := rt.listen(a); err != nil {
			rt.Destruct()
			return nil, err
		}
		go rt.watchLease()
		go rt.sweepUnowned()
		go rt.finishTakeBacks()
		go rt.watchGone()
	}
	return rt, nil
}

// eventSink is the newest config's Caddy events app, through which every
// end of a handle is published (as "handle_ended", module "retainer").
type eventSink struct {
	app *caddyevents.App
	ctx caddy.Context
}

// bind points the runtime's callbacks at the newest config.
func (rt *runtime) bind(a *App) {
	rt.logger.Store(a.logger)
	if a.events != nil {
		rt.events.Store(&eventSink{app: a.events, ctx: a.ctx})
	}
	rt.app.Store(a)
	rt.receipts.SetRetention(time.Duration(a.ReceiptRetention))
	rt.secrets.SetKey(a.secretsKey)
	rt.logs.Load().Set(time.Duration(a.LogRetention), a.LogBytes)
	registerMetrics(a.ctx, rt)
}

// logTenant is whose stored log a registry's tenant's entries count in
// (a tenant's name is its registry's: docs/logs.md).
func logTenant(registry, tenant string) string { return registry + "\x00" + tenant }

// logHandlerOutput copies a handler's console output into Caddy's log,
// rate-limited per tenant and cut per line (consolelog.go) so that a
// chatty handler can neither flood it nor crowd another tenant out.
func (rt *runtime) logHandlerOutput(registry, id, tenant string, e program.LogEntry) {
	ok, dropped := rt.console.allow(tenant, time.Now())
	if !ok {
		return
	}
	l := rt.logger.Load()
	if ce := l.Check(zap.InfoLevel, "handler console"); ce != nil {
		fields := []zap.Field{zap.String("registry", registry), zap.String("execution_id", id), zap.String("tenant", tenant),
			zap.String("level", e.Level), zap.String("message", consoleLine(e.Message))}
		if dropped > 0 {
			fields = append(fields, zap.Int("lines_left_out_before", dropped))
		}
		ce.Write(fields...)
	}
}
