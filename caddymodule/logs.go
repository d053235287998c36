package caddymodule

import (
	"encoding/json"
	"fmt"
	"net/http"
	"strconv"
	"sync"
	"time"

	"github.com/retainer-gw/retainer/authz"
	"github.com/retainer-gw/retainer/fault"
)

// handleLogs answers a page of a handle's stored log (docs/logs.md):
// ?since=<RFC 3339>&limit=&cursor=, oldest first, with the cursor that
// reads on.
func (h *API) handleLogs(w http.ResponseWriter, r *http.Request) {
	c, ok := h.authorize(w, r, authz.ScopeRead)
	if !ok {
		return
	}
	id := r.PathValue("id")
	if _, err := h.registry().Logs(c.tenant, id); err != nil {
		writeFault(w, err, "")
		return
	}
	q := r.URL.Query()
	var since time.Time
	if v := q.Get("since"); v != "" {
		t, err := time.Parse(time.RFC3339Nano, v)
		if err != nil {
			writeFault(w, fault.New(fault.BadRequest, "since: %q is not an RFC 3339 time.", v), "")
			return
		}
		since = t
	}
	limit := 0
	if v := q.Get("limit"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 || n > 1000 {
			writeFault(w, fault.New(fault.BadRequest, "limit: %q is not a number from 1 to 1000.", v), "")
			return
		}
		limit = n
	}
	page, err := h.runtime().logs.Load().List(logTenant(h.Registry, c.tenant), id, since, limit, q.Get("cursor"))
	if err != nil {
		writeFault(w, err, "")
		return
	}
	out := map[string]any{"logs": page.Entries, "cursor": nil}
	if page.Cursor != "" {
		out["cursor"] = page.Cursor
	}
	writeJSON(w, http.StatusOK, out)
}

// tailKeepalive is how often a quiet tail gets a comment line, so that
// proxies keep the stream open and a gone client is noticed.
const tailKeepalive = 15 * time.Second

// tailLogs streams a handle's log entries as they happen, as Server-Sent
// Events (`log`, and `dropped` with the count a slow reader lost), at most
// logstore.TailsPerTenant a tenant (docs/logs.md).
func (h *API) tailLogs(w http.ResponseWriter, r *http.Request) {
	c, ok := h.authorize(w, r, authz.ScopeRead)
	if !ok {
		return
	}
	id := r.PathValue("id")
	if _, err := h.registry().Logs(c.tenant, id); err != nil {
		writeFault(w, err, "")
		return
	}
	tail, err := h.runtime().logs.Load().Tail(logTenant(h.Registry, c.tenant), id)
	if err != nil {
		writeFault(w, err, "")
		return
	}
	defer tail.Close()
	rc := http.NewResponseController(w)
	hd := w.Header()
	hd.Set("Content-Type", "text/event-stream")
	hd.Set("Cache-Control", "no-store")
	hd.Set("X-Accel-Buffering", "no")
	w.WriteHeader(http.StatusOK)
	fmt.Fprint(w, ": tailing\n\n")
	if rc.Flush() != nil {
		return
	}
	keep := time.NewTicker(tailKeepalive)
	defer keep.Stop()
	closing := serverClosing(r)
	for {
		select {
		case <-r.Context().Done():
			return
		case <-tail.Done:
			return
		case <-closing:
			// The server is shutting down (a reload or a stop): its
			// shutdown waits for open answers, forever with Caddy's
			// default grace period, so tails end first.
			return
		case <-keep.C:
			fmt.Fprint(w, ": keepalive\n\n")
		case e := <-tail.C:
			if n := tail.Dropped(); n > 0 {
				fmt.Fprintf(w, "event: dropped\ndata: {\"count\":%d}\n\n", n)
			}
			b, _ := json.Marshal(e)
			fmt.Fprintf(w, "event: log\ndata: %s\n\n", b)
			// What else waits goes in the same write.
			for more := len(tail.C); more > 0; more-- {
				b, _ := json.Marshal(<-tail.C)
				fmt.Fprintf(w, "event: log\ndata: %s\n\n", b)
			}
		}
		if rc.Flush() != nil {
			return
		}
	}
}

// closingServers maps each HTTP server that serves a tail to a channel
// closed when the server begins to shut down.
var closingServers sync.Map // *http.Server → chan struct{}

// serverClosing answers the channel of the server serving r (nil, which
// never closes, when there is none).
func serverClosing(r *http.Request) <-chan struct{} {
	srv, _ := r.Context().Value(http.ServerContextKey).(*http.Server)
	if srv == nil {
		return nil
	}
	ch := make(chan struct{})
	if v, loaded := closingServers.LoadOrStore(srv, ch); loaded {
		return v.(chan struct{})
	}
	srv.RegisterOnShutdown(func() {
		closingServers.Delete(srv)
		close(ch)
	})
	return ch
}
