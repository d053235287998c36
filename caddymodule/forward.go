package caddymodule

import (
	"bytes"
	"context"
	"crypto/hmac"
	"errors"
	"hash/fnv"
	"io"
	"net"
	"net/http"
	"net/http/httputil"
	"strings"
	"sync"
	"time"

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

// clusterNode is a runtime's part in a cluster: the secret, the
// transport to other members, the listener, and the handlers a forwarded
// request is served by.
type clusterNode struct {
	secret []byte
	// self is this member's advertised address: what a forward to it
	// names (forward.To, the link's hello).
	self     string
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
	var f *fault.Fault
	switch {
	case errors.As(err, &el):
		return fault.Wrap(fault.Overloaded, err, "This tenant is being served by another gateway; try again.")
	case errors.Is(err, cluster.ErrLost):
		return fault.Wrap(fault.Overloaded, err, "This gateway is rejoining its cluster; try again.")
	case err != nil && !errors.As(err, &f):
		// etcd failed the claim otherwise (unavailable, timed out): what
		// needs etcd is retryable (docs/cluster.md, "Failures").
		return fault.Wrap(fault.Overloaded, err, "The cluster's store did not answer for this tenant's space; try again.")
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
	f.To = addr
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
			header, sig := f.header(n.secret, pr.Out, pr.Out.Header)
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
	// The HMAC covers the headers as the link sends them.
	header, sig := f.header(n.secret, r, withoutHopHeaders(r.Header))
	var stream io.Reader
	contentLength := int64(len(body.held))
	if body.chained() {
		stream, contentLength = newSealReader(r.Body, n.secret, sig), -1
	}
	s, answer, err := n.link.roundTrip(r.Context(), addr, n.secret, r, header, body.held, stream, contentLength)
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
			if remembered {
				// The owner answered as the owner: it is remembered from
				// now, so steady traffic never asks etcd again (nor waits
				// for a stalled etcd when the memory would have ended).
				n.owners.confirm(ck, addr)
			}
			return false
		case forwardFailed:
			n.owners.forgetAddr(addr)
			return false
		}
		n.owners.forgetAddr(addr)
	}
}

// ownerMemory is how long a forwarder trusts the owner it found, or that
// last answered a forward as the owner.
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

// confirm remembers k's owner at addr for ownerMemory from now, if k is
// still remembered there (a forward that owner answered as the owner):
// the owner checks that it owns the space at every forward (it answers
// Retainer-Not-Owner otherwise), so its answer is as fresh as etcd's.
// Before, the memory ended 5 s after the look whatever the traffic, and
// with etcd stalled the next request waited for it and was answered 503
// (TestClusterEtcdStallShorterThanTheLease, through the non-owner).
func (c *ownerCache) confirm(k, addr string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if e, ok := c.m[k]; ok && e.addr == addr {
		c.m[k] = ownerEntry{addr: addr, until: time.Now().Add(ownerMemory)}
	}
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
