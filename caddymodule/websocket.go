package caddymodule

import (
	"context"
	"errors"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/coder/websocket"

	"github.com/retainer-gw/retainer/budgets"
	"github.com/retainer-gw/retainer/fault"
	"github.com/retainer-gw/retainer/handles"
	"github.com/retainer-gw/retainer/program"
	socketrec "github.com/retainer-gw/retainer/sandbox/webapi/websocket"
)

// WebSockets to a handle (docs/websockets.md). The handler answers an
// upgrade with 101 and a stream of records (what it sends); the gateway
// then upgrades the visitor's connection with github.com/coder/websocket
// and relays both ways: each record to the visitor, each of the visitor's
// messages to the handler as an event.

// visitorWriteBound is how long one message to the visitor may take: a
// visitor who stops reading is closed with 1008 past it.
const visitorWriteBound = 30 * time.Second

// isWebSocketUpgrade reports a visitor's WebSocket upgrade request.
func isWebSocketUpgrade(r *http.Request) bool {
	if !strings.EqualFold(r.Header.Get("Upgrade"), "websocket") {
		return false
	}
	for _, v := range r.Header.Values("Connection") {
		for _, t := range strings.Split(v, ",") {
			if strings.EqualFold(strings.TrimSpace(t), "upgrade") {
				return true
			}
		}
	}
	return false
}

// serveSocket upgrades the visitor whose request the handler answered
// with 101 and relays until either side closes. It returns when the socket
// is closed.
func (h *Retainer) serveSocket(w http.ResponseWriter, r *http.Request, reg *handles.Registry, res program.WireResponse, st *handles.Stream) {
	release, err := reg.AcquireSocket(st.HandleID())
	if err != nil {
		st.Close(true)
		writeFault(w, err, "")
		return
	}
	defer release()
	if rt := h.live.rt.Load(); rt != nil {
		releaseVisitor, err := rt.sockets.acquire(st.HandleID(), visitorAddr(r))
		if err != nil {
			st.Close(true) // the handler's close event (a refused upgrade)
			writeFault(w, err, "")
			return
		}
		defer releaseVisitor()
	}
	// Pings and pongs count as activity for websocket_idle, as messages do.
	var relay atomic.Pointer[socketRelay]
	touch := func() {
		if s := relay.Load(); s != nil {
			s.touch()
		}
	}
	opts := &websocket.AcceptOptions{
		// The handler reads the Origin header and decides, as on Workers.
		InsecureSkipVerify: true,
		OnPingReceived:     func(context.Context, []byte) bool { touch(); return true },
		OnPongReceived:     func(context.Context, []byte) { touch() },
	}
	for _, hv := range res.Headers {
		if strings.EqualFold(hv[0], "sec-websocket-protocol") {
			opts.Subprotocols = append(opts.Subprotocols, strings.TrimSpace(hv[1]))
		}
	}
	hj := &hijackRecorder{ResponseWriter: w}
	conn, err := websocket.Accept(hj, r, opts)
	if err != nil {
		st.Close(true)
		return // Accept answered the visitor
	}
	conn.SetReadLimit(budgets.WebsocketMessage) // a message either way, its frames together; past it 1009
	metricSocketsOpen.Inc()
	defer metricSocketsOpen.Dec()
	// The socket outlives the request's context (a reload of the
	// configuration keeps it: the handle and its isolate are the app's).
	ctx, cancel := context.WithCancel(context.WithoutCancel(r.Context()))
	defer cancel()
	s := &socketRelay{conn: conn, reg: reg, st: st, ctx: ctx, cancel: cancel, inDone: make(chan struct{}), tcp: tcpOf(hj.conn)}
	if rt := h.live.rt.Load(); rt != nil {
		// Messages either way, and the handler's bytes out, are the
		// handle's tenant's (docs/usage.md).
		if registry, tenant := st.Owner(); tenant != "" {
			key := logTenant(registry, tenant)
			s.admit = func() error { return rt.admit(registry, st.HandleID(), tenant) }
			s.meter = func(egress int64) {
				if u := rt.usage.Load(); u != nil {
					u.addSocketMessages(key, 1)
					if egress > 0 {
						u.addEgress(key, egress)
					}
				}
			}
		}
	}
	s.touch()
	s.probed.Store(time.Now().UnixNano())
	relay.Store(s)
	go s.idle(time.Duration(h.app.WebsocketIdle))
	go s.inbound()
	s.outbound()
	<-s.inDone
	s.endStream(true)
}

