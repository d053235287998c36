package caddymodule

import (
	"context"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/caddyserver/caddy/v2"
	"github.com/caddyserver/caddy/v2/modules/caddyhttp"
	"go.uber.org/zap"

	"github.com/retainer-gw/retainer/authz"
	"github.com/retainer-gw/retainer/capability"
	"github.com/retainer-gw/retainer/fault"
	"github.com/retainer-gw/retainer/handles"
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
	if err := h.app.claimListen(ctx); err != nil {
		return fmt.Errorf("retainer_api: %w", err)
	}
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
		rt.wired.Store(h.Registry, reg)
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
	if h.live.reg.Load() == nil && !h.live.fromRunning(h.app, h.Registry) {
		h.app.awaitStart(r)
	}
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

// Interface guards.
var (
	_ caddy.Provisioner           = (*API)(nil)
	_ caddy.Validator             = (*API)(nil)
	_ caddyhttp.MiddlewareHandler = (*API)(nil)
)
