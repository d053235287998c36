package caddymodule

import (
	"context"
	"encoding/csv"
	"encoding/json"
	"net/http"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/caddyserver/caddy/v2"

	"github.com/retainer-gw/retainer/authz"
	"github.com/retainer-gw/retainer/fault"
	"github.com/retainer-gw/retainer/store"
)

// usageRow is one tenant's hour or day as the API shows it.
type usageRow struct {
	Registry string `json:"registry,omitempty"`
	Tenant   string `json:"tenant,omitempty"`
	Start    string `json:"start"`
	usageCounts
	// ObjectBytes is what the tenant stores in objects, read for the
	// period that is running only (docs/usage.md).
	ObjectBytes int64 `json:"objectBytes"`
}

// usageQuery is a usage read: from ≤ t < to, by "hour" or "day".
type usageQuery struct {
	from, to time.Time
	by       string
}

// list answers the hours or days of tenant (a logTenant), or of every
// tenant when tenant is "", oldest first (by tenant for every tenant).
func (m *usageMeter) list(tenant string, q usageQuery) ([]usageRow, error) {
	m.flush()
	r := store.Range{}
	if tenant != "" {
		r.Prefix = usageStoreKey(tenant, "", "")
	}
	type bucket struct{ tenant, start string }
	sums := map[bucket]*usageCounts{}
	from, to := q.from.Format("2006-01-02T15"), q.to.Format("2006-01-02T15")
	err := m.st.Scan(context.Background(), usageTable, r, func(k, v []byte) bool {
		owner, hour, ok := parseUsageKey(k)
		if !ok || hour < from || hour >= to {
			return true
		}
		var c usageCounts
		if json.Unmarshal(v, &c) != nil {
			return true
		}
		start := hour + ":00:00Z"
		if q.by == "day" {
			start = hour[:10] + "T00:00:00Z"
		}
		b := bucket{owner, start}
		s := sums[b]
		if s == nil {
			s = &usageCounts{}
			sums[b] = s
		}
		s.add(&c)
		return true
	})
	if err != nil {
		return nil, err
	}
	now := time.Now().UTC()
	current := now.Format("2006-01-02T15") + ":00:00Z"
	if q.by == "day" {
		current = now.Format(time.DateOnly) + "T00:00:00Z"
	}
	out := make([]usageRow, 0, len(sums))
	for b, s := range sums {
		registry, owner, _ := strings.Cut(b.tenant, "\x00")
		if b.start == current {
			// The period that is running: what is stored now.
			if m.kvUsed != nil {
				s.KVBytes = max(s.KVBytes, m.kvUsed(registry, owner))
			}
			if m.sqlUsed != nil {
				s.SQLBytes = max(s.SQLBytes, m.sqlUsed(registry, owner))
			}
		}
		row := usageRow{Start: b.start, usageCounts: *s}
		if b.start == current && m.objectsUsed != nil {
			row.ObjectBytes = m.objectsUsed(registry, owner)
		}
		if tenant == "" {
			row.Registry, row.Tenant = registry, owner
		}
		out = append(out, row)
	}
	sort.Slice(out, func(i, j int) bool {
		if out[i].Registry != out[j].Registry {
			return out[i].Registry < out[j].Registry
		}
		if out[i].Tenant != out[j].Tenant {
			return out[i].Tenant < out[j].Tenant
		}
		return out[i].Start < out[j].Start
	})
	return out, nil
}

