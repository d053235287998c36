package caddymodule

import (
	"encoding/json"
	"net/http"

	"github.com/retainer-gw/retainer/authz"
	"github.com/retainer-gw/retainer/budgets"
	"github.com/retainer-gw/retainer/fault"
)

// putSecret is PUT /secrets/{NAME} (docs/secrets.md): the body is the value,
// or {"value": "..."}; the answer names it and its time, never the value.
func (h *API) putSecret(w http.ResponseWriter, r *http.Request) {
	c, ok := h.authorize(w, r, authz.ScopeDeploy)
	if !ok {
		return
	}
	body, err := readBody(w, r, budgets.SecretValueBytes+1024)
	if err != nil {
		writeFault(w, err, "")
		return
	}
	value := string(body)
	var obj struct {
		Value *string `json:"value"`
	}
	if json.Unmarshal(body, &obj) == nil && obj.Value != nil {
		value = *obj.Value
	}
	info, err := h.runtime().secrets.Put(r.Context(), h.Registry, c.tenant, r.PathValue("name"), value)
	if err != nil {
		writeFault(w, err, "")
		return
	}
	writeJSON(w, http.StatusOK, info)
}

// listSecrets is GET /secrets: names and times only.
func (h *API) listSecrets(w http.ResponseWriter, r *http.Request) {
	c, ok := h.authorize(w, r, authz.ScopeRead)
	if !ok {
		return
	}
	list, err := h.runtime().secrets.List(r.Context(), h.Registry, c.tenant)
	if err != nil {
		writeFault(w, err, "")
		return
	}
	writeJSON(w, http.StatusOK, map[string]any{"secrets": list})
}

// deleteSecret is DELETE /secrets/{NAME}: 204, or 404 when there is none.
func (h *API) deleteSecret(w http.ResponseWriter, r *http.Request) {
	c, ok := h.authorize(w, r, authz.ScopeDeploy)
	if !ok {
		return
	}
	name := r.PathValue("name")
	found, err := h.runtime().secrets.Delete(r.Context(), h.Registry, c.tenant, name)
	if err == nil && !found {
		err = fault.New(fault.NotFound, "There is no secret %s.", name)
	}
	if err != nil {
		writeFault(w, err, "")
		return
	}
	w.WriteHeader(http.StatusNoContent)
}
