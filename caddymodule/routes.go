package caddymodule

import (
	"net/http"

	"github.com/retainer-gw/retainer/authz"
	"github.com/retainer-gw/retainer/fault"
	"github.com/retainer-gw/retainer/handles"
)

// The API of routes: GET /routes, PUT and DELETE /routes/{name} (a
// route's versions and rollback are versions.go).

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