// parseUsageQuery reads ?from=&to=&by= (dates or RFC 3339 times, UTC; by
// hour or day, default day; default from the last 30 days to now). A date
// as `to` includes that day.
func parseUsageQuery(r *http.Request) (usageQuery, error) {
	now := time.Now().UTC()
	today := now.Truncate(24 * time.Hour)
	q := usageQuery{from: today.Add(-29 * 24 * time.Hour), to: today.Add(24 * time.Hour), by: "day"}
	switch by := r.URL.Query().Get("by"); by {
	case "", "day":
	case "hour":
		q.by = "hour"
	default:
		return q, fault.New(fault.BadRequest, "by: %q is neither hour nor day.", by)
	}
	for _, name := range []string{"from", "to"} {
		v := r.URL.Query().Get(name)
		if v == "" {
			continue
		}
		t, err := time.Parse(time.DateOnly, v)
		if err == nil && name == "to" {
			t = t.Add(24 * time.Hour) // the whole day
		} else if err != nil {
			if t, err = time.Parse(time.RFC3339, v); err != nil {
				return q, fault.New(fault.BadRequest, "%s: %q is not a date (2006-01-02) or an RFC 3339 time.", name, v)
			}
			if name == "to" && !t.Equal(t.Truncate(time.Hour)) {
				t = t.Truncate(time.Hour).Add(time.Hour) // the hour it falls in
			}
		}
		if name == "from" {
			q.from = t.UTC().Truncate(time.Hour)
		} else {
			q.to = t.UTC()
		}
	}
	if !q.from.Before(q.to) {
		return q, fault.New(fault.BadRequest, "from must be before to.")
	}
	return q, nil
}

// usage answers the tenant's own usage an hour or a UTC day (docs/usage.md).
func (h *API) usage(w http.ResponseWriter, r *http.Request) {
	c, ok := h.authorize(w, r, authz.ScopeRead)
	if !ok {
		return
	}
	q, err := parseUsageQuery(r)
	if err != nil {
		writeFault(w, err, "")
		return
	}
	rows, err := h.runtime().usage.Load().list(logTenant(h.Registry, c.tenant), q)
	if err != nil {
		writeFault(w, fault.New(fault.Overloaded, "The usage store did not answer: %v", err), "")
		return
	}
	writeJSON(w, http.StatusOK, map[string]any{"usage": rows})
}

// adminUsage answers every tenant's usage: the billing export, in JSON or
// (?format=csv) CSV.
func adminUsage(w http.ResponseWriter, r *http.Request) error {
	if r.Method != http.MethodGet {
		return caddy.APIError{HTTPStatus: http.StatusMethodNotAllowed, Err: fault.New(fault.BadRequest, "method not allowed")}
	}
	rt := current()
	if rt == nil || rt.usage.Load() == nil {
		return caddy.APIError{HTTPStatus: http.StatusServiceUnavailable, Err: fault.New(fault.Overloaded, "the gateway is starting")}
	}
	q, err := parseUsageQuery(r)
	if err != nil {
		return caddy.APIError{HTTPStatus: http.StatusBadRequest, Err: err}
	}
	format := r.URL.Query().Get("format")
	if format != "" && format != "json" && format != "csv" {
		return caddy.APIError{HTTPStatus: http.StatusBadRequest, Err: fault.New(fault.BadRequest, "format: %q is neither json nor csv", format)}
	}
	rows, err := rt.usage.Load().list("", q)
	if err != nil {
		return caddy.APIError{HTTPStatus: http.StatusServiceUnavailable, Err: err}
	}
	if format != "csv" {
		return writeAdmin(w, map[string]any{"usage": rows})
	}
	w.Header().Set("Content-Type", "text/csv; charset=utf-8")
	w.Header().Set("Content-Disposition", `attachment; filename="usage.csv"`)
	cw := csv.NewWriter(w)
	cw.Write([]string{"registry", "tenant", "start", "requests", "cpuMs", "wallMs", "egressBytes", "kvBytes", "sqlBytes", "objectBytes", "aiTokens", "websocketMessages"})
	f := func(v float64) string { return strconv.FormatFloat(v, 'f', 3, 64) }
	i := func(v int64) string { return strconv.FormatInt(v, 10) }
	for _, row := range rows {
		cw.Write([]string{row.Registry, row.Tenant, row.Start, i(row.Requests), f(row.CPUMs), f(row.WallMs), i(row.EgressBytes),
			i(row.KVBytes), i(row.SQLBytes), i(row.ObjectBytes), i(row.AITokens), i(row.WebsocketMessages)})
	}
	cw.Flush()
	return cw.Error()
}