// socketRelay is one visitor's socket and its handler's stream.
type socketRelay struct {
	conn   *websocket.Conn
	reg    *handles.Registry
	st     *handles.Stream
	ctx    context.Context
	cancel context.CancelFunc

	last   atomic.Int64 // unix nanoseconds of the last message either way
	inDone chan struct{}

	closeOnce  sync.Once
	streamOnce sync.Once
	// sent is the close code the gateway sent of its own (a bound, idle),
	// which the handler's close event then carries.
	sent atomic.Int32
	// handlerGone is set when the handler's isolate or handle ended: its
	// close event then has nobody to reach.
	handlerGone atomic.Bool
	// tcp is the visitor's connection, to tell whether the visitor has
	// gone while frames wait unread (nil when it is not TCP).
	tcp syscall.RawConn
	// probed is when the last probe went (unix nanoseconds); probing is
	// set while one waits for its pong.
	probed  atomic.Int64
	probing atomic.Bool
	// meter counts a message (and the bytes sent to the visitor) to the
	// handle's tenant's usage; nil: none.
	meter func(egress int64)
	// admit refuses a visitor's message once the handle's tenant is past
	// its plan's daily limit (plans.go); nil: never.
	admit func() error
}

func (s *socketRelay) touch() { s.last.Store(time.Now().UnixNano()) }

// close closes the visitor's socket once, with code and reason.
func (s *socketRelay) close(code websocket.StatusCode, reason string) {
	s.closeOnce.Do(func() {
		s.sent.Store(int32(code))
		go func() {
			// Close waits for the visitor's answer (5 s at most, the
			// library's bound); the relay need not.
			s.conn.Close(code, reason)
			s.cancel()
		}()
	})
}

// endStream lets the handler's stream go (once); cancel when unread.
func (s *socketRelay) endStream(cancel bool) {
	s.streamOnce.Do(func() { s.st.Close(cancel) })
}

// handlerEnded closes the visitor's socket for the end of the handler's
// isolate or handle.
func (s *socketRelay) handlerEnded(code websocket.StatusCode, reason string) {
	s.handlerGone.Store(true)
	s.endStream(true)
	s.close(code, reason)
}

// outbound sends the handler's records to the visitor, in order.
func (s *socketRelay) outbound() {
	records := &socketrec.Records{Max: budgets.WebsocketMessage}
	for {
		chunk, done, err := s.st.Next(s.ctx)
		if err != nil {
			if s.ctx.Err() != nil {
				return // closed on the gateway's or the visitor's side
			}
			if s.reg.Ended(s.st.HandleID()) {
				s.handlerEnded(websocket.StatusGoingAway, "the handler ended")
			} else {
				s.handlerEnded(websocket.StatusInternalError, "the handler's isolate was lost")
			}
			return
		}
		recs, rerr := records.Add(chunk)
		for _, rec := range recs {
			if rec.Kind == socketrec.Close {
				// The handler closed (or the runtime did, for a bound):
				// the visitor's answer comes back as its close event.
				s.close(closeCode(rec.Code), closeReason(rec.Data))
				return
			}
			typ := websocket.MessageText
			if rec.Kind == socketrec.Binary {
				typ = websocket.MessageBinary
			}
			wctx, wcancel := context.WithTimeout(s.ctx, visitorWriteBound)
			err := s.conn.Write(wctx, typ, rec.Data)
			wcancel()
			if err != nil {
				s.close(websocket.StatusPolicyViolation, "the visitor did not read")
				return
			}
			metricSocketOut.Inc()
			if s.meter != nil {
				s.meter(int64(len(rec.Data)))
			}
			s.touch()
		}
		if rerr != nil {
			if errors.Is(rerr, socketrec.ErrMessageTooBig) {
				s.close(websocket.StatusMessageTooBig, "a message over 1 MiB")
			} else {
				s.handlerEnded(websocket.StatusInternalError, "the handler's socket failed")
			}
			return
		}
		if done {
			// The runtime never ends a socket's stream itself.
			s.handlerEnded(websocket.StatusInternalError, "the handler's socket ended")
			return
		}
	}
}

