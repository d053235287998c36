package caddymodule

import (
	"bytes"
	"context"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"crypto/tls"
	"encoding/hex"
	"errors"
	"fmt"
	"hash/fnv"
	"io"
	"net"
	"net/http"
	"net/http/httputil"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/caddyserver/caddy/v2"
	"github.com/caddyserver/caddy/v2/modules/caddyhttp"
	"golang.org/x/time/rate"

	"github.com/retainer-gw/retainer/budgets"
	"github.com/retainer-gw/retainer/cluster"
	"github.com/retainer-gw/retainer/fault"
	"github.com/retainer-gw/retainer/handles"
)

// Forwarding in a cluster (docs/cluster.md): a request for a space another
// gateway owns goes one hop to that gateway's cluster listener, with what
// this gateway resolved (the registry, the route key, the tenant and its
// scopes) in the Retainer-Forwarded header, authenticated by an HMAC under
// the cluster's secret. The owner checks it and its age, and serves the
// request as if it had come to it; the public listeners never read the
// header.

const (
	forwardHeader = "Retainer-Forwarded"
	// notOwnerHeader marks the answer of a gateway that was sent a request
	// for a space it does not own (any more): the forwarder looks again
	// once. Its value is an HMAC of the request's nonce (notOwnerMark), so
	// no handler can forge it; the gateway drops every Retainer-* header a
	// handler sets anyway (writeHead).
	notOwnerHeader = "Retainer-Not-Owner"
	// forwardMaxAge is how old a forwarded request may be.
	forwardMaxAge = 30 * time.Second
)

// forward is what the owner needs beyond the visitor's request.
type forward struct {
	Kind     string // "data" or "api"
	Registry string
	// The data plane's resolution.
	Key     string
	Resolve handles.Resolve
	// The visitor's connection, as the forwarder saw it.
	Scheme   string
	ClientIP string
	// retainer_jwt's token carriers, removed before a handler sees them.
	JWTCookie string
	JWTQuery  string
	// The API's caller.
	Tenant  string
	Scope   string
	Expires string
	// Plan is the plan the caller's token names (docs/usage.md).
	Plan string
	// Issued is the caller's token's iat, Unix seconds ("" for none).
	Issued string
	At     time.Time
	// Nonce makes the request one of a kind: the owner takes it once.
	Nonce string
	// Body is what the HMAC covers of the body (forwardBody.cover).
	Body string
}

func (f forward) values() url.Values {
	v := url.Values{}
	v.Set("kind", f.Kind)
	v.Set("registry", f.Registry)
	v.Set("key", f.Key)
	v.Set("resolve", strconv.Itoa(int(f.Resolve)))
	v.Set("scheme", f.Scheme)
	v.Set("ip", f.ClientIP)
	v.Set("cookie", f.JWTCookie)
	v.Set("query", f.JWTQuery)
	v.Set("tenant", f.Tenant)
	v.Set("scope", f.Scope)
	v.Set("expires", f.Expires)
	v.Set("plan", f.Plan)
	v.Set("issued", f.Issued)
	v.Set("at", strconv.FormatInt(f.At.UnixMilli(), 10))
	v.Set("nonce", f.Nonce)
	v.Set("body", f.Body)
	return v
}

