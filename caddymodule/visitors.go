package caddymodule

import (
	"net"
	"net/http"

	"github.com/caddyserver/caddy/v2/modules/caddyhttp"

	"github.com/retainer-gw/retainer/budgets"
	"github.com/retainer-gw/retainer/fault"
)

// streamsPerVisitor bounds the streamed responses (SSE listeners included)
// one visitor address holds open on one handle (docs/architecture.md,
// "Budgets"): a handle's isolate holds 1,024, and one visitor must not take
// them all. Past it the stream is cancelled and the visitor gets 429.
const streamsPerVisitor = budgets.StreamsPerVisitor

// visitorStreams counts open streamed responses by handle and visitor
// address. It lives in the runtime, so a reload keeps the counts.
type visitorStreams struct{ open budgets.Counts }

// visitorAddr is Caddy's client IP for r (trusted proxies respected), or
// the connection's address.
func visitorAddr(r *http.Request) string {
	if ip, ok := caddyhttp.GetVar(r.Context(), caddyhttp.ClientIPVarKey).(string); ok && ip != "" {
		return ip
	}
	host, _, err := net.SplitHostPort(r.RemoteAddr)
	if err != nil {
		return r.RemoteAddr
	}
	return host
}

// acquire counts one more stream of addr on handle, or answers
// QUOTA_EXCEEDED past streamsPerVisitor; release uncounts it.
func (v *visitorStreams) acquire(handle, addr string) (release func(), err error) {
	k := handle + "\x00" + addr
	if !v.open.Take(k, streamsPerVisitor) {
		return nil, fault.New(fault.QuotaExceeded, "This visitor holds %d streamed responses of this handler open, the most one visitor may.", streamsPerVisitor)
	}
	return func() { v.open.Give(k) }, nil
}

// socketsPerVisitor bounds the WebSockets one visitor address holds open
// on one handle (docs/websockets.md), as streamsPerVisitor does streams:
// past it the upgrade answers 429.
const socketsPerVisitor = budgets.WebsocketsPerVisitor

// visitorSockets counts open WebSockets by handle and visitor address. It
// lives in the runtime, so a reload keeps the counts.
type visitorSockets struct{ open budgets.Counts }

// acquire counts one more socket of addr on handle, or answers
// QUOTA_EXCEEDED past socketsPerVisitor; release uncounts it.
func (v *visitorSockets) acquire(handle, addr string) (release func(), err error) {
	k := handle + "\x00" + addr
	if !v.open.Take(k, socketsPerVisitor) {
		return nil, fault.New(fault.QuotaExceeded, "This visitor holds %d WebSockets of this handler open, the most one visitor may.", socketsPerVisitor)
	}
	return func() { v.open.Give(k) }, nil
}
