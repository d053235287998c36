package caddymodule

import (
	"context"
	"encoding/binary"
	"encoding/json"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/caddyserver/caddy/v2"

	"github.com/retainer-gw/retainer/authz"
	"github.com/retainer-gw/retainer/fault"
	"github.com/retainer-gw/retainer/store"
)

// usageTable holds each tenant's usage a UTC day (docs/logs.md, "Usage"):
// key lp(registry NUL tenant) day ("2006-01-02"), value the day's counts
// as JSON. It lives in the receipts backend, as the logs do.
const usageTable = "usage.v1"

// usageRetention is how long a day's usage is kept.
const usageRetention = 90 * 24 * time.Hour

// usageDay is what a tenant used in a day.
type usageDay struct {
	Requests    int64   `json:"requests"`
	WallMs      float64 `json:"wallMs"`
	EgressBytes int64   `json:"egressBytes"`
}

type usageKey struct{ tenant, day string }

// usageMeter counts handles' invocations per tenant and UTC day in memory
// and adds them to the store every few seconds (a read adds them first).
type usageMeter struct {
	st store.Store
	// kvUsed is what a tenant stores in kv now (today's row's kvBytes).
	kvUsed  func(registry, tenant string) int64
	mu      sync.Mutex
	pending map[usageKey]*usageDay
	cmu     sync.Mutex // serializes flushes
	stop    chan struct{}
	done    chan struct{}
}

func openUsage(st store.Store, kvUsed func(registry, tenant string) int64) *usageMeter {
	m := &usageMeter{st: st, kvUsed: kvUsed, pending: map[usageKey]*usageDay{}, stop: make(chan struct{}), done: make(chan struct{})}
	go m.loop()
	return m
}

func (m *usageMeter) loop() {
	defer close(m.done)
	tick := time.NewTicker(5 * time.Second)
	defer tick.Stop()
	sweep := time.NewTicker(time.Hour)
	defer sweep.Stop()
	m.sweep()
	for {
		select {
		case <-m.stop:
			m.flush()
			return
		case <-tick.C:
			m.flush()
		case <-sweep.C:
			m.sweep()
		}
	}
}

func (m *usageMeter) close() {
	close(m.stop)
	<-m.done
}

// add counts one invocation of tenant's (a logTenant).
func (m *usageMeter) add(tenant string, at time.Time, wallMs float64, egress int64) {
	k := usageKey{tenant, at.UTC().Format(time.DateOnly)}
	m.mu.Lock()
	d := m.pending[k]
	if d == nil {
		d = &usageDay{}
		m.pending[k] = d
	}
	d.Requests++
	d.WallMs += wallMs
	d.EgressBytes += egress
	m.mu.Unlock()
}

func usageStoreKey(tenant, day string) []byte {
	k := binary.BigEndian.AppendUint16(nil, uint16(len(tenant)))
	return append(append(k, tenant...), day...)
}

// flush adds what waits to the days in the store.
func (m *usageMeter) flush() {
	m.cmu.Lock()
	defer m.cmu.Unlock()
	m.mu.Lock()
	batch := m.pending
	m.pending = map[usageKey]*usageDay{}
	m.mu.Unlock()
	ctx := context.Background()
	var ops []store.Op
	for k, d := range batch {
		key := usageStoreKey(k.tenant, k.day)
		var sum usageDay
		if v, err := m.st.Get(ctx, usageTable, key); err == nil && v != nil {
			json.Unmarshal(v, &sum)
		}
		sum.Requests += d.Requests
		sum.WallMs += d.WallMs
		sum.EgressBytes += d.EgressBytes
		b, _ := json.Marshal(sum)
		ops = append(ops, store.Put(usageTable, key, b))
	}
	store.CommitChunked(ctx, m.st, nil, ops)
}

// sweep deletes days older than usageRetention.
func (m *usageMeter) sweep() {
	cutoff := time.Now().UTC().Add(-usageRetention).Format(time.DateOnly)
	var ops []store.Op
	m.st.Scan(context.Background(), usageTable, store.Range{}, func(k, _ []byte) bool {
		if len(k) >= 10 && string(k[len(k)-10:]) < cutoff {
			ops = append(ops, store.Delete(usageTable, store.Copy(k)))
		}
		return true
	})
	store.CommitChunked(context.Background(), m.st, nil, ops)
}