// newNonce is a fresh random nonce, in hex.
func newNonce() string {
	var b [16]byte
	rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

// signature is the HMAC over the request's method, target, Host and
// every field of f (its nonce and what it says of the body included).
func signature(secret []byte, r *http.Request, fields string) []byte {
	mac := hmac.New(sha256.New, secret)
	fmt.Fprintf(mac, "%s\n%s\n%s\n%s", r.Method, r.URL.RequestURI(), r.Host, fields)
	return mac.Sum(nil)
}

// header answers the Retainer-Forwarded header for r and its signature
// (the seed of a chained body's frames).
func (f forward) header(secret []byte, r *http.Request) (string, []byte) {
	fields := f.values().Encode()
	sig := signature(secret, r, fields)
	return fields + "&sig=" + hex.EncodeToString(sig), sig
}

// notOwnerMark is the value of an owner's not-the-owner answer to the
// request whose nonce is given.
func notOwnerMark(secret []byte, nonce string) string {
	mac := hmac.New(sha256.New, secret)
	fmt.Fprintf(mac, "not the owner\n%s", nonce)
	return hex.EncodeToString(mac.Sum(nil))
}

// parseForward checks a forwarded request's header (signed under secret,
// at most forwardMaxAge old and at most forwardSkew in the future) and
// puts on r the body its HMAC covers (takeForwardBody). Whether its nonce
// was seen before is the caller's to check.
func parseForward(secret []byte, r *http.Request, now time.Time) (forward, error) {
	v, sig, at, err := checkForward(secret, r, now)
	if err != nil {
		return forward{}, err
	}
	if nonce, err := hex.DecodeString(v.Get("nonce")); err != nil || len(nonce) != 16 {
		return forward{}, errors.New("no nonce")
	}
	if err := takeForwardBody(secret, sig, v.Get("body"), r); err != nil {
		return forward{}, err
	}
	resolve, _ := strconv.Atoi(v.Get("resolve"))
	return forward{Kind: v.Get("kind"), Registry: v.Get("registry"), Key: v.Get("key"), Resolve: handles.Resolve(resolve),
		Scheme: v.Get("scheme"), ClientIP: v.Get("ip"), JWTCookie: v.Get("cookie"), JWTQuery: v.Get("query"),
		Tenant: v.Get("tenant"), Scope: v.Get("scope"), Expires: v.Get("expires"), Plan: v.Get("plan"), Issued: v.Get("issued"), At: at,
		Nonce: v.Get("nonce"), Body: v.Get("body")}, nil
}

// checkForward checks a forwarded request's header: signed under secret
// over r's method, target and Host, and fresh. It answers the header's
// fields, the signature and the stamp.
func checkForward(secret []byte, r *http.Request, now time.Time) (url.Values, []byte, time.Time, error) {
	raw := r.Header.Get(forwardHeader)
	i := len(raw) - len("&sig=") - 64
	if i < 0 || raw[i:i+5] != "&sig=" {
		return nil, nil, time.Time{}, errors.New("no signature")
	}
	fields, sigText := raw[:i], raw[i+5:]
	sig, err := hex.DecodeString(sigText)
	if err != nil || !hmac.Equal(sig, signature(secret, r, fields)) {
		return nil, nil, time.Time{}, errors.New("a bad signature")
	}
	v, err := url.ParseQuery(fields)
	if err != nil {
		return nil, nil, time.Time{}, err
	}
	atMs, _ := strconv.ParseInt(v.Get("at"), 10, 64)
	at := time.UnixMilli(atMs)
	if d := now.Sub(at); d > forwardMaxAge || d < -forwardSkew {
		return nil, nil, time.Time{}, errors.New("too old, or stamped in the future")
	}
	return v, sig, at, nil
}

// clusterNode is a runtime's part in a cluster: the secret, the
// transport to other members, the listener, and the handlers a forwarded
// request is served by.
type clusterNode struct {
	secret   []byte
	started  time.Time
	nonces   nonceSet
	owners   ownerCache
	members  memberGens
	lookups  lookupBuckets
	locating locateCalls
	// link carries forwards to other members (link.go); transport carries
	// protocol upgrades (WebSockets), and every forward when link is nil.
	link      *linkClient
	transport *http.Transport
	server    *http.Server
	mu        sync.Mutex
	data      map[string]*Retainer // by registry
	apis      map[string]*API      // by registry
}

// ownFault turns a claim's refusal into the fault a request answers when
// it is not forwarded (a forwarded request that met another owner, a lost
// lease); the owner stays reachable through errors.As.
func ownFault(err error) error {
	var el *cluster.Elsewhere
	switch {
	case errors.As(err, &el):
		return fault.Wrap(fault.Overloaded, err, "This tenant is being served by another gateway; try again.")
	case errors.Is(err, cluster.ErrLost):
		return fault.Wrap(fault.Overloaded, err, "This gateway is rejoining its cluster; try again.")
	}
	return err
}

// isNotOwner is whether err says this gateway does not own the space:
// another does, or this one's lease is lost.
func isNotOwner(err error) bool {
	var el *cluster.Elsewhere
	return errors.As(err, &el) || errors.Is(err, cluster.ErrLost)
}

// errNotOwner is how a not-owner answer leaves the proxy unwritten.
var errNotOwner = errors.New("the gateway sent to does not own the space")

// forwardOutcome is what became of a forwarded request.
type forwardOutcome int

const (
	forwardRelayed   forwardOutcome = iota // the owner's answer went to the visitor
	forwardLookAgain                       // nothing written: the owner is not the owner, or could not be reached
	forwardFailed                          // the owner did not answer; a retryable fault was written
)

// forwardTo sends r to the owner at addr and relays its answer (streams
// and WebSocket upgrades included). When lookAgain is set and the request
// can be sent again (its body, if any, is held whole), an owner that
// answers it no longer owns the space, or that cannot be reached, is not
// relayed: forwardTo writes nothing and answers forwardLookAgain, for the
// caller to look up the owner again (once). A streamed body is never sent
// twice; its caller gets the retryable 503.
func (n *clusterNode) forwardTo(w http.ResponseWriter, r *http.Request, addr string, f forward, body forwardBody, lookAgain bool) (outcome forwardOutcome) {
	f.At = time.Now()
	f.Nonce = newNonce()
	f.Body = body.cover
	if r.TLS != nil {
		f.Scheme = "https"
	} else {
		f.Scheme = "http"
	}
	f.ClientIP = visitorAddr(r)
	if v, ok := caddyhttp.GetVar(r.Context(), jwtCookieVar).(string); ok {
		f.JWTCookie = v
	}
	if v, ok := caddyhttp.GetVar(r.Context(), jwtQueryVar).(string); ok {
		f.JWTQuery = v
	}
	if body.held != nil {
		r.Body = io.NopCloser(bytes.NewReader(body.held))
	}
	lookAgain = lookAgain && body.resendable()
	// A forward to a member whose lease ends (watchGone) stops waiting
	// at once: it can no longer answer for the space.
	ctx, cancel := context.WithCancel(r.Context())
	defer cancel()
	defer context.AfterFunc(n.members.of(addr), cancel)()
	r = r.WithContext(ctx)
	metricForwards.Inc()
	if n.link != nil && r.Header.Get("Upgrade") == "" {
		return n.forwardLink(w, r, addr, f, body, lookAgain)
	}
	proxy := &httputil.ReverseProxy{
		Rewrite: func(pr *httputil.ProxyRequest) {
			pr.Out.URL.Scheme = "http"
			pr.Out.URL.Host = addr
			pr.Out.Host = r.Host
			pr.Out.Header.Del(forwardHeader)
			header, sig := f.header(n.secret, pr.Out)
			pr.Out.Header.Set(forwardHeader, header)
			if body.chained() && pr.Out.Body != nil {
				pr.Out.Body = newSealReader(pr.Out.Body, n.secret, sig)
				pr.Out.ContentLength = -1
				pr.Out.Header.Del("Content-Length")
			}
		},
		Transport:     n.transport,
		FlushInterval: -1,
		ModifyResponse: func(res *http.Response) error {
			mark := res.Header.Get(notOwnerHeader)
			dropRetainerHeaders(res.Header)
			if mark == "" || !hmac.Equal([]byte(mark), []byte(notOwnerMark(n.secret, f.Nonce))) {
				return nil
			}
			if lookAgain {
				return errNotOwner
			}
			return nil
		},
		ErrorHandler: func(w http.ResponseWriter, _ *http.Request, err error) {
			var op *net.OpError
			if errors.Is(err, errNotOwner) || lookAgain && errors.As(err, &op) && op.Op == "dial" {
				outcome = forwardLookAgain
				return
			}
			outcome = forwardFailed
			writeFault(w, fault.Wrap(fault.Overloaded, err, "The gateway serving this tenant did not answer; try again."), "")
		},
	}
	proxy.ServeHTTP(w, r)
	return outcome
}

// forwardLink is forwardTo over the link (link.go): the same header,
// body cover and outcomes as the proxy hop.
func (n *clusterNode) forwardLink(w http.ResponseWriter, r *http.Request, addr string, f forward, body forwardBody, lookAgain bool) forwardOutcome {
	if headerFields(r.Header) >= linkMaxFields {
		// The owner refuses such a head and closes the link with it.
		writeFault(w, fault.New(fault.TooLarge, "This request carries more than %d header fields.", linkMaxFields-1), "")
		return forwardRelayed
	}
	header, sig := f.header(n.secret, r)
	var stream io.Reader
	contentLength := int64(len(body.held))
	if body.chained() {
		stream, contentLength = newSealReader(r.Body, n.secret, sig), -1
	}
	s, answer, err := n.link.roundTrip(r.Context(), addr, r, header, body.held, stream, contentLength)
	if err != nil {
		var op *net.OpError
		if lookAgain && errors.As(err, &op) && op.Op == "dial" {
			return forwardLookAgain
		}
		writeFault(w, fault.Wrap(fault.Overloaded, err, "The gateway serving this tenant did not answer; try again."), "")
		return forwardFailed
	}
	mark := answer.header.Get(notOwnerHeader)
	dropRetainerHeaders(answer.header)
	if lookAgain && mark != "" && hmac.Equal([]byte(mark), []byte(notOwnerMark(n.secret, f.Nonce))) {
		s.reset()
		return forwardLookAgain
	}
	h := w.Header()
	for name, vs := range withoutHopHeaders(answer.header) {
		h[name] = vs
	}
	w.WriteHeader(answer.status)
	buf := linkBufs.Get().(*[]byte)
	defer linkBufs.Put(buf)
	rc := http.NewResponseController(w)
	for {
		k, err := s.in.read(*buf, r.Context().Done())
		if k > 0 {
			if _, werr := w.Write((*buf)[:k]); werr != nil {
				s.reset()
				panic(http.ErrAbortHandler)
			}
			if !s.in.ready() {
				// Nothing more is here yet: what came goes to the
				// visitor now (streams, SSE).
				rc.Flush()
			}
		}
		if err == io.EOF {
			return forwardRelayed
		}
		if err != nil {
			// The owner or the link failed mid-answer: the visitor's
			// answer is cut, as a proxy cuts it.
			s.reset()
			panic(http.ErrAbortHandler)
		}
	}
}

// linkBufs are the buffers answers are relayed through.
var linkBufs = sync.Pool{New: func() any { b := make([]byte, linkMaxData); return &b }}

// locateWait is how long a request waits for its space to be found or
// claimed (etcd round trips) before it is answered 503 OVERLOADED: with
// etcd unreachable a request is answered within it rather than when etcd
// comes back. The look goes on without the request (up to locateDetached),
// so a slow etcd's answer still places the space for the next request.
const (
	locateWait     = 1500 * time.Millisecond
	locateDetached = 30 * time.Second
)

// locateCalls runs one look a key at a time: the requests for a key that
// come while its look waits on etcd wait on that one (the first's visitor
// budget charges a made-up key once), so an outage does not pile up a
// look per request.
type locateCalls struct {
	mu    sync.Mutex
	calls map[string]*locateCall
}

type locateCall struct {
	done chan struct{}
	err  error
}

// within answers locate's outcome for ck, or 503 OVERLOADED once
// locateWait passed without one.
func (l *locateCalls) within(ctx context.Context, ck string, locate func(ctx context.Context) error) error {
	l.mu.Lock()
	if l.calls == nil {
		l.calls = map[string]*locateCall{}
	}
	c, ok := l.calls[ck]
	if !ok {
		c = &locateCall{done: make(chan struct{})}
		l.calls[ck] = c
		go func() {
			lctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), locateDetached)
			defer cancel()
			c.err = locate(lctx)
			l.mu.Lock()
			delete(l.calls, ck)
			l.mu.Unlock()
			close(c.done)
		}()
	}
	l.mu.Unlock()
	t := time.NewTimer(locateWait)
	defer t.Stop()
	select {
	case <-c.done:
		if errors.Is(c.err, context.DeadlineExceeded) {
			return fault.Wrap(fault.Overloaded, c.err, "The cluster's store did not answer in time; try again.")
		}
		return c.err
	case <-t.C:
		return fault.New(fault.Overloaded, "The cluster's store did not answer in time; try again.")
	case <-ctx.Done():
		return fault.Wrap(fault.Overloaded, ctx.Err(), "The request ended before its tenant was placed.")
	}
}

