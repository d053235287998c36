package caddymodule

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/textproto"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/caddyserver/caddy/v2"
	"github.com/caddyserver/caddy/v2/modules/caddyhttp"
	"go.uber.org/zap"

	"github.com/retainer-gw/retainer/fault"
	"github.com/retainer-gw/retainer/handles"
	"github.com/retainer-gw/retainer/program"
)

func init() {
	caddy.RegisterModule(Retainer{})
}

// Retainer is the data plane (`retainer`): it routes a request to the
// handle whose route name or executionId equals Key, and writes the
// handler's Response back. Anyone who reaches the route may send it traffic.
type Retainer struct {
	// Registry names the registry this site serves. Default "default".
	Registry string `json:"registry,omitempty"`
	// Key is a placeholder that yields the route name or executionId, e.g.
	// {http.request.host.labels.2} or {http.request.uri.path.1}. Required.
	Key string `json:"key,omitempty"`
	// Resolve is one or more of "routes", "ids" and "domains", space
	// separated, or "both" (routes and ids, the default): with "routes",
	// executionIds never need to appear in public host names; "domains"
	// serves tenants' own active domains, with key {host}.
	Resolve string `json:"resolve,omitempty"`
	// PassCredentials lets the Authorization header and retainer_jwt's
	// token cookie or query parameter through to the handler.
	PassCredentials bool `json:"pass_credentials,omitempty"`

	app     *App
	live    *started // the registry, once the app has started
	resolve handles.Resolve
	logger  *zap.Logger
	// hostLabel is N when Key is exactly {http.request.host.labels.N}
	// (what the Caddyfile's {labels.N} becomes), -1 otherwise: the key is
	// then read from the Host header directly (keyOf), not through the
	// replacer, which splits the host into a new slice on every request.
	hostLabel int
}

// CaddyModule returns the Caddy module information.
func (Retainer) CaddyModule() caddy.ModuleInfo {
	return caddy.ModuleInfo{ID: "http.handlers.retainer", New: func() caddy.Module { return new(Retainer) }}
}

// Provision finds the app and registry.
func (h *Retainer) Provision(ctx caddy.Context) error {
	h.logger = ctx.Logger()
	appIface, err := ctx.App("retainer")
	if err != nil {
		return fmt.Errorf("retainer: %w", err)
	}
	h.app = appIface.(*App)
	if err := h.app.claimListen(ctx); err != nil {
		return fmt.Errorf("retainer: %w", err)
	}
	if h.Registry == "" {
		h.Registry = "default"
	}
	h.hostLabel = parseHostLabel(h.Key)
	h.live = new(started)
	h.app.whenStarted(func(rt *runtime) {
		reg := h.app.registry(rt, h.Registry)
		h.live.rt.Store(rt)
		h.live.reg.Store(reg)
		rt.wired.Store(h.Registry, reg)
		if rt.cluster != nil {
			rt.cluster.mu.Lock()
			rt.cluster.data[h.Registry] = h
			rt.cluster.mu.Unlock()
		}
	})
	h.resolve, _ = parseResolve(h.Resolve)
	return nil
}

// parseResolve reads a resolve mode: words among routes, ids and domains,
// or both; "" is both.
func parseResolve(mode string) (handles.Resolve, error) {
	if mode == "" {
		return handles.ResolveBoth, nil
	}
	var res handles.Resolve
	for _, w := range strings.Fields(mode) {
		switch w {
		case "both":
			res |= handles.ResolveBoth
		case "routes":
			res |= handles.ResolveRoutes
		case "ids":
			res |= handles.ResolveIDs
		case "domains":
			res |= handles.ResolveDomains
		default:
			return 0, fmt.Errorf("resolve takes routes, ids, domains or both, not %q", w)
		}
	}
	return res, nil
}

// Validate checks the key and resolve mode.
func (h *Retainer) Validate() error {
	if h.Key == "" {
		return fmt.Errorf("retainer: key is required (e.g. key {labels.2})")
	}
	if _, err := parseResolve(h.Resolve); err != nil {
		return fmt.Errorf("retainer: %w", err)
	}
	return nil
}

