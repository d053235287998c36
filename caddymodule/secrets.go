package caddymodule

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"

	"github.com/retainer-gw/retainer/authz"
	"github.com/retainer-gw/retainer/budgets"
	"github.com/retainer-gw/retainer/fault"
)

// secretsCall bounds a secrets call's store reads and writes in a
// cluster, whose etcd may stall (docs/cluster.md, "Failures"): past
// budgets.ClusterKVBound the call answers 503 OVERLOADED. A write whose
// answer was not waited for may still be applied; each is conditioned on
// the value it replaces (capability/secrets.go), so it never lands over
// a newer one.
func (h *API) secretsCall(r *http.Request) (context.Context, func(error) error, context.CancelFunc) {
	rt := h.runtime()
	if rt == nil || rt.cluster == nil {
		return r.Context(), func(err error) error { return err }, func() {}
	}
	ctx, cancel := context.WithTimeout(r.Context(), budgets.ClusterKVBound)
	answer := func(err error) error {
		var f *fault.Fault
		if err == nil || errors.As(err, &f) {
			return err
		}
		return fault.Wrap(fault.Overloaded, err, "The secrets' store did not answer in time; retry shortly.")
	}
	return ctx, answer, cancel
}

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
	ctx, answer, cancel := h.secretsCall(r)
	defer cancel()
	info, err := h.runtime().secrets.Put(ctx, h.Registry, c.tenant, r.PathValue("name"), value)
	if err != nil {
		writeFault(w, answer(err), "")
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
	ctx, answer, cancel := h.secretsCall(r)
	defer cancel()
	list, err := h.runtime().secrets.List(ctx, h.Registry, c.tenant)
	if err != nil {
		writeFault(w, answer(err), "")
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
	ctx, answer, cancel := h.secretsCall(r)
	defer cancel()
	found, err := h.runtime().secrets.Delete(ctx, h.Registry, c.tenant, name)
	if err == nil && !found {
		err = fault.New(fault.NotFound, "There is no secret %s.", name)
	}
	if err != nil {
		writeFault(w, answer(err), "")
		return
	}
	w.WriteHeader(http.StatusNoContent)
}