// dropRetainerHeaders removes every Retainer-* header: the gateways'
// own, which neither a visitor nor a handler may set.
func dropRetainerHeaders(h http.Header) {
	for name := range h {
		if len(name) >= len("Retainer-") && strings.EqualFold(name[:len("Retainer-")], "Retainer-") {
			delete(h, name)
		}
	}
}

// dispatch sends a request whose space another gateway owns to that
// gateway, and answers true when this gateway owns it and should serve it
// (or false once the request is answered). locate owns the space here or
// answers a *cluster.Elsewhere. The owner found is remembered under ck for
// ownerMemory, so a gateway's steady forwards cost no etcd round trip; a
// remembered owner that no longer owns the space answers so, or one that
// cannot be reached is forgotten, and the request looks again at once,
// once, in etcd.
func (n *clusterNode) dispatch(w http.ResponseWriter, r *http.Request, ck string, f forward, forwarded bool, locate func(ctx context.Context) error) bool {
	var body forwardBody
	for attempt := 0; ; attempt++ {
		addr, remembered := "", false
		if attempt == 0 && !forwarded {
			addr, remembered = n.owners.get(ck)
		}
		if !remembered {
			err := n.locating.within(r.Context(), ck, locate)
			var el *cluster.Elsewhere
			switch {
			case err == nil:
				if body.held != nil {
					// A send before this look read the body.
					r.Body = io.NopCloser(bytes.NewReader(body.held))
				}
				return true
			case errors.As(err, &el) && !forwarded:
				addr = el.Address
				n.owners.put(ck, addr)
			case forwarded && isNotOwner(err):
				n.writeNotOwner(w, r, err)
				return false
			default:
				writeFault(w, err, "")
				return false
			}
		}
		if attempt == 0 {
			var err error
			if body, err = readForwardBody(r); err != nil {
				writeFault(w, fault.Wrap(fault.BadRequest, err, "The request body could not be read."), "")
				return false
			}
		}
		switch n.forwardTo(w, r, addr, f, body, attempt == 0) {
		case forwardRelayed:
			return false
		case forwardFailed:
			n.owners.forgetAddr(addr)
			return false
		}
		n.owners.forgetAddr(addr)
	}
}

