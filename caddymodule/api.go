package caddymodule

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/caddyserver/caddy/v2"
	"github.com/caddyserver/caddy/v2/modules/caddyhttp"
	"go.uber.org/zap"

	"github.com/retainer-gw/retainer/authz"
	"github.com/retainer-gw/retainer/budgets"
	"github.com/retainer-gw/retainer/capability"
	"github.com/retainer-gw/retainer/fault"
	"github.com/retainer-gw/retainer/handles"
	"github.com/retainer-gw/retainer/program"
	"github.com/retainer-gw/retainer/receipts"
)

func init() {
	caddy.RegisterModule(API{})
}

// API is the control plane (`retainer_api`): it runs programs, lists,
// invokes and closes handles, binds routes and domains and reads logs, for the tenant
// in {http.auth.user.id}. Paths are relative to where it is mounted (use
// handle_path to mount it under a prefix).
type API struct {
	// Registry names the registry this site uses. Default "default".
	Registry string `json:"registry,omitempty"`
	// Providers are the upstream tools a program may be granted, by
	// provider name, then tool name → upstream URL.
	Providers map[string]map[string]string `json:"providers,omitempty"`
	// OutboundAllowPrivate lets granted outbound fetch reach loopback and
	// private addresses (local testing only).
	OutboundAllowPrivate bool `json:"outbound_allow_private,omitempty"`
	// AllowAnonymous serves callers without a tenant as tenant "anonymous"
	// (local development). Otherwise they answer 401.
	AllowAnonymous bool `json:"allow_anonymous,omitempty"`
	// RequireScopes enforces retainer:execute, retainer:deploy and
	// retainer:read from the token's scope claim.
	RequireScopes bool `json:"require_scopes,omitempty"`
	// SpawnDepth and SpawnChildren are a top-level run's spawn budget
	// (README.md, API). Defaults 3 and 50.
	SpawnDepth    int `json:"spawn_depth,omitempty"`
	SpawnChildren int `json:"spawn_children,omitempty"`
	// Generate configures POST /run/generate; without it that answers
	// BAD_REQUEST.
	Generate *GenerateConfig `json:"generate,omitempty"`
	// AI is the models behind the ai capability (docs/ai.md); without it
	// ai.run refuses.
	AI *AIConfig `json:"ai,omitempty"`
	// Domains configures tenants' own domains (docs/domains.md).
	Domains *DomainsConfig `json:"domains,omitempty"`

	app     *App
	domains *domainsAPI
	sockets *socketSet // open executor sockets (docs/protocol.md)
	live    *started   // the runtime and registry, once the app has started
	logger  *zap.Logger
	mux     *http.ServeMux
}

// CaddyModule returns the Caddy module information.
func (API) CaddyModule() caddy.ModuleInfo {
	return caddy.ModuleInfo{ID: "http.handlers.retainer_api", New: func() caddy.Module { return new(API) }}
}

