package caddymodule

import (
	"errors"
	"sync"
	"time"

	"github.com/caddyserver/caddy/v2"
	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/zap"

	"github.com/retainer-gw/retainer/fault"
	"github.com/retainer-gw/retainer/logstore"
	"github.com/retainer-gw/retainer/workers"
)

// Metrics are created once per process and registered with each config's
// registry (Caddy gives every config a fresh one), tolerating "already
// registered".
var (
	metricInvocations = prometheus.NewCounterVec(prometheus.CounterOpts{
		Namespace: "retainer", Name: "invocations_total",
		Help: "Handle invocations by outcome (ok or an error code).",
	}, []string{"outcome"})
	metricLatency = prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Namespace: "retainer", Name: "invocation_duration_seconds",
		Help:    "Time to answer a handle invocation, rebuilds included.",
		Buckets: []float64{.0005, .001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30},
	}, []string{"plane"})
	// The children every data-plane request touches, resolved once:
	// WithLabelValues hashes and looks its labels up on each call (~1 us
	// of the gateway's profile for the two of them).
	metricInvocationsOK = metricInvocations.WithLabelValues("ok")
	metricLatencyData   = metricLatency.WithLabelValues("data")
	metricExecutions    = prometheus.NewCounterVec(prometheus.CounterOpts{
		Namespace: "retainer", Name: "executions_total",
		Help: "POST /executions runs by outcome.",
	}, []string{"outcome"})
	metricEnds = prometheus.NewCounterVec(prometheus.CounterOpts{
		Namespace: "retainer", Name: "handle_ends_total",
		Help: "Handles ended, by reason.",
	}, []string{"reason"})
	metricForwards = prometheus.NewCounter(prometheus.CounterOpts{
		Namespace: "retainer", Name: "cluster_forwards_total",
		Help: "Requests forwarded to the gateway that owns their tenant's space (docs/cluster.md).",
	})
	metricClaims = prometheus.NewCounter(prometheus.CounterOpts{
		Namespace: "retainer", Name: "cluster_claims_total",
		Help: "Spaces this gateway claimed (first owned, or owned again after another gateway or a lost lease).",
	})
	metricReceiptsDropped = prometheus.NewCounter(prometheus.CounterOpts{
		Namespace: "retainer", Name: "receipts_dropped_total",
		Help: "Receipts dropped unwritten: the receipt store (a cluster's PostgreSQL) took none while the most the gateway holds waited (docs/cluster.md).",
	})
	metricEtcdSize = prometheus.NewGauge(prometheus.GaugeOpts{
		Namespace: "retainer", Name: "cluster_etcd_db_bytes",
		Help: "etcd's database size in use, as last measured (every 5 s, with or without kv_budget).",
	})
	metricRebuilds = prometheus.NewCounter(prometheus.CounterOpts{
		Namespace: "retainer", Name: "rebuilds_total",
		Help: "Handle isolates rebuilt after a restart, crash, bound hit or parking.",
	})
	metricSocketsOpen = prometheus.NewGauge(prometheus.GaugeOpts{
		Namespace: "retainer", Name: "websockets_open",
		Help: "WebSockets open to handles.",
	})
	metricSocketMessages = prometheus.NewCounterVec(prometheus.CounterOpts{
		Namespace: "retainer", Name: "websocket_messages_total",
		Help: "WebSocket messages to handles (in) and from them (out).",
	}, []string{"direction"})
	metricAITokens = prometheus.NewCounter(prometheus.CounterOpts{
		Namespace: "retainer", Name: "ai_tokens_total",
		Help: "Tokens (prompt and completion) tenants spent through ai.run (docs/ai.md).",
	})
	metricSocketIn       = metricSocketMessages.WithLabelValues("in")
	metricSocketOut      = metricSocketMessages.WithLabelValues("out")
	metricWorkerRestarts = prometheus.NewCounter(prometheus.CounterOpts{
		Namespace: "retainer", Name: "worker_restarts_total",
		Help: "Worker processes that died and were replaced.",
	})

	gaugesMu sync.Mutex
	gaugeRT  *runtime // the runtime the gauges report (the newest config's)
)

// current is the runtime the gauges report: the newest config's.
func current() *runtime {
	gaugesMu.Lock()
	defer gaugesMu.Unlock()
	return gaugeRT
}

// workerSum adds one number over the current runtime's workers.
func workerSum(f func(workers.WorkerStatus) int) int {
	rt := current()
	if rt == nil {
		return 0
	}
	n := 0
	for _, s := range rt.pool.Status() {
		n += f(s)
	}
	return n
}

func liveIsolates(s workers.WorkerStatus) int { return s.Isolates }

// domainCount is the current runtime's active (or pending) domains.
func domainCount(active bool) float64 {
	rt := current()
	if rt == nil {
		return 0
	}
	a, p := rt.store.DomainCounts()
	if active {
		return float64(a)
	}
	return float64(p)
}