// hopByHop are headers that describe one connection, not the message.
var hopByHop = map[string]bool{
	"connection": true, "keep-alive": true, "proxy-connection": true, "proxy-authenticate": true,
	"proxy-authorization": true, "te": true, "trailer": true, "transfer-encoding": true, "upgrade": true,
}

// ServeHTTP serves a visitor's request with the handle.
func (h *Retainer) ServeHTTP(w http.ResponseWriter, r *http.Request, _ caddyhttp.Handler) error {
	if h.live.reg.Load() == nil && !h.live.fromRunning(h.app, h.Registry) {
		h.app.awaitStart(r)
	}
	if h.live.reg.Load() == nil {
		writeFault(w, errStarting, "")
		return nil
	}
	if upgrade := isWebSocketUpgrade(r); !upgrade && r.Header.Get("Upgrade") != "" {
		writeFault(w, fault.New(fault.NotImplemented, "Upgrades other than WebSocket are not supported."), "")
		return nil
	}
	key := h.keyOf(r)
	if key == "" {
		writeFault(w, fault.New(fault.NotFound, "No handler is deployed here."), "")
		return nil
	}
	h.serveKey(w, r, key, h.resolve, false)
	return nil
}

// serveKey serves a data-plane request for the handle key names: here,
// or in a cluster at the gateway that owns its tenant's space
// (forward.go). forwarded is true for a request another gateway sent
// here; it is never sent on again.
func (h *Retainer) serveKey(w http.ResponseWriter, r *http.Request, key string, resolve handles.Resolve, forwarded bool) {
	start := time.Now()
	reg := h.live.reg.Load()
	upgrade := isWebSocketUpgrade(r)
	if !forwarded {
		r.Header.Del(forwardHeader) // a visitor's is never believed, nor passed on
	}
	if rt := h.live.rt.Load(); rt != nil && rt.cluster != nil {
		f := forward{Kind: "data", Registry: h.Registry, Key: key, Resolve: resolve}
		ck := fmt.Sprintf("data\x00%s\x00%d\x00%s", h.Registry, resolve, key)
		// Only a lookup that found nothing (a made-up key) is charged; a
		// remembered owner needs none.
		gate := rt.cluster.lookups.gate(visitorAddr(r))
		locate := func(ctx context.Context) error {
			lookups := handles.WithStoreLookups(ctx, gate)
			return reg.Locate(lookups, key, resolve)
		}
		if !rt.cluster.dispatch(w, r, ck, f, forwarded, locate) {
			return
		}
	}
	// A body of up to 1 MiB is read whole before the handler is called; a
	// larger one streams into request.body as it arrives (body.go).
	var body []byte
	var streamed *handles.RequestBody
	var tracked *trackedBody
	if r.Body != nil && r.Body != http.NoBody && r.Method != http.MethodGet && r.Method != http.MethodHead {
		// What is held of it is charged to the visitor and to the tenant
		// whose handler it is for (docs/architecture.md, Budgets), so the
		// key is resolved first: one that names nothing answers 404
		// before a byte of the body is read. (In a cluster, dispatch has
		// placed the key's space here.)
		tenant, ok := reg.TenantOfKey(key, resolve)
		if !ok {
			err := fault.New(fault.NotFound, "No handler is deployed here.")
			observeInvocation("data", start, err)
			refuseBody(w, r, err)
			return
		}
		var release func()
		var err error
		body, tracked, release, err = h.readVisitorBody(w, r, tenant, start)
		defer release()
		if err != nil {
			refuseBody(w, r, err)
			return
		}
		if tracked != nil {
			streamed = &handles.RequestBody{Reader: tracked, Began: start}
		}
	}
	req := program.NewWireRequest(r.Method, h.requestURL(r), h.requestHeaders(r, upgrade), body)
	res, stream, err := reg.ServeStream(r.Context(), key, resolve, req, streamed)
	observeInvocation("data", start, err)
	if forwarded && bodyTampered(r) {
		// The handler read up to a forwarded body's first frame whose
		// HMAC failed: what it answered is not sent.
		if stream != nil {
			stream.Close(true)
		}
		res, stream, err = program.WireResponse{}, nil, errForwardBody
	}
	if tracked != nil && !tracked.ended.Load() {
		// The body was not read to its end (the handler did not want it,
		// or it stopped arriving): a read of it may still be waiting on
		// the connection, and net/http would wait for that read to drain
		// the body before it wrote this answer. The connection closes
		// after the answer instead, and that read ends with it.
		w.Header().Set("Connection", "close")
		if stream == nil {
			defer dropBody(w)
		}
	}
	if err != nil {
		writeFault(w, err, "")
		return
	}
	if res.Status == 101 {
		// The handler accepted a WebSocket (websocket.go).
		if !upgrade || stream == nil {
			if stream != nil {
				stream.Close(true)
			}
			writeFault(w, fault.New(fault.BadResponse, "The handler answered a WebSocket to a request that is not a WebSocket upgrade."), "")
			return
		}
		h.serveSocket(w, r, reg, res, stream)
		return
	}
	if stream != nil {
		h.writeStream(w, r, res, stream)
		return
	}
	writeResponse(w, res)
}