// Provision finds the app and the registry.
func (h *API) Provision(ctx caddy.Context) error {
	h.logger = ctx.Logger()
	appIface, err := ctx.App("retainer")
	if err != nil {
		return fmt.Errorf("retainer_api: %w", err)
	}
	h.app = appIface.(*App)
	if h.Registry == "" {
		h.Registry = "default"
	}
	if h.Generate != nil {
		if err := h.Generate.provision(); err != nil {
			return fmt.Errorf("retainer_api: %w", err)
		}
	}
	var ai *capability.AIConfig
	if h.AI != nil {
		if ai, err = h.AI.provision(); err != nil {
			return fmt.Errorf("retainer_api: %w", err)
		}
	}
	h.live = new(started)
	h.sockets = new(socketSet)
	h.domains = newDomainsAPI(h.Domains)
	h.app.whenStarted(func(rt *runtime) {
		reg := h.app.registry(rt, h.Registry)
		reg.SetCapabilities(h.Providers, h.OutboundAllowPrivate)
		rt.ai.Set(h.Registry, ai)
		h.live.rt.Store(rt)
		h.live.reg.Store(reg)
		if rt.cluster != nil {
			rt.cluster.mu.Lock()
			rt.cluster.apis[h.Registry] = h
			rt.cluster.mu.Unlock()
		}
	})
	mux := http.NewServeMux()
	mux.HandleFunc("POST /executions", h.execute)
	mux.HandleFunc("GET /handles", h.listHandles)
	mux.HandleFunc("GET /handles/{id}", h.getHandle)
	mux.HandleFunc("DELETE /handles/{id}", h.closeHandle)
	mux.HandleFunc("GET /handles/{id}/logs", h.handleLogs)
	mux.HandleFunc("GET /handles/{id}/tail", h.tailLogs)
	mux.HandleFunc("GET /usage", h.usage)
	mux.HandleFunc("GET /handles/{id}/schedules", h.handleSchedules)
	mux.HandleFunc("POST /handles/{id}/scheduled", h.fireScheduled)
	mux.HandleFunc("POST /handles/{id}/{name}", h.invoke)
	mux.HandleFunc("GET /routes", h.listRoutes)
	mux.HandleFunc("PUT /routes/{name}", h.bindRoute)
	mux.HandleFunc("GET /routes/{name}", h.getRoute)
	mux.HandleFunc("POST /routes/{name}/rollback", h.rollbackRoute)
	mux.HandleFunc("DELETE /routes/{name}", h.unbindRoute)
	mux.HandleFunc("GET /domains", h.listDomains)
	mux.HandleFunc("GET /domains/{host}", h.getDomain)
	mux.HandleFunc("PUT /domains/{host}", h.putDomain)
	mux.HandleFunc("DELETE /domains/{host}", h.deleteDomain)
	mux.HandleFunc("POST /domains/{host}/verify", h.verifyDomain)
	mux.HandleFunc("GET /health", h.health)
	mux.HandleFunc("GET /executor", h.executorSocket)
	mux.HandleFunc("POST /run", h.run)
	mux.HandleFunc("POST /run/chain", h.runChain)
	mux.HandleFunc("POST /run/generate", h.runGenerate)
	mux.HandleFunc("GET /results", h.listResults)
	mux.HandleFunc("GET /results/{id}", h.getResult)
	mux.HandleFunc("POST /sql", h.sqlQuery)
	mux.HandleFunc("GET /sql/export", h.sqlExport)
	mux.HandleFunc("GET /objects", h.listObjects)
	mux.HandleFunc("GET /objects/{key...}", h.getObject)
	mux.HandleFunc("PUT /objects/{key...}", h.putObject)
	mux.HandleFunc("DELETE /objects/{key...}", h.deleteObject)
	mux.HandleFunc("GET /secrets", h.listSecrets)
	mux.HandleFunc("PUT /secrets/{name}", h.putSecret)
	mux.HandleFunc("DELETE /secrets/{name}", h.deleteSecret)
	mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		writeFault(w, fault.New(fault.NotFound, "No such API path: %s %s.", r.Method, r.URL.Path), "")
	})
	h.mux = mux
	return nil
}

// Validate checks provider URLs.
func (h *API) Validate() error {
	if h.SpawnDepth < 0 || h.SpawnChildren < 0 {
		return fmt.Errorf("retainer_api: spawn_depth and spawn_children must be positive")
	}
	for p, tools := range h.Providers {
		for t, u := range tools {
			if !strings.HasPrefix(u, "http://") && !strings.HasPrefix(u, "https://") {
				return fmt.Errorf("retainer_api: provider %s tool %s: %q is not an http(s) URL", p, t, u)
			}
		}
	}
	return nil
}

// ServeHTTP answers the API; it never calls next.
func (h *API) ServeHTTP(w http.ResponseWriter, r *http.Request, _ caddyhttp.Handler) error {
	if h.live.reg.Load() == nil {
		writeFault(w, errStarting, "")
		return nil
	}
	h.serve(w, r, false)
	return nil
}