var (
	metricHandles = prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Namespace: "retainer", Name: "handles_live",
		Help: "Handles with a live isolate in a worker.",
	}, func() float64 { return float64(workerSum(liveIsolates)) })
	metricParked = prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Namespace: "retainer", Name: "handles_parked",
		Help: "Handles with a record but no live isolate (rebuilt on their next request).",
	}, func() float64 {
		rt := current()
		if rt == nil {
			return 0
		}
		return float64(max(rt.store.Count()-workerSum(liveIsolates), 0))
	})
	metricOwnedSpaces = prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Namespace: "retainer", Name: "cluster_spaces_owned",
		Help: "Tenant spaces this gateway owns in its cluster (docs/cluster.md).",
	}, func() float64 {
		if rt := current(); rt != nil {
			return float64(rt.store.OwnedSpaces())
		}
		return 0
	})
	metricLogsLost = prometheus.NewCounterFunc(prometheus.CounterOpts{
		Namespace: "retainer", Name: "log_entries_lost_total",
		Help: "Handle log entries left out of the store because their handle had 64 KiB waiting to be written (docs/logs.md).",
	}, func() float64 { return float64(logstore.Lost()) })
	metricFenceFailures = prometheus.NewCounterFunc(prometheus.CounterOpts{
		Namespace: "retainer", Name: "cluster_fence_failures_total",
		Help: "Commits etcd refused because this gateway's claim on the space was superseded.",
	}, func() float64 {
		if rt := current(); rt != nil && rt.backing.etcd != nil {
			return float64(rt.backing.etcd.FenceFailures())
		}
		return 0
	})
	metricDomainsActive = prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Namespace: "retainer", Name: "domains_active",
		Help: "Tenants' own domains that are verified and served (docs/domains.md).",
	}, func() float64 { return domainCount(true) })
	metricDomainsPending = prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Namespace: "retainer", Name: "domains_pending",
		Help: "Tenants' own domains claimed and not yet verified.",
	}, func() float64 { return domainCount(false) })
	// Per handle, GET /handles shows inProgress: a metric label per handle
	// would grow without bound.
	metricInProgress = prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Namespace: "retainer", Name: "invocations_in_progress",
		Help: "Handle invocations under way or waiting, across all handles.",
	}, func() float64 {
		rt := current()
		if rt == nil {
			return 0
		}
		return float64(rt.store.InProgress())
	})
	metricStreamsOpen = prometheus.NewGauge(prometheus.GaugeOpts{
		Namespace: "retainer", Name: "response_streams_open",
		Help: "Streamed handler responses being sent to visitors.",
	})
	metricStreamBytes = prometheus.NewCounter(prometheus.CounterOpts{
		Namespace: "retainer", Name: "response_stream_bytes_total",
		Help: "Bytes of streamed handler responses sent to visitors.",
	})
	metricQueue = prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Namespace: "retainer", Name: "queue_depth",
		Help: "Calls in flight or waiting across all workers.",
	}, func() float64 { return float64(workerSum(func(s workers.WorkerStatus) int { return s.Queue })) })
	metricWorkerMemory = prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Namespace: "retainer", Name: "worker_memory_bytes",
		Help: "The workers' own memory (PSS) summed, as last measured.",
	}, func() float64 { return float64(budget().UsedMemory) })
	metricWorkerBudget = prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Namespace: "retainer", Name: "worker_memory_budget_bytes",
		Help: "worker_memory: the budget of `workers auto` (0 with a fixed number of workers).",
	}, func() float64 { return float64(budget().WorkerMemory) })
	metricWorkers = prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Namespace: "retainer", Name: "workers",
		Help: "Worker processes up or starting.",
	}, func() float64 { return float64(budget().Workers) })
)

// budget is the current runtime's worker capacity.
func budget() workers.Budget {
	if rt := current(); rt != nil {
		return rt.pool.Budget()
	}
	return workers.Budget{}
}

func registerMetrics(ctx caddy.Context, rt *runtime) {
	gaugesMu.Lock()
	gaugeRT = rt
	gaugesMu.Unlock()
	reg := ctx.GetMetricsRegistry()
	if reg == nil {
		return
	}
	collectors := append([]prometheus.Collector{metricReceiptsDropped, metricInvocations, metricLatency, metricExecutions, metricEnds, metricWorkerRestarts, metricRebuilds, metricHandles, metricParked, metricInProgress, metricQueue, metricStreamsOpen, metricStreamBytes, metricWorkerMemory, metricWorkerBudget, metricWorkers, metricSocketsOpen, metricSocketMessages, metricDomainsActive, metricDomainsPending, metricForwards, metricClaims, metricOwnedSpaces, metricFenceFailures, metricEtcdSize, metricAITokens}, scheduleMetrics...) // schedules.go
	// docs/logs.md
	collectors = append(collectors, metricLogsLost)
	for _, c := range collectors {
		if err := reg.Register(c); err != nil {
			var already prometheus.AlreadyRegisteredError
			if !errors.As(err, &already) {
				ctx.Logger().Warn("registering a metric", zap.Error(err))
			}
		}
	}
}

func observeInvocation(plane string, start time.Time, err error) {
	if err == nil {
		metricInvocationsOK.Inc()
	} else {
		metricInvocations.WithLabelValues(string(fault.CodeOf(err))).Inc()
	}
	latency := metricLatencyData
	if plane != "data" {
		latency = metricLatency.WithLabelValues(plane)
	}
	latency.Observe(time.Since(start).Seconds())
}