// trackedBody is a streamed request body that knows whether it was read to
// its end.
type trackedBody struct {
	r     io.Reader
	ended atomic.Bool
}

func (b *trackedBody) Read(p []byte) (int, error) {
	n, err := b.r.Read(p)
	if err != nil {
		b.ended.Store(true)
	}
	return n, err
}

// parseHostLabel is N for a key that is exactly
// {http.request.host.labels.N}, -1 for any other.
func parseHostLabel(key string) int {
	rest, ok := strings.CutPrefix(key, "{http.request.host.labels.")
	if !ok || !strings.HasSuffix(rest, "}") {
		return -1
	}
	n, err := strconv.Atoi(strings.TrimSuffix(rest, "}"))
	if err != nil || n < 0 || strings.ContainsAny(rest, "{+-") {
		return -1
	}
	return n
}

// keyOf is the route name or executionId the request names: Key through
// Caddy's replacer, or for a host label the same answer without it
// (hostLabelOf).
func (h *Retainer) keyOf(r *http.Request) string {
	if h.hostLabel >= 0 {
		return hostLabelOf(r.Host, h.hostLabel)
	}
	repl := r.Context().Value(caddy.ReplacerCtxKey).(*caddy.Replacer)
	return repl.ReplaceAll(h.Key, "")
}

// hostLabelOf is what Caddy's {http.request.host.labels.N} answers for
// host: the host without its port, split at dots, the Nth label from the
// right, lower-cased ("" past the first).
func hostLabelOf(host string, n int) string {
	if h, _, err := net.SplitHostPort(host); err == nil {
		host = h
	}
	end := len(host)
	for i := len(host) - 1; i >= -1; i-- {
		if i >= 0 && host[i] != '.' {
			continue
		}
		if n == 0 {
			return strings.ToLower(host[i+1 : end])
		}
		n--
		end = i
	}
	return ""
}