// ownerMemory is how long a forwarder trusts the owner it found.
const ownerMemory = 5 * time.Second

// ownerCache remembers, per route key or tenant, the gateway found to own
// its space: at most budgets.ForwardOwners entries (all dropped past it),
// each for ownerMemory. Only keys that named a space owned elsewhere are
// kept, so a visitor's made-up hosts add nothing.
type ownerCache struct {
	mu sync.Mutex
	m  map[string]ownerEntry
}

type ownerEntry struct {
	addr  string
	until time.Time
}

func (c *ownerCache) get(k string) (string, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	e, ok := c.m[k]
	if !ok || time.Now().After(e.until) {
		return "", false
	}
	return e.addr, true
}

func (c *ownerCache) put(k, addr string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.m == nil || len(c.m) >= budgets.ForwardOwners {
		c.m = map[string]ownerEntry{}
	}
	c.m[k] = ownerEntry{addr: addr, until: time.Now().Add(ownerMemory)}
}

// forgetAddr forgets every key remembered at addr (its gateway did not
// answer, or no longer owns what it was found to own).
func (c *ownerCache) forgetAddr(addr string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for k, e := range c.m {
		if e.addr == addr {
			delete(c.m, k)
		}
	}
}

// forwardedKey carries, at the owner, the forwarded request's header.
type forwardedKey struct{}

