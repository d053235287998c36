package caddymodule

import (
	"context"
	"encoding/json"
	"net/http"
	"strings"
	"time"

	"github.com/retainer-gw/retainer/authz"
	"github.com/retainer-gw/retainer/budgets"
	"github.com/retainer-gw/retainer/capability"
	"github.com/retainer-gw/retainer/fault"
	"github.com/retainer-gw/retainer/handles"
	"github.com/retainer-gw/retainer/program"
)

// POST /executions: a request checked against the config's maxima, run
// once or kept as a handle, its receipt kept (results.go).

// executionRequest is the body of POST /executions.
type executionRequest struct {
	Code          string             `json:"code"`
	Modules       map[string]string  `json:"modules,omitempty"`
	Language      string             `json:"language,omitempty"`
	RetainHandles bool               `json:"retainHandles,omitempty"`
	Concurrency   *int               `json:"concurrency,omitempty"`
	TimeoutMs     *int64             `json:"timeoutMs,omitempty"`
	MemoryLimitMb *int               `json:"memoryLimitMb,omitempty"`
	IdleMs        *int64             `json:"idleMs,omitempty"`
	Schedules     []string           `json:"schedules,omitempty"`
	Capabilities  []string           `json:"capabilities,omitempty"`
	Providers     []handles.Provider `json:"providers,omitempty"`
	Outbound      *struct {
		Allow []string `json:"allow"`
		// Headers the gateway sets on fetch to a host (docs/secrets.md).
		Headers map[string]map[string]string `json:"headers,omitempty"`
	} `json:"outbound,omitempty"`
	Env map[string]string `json:"env,omitempty"`
}

// executionResponse is the answer of POST /executions.
type executionResponse struct {
	Result      json.RawMessage `json:"result,omitempty"`
	Logs        []string        `json:"logs"`
	ExecutionID string          `json:"executionId,omitempty"`
	Handles     []string        `json:"handles,omitempty"`
	ResultID    string          `json:"resultId,omitempty"`
}

// toRequest checks an execution request against the config's maxima.
func (h *API) toRequest(req executionRequest) (handles.ExecRequest, error) {
	a := h.app
	out := handles.ExecRequest{
		Program:       program.Program{Code: req.Code, Modules: req.Modules, Language: req.Language},
		RetainHandles: req.RetainHandles,
		Timeout:       time.Duration(a.Timeout),
		MemoryMiB:     a.MemoryMiB,
		Env:           req.Env,
		Budget:        &handles.SpawnBudget{MaxDepth: h.spawnDepth(), MaxChildren: h.spawnChildren()},
	}
	if req.Code == "" {
		return out, fault.New(fault.BadRequest, "code is required.")
	}
	switch req.Language {
	case "", "javascript":
		out.Program.Language = ""
	case program.LanguageTypeScript:
	default:
		return out, fault.New(fault.BadRequest, "language is javascript or typescript, not %q.", req.Language)
	}
	if req.Concurrency != nil {
		if *req.Concurrency < 1 || *req.Concurrency > budgets.HandleConcurrency {
			return out, fault.New(fault.BadRequest, "concurrency must be between 1 and %d.", budgets.HandleConcurrency)
		}
		out.Concurrency = *req.Concurrency
	}
	if req.TimeoutMs != nil {
		d := time.Duration(*req.TimeoutMs) * time.Millisecond
		if *req.TimeoutMs <= 0 || d > time.Duration(a.MaxTimeout) {
			return out, fault.New(fault.BadRequest, "timeoutMs must be between 1 and %d.", time.Duration(a.MaxTimeout).Milliseconds())
		}
		out.Timeout = d
	}
	if req.IdleMs != nil {
		maxIdle := time.Duration(a.MaxIdle).Milliseconds()
		if *req.IdleMs < 1000 || *req.IdleMs > maxIdle {
			return out, fault.New(fault.BadRequest, "idleMs must be between 1000 and %d.", maxIdle)
		}
		out.Idle = time.Duration(*req.IdleMs) * time.Millisecond
	}
	// Schedules are checked by the registry (handles/schedules.go).
	out.Schedules = req.Schedules
	if req.MemoryLimitMb != nil {
		if *req.MemoryLimitMb < 8 || *req.MemoryLimitMb > a.MaxMemoryMiB {
			return out, fault.New(fault.BadRequest, "memoryLimitMb must be between 8 and %d.", a.MaxMemoryMiB)
		}
		out.MemoryMiB = *req.MemoryLimitMb
	}
	for _, c := range req.Capabilities {
		if !capability.Known(c) {
			last := len(capability.Names) - 1
			return out, fault.New(fault.BadRequest, "Unknown capability %q: the capabilities are %s and %s.", c, strings.Join(capability.Names[:last], ", "), capability.Names[last])
		}
	}
	out.Grants.Capabilities = req.Capabilities
	for _, p := range req.Providers {
		if p.Caller {
			continue // checked by checkCallerProviders
		}
		tools, ok := h.Providers[p.Name]
		if !ok {
			return out, fault.New(fault.BadRequest, "Unknown provider %q.", p.Name)
		}
		for _, t := range p.Tools {
			if _, ok := tools[t]; !ok {
				return out, fault.New(fault.BadRequest, "Provider %q has no tool %q.", p.Name, t)
			}
		}
	}
	out.Grants.Providers = req.Providers
	if req.Outbound != nil {
		for _, host := range req.Outbound.Allow {
			if strings.Contains(host, "%") {
				return out, fault.New(fault.BadRequest, "outbound.allow %q names an IPv6 address with a zone, which is never reachable.", host)
			}
		}
		out.Grants.Outbound = req.Outbound.Allow
		out.Grants.Headers = req.Outbound.Headers
	}
	return out, nil
}

