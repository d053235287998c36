package caddymodule

import (
	"context"
	"errors"
	"net/http"
	"sort"
	"strconv"
	"strings"
	"time"

	"go.uber.org/zap"

	"github.com/retainer-gw/retainer/authz"
	"github.com/retainer-gw/retainer/budgets"
	"github.com/retainer-gw/retainer/fault"
	"github.com/retainer-gw/retainer/handles"
	"github.com/retainer-gw/retainer/receipts"
)

// A run's receipt (receipts/) and GET /results: its record, stored
// without ever failing the run, and read back by its tenant.

// saveReceipt records the run; a failure to store it is logged, never the
// run's failure.
func (h *API) saveReceipt(tenant string, req executionRequest, ereq handles.ExecRequest, res handles.ExecResult, runErr error, received, started, ended time.Time) string {
	rc := h.receipt(tenant, req, ereq, res, runErr, received, started, ended)
	rc.Children = children(ereq.Budget)
	return h.putReceipt(rc)
}

// receipt is the record of one run.
func (h *API) receipt(tenant string, req executionRequest, ereq handles.ExecRequest, res handles.ExecResult, runErr error, received, started, ended time.Time) receipts.Receipt {
	rc := receipts.Receipt{
		ID: receipts.NewID(), Tenant: tenant, Registry: h.Registry,
		Code: req.Code, Modules: req.Modules, RetainHandles: req.RetainHandles,
		Logs:        res.Outcome.Logs,
		ExecutionID: res.ExecutionID,
		Timing: receipts.Timing{Received: received, Started: started, Ended: ended,
			DurationMs: float64(ended.Sub(started).Microseconds()) / 1000},
		Grants: receipts.Grants{Capabilities: ereq.Grants.Capabilities, Outbound: ereq.Grants.Outbound, Providers: map[string][]string{},
			OutboundHeaders: ereq.Grants.Headers},
	}
	if rc.Logs == nil {
		rc.Logs = []string{}
	}
	if rc.Grants.Capabilities == nil {
		rc.Grants.Capabilities = []string{}
	}
	if rc.Grants.Outbound == nil {
		rc.Grants.Outbound = []string{}
	}
	for _, p := range ereq.Grants.Providers {
		rc.Grants.Providers[p.Name] = p.Tools
	}
	for k := range req.Env {
		rc.Grants.EnvKeys = append(rc.Grants.EnvKeys, k)
	}
	sort.Strings(rc.Grants.EnvKeys)
	if runErr != nil {
		f := fault.As(runErr)
		rc.Outcome = receipts.Outcome{Status: "error", Error: &receipts.Error{Code: string(f.Code), Message: f.Message}}
	} else {
		rc.Outcome = receipts.Outcome{Status: "ok", Result: res.Outcome.Result, Handler: res.Outcome.Handler}
	}
	rc.Outcome.Denials = res.Denials
	return rc
}

// putReceipt stores a receipt and answers its id ("" when it could not be
// stored: logged, never the run's failure).
func (h *API) putReceipt(rc receipts.Receipt) string {
	if err := h.runtime().receipts.Put(rc); err != nil {
		h.logger.Error("saving a receipt", zap.Error(err))
		return ""
	}
	return rc.ID
}

// receiptsUnavailable answers a receipt read the store failed (its
// PostgreSQL stopped, in a cluster) 503 OVERLOADED with Retry-After, never
// 404: the receipt may exist. The failure is logged, rate-limited.
func (h *API) receiptsUnavailable(w http.ResponseWriter, what string, err error) {
	h.runtime().receiptStoreFailed(what, err)
	writeFault(w, fault.New(fault.Overloaded, "Receipts cannot be read now. Retry shortly."), "")
}

func (h *API) getResult(w http.ResponseWriter, r *http.Request) {
	c, ok := h.authorize(w, r, authz.ScopeRead)
	if !ok {
		return
	}
	id, asJSON := strings.CutSuffix(r.PathValue("id"), ".json")
	ctx, cancel := context.WithTimeout(r.Context(), budgets.ClusterKVBound)
	defer cancel()
	rc, err := h.runtime().receipts.GetWithin(ctx, c.tenant, id)
	if errors.Is(err, receipts.ErrUnavailable) {
		h.receiptsUnavailable(w, "reading a receipt", err)
		return
	}
	if err != nil {
		writeFault(w, fault.New(fault.NotFound, "No receipt %q.", id), "")
		return
	}
	if asJSON {
		writeJSON(w, http.StatusOK, rc)
		return
	}
	receipts.Render(w, rc)
}

func (h *API) listResults(w http.ResponseWriter, r *http.Request) {
	c, ok := h.authorize(w, r, authz.ScopeRead)
	if !ok {
		return
	}
	limit, _ := strconv.Atoi(r.URL.Query().Get("limit"))
	ctx, cancel := context.WithTimeout(r.Context(), budgets.ClusterKVBound)
	defer cancel()
	list, next, err := h.runtime().receipts.ListWithin(ctx, c.tenant, limit, r.URL.Query().Get("cursor"))
	if errors.Is(err, receipts.ErrUnavailable) {
		h.receiptsUnavailable(w, "listing receipts", err)
		return
	}
	if err != nil {
		writeFault(w, err, "")
		return
	}
	out := map[string]any{"results": list, "cursor": nil}
	if next != "" {
		out["cursor"] = next
	}
	writeJSON(w, http.StatusOK, out)
}
