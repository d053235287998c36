package caddymodule

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"net/http"
	"time"

	"github.com/caddyserver/caddy/v2"
	"github.com/caddyserver/caddy/v2/modules/caddyhttp"

	"github.com/retainer-gw/retainer/cluster"
	"github.com/retainer-gw/retainer/fault"
)

// The owner's side of forwarding (forward.go): the cluster listener,
// serving a forwarded request as if it had come to this gateway, the
// not-the-owner answer, and the member's lease.

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
// under the secret over its whole head, fresh, and never taken before
// (its nonce), whose body yields only what the HMAC covers. A request
// that came on the link was admitted by the link's read loop before its
// stream was opened (serveCluster); one over HTTP/1.1 is admitted here,
// before its body is read or anything runs.
func (n *clusterNode) serveForwarded(w http.ResponseWriter, r *http.Request) {
	head, ok := r.Context().Value(linkAdmitted{}).(forwardHead)
	if !ok {
		var err error
		if head, err = n.admitForward(r, time.Now()); err != nil {
			writeFault(w, err, "")
			return
		}
	}
	f, err := takeForward(n.secret, head, r)
	if err != nil {
		writeFault(w, forbidForward(err), "")
		return
	}
	dropUncovered(r.Header)
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

// listen starts the cluster listener.
func (rt *runtime) listen(a *App) error {
	secret := caddy.NewReplacer().ReplaceAll(a.Cluster.Secret, "")
	lease := time.Duration(a.Cluster.Lease)
	n := &clusterNode{
		secret:  []byte(secret),
		self:    a.Cluster.Advertise,
		started: time.Now(),
		transport: &http.Transport{
			DialContext:           (&net.Dialer{Timeout: 5 * time.Second}).DialContext,
			ResponseHeaderTimeout: lease,
			MaxIdleConnsPerHost:   256,
			IdleConnTimeout:       90 * time.Second,
			// The forward's HMAC covers every header sent: the
			// transport adds no Accept-Encoding of its own.
			DisableCompression: true,
		},
		link: newLinkClient(lease),
		data: map[string]*Retainer{},
		apis: map[string]*API{},
	}
	ln, err := net.Listen("tcp", a.Cluster.Listen)
	if err != nil {
		return fmt.Errorf("cluster listen %s: %w", a.Cluster.Listen, err)
	}
	n.serveCluster(ln, http.HandlerFunc(n.serveForwarded))
	rt.cluster = n
	return nil
}

// serveCluster serves the cluster listener ln with h (serveForwarded; a
// test's wrapping of it): the link, whose heads are checked before
// anything is held or run for them, and HTTP/1.1.
func (n *clusterNode) serveCluster(ln net.Listener, h http.Handler) {
	// A connection to the cluster listener that says nothing is closed
	// (docs/cluster.md, "The link between members").
	n.server = &http.Server{Handler: h, ReadHeaderTimeout: linkFrameWait, IdleTimeout: linkIdle}
	if n.self == "" {
		// A test's node: it is reached at its listener's address.
		n.self = ln.Addr().String()
	}
	ls := newLinkServer(h)
	ls.hello = func(h linkHello) error { return n.admitHello(h, time.Now()) }
	ls.admit = func(w http.ResponseWriter, r *http.Request) (any, bool) {
		head, err := n.admitForward(r, time.Now())
		if err != nil {
			writeFault(w, err, "")
			return nil, false
		}
		return head, true
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
