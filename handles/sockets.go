package handles

import (
	"context"
	"sync"

	"github.com/retainer-gw/retainer/budgets"
	"github.com/retainer-gw/retainer/fault"
	"github.com/retainer-gw/retainer/sandbox"
)

// WebSockets to a handle (docs/websockets.md): the data plane upgrades the
// visitor once the handler answered 101 (a Stream whose records are what
// the handler sends), counts the socket here against its handle's and its
// tenant's caps, and delivers each of the visitor's messages with
// SocketEvent. An open socket is an open stream: it keeps its handle from
// idling out and its worker from being recycled.

// socketCount is the open sockets of each handle and of each tenant.
type socketCount struct{ byHandle, byTenant budgets.Counts }

// HandleID is the handle a stream belongs to.
func (st *Stream) HandleID() string { return st.id }

// AcquireSocket counts an accepted socket of handle id against
// websockets_per_handle and websockets_per_tenant; release uncounts it.
func (r *Registry) AcquireSocket(id string) (release func(), err error) {
	s := r.store
	cfg := r.config()
	tenant := s.tenantOf(id)
	if tenant == "" {
		return nil, fault.Closed(id)
	}
	if !s.sockets.byHandle.Take(id, cfg.WebsocketsPerHandle) {
		return nil, fault.New(fault.QuotaExceeded, "This handler holds %d WebSockets, the most one handler may (websockets_per_handle).", cfg.WebsocketsPerHandle)
	}
	if !s.sockets.byTenant.Take(tenant, cfg.WebsocketsPerTenant) {
		s.sockets.byHandle.Give(id)
		return nil, fault.New(fault.QuotaExceeded, "This tenant's handlers hold %d WebSockets, the most one tenant may (websockets_per_tenant).", cfg.WebsocketsPerTenant)
	}
	var once sync.Once
	return func() {
		once.Do(func() {
			s.sockets.byHandle.Give(id)
			s.sockets.byTenant.Give(tenant)
		})
	}, nil
}

// ErrSocketGone is an event for a socket its isolate no longer has.
var ErrSocketGone = fault.New(fault.HandlesClosed, "The handler's WebSocket is gone.")

// SocketEvent delivers a visitor's message (webapi/websocket's Text or
// Binary) or close (Close, with code, data the reason) to the
// handler's socket opened as stream st. It runs as an invocation does, in
// order and under the handle's bounds, but never rebuilds the isolate: a
// rebuilt isolate has no sockets (the visitor reconnects).
func (r *Registry) SocketEvent(ctx context.Context, st *Stream, kind byte, code int, data []byte) error {
	s := r.store
	ls := s.liveFor(st.id)
	if ls == nil {
		return fault.Closed(st.id)
	}
	if !s.opts.Executor.Holds(st.id) {
		return ErrSocketGone
	}
	ls.inflight.Add(1)
	defer ls.inflight.Add(-1)
	res, err := s.opts.Executor.Invoke(ctx, st.id, sandbox.SocketEvent, sandbox.SocketEventRequest(st.stream, kind, code, data))
	switch fault.CodeOf(err) {
	case "":
		s.touch(st.id, true)
		if res.Status == 410 {
			return ErrSocketGone
		}
		return nil
	case fault.Timeout, fault.Memory:
		s.touch(st.id, false)
		r.strikeIfCharged(st.id, "", err)
	}
	return err
}

// Ended reports that handle id has ended (its sockets then close with
// 1001, not 1011).
func (r *Registry) Ended(id string) bool { return !r.store.exists(id) }