// writeStream sends a streamed response (README.md, API): the head at once, then
// each chunk as the handler's stream yields it, flushed through Caddy. The
// visitor's pace sets the producer's (one chunk is read after the last is
// written). The response bound counts bytes sent and stream_timeout bounds
// the whole; passing either, a visitor leaving or the stream failing
// cancels the stream and ends the connection without a clean end of body,
// so the visitor can tell it was cut.
func (h *Retainer) writeStream(w http.ResponseWriter, r *http.Request, res program.WireResponse, stream *handles.Stream) {
	if rt := h.live.rt.Load(); rt != nil {
		release, err := rt.streams.acquire(stream.HandleID(), visitorAddr(r))
		if err != nil {
			stream.Close(true)
			writeFault(w, err, "")
			return
		}
		defer release()
	}
	metricStreamsOpen.Inc()
	defer metricStreamsOpen.Dec()
	sent := int64(0)
	if rt := h.live.rt.Load(); rt != nil {
		// A streamed body is the handle's tenant's egress (docs/usage.md).
		if registry, tenant := stream.Owner(); tenant != "" {
			defer func() {
				if u := rt.usage.Load(); u != nil && sent > 0 {
					u.addEgress(logTenant(registry, tenant), sent)
				}
			}()
		}
	}
	bound := time.Duration(h.app.StreamTimeout)
	ctx, cancel := context.WithTimeout(r.Context(), bound)
	defer cancel()
	writeHead(w, res)
	rc := http.NewResponseController(w)
	// The write deadline holds stream_timeout for a visitor who stops
	// reading: a write blocked on a full connection fails at it.
	rc.SetWriteDeadline(time.Now().Add(bound))
	if err := rc.Flush(); err != nil {
		stream.Close(true)
		return
	}
	limit, limitName := h.app.MaxResponseBody, "max_response_body"
	if stream.ObjectBody() {
		// An object's body sent from storage (docs/objects.md).
		limit, limitName = h.app.MaxObject, "max_object"
	}
	for {
		chunk, done, err := stream.Next(ctx)
		if err != nil {
			stream.Close(true)
			reason := "the stream failed: " + fault.As(err).Message
			switch {
			case r.Context().Err() != nil:
				reason = "the visitor went away"
			case ctx.Err() != nil:
				reason = fmt.Sprintf("it passed stream_timeout (%v)", time.Duration(h.app.StreamTimeout))
			}
			h.logger.Debug("response stream cut", zap.String("reason", reason))
			panic(http.ErrAbortHandler)
		}
		if done {
			stream.Close(false)
			return
		}
		sent += int64(len(chunk))
		if sent > limit {
			stream.Close(true)
			h.logger.Debug("response stream cut", zap.String("reason", "it passed "+limitName))
			panic(http.ErrAbortHandler)
		}
		metricStreamBytes.Add(float64(len(chunk)))
		if _, err := w.Write(chunk); err != nil {
			stream.Close(true)
			return
		}
		if err := rc.Flush(); err != nil {
			stream.Close(true)
			return
		}
	}
}

// requestURL is the full URL the visitor asked for, without the query
// parameter that carried the gateway's token (unless pass_credentials).
func (h *Retainer) requestURL(r *http.Request) string {
	scheme := "http"
	if r.TLS != nil {
		scheme = "https"
	}
	u := *r.URL
	if name, ok := caddyhttp.GetVar(r.Context(), jwtQueryVar).(string); ok && name != "" && !h.PassCredentials {
		q := u.Query()
		q.Del(name)
		u.RawQuery = q.Encode()
	}
	return scheme + "://" + r.Host + u.RequestURI()
}

// requestHeaders copies the visitor's headers for the handler: no
// hop-by-hop headers but `Upgrade: websocket` for an upgrade, and none of
// the gateway's credentials unless pass_credentials.
func (h *Retainer) requestHeaders(r *http.Request, upgrade bool) [][2]string {
	var drop map[string]bool // what the Connection header names
	for _, v := range r.Header.Values("Connection") {
		for _, name := range strings.Split(v, ",") {
			if drop == nil {
				drop = map[string]bool{}
			}
			drop[strings.ToLower(strings.TrimSpace(name))] = true
		}
	}
	dropCredentials := !h.PassCredentials
	cookieName := ""
	if dropCredentials {
		if v, ok := caddyhttp.GetVar(r.Context(), jwtCookieVar).(string); ok {
			cookieName = v
		}
	}
	out := make([][2]string, 1, len(r.Header)+2)
	out[0] = [2]string{"host", r.Host}
	if upgrade {
		// The one hop-by-hop header a handler is given (docs/websockets.md).
		out = append(out, [2]string{"upgrade", "websocket"})
	}
	for name, values := range r.Header {
		lower, common := lowerHeaderNames[name]
		if !common {
			lower = strings.ToLower(name)
		}
		if hopByHop[lower] || drop[lower] || lower == "host" || dropCredentials && lower == "authorization" {
			continue
		}
		for _, v := range values {
			if lower == "cookie" && cookieName != "" {
				v = withoutCookie(v, cookieName)
				if v == "" {
					continue
				}
			}
			out = append(out, [2]string{lower, v})
		}
	}
	return out
}

// lowerHeaderNames holds the lower case of header names most requests
// carry, as net/http canonicalizes them: strings.ToLower would make a new
// string for each on every request.
var lowerHeaderNames = func() map[string]string {
	m := map[string]string{}
	for _, n := range []string{"Accept", "Accept-Encoding", "Accept-Language", "Authorization", "Cache-Control",
		"Content-Length", "Content-Type", "Cookie", "Forwarded", "If-Modified-Since", "If-None-Match", "Origin",
		"Pragma", "Referer", "Sec-Fetch-Dest", "Sec-Fetch-Mode", "Sec-Fetch-Site", "User-Agent",
		"X-Forwarded-For", "X-Forwarded-Host", "X-Forwarded-Proto", "X-Request-Id"} {
		m[n] = strings.ToLower(n)
	}
	return m
}()