// closeEventBound is how long the handler's close event may wait for its
// turn; past it (or if it fails) the stream's cancel gives it instead.
const closeEventBound = time.Minute

// inbound delivers the visitor's messages to the handler, then, unless
// the handler's isolate or handle ended first, one close event: the
// visitor's close, or the one the gateway sent (a bound, idle, the
// handler's own close).
func (s *socketRelay) inbound() {
	defer close(s.inDone)
	code, reason := s.relayIn()
	if s.handlerGone.Load() {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), closeEventBound)
	s.reg.SocketEvent(ctx, s.st, socketrec.Close, int(code), []byte(reason))
	cancel()
	s.cancel()
}

// relayIn delivers the visitor's messages until the socket ends, one at a
// time: the next frame is read once the last is delivered, so while the
// handle's queue is full the visitor's connection is not read and TCP
// slows the visitor. It answers the close code and reason of the end.
func (s *socketRelay) relayIn() (websocket.StatusCode, string) {
	for {
		typ, data, err := s.conn.Read(s.ctx)
		if err != nil {
			code, reason := websocket.CloseStatus(err), ""
			var ce websocket.CloseError
			if errors.As(err, &ce) {
				reason = ce.Reason
			}
			switch {
			case strings.Contains(err.Error(), "read limited"):
				s.close(websocket.StatusMessageTooBig, "a message over 1 MiB")
				code, reason = websocket.StatusMessageTooBig, "a message over 1 MiB"
			case s.sent.Load() != 0:
				code = websocket.StatusCode(s.sent.Load())
			case code < 0:
				code = websocket.StatusAbnormalClosure
			}
			return code, reason
		}
		metricSocketIn.Inc()
		if s.meter != nil {
			s.meter(0)
		}
		s.touch()
		s.probe()
		kind := socketrec.Text
		if typ == websocket.MessageBinary {
			kind = socketrec.Binary
		}
		if s.admit != nil && s.admit() != nil {
			// Past the tenant's plan (docs/usage.md): the socket closes,
			// and the handler gets its close event.
			const reason = "the tenant reached its plan's daily limit"
			s.close(websocket.StatusPolicyViolation, reason)
			return websocket.StatusPolicyViolation, reason
		}
		err = s.deliver(kind, data)
		switch {
		case err == nil:
			continue
		case errors.Is(err, errVisitorGone):
			// Frames still unread when the visitor went away are dropped,
			// not delivered (docs/websockets.md).
			s.conn.CloseNow()
			return websocket.StatusAbnormalClosure, ""
		case s.ctx.Err() != nil:
			// The gateway closed the socket (a bound, idle, the handler's
			// close) while the message waited: it is not delivered.
			if c := s.sent.Load(); c != 0 {
				return websocket.StatusCode(c), ""
			}
			return websocket.StatusAbnormalClosure, ""
		case s.reg.Ended(s.st.HandleID()):
			s.handlerEnded(websocket.StatusGoingAway, "the handler ended")
		case isolateLost(err):
			s.handlerEnded(websocket.StatusInternalError, socketEventReason(err))
		default:
			// The isolate is fine and keeps the socket: it gets its close
			// event.
			reason := socketEventReason(err)
			s.close(websocket.StatusInternalError, reason)
			return websocket.StatusInternalError, reason
		}
		return 0, ""
	}
}

// errVisitorGone is a message not delivered because its visitor left.
var errVisitorGone = errors.New("the visitor went away")

