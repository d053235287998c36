package caddymodule

import (
	"net/http"
	"time"

	"github.com/retainer-gw/retainer/authz"
	"github.com/retainer-gw/retainer/program"
)

// The API of handles: GET /handles, GET and DELETE /handles/{id}, and
// POST /handles/{id}/{name} (an invocation through the control plane).

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
