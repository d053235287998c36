package caddymodule

import (
	"encoding/json"
	"fmt"
	"net/http"

	"github.com/caddyserver/caddy/v2"

	"github.com/retainer-gw/retainer/workers"
)

func init() {
	caddy.RegisterModule(Admin{})
}

// Admin is the `admin.api.retainer` module: Retainer's operator endpoints on
// Caddy's admin listener only (never on a site), because they name tenants:
//
//	GET /retainer/workers          each worker: pid, tenant, isolates, queue, RSS, CPU when pinned
//	GET /retainer/handles?tenant=  handle counts per registry and tenant
//	GET /retainer/cluster          the cluster's live members and the spaces each owns
//
// Caddy loads every registered admin.api module, so no configuration is
// needed.
type Admin struct{}

// CaddyModule returns the Caddy module information.
func (Admin) CaddyModule() caddy.ModuleInfo {
	return caddy.ModuleInfo{ID: "admin.api.retainer", New: func() caddy.Module { return new(Admin) }}
}

// Routes answers the admin routes.
func (Admin) Routes() []caddy.AdminRoute {
	return []caddy.AdminRoute{
		{Pattern: "/retainer/workers", Handler: caddy.AdminHandlerFunc(adminWorkers)},
		{Pattern: "/retainer/handles", Handler: caddy.AdminHandlerFunc(adminHandles)},
		{Pattern: "/retainer/cluster", Handler: caddy.AdminHandlerFunc(adminCluster)},
		{Pattern: "/retainer/usage", Handler: caddy.AdminHandlerFunc(adminUsage)},
	}
}

// adminCluster answers the cluster's live members as etcd knows them
// (docs/cluster.md): {self, members: [{name, address, spaces, leaseLeftMs}]}.
func adminCluster(w http.ResponseWriter, r *http.Request) error {
	if r.Method != http.MethodGet {
		return caddy.APIError{HTTPStatus: http.StatusMethodNotAllowed, Err: fmt.Errorf("method not allowed")}
	}
	rt := current()
	if rt == nil || rt.cluster == nil {
		return caddy.APIError{HTTPStatus: http.StatusNotFound, Err: fmt.Errorf("this gateway is not in a cluster (docs/cluster.md)")}
	}
	m := rt.backing.member.Load()
	members, err := m.Members(r.Context())
	if err != nil {
		return caddy.APIError{HTTPStatus: http.StatusServiceUnavailable, Err: err}
	}
	return writeAdmin(w, map[string]any{"self": m.Name(), "members": members})
}

// adminWorker is one worker as an operator sees it.
type adminWorker struct {
	Store    string `json:"store"`
	Index    int    `json:"index"`
	PID      int    `json:"pid,omitempty"`
	State    string `json:"state"`
	Tenant   string `json:"tenant"`
	Isolates int    `json:"isolates"`
	Queue    int    `json:"queue"`
	RSSBytes int64  `json:"rssBytes"`
	// PSSBytes and PrivateBytes are its own memory as last measured
	// (proportional and private: not the binary's text every worker maps).
	PSSBytes     int64 `json:"pssBytes"`
	PrivateBytes int64 `json:"privateBytes"`
	CPU          *int  `json:"cpu,omitempty"` // pinned (worker_cpus): the CPU it runs on
}

// adminBudget is one runtime's worker capacity: `workers auto` or fixed,
// the memory budget and what the workers use of it.
type adminBudget struct {
	Store string `json:"store"`
	workers.Budget
}

func adminWorkers(w http.ResponseWriter, r *http.Request) error {
	if r.Method != http.MethodGet {
		return caddy.APIError{HTTPStatus: http.StatusMethodNotAllowed, Err: fmt.Errorf("method not allowed")}
	}
	out := []adminWorker{}
	budgets := []adminBudget{}
	runtimes.Range(func(key, v any) bool {
		rt := v.(*runtime)
		budgets = append(budgets, adminBudget{Store: rt.key, Budget: rt.pool.Budget()})
		for _, s := range rt.pool.Status() {
			aw := adminWorker{Store: rt.key, Index: s.Index, PID: s.PID, State: s.State, Tenant: s.Tenant, Isolates: s.Isolates, Queue: s.Queue, RSSBytes: s.RSS,
				PSSBytes: s.PSS, PrivateBytes: s.Private}
			if s.CPU >= 0 {
				cpu := s.CPU
				aw.CPU = &cpu
			}
			out = append(out, aw)
		}
		return true
	})
	return writeAdmin(w, map[string]any{"workers": out, "budget": budgets})
}

// adminCount is the handles of one tenant in one registry.
type adminCount struct {
	Store    string `json:"store"`
	Registry string `json:"registry"`
	Tenant   string `json:"tenant"`
	Handles  int    `json:"handles"`
	Live     int    `json:"live"` // with an isolate now (the others are parked)
}

func adminHandles(w http.ResponseWriter, r *http.Request) error {
	if r.Method != http.MethodGet {
		return caddy.APIError{HTTPStatus: http.StatusMethodNotAllowed, Err: fmt.Errorf("method not allowed")}
	}
	only := r.URL.Query().Get("tenant")
	out := []adminCount{}
	runtimes.Range(func(key, v any) bool {
		rt := v.(*runtime)
		for _, c := range rt.store.Counts() {
			if only == "" || c.Tenant == only {
				out = append(out, adminCount{Store: rt.key, Registry: c.Registry, Tenant: c.Tenant, Handles: c.Handles, Live: c.Live})
			}
		}
		return true
	})
	return writeAdmin(w, map[string]any{"handles": out})
}

func writeAdmin(w http.ResponseWriter, v any) error {
	w.Header().Set("Content-Type", "application/json")
	enc := json.NewEncoder(w)
	enc.SetEscapeHTML(false) // as every JSON answer (fault.go's encodeJSON)
	return enc.Encode(v)
}

// Interface guard.
var _ caddy.AdminRouter = (*Admin)(nil)