// serve answers the API; in a cluster, a tenant's request is served by the
// gateway that owns the tenant's space and sent there when that is another
// (forward.go). Receipts and health are any gateway's to answer.
func (h *API) serve(w http.ResponseWriter, r *http.Request, forwarded bool) {
	if !forwarded {
		r.Header.Del(forwardHeader)
	}
	rt := h.runtime()
	if rt == nil || rt.cluster == nil || r.URL.Path == "/health" || strings.HasPrefix(r.URL.Path, "/results") {
		h.mux.ServeHTTP(w, r)
		return
	}
	c, err := h.caller(r)
	if err != nil {
		h.mux.ServeHTTP(w, r) // answered by the handler: UNAUTHENTICATED
		return
	}
	f := forward{Kind: "api", Registry: h.Registry, Tenant: c.tenant, Plan: c.plan, Issued: c.issued}
	if repl, ok := r.Context().Value(caddy.ReplacerCtxKey).(*caddy.Replacer); ok {
		f.Scope, _ = repl.GetString("http.auth.user.scope")
		f.Expires, _ = repl.GetString("http.auth.user." + tokenExpiresKey)
	}
	if !rt.cluster.dispatch(w, r, "api\x00"+h.Registry+"\x00"+c.tenant, f, forwarded, func(ctx context.Context) error { return h.registry().Own(ctx, c.tenant) }) {
		return
	}
	h.mux.ServeHTTP(w, r)
}

// registry and runtime are the started app's (ServeHTTP checked).
func (h *API) registry() *handles.Registry { return h.live.reg.Load() }
func (h *API) runtime() *runtime           { return h.live.rt.Load() }

// caller is the authenticated tenant and its scopes.
type caller struct {
	tenant string
	scopes []string
	anon   bool
	// expires is when the caller's token stops being accepted (zero when
	// unknown): an executor socket it opened is closed then.
	expires time.Time
	// plan is the plan its token's plan claim names (docs/usage.md).
	plan string
	// issued is its token's iat, Unix seconds ("" for none): only a token
	// issued later than the one that recorded the tenant's plan changes it.
	issued string
}

func (h *API) caller(r *http.Request) (caller, error) {
	repl, _ := r.Context().Value(caddy.ReplacerCtxKey).(*caddy.Replacer)
	var id, scope, expires string
	if repl != nil {
		id, _ = repl.GetString("http.auth.user.id")
		scope, _ = repl.GetString("http.auth.user.scope")
		expires, _ = repl.GetString("http.auth.user." + tokenExpiresKey)
	}
	if id == "" {
		if h.AllowAnonymous {
			return caller{tenant: "anonymous", anon: true}, nil
		}
		return caller{}, fault.New(fault.Unauthenticated, "A bearer token is required.")
	}
	// Whatever authenticated the request (retainer_jwt checks this too),
	// a tenant id must be one that cannot collide with another.
	if err := authz.ValidTenant(id); err != nil {
		return caller{}, fault.New(fault.Unauthenticated, "The tenant id %s.", err)
	}
	c := caller{tenant: id, scopes: strings.Fields(scope)}
	if f, ok := r.Context().Value(forwardedKey{}).(forward); ok {
		c.plan, c.issued = f.Plan, f.Issued // signed by the gateway that read the token
	} else if h.app != nil && h.app.Plans != nil {
		c.plan, _ = repl.GetString("http.auth.user." + h.app.Plans.claim())
		c.issued, _ = repl.GetString("http.auth.user." + tokenIssuedKey)
	}
	if sec, err := strconv.ParseInt(expires, 10, 64); err == nil {
		c.expires = time.Unix(sec, 0)
	}
	return c, nil
}

// need checks a scope when require_scopes is on.
func (h *API) need(c caller, scopes ...string) error {
	if !h.RequireScopes || c.anon {
		return nil
	}
	for _, want := range scopes {
		for _, have := range c.scopes {
			if have == want {
				return nil
			}
		}
	}
	return fault.New(fault.Forbidden, "This call needs the %s scope.", strings.Join(scopes, " or "))
}

