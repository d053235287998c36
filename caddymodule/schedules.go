package caddymodule

import (
	"net/http"
	"slices"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/retainer-gw/retainer/authz"
	"github.com/retainer-gw/retainer/fault"
	"github.com/retainer-gw/retainer/handles"
	"github.com/retainer-gw/retainer/program"
	"github.com/retainer-gw/retainer/receipts"
)

// Schedules (docs/schedules.md): GET /handles/{id}/schedules, POST
// /handles/{id}/scheduled (fire now), and the receipt of every firing.

func (h *API) handleSchedules(w http.ResponseWriter, r *http.Request) {
	c, ok := h.authorize(w, r, authz.ScopeRead)
	if !ok {
		return
	}
	info, err := h.registry().Schedules(c.tenant, r.PathValue("id"))
	if err != nil {
		writeFault(w, err, "")
		return
	}
	writeJSON(w, http.StatusOK, info)
}

func (h *API) fireScheduled(w http.ResponseWriter, r *http.Request) {
	c, ok := h.authorize(w, r, authz.ScopeDeploy)
	if !ok {
		return
	}
	// A handle without schedules has no handle named scheduled: answered
	// as the invoke of any name it does not have, whatever the body.
	id := r.PathValue("id")
	info, err := h.registry().Get(c.tenant, id)
	if err == nil && !slices.Contains(info.Handles, program.ScheduledEvent) {
		err = fault.UnknownHandle(id, program.ScheduledEvent)
	}
	if err != nil {
		writeFault(w, err, "")
		return
	}
	var req struct {
		Cron string `json:"cron,omitempty"`
	}
	if r.ContentLength != 0 && !decodeBody(w, r, 64<<10, &req) {
		return
	}
	f, err := h.registry().FireNow(r.Context(), c.tenant, id, req.Cron)
	if err != nil {
		writeFault(w, err, "")
		return
	}
	writeJSON(w, http.StatusOK, f)
}

var (
	metricFirings = prometheus.NewCounterVec(prometheus.CounterOpts{
		Namespace: "retainer", Name: "schedule_firings_total",
		Help: "Tries of schedules' ticks, by outcome (ok, error, bound, failed, missing).",
	}, []string{"outcome"})
	metricFiringLateness = prometheus.NewHistogram(prometheus.HistogramOpts{
		Namespace: "retainer", Name: "schedule_lateness_seconds",
		Help:    "From a tick's scheduled time to its first try's start.",
		Buckets: []float64{.01, .05, .1, .25, .5, 1, 2.5, 5, 10, 30, 60, 300, 3600},
	})
	scheduleMetrics = []prometheus.Collector{metricFirings, metricFiringLateness}
)

// firingReceipt counts one firing in the metrics, writes its receipt and
// answers the receipt's id.
func (rt *runtime) firingReceipt(fr handles.FiringReceipt) string {
	f := fr.Firing
	metricFirings.WithLabelValues(f.Outcome).Inc()
	if f.Attempt == 1 && !f.Now {
		metricFiringLateness.Observe(max(f.StartedAt.Sub(time.UnixMilli(f.ScheduledTime)).Seconds(), 0))
	}
	if rt.receipts == nil {
		return ""
	}
	ended := f.StartedAt.Add(time.Duration(f.DurationMs) * time.Millisecond)
	rc := receipts.Receipt{
		ID: receipts.NewID(), Tenant: fr.Tenant, Registry: fr.Registry,
		Kind: "scheduled", RetainHandles: true, ExecutionID: fr.ID,
		Code: "scheduled " + f.Cron, Logs: []string{},
		Timing: receipts.Timing{Received: time.UnixMilli(f.ScheduledTime).UTC(), Started: f.StartedAt, Ended: ended, DurationMs: float64(f.DurationMs)},
		Grants: receipts.Grants{Capabilities: []string{}, Providers: map[string][]string{}, Outbound: []string{}},
	}
	if f.Outcome == "ok" {
		rc.Outcome = receipts.Outcome{Status: "ok"}
	} else {
		rc.Outcome = receipts.Outcome{Status: "error", Error: &receipts.Error{Code: f.Outcome, Message: f.Error}}
	}
	if err := rt.receipts.Put(rc); err != nil {
		return ""
	}
	return rc.ID
}
