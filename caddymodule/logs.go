package caddymodule

import (
	"fmt"
	"io"
	"net/http"
	"strconv"
	"sync"
	"time"

	"github.com/caddyserver/caddy/v2"
	"github.com/retainer-gw/retainer/authz"
	"github.com/retainer-gw/retainer/budgets"
	"github.com/retainer-gw/retainer/fault"
	"github.com/retainer-gw/retainer/internal/wirejson"
)

// budgets.LogPagePartBytes is the most of a log page the gateway holds
// at once: the page (up to 1,000 entries of 16 KiB) is read from the
// store and written a part at a time, the part's bytes charged to the
// tenant in the answer budget (budgets.BodyBytes) while the answer is
// written; budgets.LogPagePartWrite bounds the writing of each part, so a
// reader who stops reading lets go of it (docs/logs.md).

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
	release, err := h.registry().HoldAnswer(c.tenant, budgets.LogPagePartBytes)
	if err != nil {
		writeFault(w, err, "")
		return
	}
	defer release()
	rc := http.NewResponseController(w)
	started := false
	start := func() {
		started = true
		hd := w.Header()
		hd.Set("Content-Type", "application/json")
		hd.Set("Cache-Control", "no-store")
		hd.Set("X-Content-Type-Options", "nosniff")
		w.WriteHeader(http.StatusOK)
		io.WriteString(w, `{"logs":[`)
	}
	first := true
	cursor, err := h.runtime().logs.Load().Read(logTenant(h.Registry, c.tenant), id, since, limit, q.Get("cursor"), budgets.LogPagePartBytes, func(entries [][]byte) error {
		if !started {
			start()
		}
		rc.SetWriteDeadline(time.Now().Add(budgets.LogPagePartWrite))
		for _, b := range entries {
			if !first {
				if _, err := io.WriteString(w, ","); err != nil {
					return err
				}
			}
			first = false
			if _, err := w.Write(b); err != nil {
				return err
			}
		}
		return rc.Flush()
	})
	if err != nil {
		if !started {
			writeFault(w, err, "")
			return
		}
		// Past the head the page cannot say so: it ends unfinished (not
		// JSON), and the connection with it.
		panic(http.ErrAbortHandler)
	}
	if !started {
		start()
	}
	rc.SetWriteDeadline(time.Now().Add(budgets.LogPagePartWrite))
	tail := `],"cursor":null}` + "\n"
	if cursor != "" {
		tail = `],"cursor":"` + cursor + `"}` + "\n"
	}
	io.WriteString(w, tail)
}

// tailKeepalive is how often a quiet tail gets a comment line, so that
// proxies keep the stream open and a gone client is noticed.
const tailKeepalive = 15 * time.Second

// tailLogs streams a handle's log entries as they happen, as Server-Sent
// Events (`log`, and `dropped` with the count a slow reader lost), at most
// budgets.LogTailsPerTenant a tenant (docs/logs.md).
func (h *API) tailLogs(w http.ResponseWriter, r *http.Request) {
	if h.replaced() {
		// A request on a keep-alive connection of the server a reload is
		// retiring: a tail here would hold that server's shutdown (Caddy's
		// default grace period waits forever) and see nothing new. The
		// client retries on a new connection, which the new server serves.
		w.Header().Set("Connection", "close")
		writeFault(w, fault.New(fault.Overloaded, "The gateway is reloading its configuration; open the tail again."), "")
		return
	}
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
	// The shutdown hook above is missed by a server whose shutdown began
	// before this tail registered it; a reload is also noticed here.
	current := time.NewTicker(time.Second)
	defer current.Stop()
	var expired <-chan time.Time
	if !c.expires.IsZero() {
		// A tail lives no longer than the token that opened it.
		timer := time.NewTimer(time.Until(c.expires))
		defer timer.Stop()
		expired = timer.C
	}
	// A handle that ended before the tail was counted leaves it nothing
	// to follow.
	if _, err := h.registry().Logs(c.tenant, id); err != nil {
		tail.Close()
		endTail(w, rc, "the handle ended")
		return
	}
	for {
		select {
		case <-r.Context().Done():
			return
		case <-expired:
			endTail(w, rc, "the token expired; open the tail again with a fresh one")
			return
		case <-tail.Done:
			if tail.Reason != "" {
				endTail(w, rc, tail.Reason)
			}
			return
		case <-closing:
			// The server is shutting down (a reload or a stop): its
			// shutdown waits for open answers, forever with Caddy's
			// default grace period, so tails end first.
			return
		case <-current.C:
			if h.replaced() {
				return
			}
			continue
		case <-keep.C:
			rc.SetWriteDeadline(time.Now().Add(budgets.LogPagePartWrite))
			fmt.Fprint(w, ": keepalive\n\n")
		case e := <-tail.C:
			tail.Took(e)
			// A reader who stops reading lets go of the tail.
			rc.SetWriteDeadline(time.Now().Add(budgets.LogPagePartWrite))
			if n := tail.Dropped(); n > 0 {
				fmt.Fprintf(w, "event: dropped\ndata: {\"count\":%d}\n\n", n)
			}
			b, _ := e.MarshalJSON()
			fmt.Fprintf(w, "event: log\ndata: %s\n\n", b)
			// What else waits goes in the same write.
			for more := len(tail.C); more > 0; more-- {
				e := <-tail.C
				tail.Took(e)
				b, _ := e.MarshalJSON()
				fmt.Fprintf(w, "event: log\ndata: %s\n\n", b)
			}
		}
		if rc.Flush() != nil {
			return
		}
	}
}

// replaced answers whether the running configuration is no longer the one
// this handler was provisioned in (a reload swapped it): its server is
// being retired.
func (h *API) replaced() bool {
	cur, err := caddy.ActiveContext().AppIfConfigured("retainer")
	return err == nil && cur != any(h.app)
}

// endTail writes a tail's last event, `end`, with why it ended.
func endTail(w http.ResponseWriter, rc *http.ResponseController, reason string) {
	b, _ := wirejson.Marshal(map[string]string{"reason": reason})
	fmt.Fprintf(w, "event: end\ndata: %s\n\n", b)
	rc.Flush()
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
