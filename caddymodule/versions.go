package caddymodule

import (
	"bytes"
	"net/http"

	"github.com/retainer-gw/retainer/authz"
)

// The API of a route's versions (docs/deployments.md): GET /routes/{name}
// and POST /routes/{name}/rollback.

func (h *API) getRoute(w http.ResponseWriter, r *http.Request) {
	c, ok := h.authorize(w, r, authz.ScopeRead)
	if !ok {
		return
	}
	d, err := h.registry().Route(c.tenant, r.PathValue("name"))
	if err != nil {
		writeFault(w, err, "")
		return
	}
	writeJSON(w, http.StatusOK, d)
}

func (h *API) rollbackRoute(w http.ResponseWriter, r *http.Request) {
	c, ok := h.authorize(w, r, authz.ScopeDeploy)
	if !ok {
		return
	}
	var req struct {
		ExecutionID string `json:"executionId"`
	}
	// An empty body is {}: the version before the current one.
	body, err := readBody(w, r, 64<<10)
	if err == nil && len(bytes.TrimSpace(body)) > 0 {
		err = decodeStrict(body, &req)
	}
	if err != nil {
		writeFault(w, err, "")
		return
	}
	d, err := h.registry().Rollback(c.tenant, r.PathValue("name"), req.ExecutionID)
	if err != nil {
		writeFault(w, err, "")
		return
	}
	writeJSON(w, http.StatusOK, d)
}