// writeNotOwner answers a forwarded request for a space this gateway does
// not own: the retryable fault, marked for the forwarder with the HMAC of
// the request's nonce.
func (n *clusterNode) writeNotOwner(w http.ResponseWriter, r *http.Request, err error) {
	if f, ok := r.Context().Value(forwardedKey{}).(forward); ok {
		w.Header().Set(notOwnerHeader, notOwnerMark(n.secret, f.Nonce))
	}
	writeFault(w, err, "")
}

// serveForwarded is the cluster listener's handler: a request signed
// under the secret, fresh, and never taken before (its nonce), whose body
// yields only what the HMAC covers.
func (n *clusterNode) serveForwarded(w http.ResponseWriter, r *http.Request) {
	now := time.Now()
	f, err := parseForward(n.secret, r, now)
	if err == nil && f.At.Before(n.started) {
		// Signed before this gateway started: its nonce may have been
		// taken by the process before this one (a retry gets a fresh
		// stamp).
		writeFault(w, fault.New(fault.Overloaded, "This gateway has just started; try again."), "")
		return
	}
	if err == nil {
		var nonce [16]byte
		hex.Decode(nonce[:], []byte(f.Nonce))
		if err = n.nonces.first(nonce, now); errors.Is(err, errNoncesFull) {
			writeFault(w, err, "")
			return
		}
	}
	if err != nil {
		writeFault(w, fault.New(fault.Forbidden, "This listener serves the cluster's forwarded requests only (%s).", err), "")
		return
	}
	r.Header.Del(forwardHeader)
	if f.Scheme == "https" {
		// requestURL tells the handler the visitor's scheme from this.
		r.TLS = &tls.ConnectionState{}
	}
	vars := map[string]any{caddyhttp.ClientIPVarKey: f.ClientIP}
	if f.JWTCookie != "" {
		vars[jwtCookieVar] = f.JWTCookie
	}
	if f.JWTQuery != "" {
		vars[jwtQueryVar] = f.JWTQuery
	}
	repl := caddy.NewReplacer()
	if f.Tenant != "" {
		repl.Set("http.auth.user.id", f.Tenant)
		repl.Set("http.auth.user.scope", f.Scope)
		repl.Set("http.auth.user."+tokenExpiresKey, f.Expires)
	}
	ctx := context.WithValue(r.Context(), caddyhttp.VarsCtxKey, vars)
	ctx = context.WithValue(ctx, caddy.ReplacerCtxKey, repl)
	ctx = context.WithValue(ctx, forwardedKey{}, f)
	if c, ok := r.Body.(*chainReader); ok {
		ctx = context.WithValue(ctx, chainKey{}, c)
	}
	r = r.WithContext(ctx)
	n.mu.Lock()
	data, api := n.data[f.Registry], n.apis[f.Registry]
	n.mu.Unlock()
	switch {
	case f.Kind == "data" && data != nil:
		data.serveKey(w, r, f.Key, f.Resolve, true)
	case f.Kind == "api" && api != nil:
		api.serve(w, r, true)
	default:
		writeFault(w, fault.New(fault.NotFound, "This gateway serves no %s for registry %q.", f.Kind, f.Registry), "")
	}
}

