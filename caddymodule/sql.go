package caddymodule

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"strconv"
	"time"

	"github.com/retainer-gw/retainer/authz"
	"github.com/retainer-gw/retainer/fault"
	"github.com/retainer-gw/retainer/sqldb"
)

// sqlTimeout bounds one POST /sql or GET /sql/export: the app's run bound.
func (h *API) sqlTimeout() time.Duration {
	if h.app.Timeout > 0 {
		return time.Duration(h.app.Timeout)
	}
	return 30 * time.Second
}

// sqlQuery is POST /sql (docs/sql.md): {sql, params?} or {batch: [{sql,
// params?}]} on the caller's database in this registry, as its owner;
// answered in the shape of D1's .all() (an array of them for a batch).
func (h *API) sqlQuery(w http.ResponseWriter, r *http.Request) {
	c, ok := h.authorize(w, r, authz.ScopeDeploy)
	if !ok {
		return
	}
	var req struct {
		SQL    *string           `json:"sql"`
		Params []json.RawMessage `json:"params"`
		Batch  []sqldb.Statement `json:"batch"`
	}
	if !decodeBody(w, r, h.app.MaxRequestBody, &req) {
		return
	}
	sreq := sqldb.Request{Mode: "all"}
	switch {
	case req.SQL != nil && req.Batch == nil:
		sreq.Statements = []sqldb.Statement{{SQL: *req.SQL, Params: req.Params}}
	case req.SQL == nil && req.Batch != nil && req.Params == nil:
		sreq.Mode, sreq.Statements = "batch", req.Batch
	default:
		writeFault(w, fault.New(fault.BadRequest, "POST /sql takes {sql, params?} or {batch: [{sql, params?}]}."), "")
		return
	}
	rt := h.runtime()
	ctx, cancel := context.WithTimeout(r.Context(), h.sqlTimeout())
	defer cancel()
	res, err := rt.sql.Serve(ctx, h.Registry, c.tenant, true, int(h.app.MaxResponseBody), sreq)
	if err == nil {
		res, err = sqldb.D1(res, sreq.Mode == "batch")
	}
	if err == nil && h.app.MaxResponseBody > 0 && int64(len(res)) > int64(h.app.MaxResponseBody) {
		err = sqldb.TooLarge() // D1's shape names the columns in every row
	}
	if err != nil {
		writeFault(w, err, "")
		return
	}
	writeJSON(w, http.StatusOK, res)
}

// sqlExport is GET /sql/export: the caller's database as a SQLite file.
func (h *API) sqlExport(w http.ResponseWriter, r *http.Request) {
	c, ok := h.authorize(w, r, authz.ScopeDeploy)
	if !ok {
		return
	}
	ctx, cancel := context.WithTimeout(r.Context(), h.sqlTimeout())
	defer cancel()
	e, err := h.runtime().sql.Export(ctx, h.Registry, c.tenant)
	if err != nil {
		writeFault(w, err, "")
		return
	}
	defer e.Close() // the copy has no name left: closing frees its space
	hd := w.Header()
	hd.Set("Content-Type", "application/vnd.sqlite3")
	hd.Set("Content-Disposition", `attachment; filename="database.sqlite"`)
	hd.Set("Cache-Control", "no-store")
	hd.Set("X-Content-Type-Options", "nosniff")
	hd.Set("Content-Length", strconv.FormatInt(e.Size, 10))
	w.WriteHeader(http.StatusOK)
	io.Copy(w, e.File)
}
