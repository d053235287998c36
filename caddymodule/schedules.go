package caddymodule

import (
	"net/http"
	"time"

	"github.com/retainer-gw/retainer/authz"
	"github.com/retainer-gw/retainer/handles"
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
	var req struct {
		Cron string `json:"cron,omitempty"`
	}
	if r.ContentLength != 0 && !decodeBody(w, r, 64<<10, &req) {
		return
	}
	f, err := h.registry().FireNow(r.Context(), c.tenant, r.PathValue("id"), req.Cron)
	if err != nil {
		writeFault(w, err, "")
		return
	}
	writeJSON(w, http.StatusOK, f)
}

// firingReceipt writes the receipt of one firing and answers its id.
func (rt *runtime) firingReceipt(fr handles.FiringReceipt) string {
	if rt.receipts == nil {
		return ""
	}
	f := fr.Firing
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