// goneCheck is how often a message waiting for its turn looks whether its
// visitor has gone.
const goneCheck = 50 * time.Millisecond

// deliver gives the handler one of the visitor's messages, waiting for
// its turn; a visitor who has gone meanwhile (or before) is not waited for.
func (s *socketRelay) deliver(kind byte, data []byte) error {
	if s.visitorGone() {
		return errVisitorGone
	}
	ctx, cancel := context.WithCancel(s.ctx)
	defer cancel()
	var gone, stopped atomic.Bool
	var watch *time.Timer
	if s.tcp != nil {
		var mu sync.Mutex
		mu.Lock()
		watch = time.AfterFunc(goneCheck, func() {
			if stopped.Load() {
				return
			}
			if s.visitorGone() {
				gone.Store(true)
				cancel()
				return
			}
			s.probe()
			mu.Lock()
			watch.Reset(goneCheck)
			mu.Unlock()
		})
		mu.Unlock()
	}
	err := s.reg.SocketEvent(ctx, s.st, kind, 0, data)
	if watch != nil {
		stopped.Store(true)
		watch.Stop()
	}
	if err != nil && gone.Load() {
		return errVisitorGone
	}
	return err
}

// probeEvery is how often a visitor whose frames keep coming, or wait for
// their turn, is sent a ping. A visitor who closed its connection with
// frames still in its own kernel's send buffer (its FIN behind them, held
// there while the gateway reads at the handler's pace) answers the ping
// with a reset, which visitorGone then sees.
const probeEvery = time.Second

// probe pings the visitor at most every probeEvery, one ping at a time.
func (s *socketRelay) probe() {
	if s.tcp == nil {
		return
	}
	now := time.Now().UnixNano()
	if now-s.probed.Load() < int64(probeEvery) || !s.probing.CompareAndSwap(false, true) {
		return
	}
	s.probed.Store(now)
	go func() {
		defer s.probing.Store(false)
		ctx, cancel := context.WithTimeout(s.ctx, visitorWriteBound)
		defer cancel()
		s.conn.Ping(ctx)
	}()
}

// isolateLost says a socket event failed because the handler's isolate
// (and with it its sockets) is gone.
func isolateLost(err error) bool {
	if errors.Is(err, handles.ErrSocketGone) {
		return true
	}
	switch fault.CodeOf(err) {
	case fault.HandlesClosed, fault.Timeout, fault.Memory, fault.WorkerCrashed:
		return true
	}
	return false
}

// closeCode is a handler's close code as sent: the runtime allows 1000 and
// 3000-4999 (and closes with 1008 itself); anything else, which only a
// broken isolate could write, is sent as 1000. 1005 and 1006 never are.
func closeCode(code int) websocket.StatusCode {
	if code == 1000 || code == 1008 || code >= 3000 && code <= 4999 {
		return websocket.StatusCode(code)
	}
	return websocket.StatusNormalClosure
}

// closeReason is a close reason within the protocol's 123 bytes.
func closeReason(b []byte) string {
	if len(b) > 123 {
		b = b[:123]
	}
	return strings.ToValidUTF8(string(b), "")
}

// socketEventReason is the close reason for an event the handler could
// not take (a close reason is at most 123 bytes).
func socketEventReason(err error) string {
	switch fault.CodeOf(err) {
	case fault.Timeout:
		return "the handler timed out"
	case fault.Memory:
		return "the handler ran out of memory"
	}
	return "the handler's isolate was lost"
}

// idle closes the socket (1001) when no message, ping or pong went either
// way for bound.
func (s *socketRelay) idle(bound time.Duration) {
	t := time.NewTimer(bound)
	defer t.Stop()
	for {
		select {
		case <-s.ctx.Done():
			return
		case <-t.C:
			since := time.Since(time.Unix(0, s.last.Load()))
			if since >= bound {
				s.close(websocket.StatusGoingAway, "idle")
				return
			}
			t.Reset(bound - since)
		}
	}
}