// authorize reads the caller and checks scopes; it answers the failure.
func (h *API) authorize(w http.ResponseWriter, r *http.Request, scopes ...string) (caller, bool) {
	c, err := h.caller(r)
	if err == nil {
		err = h.need(c, scopes...)
	}
	if err == nil {
		err = h.planGate(c, r.Pattern == "GET /usage" || r.Pattern == "GET /handles/{id}/logs")
	}
	if err != nil {
		writeFault(w, err, "")
		return caller{}, false
	}
	return c, true
}

// planGate records the plan the caller's token names, if the token was
// issued later than the one that recorded the tenant's plan, and refuses
// a tenant past its plan's daily limit (docs/usage.md). Reading its usage
// and its handles' logs stays open, so a tenant can see why it was cut; a
// token older than the recorded one, or naming no plan, changes nothing
// there or anywhere.
func (h *API) planGate(c caller, exempt bool) error {
	rt := h.runtime()
	if rt == nil || h.app == nil || h.app.Plans == nil || len(h.app.Plans.Plans) == 0 {
		return nil
	}
	u := rt.usage.Load()
	if u == nil {
		return nil
	}
	issued, _ := strconv.ParseInt(c.issued, 10, 64)
	u.plans.record(logTenant(h.Registry, c.tenant), c.plan, issued)
	if exempt {
		return nil
	}
	return rt.admit(h.Registry, "", c.tenant)
}

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

// readBody reads a request body within max_request_body (TOO_LARGE past it).
// A body of known length within the bound is read into a buffer of that
// length at once (net/http ends it there): io.ReadAll grows its buffer
// from 512 bytes, which cost a 3.8 KB webhook body ~10 µs of the gateway's
// CPU in allocations and copies.
// decodeBody reads a JSON request body of at most max bytes into v, and
// answers the fault itself when it cannot (false).
func decodeBody(w http.ResponseWriter, r *http.Request, max int64, v any) bool {
	body, err := readBody(w, r, max)
	if err == nil {
		err = decodeStrict(body, v)
	}
	if err != nil {
		writeFault(w, err, "")
		return false
	}
	return true
}

func readBody(w http.ResponseWriter, r *http.Request, max int64) ([]byte, error) {
	if n := r.ContentLength; n >= 0 && n <= max {
		data := make([]byte, n)
		if _, err := io.ReadFull(r.Body, data); err != nil {
			if errors.Is(err, errForwardBody) {
				return nil, err
			}
			return nil, fault.New(fault.BadRequest, "The request body could not be read.")
		}
		return data, nil
	}
	data, err := io.ReadAll(http.MaxBytesReader(w, r.Body, max))
	if err != nil {
		var tooBig *http.MaxBytesError
		if errors.As(err, &tooBig) {
			return nil, fault.New(fault.TooLarge, "The request body is over the %d byte bound.", max)
		}
		if errors.Is(err, errForwardBody) {
			return nil, err
		}
		return nil, fault.New(fault.BadRequest, "The request body could not be read.")
	}
	return data, nil
}

func decodeStrict(data []byte, v any) error {
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return fault.New(fault.BadRequest, "The body is not the expected JSON: %s.", strings.TrimPrefix(err.Error(), "json: "))
	}
	return nil
}