func (h *API) execute(w http.ResponseWriter, r *http.Request) {
	received := time.Now()
	c, err := h.caller(r)
	if err != nil {
		writeFault(w, err, "")
		return
	}
	var req executionRequest
	if !decodeBody(w, r, h.app.MaxRequestBody, &req) {
		return
	}
	resp, err := h.runExecution(r.Context(), c, req, nil, received)
	if err != nil {
		writeFault(w, err, resp.ResultID)
		return
	}
	writeJSON(w, http.StatusOK, resp)
}

// runExecution runs one execution request for caller c, over HTTP or the
// executor socket (whose callerTools answer its caller providers), and
// keeps its receipt. On failure the response carries only the resultId
// (empty when the program never ran).
func (h *API) runExecution(ctx context.Context, c caller, req executionRequest, callerTools handles.CallerTools, received time.Time) (executionResponse, error) {
	var err error
	if req.RetainHandles {
		err = h.need(c, authz.ScopeDeploy)
	} else {
		err = h.need(c, authz.ScopeExecute)
	}
	if err == nil {
		err = h.planGate(c, false)
	}
	if err != nil {
		return executionResponse{}, err
	}
	ereq, err := h.toRequest(req)
	if err != nil {
		return executionResponse{}, err
	}
	// Every secret outbound.headers names must be the caller's own.
	if err := h.runtime().secrets.CheckHeaders(ctx, h.Registry, c.tenant, ereq.Grants.Headers); err != nil {
		return executionResponse{}, err
	}
	if err := checkCallerProviders(req.Providers, callerTools != nil); err != nil {
		return executionResponse{}, err
	}
	ereq.Caller = callerTools
	started := time.Now()
	res, err := h.registry().Execute(ctx, c.tenant, ereq)
	ended := time.Now()
	metricExecutions.WithLabelValues(outcomeLabel(err)).Inc()
	resultID := h.saveReceipt(c.tenant, req, ereq, res, err, received, started, ended)
	if err != nil {
		return executionResponse{ResultID: resultID}, err
	}
	resp := executionResponse{Result: res.Outcome.Result, Logs: res.Outcome.Logs, ResultID: resultID}
	if resp.Logs == nil {
		resp.Logs = []string{}
	}
	if res.ExecutionID != "" {
		resp.ExecutionID = res.ExecutionID
		resp.Handles = []string{"fetch"}
		if len(ereq.Schedules) > 0 {
			resp.Handles = append(resp.Handles, program.ScheduledEvent)
		}
	}
	return resp, nil
}