func withoutCookie(header, name string) string {
	var keep []string
	for _, part := range strings.Split(header, ";") {
		p := strings.TrimSpace(part)
		if p == "" || strings.HasPrefix(p, name+"=") {
			continue
		}
		keep = append(keep, p)
	}
	return strings.Join(keep, "; ")
}

// writeResponse writes a handler's response (README.md, API): its framing and
// hop-by-hop headers are dropped and the gateway frames the body itself;
// so are the headers its own Connection header names; a Set-Cookie loses
// its Domain attribute, so no handler sets a cookie for a parent domain
// that other handles or the API share. The sandbox has already bounded the
// head (64 KiB) and the body.
func writeResponse(w http.ResponseWriter, res program.WireResponse) {
	body := res.BodyBytes()
	// A buffered body's length is known: say it (as Workers does for a
	// body of known length), so that net/http need not send a body over
	// 2 KiB chunked. A status that has no body has no length to say.
	if res.Status != http.StatusNoContent && res.Status != http.StatusNotModified {
		w.Header().Set("Content-Length", strconv.Itoa(len(body)))
	}
	writeHead(w, res)
	if len(body) > 0 {
		w.Write(body)
	}
}

// writeHead writes the handler's status and headers, minus the hop-by-hop
// ones, those its Connection header names, Content-Length (the gateway
// frames the body itself) and every Retainer-* header (the gateways' own:
// docs/cluster.md); cookies become host-only.
func writeHead(w http.ResponseWriter, res program.WireResponse) {
	var named map[string]bool // what a Connection header names
	for _, kv := range res.Headers {
		if strings.EqualFold(kv[0], "connection") {
			for _, name := range strings.Split(kv[1], ",") {
				if named == nil {
					named = map[string]bool{}
				}
				named[strings.ToLower(strings.TrimSpace(name))] = true
			}
		}
	}
	h := w.Header()
	for _, kv := range res.Headers {
		lower := strings.ToLower(kv[0])
		if hopByHop[lower] || lower == "content-length" || named[lower] || strings.HasPrefix(lower, "retainer-") {
			continue
		}
		value := kv[1]
		if lower == "set-cookie" {
			value = hostOnlyCookie(value)
		}
		name, common := canonicalHeaderNames[kv[0]]
		if !common {
			name = textproto.CanonicalMIMEHeaderKey(kv[0])
		}
		h[name] = append(h[name], value)
	}
	w.WriteHeader(res.Status)
}

// canonicalHeaderNames holds the canonical form of response header names
// handlers commonly answer, in the lower case a handler's Headers gives
// them: textproto.CanonicalMIMEHeaderKey would make a new string for each
// on every response.
var canonicalHeaderNames = func() map[string]string {
	m := map[string]string{}
	for _, n := range []string{"Access-Control-Allow-Origin", "Cache-Control", "Content-Encoding", "Content-Type",
		"Date", "Etag", "Expires", "Last-Modified", "Location", "Set-Cookie", "Vary", "X-Content-Type-Options"} {
		m[strings.ToLower(n)] = n
		m[n] = n
	}
	return m
}()

// hostOnlyCookie drops every Domain attribute of a Set-Cookie value.
func hostOnlyCookie(v string) string {
	parts := strings.Split(v, ";")
	keep := parts[:1]
	for _, attr := range parts[1:] {
		name, _, _ := strings.Cut(strings.TrimSpace(attr), "=")
		if strings.EqualFold(strings.TrimSpace(name), "domain") {
			continue
		}
		keep = append(keep, attr)
	}
	return strings.Join(keep, ";")
}

// Interface guards.
var (
	_ caddy.Provisioner           = (*Retainer)(nil)
	_ caddy.Validator             = (*Retainer)(nil)
	_ caddyhttp.MiddlewareHandler = (*Retainer)(nil)
)