var knownCapabilities = map[string]bool{"kvRead": true, "kvWrite": true, "sqlRead": true, "sqlWrite": true, "ai": true, "objectsRead": true, "objectsWrite": true, "fetch": true, "spawn": true}

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
		if !knownCapabilities[c] {
			return out, fault.New(fault.BadRequest, "Unknown capability %q: the capabilities are kvRead, kvWrite, sqlRead, sqlWrite, ai, objectsRead, objectsWrite, fetch and spawn.", c)
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
	rc, err := h.runtime().receipts.Get(c.tenant, id)
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
	list, next, err := h.runtime().receipts.List(c.tenant, limit, r.URL.Query().Get("cursor"))
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

func (h *API) listHandles(w http.ResponseWriter, r *http.Request) {
	c, ok := h.authorize(w, r, authz.ScopeRead)
	if !ok {
		return
	}
	writeJSON(w, http.StatusOK, map[string]any{"handles": h.registry().List(c.tenant)})
}

func (h *API) getHandle(w http.ResponseWriter, r *http.Request) {
	c, ok := h.authorize(w, r, authz.ScopeRead)
	if !ok {
		return
	}
	info, err := h.registry().Get(c.tenant, r.PathValue("id"))
	if err != nil {
		writeFault(w, err, "")
		return
	}
	writeJSON(w, http.StatusOK, info)
}

func (h *API) closeHandle(w http.ResponseWriter, r *http.Request) {
	c, ok := h.authorize(w, r, authz.ScopeDeploy)
	if !ok {
		return
	}
	if err := h.registry().Close(c.tenant, r.PathValue("id")); err != nil {
		writeFault(w, err, "")
		return
	}
	w.WriteHeader(http.StatusNoContent)
}

func (h *API) invoke(w http.ResponseWriter, r *http.Request) {
	c, ok := h.authorize(w, r, authz.ScopeDeploy)
	if !ok {
		return
	}
	var req program.WireRequest
	if !decodeBody(w, r, h.app.MaxRequestBody*4/3+64<<10, &req) {
		return
	}
	if req.Headers == nil {
		req.Headers = [][2]string{}
	}
	start := time.Now()
	// The body is charged to the tenant until it is written (budgets).
	res, release, err := h.registry().InvokeHeld(r.Context(), c.tenant, r.PathValue("id"), r.PathValue("name"), req)
	defer release()
	observeInvocation("api", start, err)
	if err != nil {
		writeFault(w, err, "")
		return
	}
	writeJSON(w, http.StatusOK, res)
}

func (h *API) listRoutes(w http.ResponseWriter, r *http.Request) {
	c, ok := h.authorize(w, r, authz.ScopeRead)
	if !ok {
		return
	}
	writeJSON(w, http.StatusOK, map[string]any{"routes": h.registry().Routes(c.tenant)})
}

func (h *API) bindRoute(w http.ResponseWriter, r *http.Request) {
	c, ok := h.authorize(w, r, authz.ScopeDeploy)
	if !ok {
		return
	}
	var req struct {
		ExecutionID string          `json:"executionId"`
		Split       []handles.Share `json:"split"`
	}
	if !decodeBody(w, r, 64<<10, &req) {
		return
	}
	var route handles.Route
	var err error
	switch {
	case req.Split != nil && req.ExecutionID != "":
		err = fault.New(fault.BadRequest, "A route is bound to an executionId or to a split, not both.")
	case req.Split != nil:
		route, err = h.registry().BindSplit(c.tenant, r.PathValue("name"), req.Split)
	default:
		route, err = h.registry().BindRoute(c.tenant, r.PathValue("name"), req.ExecutionID)
	}
	if err != nil {
		writeFault(w, err, "")
		return
	}
	writeJSON(w, http.StatusOK, route)
}

func (h *API) unbindRoute(w http.ResponseWriter, r *http.Request) {
	c, ok := h.authorize(w, r, authz.ScopeDeploy)
	if !ok {
		return
	}
	if err := h.registry().UnbindRoute(c.tenant, r.PathValue("name")); err != nil {
		writeFault(w, err, "")
		return
	}
	w.WriteHeader(http.StatusNoContent)
}

// health reveals no tenant's data: worker states only.
func (h *API) health(w http.ResponseWriter, r *http.Request) {
	workers := h.runtime().pool.Status()
	up := 0
	for _, s := range workers {
		if s.State == "up" {
			up++
		}
	}
	status, code := "ok", http.StatusOK
	if up == 0 {
		status, code = "unavailable", http.StatusServiceUnavailable
	}
	writeJSON(w, code, map[string]any{"status": status, "workers": workers})
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

// Interface guards.
var (
	_ caddy.Provisioner           = (*API)(nil)
	_ caddy.Validator             = (*API)(nil)
	_ caddyhttp.MiddlewareHandler = (*API)(nil)
)