// memberGens gives, per member address, a context that ends when that
// member's registration ends (its lease expired, or it left): the
// forwards waiting on it end with it.
type memberGens struct {
	mu sync.Mutex
	m  map[string]memberGen
}

type memberGen struct {
	ctx    context.Context
	cancel context.CancelFunc
}

func (g *memberGens) of(addr string) context.Context {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.m == nil {
		g.m = map[string]memberGen{}
	}
	gen, ok := g.m[addr]
	if !ok {
		ctx, cancel := context.WithCancel(context.Background())
		gen = memberGen{ctx, cancel}
		g.m[addr] = gen
	}
	return gen.ctx
}

// gone ends addr's context; the next forward there gets a new one.
func (g *memberGens) gone(addr string) {
	g.mu.Lock()
	gen, ok := g.m[addr]
	delete(g.m, addr)
	g.mu.Unlock()
	if ok {
		gen.cancel()
	}
}

// watchGone follows the cluster's members: when one's registration ends,
// the owners remembered at its address are forgotten and the forwards
// waiting on it answer 503 at once (the visitor's retry finds the new
// owner), instead of waiting out the response-head timeout.
func (rt *runtime) watchGone() {
	ctx, cancel := context.WithCancel(context.Background())
	go func() {
		<-rt.closing
		cancel()
	}()
	cluster.WatchGone(ctx, rt.backing.etcd, func(addr string) {
		rt.cluster.owners.forgetAddr(addr)
		rt.cluster.members.gone(addr)
		rt.cluster.link.forget(addr)
	})
}

// listen starts the cluster listener.
func (rt *runtime) listen(a *App) error {
	secret := caddy.NewReplacer().ReplaceAll(a.Cluster.Secret, "")
	lease := time.Duration(a.Cluster.Lease)
	n := &clusterNode{
		secret:  []byte(secret),
		started: time.Now(),
		transport: &http.Transport{
			DialContext:           (&net.Dialer{Timeout: 5 * time.Second}).DialContext,
			ResponseHeaderTimeout: lease,
			MaxIdleConnsPerHost:   256,
			IdleConnTimeout:       90 * time.Second,
		},
		link: newLinkClient(lease),
		data: map[string]*Retainer{},
		apis: map[string]*API{},
	}
	ln, err := net.Listen("tcp", a.Cluster.Listen)
	if err != nil {
		return fmt.Errorf("cluster listen %s: %w", a.Cluster.Listen, err)
	}
	n.serveCluster(ln)
	rt.cluster = n
	return nil
}