// usageRow is one tenant's day as the API shows it.
type usageRow struct {
	Registry string `json:"registry,omitempty"`
	Tenant   string `json:"tenant,omitempty"`
	Start    string `json:"start"`
	usageDay
	// KVBytes is what the tenant stores in kv now, on today's row only.
	KVBytes *int64 `json:"kvBytes,omitempty"`
}

// list answers the days from ≤ day ≤ to of tenant (a logTenant), or of
// every tenant when tenant is "".
func (m *usageMeter) list(tenant, from, to string) ([]usageRow, error) {
	m.flush()
	r := store.Range{}
	if tenant != "" {
		r.Prefix = usageStoreKey(tenant, "")
	}
	out := []usageRow{}
	today := time.Now().UTC().Format(time.DateOnly)
	err := m.st.Scan(context.Background(), usageTable, r, func(k, v []byte) bool {
		if len(k) < 12 {
			return true
		}
		n := int(binary.BigEndian.Uint16(k))
		if len(k) != 2+n+10 {
			return true
		}
		day := string(k[2+n:])
		if day < from || day > to {
			return true
		}
		var row usageRow
		if json.Unmarshal(v, &row.usageDay) != nil {
			return true
		}
		row.Start = day + "T00:00:00Z"
		registry, owner, _ := strings.Cut(string(k[2:2+n]), "\x00")
		if tenant == "" {
			row.Registry, row.Tenant = registry, owner
		}
		if day == today && m.kvUsed != nil {
			kvBytes := m.kvUsed(registry, owner)
			row.KVBytes = &kvBytes
		}
		out = append(out, row)
		return true
	})
	return out, err
}

// usageRange reads ?from=&to= (dates or RFC 3339 times, UTC days; default
// the last 30 days to today).
func usageRange(r *http.Request) (string, string, error) {
	today := time.Now().UTC()
	from, to := today.Add(-29*24*time.Hour).Format(time.DateOnly), today.Format(time.DateOnly)
	for name, dst := range map[string]*string{"from": &from, "to": &to} {
		v := r.URL.Query().Get(name)
		if v == "" {
			continue
		}
		t, err := time.Parse(time.DateOnly, v)
		if err != nil {
			if t, err = time.Parse(time.RFC3339, v); err != nil {
				return "", "", fault.New(fault.BadRequest, "%s: %q is not a date (2006-01-02) or an RFC 3339 time.", name, v)
			}
		}
		*dst = t.UTC().Format(time.DateOnly)
	}
	return from, to, nil
}

// usage answers the tenant's own usage a UTC day (docs/logs.md, "Usage").
func (h *API) usage(w http.ResponseWriter, r *http.Request) {
	c, ok := h.authorize(w, r, authz.ScopeRead)
	if !ok {
		return
	}
	from, to, err := usageRange(r)
	if err != nil {
		writeFault(w, err, "")
		return
	}
	rows, err := h.runtime().usage.Load().list(logTenant(h.Registry, c.tenant), from, to)
	if err != nil {
		writeFault(w, fault.New(fault.Overloaded, "The usage store did not answer: %v", err), "")
		return
	}
	writeJSON(w, http.StatusOK, map[string]any{"usage": rows})
}

// adminUsage answers every tenant's usage a UTC day: the billing export.
func adminUsage(w http.ResponseWriter, r *http.Request) error {
	if r.Method != http.MethodGet {
		return caddy.APIError{HTTPStatus: http.StatusMethodNotAllowed, Err: fault.New(fault.BadRequest, "method not allowed")}
	}
	rt := current()
	if rt == nil || rt.usage.Load() == nil {
		return caddy.APIError{HTTPStatus: http.StatusServiceUnavailable, Err: fault.New(fault.Overloaded, "the gateway is starting")}
	}
	from, to, err := usageRange(r)
	if err != nil {
		return caddy.APIError{HTTPStatus: http.StatusBadRequest, Err: err}
	}
	rows, err := rt.usage.Load().list("", from, to)
	if err != nil {
		return caddy.APIError{HTTPStatus: http.StatusServiceUnavailable, Err: err}
	}
	return writeAdmin(w, map[string]any{"usage": rows})
}
