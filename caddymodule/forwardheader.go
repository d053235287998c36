package caddymodule

import (
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"time"

	"github.com/retainer-gw/retainer/fault"
	"github.com/retainer-gw/retainer/handles"
)

// The forwarding header (forward.go, docs/cluster.md): what a forward
// carries in Retainer-Forwarded, the HMAC over the request's whole head
// and those fields, and the owner's checks of it before anything runs.

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
	// To is the advertised address of the member the request is sent to:
	// only that member takes it (a forward captured on its way to one
	// member is refused by the next owner of the space).
	To string
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
	v.Set("to", f.To)
	v.Set("body", f.Body)
	return v
}

// newNonce is a fresh random nonce, in hex.
func newNonce() string {
	var b [16]byte
	rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

// signature is the HMAC over the request's method, target, Host, every
// header it carries (coverHeaders) and every field of f (its nonce, the
// visitor's address and what it says of the body included).
func signature(secret []byte, method, target, host string, h http.Header, fields string) []byte {
	mac := hmac.New(sha256.New, secret)
	b := make([]byte, 0, 1024)
	b = appendString(appendString(appendString(b, method), target), host)
	b = appendCoveredHeaders(b, h)
	mac.Write(appendString(b, fields))
	return mac.Sum(nil)
}

// appendCoveredHeaders appends what the HMAC covers of h: every header
// by name (sorted) with its values, but for Retainer-Forwarded itself,
// Content-Length (the body's cover says the length, and the owner sets
// it from that) and a header whose values are all empty (Go's proxy
// hop adds an empty User-Agent it does not send; the owner drops such
// headers: dropUncovered). Names are as given, so a name that differs
// only in case is another header.
func appendCoveredHeaders(b []byte, h http.Header) []byte {
	var stack [32]string
	names := stack[:0]
	for name, vs := range h {
		if !covered(name, vs) {
			continue
		}
		names = append(names, name)
	}
	slices.Sort(names)
	b = binary.AppendUvarint(b, uint64(len(names)))
	for _, name := range names {
		vs := h[name]
		b = binary.AppendUvarint(appendString(b, name), uint64(len(vs)))
		for _, v := range vs {
			b = appendString(b, v)
		}
	}
	return b
}

// covered is whether the forward's HMAC covers the header name.
func covered(name string, vs []string) bool {
	if name == forwardHeader || name == "Content-Length" {
		return false
	}
	for _, v := range vs {
		if v != "" {
			return true
		}
	}
	return false
}

// dropUncovered removes, at the owner, the headers of a forwarded
// request its HMAC does not cover (appendCoveredHeaders): those of
// empty values. Content-Length is set from the body's cover.
func dropUncovered(h http.Header) {
	for name, vs := range h {
		if name != "Content-Length" && !covered(name, vs) {
			delete(h, name)
		}
	}
}

// header answers the Retainer-Forwarded header for r sent with the
// headers h, and its signature (the seed of a chained body's frames).
func (f forward) header(secret []byte, r *http.Request, h http.Header) (string, []byte) {
	fields := f.values().Encode()
	sig := signature(secret, r.Method, r.URL.RequestURI(), r.Host, h, fields)
	return fields + "&sig=" + hex.EncodeToString(sig), sig
}

// notOwnerMark is the value of an owner's not-the-owner answer to the
// request whose nonce is given.
func notOwnerMark(secret []byte, nonce string) string {
	mac := hmac.New(sha256.New, secret)
	fmt.Fprintf(mac, "not the owner\n%s", nonce)
	return hex.EncodeToString(mac.Sum(nil))
}

// forwardHead is a forwarded request's header once checked: its fields,
// signature and stamp.
type forwardHead struct {
	v   url.Values
	sig []byte
	at  time.Time
}

// parseForward checks a forwarded request's header (signed under secret,
// at most forwardMaxAge old and at most forwardSkew in the future) and
// puts on r the body its HMAC covers (takeForwardBody). Whether its nonce
// was seen before is the caller's to check (clusterNode.admitForward).
func parseForward(secret []byte, r *http.Request, now time.Time) (forward, error) {
	head, err := checkForward(secret, r, now)
	if err != nil {
		return forward{}, err
	}
	return takeForward(secret, head, r)
}

// takeForward puts on r, whose header checked, the body its HMAC covers,
// and answers what the header says.
func takeForward(secret []byte, head forwardHead, r *http.Request) (forward, error) {
	v := head.v
	if err := takeForwardBody(secret, head.sig, v.Get("body"), r); err != nil {
		return forward{}, err
	}
	resolve, _ := strconv.Atoi(v.Get("resolve"))
	return forward{Kind: v.Get("kind"), Registry: v.Get("registry"), Key: v.Get("key"), Resolve: handles.Resolve(resolve),
		Scheme: v.Get("scheme"), ClientIP: v.Get("ip"), JWTCookie: v.Get("cookie"), JWTQuery: v.Get("query"),
		Tenant: v.Get("tenant"), Scope: v.Get("scope"), Expires: v.Get("expires"), Plan: v.Get("plan"), Issued: v.Get("issued"), At: head.at,
		Nonce: v.Get("nonce"), To: v.Get("to"), Body: v.Get("body")}, nil
}

// checkForward checks a forwarded request's header: signed under secret
// over r's method, target, Host and headers, fresh, and with a nonce.
func checkForward(secret []byte, r *http.Request, now time.Time) (forwardHead, error) {
	raw := r.Header.Get(forwardHeader)
	i := len(raw) - len("&sig=") - 64
	if i < 0 || raw[i:i+5] != "&sig=" {
		return forwardHead{}, errors.New("no signature")
	}
	fields, sigText := raw[:i], raw[i+5:]
	sig, err := hex.DecodeString(sigText)
	if err != nil || !hmac.Equal(sig, signature(secret, r.Method, r.URL.RequestURI(), r.Host, r.Header, fields)) {
		return forwardHead{}, errors.New("a bad signature")
	}
	v, err := url.ParseQuery(fields)
	if err != nil {
		return forwardHead{}, err
	}
	atMs, _ := strconv.ParseInt(v.Get("at"), 10, 64)
	at := time.UnixMilli(atMs)
	if d := now.Sub(at); d > forwardMaxAge || d < -forwardSkew {
		return forwardHead{}, errors.New("too old, or stamped in the future")
	}
	if nonce, err := hex.DecodeString(v.Get("nonce")); err != nil || len(nonce) != 16 {
		return forwardHead{}, errors.New("no nonce")
	}
	return forwardHead{v: v, sig: sig, at: at}, nil
}

// admitForward checks a forwarded request's head before anything runs
// or is held for it: signed and fresh (checkForward), addressed to this
// member (its advertised address), stamped after this
// gateway started, and its nonce never taken before (taken now). Its
// error is the answer: 403 FORBIDDEN, or 503 OVERLOADED for what a
// retry gets past.
func (n *clusterNode) admitForward(r *http.Request, now time.Time) (forwardHead, error) {
	head, err := checkForward(n.secret, r, now)
	if err != nil {
		return forwardHead{}, forbidForward(err)
	}
	if to := head.v.Get("to"); to != n.self {
		// Signed for another member (the space's owner before a
		// failover, say): taken there, or never.
		return forwardHead{}, forbidForward(fmt.Errorf("addressed to %q, not this member", to))
	}
	if head.at.Before(n.started) {
		// Signed before this gateway started: its nonce may have been
		// taken by the process before this one (a retry gets a fresh
		// stamp).
		return forwardHead{}, fault.New(fault.Overloaded, "This gateway has just started; try again.")
	}
	var nonce [16]byte
	hex.Decode(nonce[:], []byte(head.v.Get("nonce")))
	if err := n.nonces.first(nonce, now); err != nil {
		if errors.Is(err, errNoncesFull) {
			return forwardHead{}, err
		}
		return forwardHead{}, forbidForward(err)
	}
	return head, nil
}

// forbidForward is the 403 of a forwarded request that does not check.
func forbidForward(err error) error {
	return fault.New(fault.Forbidden, "This listener serves the cluster's forwarded requests only (%s).", err)
}

// admitHello checks a link connection's hello (linkhello.go): signed,
// addressed to this member, fresh, stamped after this gateway started,
// and its nonce never taken before (taken now).
func (n *clusterNode) admitHello(h linkHello, now time.Time) error {
	if err := checkLinkHello(n.secret, n.self, n.started, h, now); err != nil {
		return err
	}
	return n.nonces.first(h.nonce, now)
}