// serveCluster serves the cluster listener ln: the link, whose heads are
// checked before anything is held for them, and HTTP/1.1.
func (n *clusterNode) serveCluster(ln net.Listener) {
	// A connection to the cluster listener that says nothing is closed
	// (docs/cluster.md, "The link between members").
	n.server = &http.Server{Handler: http.HandlerFunc(n.serveForwarded), ReadHeaderTimeout: linkFrameWait, IdleTimeout: linkIdle}
	ls := newLinkServer(n.server.Handler)
	ls.admit = func(w http.ResponseWriter, r *http.Request) bool {
		if _, _, _, err := checkForward(n.secret, r, time.Now()); err != nil {
			writeFault(w, fault.New(fault.Forbidden, "This listener serves the cluster's forwarded requests only (%s).", err), "")
			return false
		}
		return true
	}
	go n.server.Serve(newSplitListener(ln, ls))
}

// watchLease follows the member's lease: when it is lost by the member's
// clock, nothing is served until etcd answers about it. A lease etcd
// still holds (it was stalled or restarted, not past the lease for the
// other members) is renewed and every space kept, with its isolates
// (cluster.Member.Renew says why that is safe); a lease etcd let expire
// means every space is forgotten (the next request claims again and
// reloads) and the gateway joins again under a new lease.
func (rt *runtime) watchLease() {
	b := rt.backing
	for {
		m := b.member.Load()
		select {
		case <-m.Lost():
		case <-rt.closing:
			return
		}
		rt.logger.Load().Warn("this gateway lost its cluster lease by its own clock; it serves nothing until etcd renews it or it joins again")
		b.writer.Forget()
		if next := rt.renewLease(m); next != nil {
			b.member.Store(next)
			rt.logger.Load().Info("etcd renewed this gateway's cluster lease: its spaces and their isolates are kept")
			continue
		}
		rt.store.Disowned()
		for {
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			next, err := m.Rejoin(ctx)
			cancel()
			if err == nil {
				b.member.Store(next)
				break
			}
			rt.logger.Load().Warn("joining the cluster again: " + err.Error())
			select {
			case <-rt.closing:
				return
			case <-time.After(time.Second):
			}
		}
	}
}

// renewLease tries to renew m's lost lease until etcd answers: the member
// under it when etcd still held it, nil when etcd let it go (or the
// gateway is closing).
func (rt *runtime) renewLease(m *cluster.Member) *cluster.Member {
	for {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		next, err := m.Renew(ctx)
		cancel()
		if err == nil {
			return next
		}
		if errors.Is(err, cluster.ErrLost) {
			return nil
		}
		select {
		case <-rt.closing:
			return nil
		case <-time.After(200 * time.Millisecond):
		}
	}
}

// lookupBuckets charges the store reads a visitor's unknown keys cause to
// its address (budgets.LookupsPerVisitor a second): a fixed set of token
// buckets that addresses share by hash, so the table never grows. Only a
// read that found nothing takes a token (a made-up host); while an
// address's bucket is empty it may make no read at all. A key that names
// a handle costs nothing, so a space that moves between gateways (every
// request looks its owner up again) never spends a visitor's budget.
type lookupBuckets struct {
	once    sync.Once
	buckets []*rate.Limiter
}

// gate answers the gate for addr's store reads.
func (l *lookupBuckets) gate(addr string) handles.StoreLookups {
	l.once.Do(func() {
		l.buckets = make([]*rate.Limiter, budgets.LookupBuckets)
		for i := range l.buckets {
			l.buckets[i] = rate.NewLimiter(budgets.LookupsPerVisitor, budgets.LookupBurstPerVisitor)
		}
	})
	h := fnv.New32a()
	h.Write([]byte(addr))
	b := l.buckets[h.Sum32()%uint32(len(l.buckets))]
	return handles.StoreLookups{Allow: func() bool { return b.Tokens() >= 1 }, Miss: func() { b.Allow() }}
}
