package caddymodule

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"regexp"
	"strings"
	"sync"
	"time"

	"github.com/coder/websocket"
	"go.uber.org/zap"

	"github.com/retainer-gw/retainer/authz"
	"github.com/retainer-gw/retainer/budgets"
	"github.com/retainer-gw/retainer/fault"
	"github.com/retainer-gw/retainer/handles"
	"github.com/retainer-gw/retainer/internal/wirejson"
	"github.com/retainer-gw/retainer/program"
)

// The executor socket (docs/protocol.md): GET /executor upgrades to a WebSocket that
// carries the native contract, so a host on another machine runs programs
// whose caller tools run in the host's own process. docs/protocol.md is the
// protocol's reference; this file is its gateway side.

// ExecutorSubprotocol names the protocol and its version.
const ExecutorSubprotocol = "retainer.executor.v1"

// Per-connection bounds (docs/protocol.md; the counts are budgets'
// ExecutorSocket* and ExecutorCaller* rows).
const (
	// socketIdle closes a socket on which the host sent nothing for so long.
	socketIdle = budgets.ExecutorSocketIdle
	// socketWriteBound is how long one message may take to reach a host
	// that stopped reading; past it the connection is closed.
	socketWriteBound = 30 * time.Second
)

var identifier = regexp.MustCompile(`^[A-Za-z_$][A-Za-z0-9_$]{0,63}$`)

// checkCallerProviders refuses caller providers outside the socket and
// names a program could not call (or that the runtime cannot define).
func checkCallerProviders(ps []handles.Provider, socket bool) error {
	seen := map[string]bool{}
	n := 0
	for _, p := range ps {
		if seen[p.Name] {
			return fault.New(fault.BadRequest, "The provider %q is named twice.", p.Name)
		}
		seen[p.Name] = true
		if !p.Caller {
			continue
		}
		n++
		if !socket {
			return fault.New(fault.BadRequest, "The provider %q is a caller provider: its tools run in the caller's process, which needs the executor socket (GET /executor).", p.Name)
		}
		if !identifier.MatchString(p.Name) || p.Name == "undefined" || p.Name == "NaN" || p.Name == "Infinity" {
			return fault.New(fault.BadRequest, "The caller provider name %q is not a JavaScript identifier of at most 64 characters.", p.Name)
		}
		if len(p.Tools) > budgets.ExecutorCallerTools {
			return fault.New(fault.BadRequest, "The caller provider %q has %d tools; at most %d.", p.Name, len(p.Tools), budgets.ExecutorCallerTools)
		}
		tools := map[string]bool{}
		for _, t := range p.Tools {
			if !identifier.MatchString(t) || tools[t] {
				return fault.New(fault.BadRequest, "The caller provider %q names the tool %q twice or not as a JavaScript identifier.", p.Name, t)
			}
			tools[t] = true
		}
	}
	if n > budgets.ExecutorCallerProviders {
		return fault.New(fault.BadRequest, "%d caller providers; at most %d.", n, budgets.ExecutorCallerProviders)
	}
	return nil
}

// socketMessage is every message a host sends; type says which fields
// count.
type socketMessage struct {
	Type        string          `json:"type"`
	ID          *int64          `json:"id"`
	Request     json.RawMessage `json:"request,omitempty"`
	ExecutionID string          `json:"executionId,omitempty"`
	Name        string          `json:"name,omitempty"`
	Value       json.RawMessage `json:"value,omitempty"`
	Message     string          `json:"message,omitempty"`
}

// socketError is a fault as the socket carries it.
type socketError struct {
	Code      fault.Code `json:"code"`
	Message   string     `json:"message"`
	Retryable bool       `json:"retryable"`
}

func toSocketError(err error) *socketError {
	f := fault.As(err)
	return &socketError{Code: f.Code, Message: f.Message, Retryable: f.Retryable()}
}

// executorConn is one host's connection.
type executorConn struct {
	h      *API
	caller caller
	ws     *websocket.Conn
	limit  int64
	ctx    context.Context // ends when the connection does
	cancel context.CancelFunc

	mu         sync.Mutex
	executions int
	invokes    int
	calls      map[int64]chan callAnswer
	callRuns   map[int64]int64 // a waiting call's execution
	nextCall   int64
}

type callAnswer struct {
	value json.RawMessage
	err   error
}

// executorSocket serves GET /executor.
func (h *API) executorSocket(w http.ResponseWriter, r *http.Request) {
	c, err := h.caller(r)
	if err != nil {
		writeFault(w, err, "")
		return
	}
	if !offersSubprotocol(r) {
		writeFault(w, fault.New(fault.BadRequest, "GET /executor is a WebSocket with the subprotocol %s.", ExecutorSubprotocol), "")
		return
	}
	if !h.sockets.reserve(c.tenant) {
		writeFault(w, fault.New(fault.QuotaExceeded, "The tenant has %d executor sockets open on this gateway, the most it may; close one first.", budgets.ExecutorSocketsPerTenant), "")
		return
	}
	defer h.sockets.release(c.tenant)
	// The default origin check stays: a page on another origin must not
	// open a socket with a visitor's cookie. Hosts that are not browsers
	// send no Origin.
	ws, err := websocket.Accept(w, r, &websocket.AcceptOptions{Subprotocols: []string{ExecutorSubprotocol}})
	if err != nil {
		return // Accept answered the request
	}
	// Messages are read under our own bound, which answers a fault
	// instead of closing the connection.
	ws.SetReadLimit(-1)
	ctx, cancel := context.WithCancel(context.WithoutCancel(r.Context()))
	conn := &executorConn{h: h, caller: c, ws: ws, ctx: ctx, cancel: cancel,
		limit: h.app.MaxRequestBody*4/3 + 64<<10, calls: map[int64]chan callAnswer{}, callRuns: map[int64]int64{}}
	h.sockets.add(conn)
	defer h.sockets.remove(conn)
	if !c.expires.IsZero() {
		// A socket lives no longer than the token that opened it.
		expired := time.AfterFunc(time.Until(c.expires), func() {
			ws.Close(websocket.StatusPolicyViolation, "the token expired; reconnect with a fresh one")
			cancel()
		})
		defer expired.Stop()
	}
	conn.serve()
}

func offersSubprotocol(r *http.Request) bool {
	for _, v := range r.Header.Values("Sec-WebSocket-Protocol") {
		for _, p := range strings.Split(v, ",") {
			if strings.TrimSpace(p) == ExecutorSubprotocol {
				return true
			}
		}
	}
	return false
}

// serve reads messages until the connection ends; each execute and invoke
// runs on its own goroutine so they overlap.
func (c *executorConn) serve() {
	defer c.shut()
	for {
		typ, data, over, err := c.next()
		if err != nil {
			return
		}
		if over {
			c.refuse(data, fault.New(fault.TooLarge, "The message is over the %d byte bound.", c.limit))
			continue
		}
		if typ != websocket.MessageText {
			c.send(map[string]any{"type": "fault", "error": toSocketError(fault.New(fault.BadRequest, "Messages are JSON text frames."))})
			continue
		}
		c.handle(data)
	}
}

// next reads the next message whole (up to the bound; over answers the
// first bytes of a longer one, whose rest is drained: the connection
// stays). A host that sends nothing for socketIdle has its socket closed:
// the read's context ending closes the connection.
func (c *executorConn) next() (typ websocket.MessageType, data []byte, over bool, err error) {
	readCtx, stop := context.WithTimeout(c.ctx, socketIdle)
	defer stop() // only once the whole message is read: its body is read under readCtx
	typ, rd, err := c.ws.Reader(readCtx)
	if err != nil {
		return 0, nil, false, err
	}
	if data, err = io.ReadAll(io.LimitReader(rd, c.limit+1)); err != nil {
		return 0, nil, false, err
	}
	if int64(len(data)) > c.limit {
		if _, err := io.Copy(io.Discard, rd); err != nil {
			return 0, nil, false, err
		}
		return typ, data, true, nil
	}
	return typ, data, false, nil
}

// shut ends the connection: pending calls throw in their programs (the runs
// go on), invocations in progress are abandoned like a visitor's.
func (c *executorConn) shut() {
	c.cancel()
	c.mu.Lock()
	for id, ch := range c.calls {
		ch <- callAnswer{err: fault.New(fault.BadRequest, "The caller's connection has closed.")}
		delete(c.calls, id)
		delete(c.callRuns, id)
	}
	c.mu.Unlock()
	c.ws.CloseNow()
}

func (c *executorConn) handle(data []byte) {
	var m socketMessage
	if err := json.Unmarshal(data, &m); err != nil {
		c.refuse(data, fault.New(fault.BadRequest, "The message is not JSON: %s.", strings.TrimPrefix(err.Error(), "json: ")))
		return
	}
	if m.ID == nil {
		c.send(map[string]any{"type": "fault", "error": toSocketError(fault.New(fault.BadRequest, "The %q message has no id.", m.Type))})
		return
	}
	id := *m.ID
	switch m.Type {
	case "execute":
		c.execute(id, m.Request)
	case "invoke":
		c.invoke(id, m)
	case "close":
		c.closeHandle(id, m.ExecutionID)
	case "result":
		value := m.Value
		if len(value) == 0 {
			value = json.RawMessage("null")
		}
		c.answer(id, callAnswer{value: value})
	case "error":
		msg := m.Message
		if msg == "" {
			msg = "The caller's tool failed."
		}
		c.answer(id, callAnswer{err: fault.New(fault.BadRequest, "%s", msg)})
	default:
		c.send(map[string]any{"type": "fault", "id": id, "error": toSocketError(fault.New(fault.BadRequest, "Unknown message type %q: the host sends execute, invoke, close, result and error.", m.Type))})
	}
}

// refuse answers a message that could not be served as a whole, in the
// answer's own type when the message's type and id can be read from it.
func (c *executorConn) refuse(data []byte, err error) {
	typ, id, ok := peekHead(data)
	se := toSocketError(err)
	if !ok {
		c.send(map[string]any{"type": "fault", "error": se})
		return
	}
	if typ == "" {
		c.send(map[string]any{"type": "fault", "id": id, "error": se})
		return
	}
	switch typ {
	case "execute":
		c.send(map[string]any{"type": "outcome", "id": id, "outcome": map[string]any{"error": se}})
	case "invoke":
		c.send(map[string]any{"type": "response", "id": id, "error": se})
	case "close":
		c.send(map[string]any{"type": "closed", "id": id, "error": se})
	case "result", "error":
		// The program's call fails with the fault; the host is told too.
		c.answer(id, callAnswer{err: err})
		c.send(map[string]any{"type": "fault", "id": id, "error": se})
	default:
		c.send(map[string]any{"type": "fault", "id": id, "error": se})
	}
}

// peekHead reads "type" and "id" from the start of a message that may be
// cut or malformed further on (clients send them first); ok is whether the
// id was read.
func peekHead(data []byte) (typ string, id int64, ok bool) {
	dec := json.NewDecoder(bytes.NewReader(data))
	if t, err := dec.Token(); err != nil || t != json.Delim('{') {
		return "", 0, false
	}
	haveID := false
	for dec.More() {
		k, err := dec.Token()
		if err != nil {
			break
		}
		key, _ := k.(string)
		switch key {
		case "type":
			v, err := dec.Token()
			if err != nil {
				return typ, id, haveID
			}
			typ, _ = v.(string)
		case "id":
			var n int64
			if err := dec.Decode(&n); err != nil {
				return typ, id, haveID
			}
			id, haveID = n, true
		default:
			var skip json.RawMessage
			if err := dec.Decode(&skip); err != nil {
				return typ, id, haveID
			}
		}
		if haveID && typ != "" {
			return typ, id, true
		}
	}
	return typ, id, haveID
}

// send writes one message; a host that does not read it within the write
// bound loses the connection.
func (c *executorConn) send(v any) {
	data, err := wirejson.Marshal(v)
	if err != nil {
		c.h.logger.Error("executor socket: encoding a message", zap.Error(err))
		return
	}
	ctx, cancel := context.WithTimeout(c.ctx, socketWriteBound)
	defer cancel()
	if err := c.ws.Write(ctx, websocket.MessageText, data); err != nil {
		c.cancel()
		c.ws.CloseNow()
	}
}

func (c *executorConn) execute(id int64, raw json.RawMessage) {
	received := time.Now()
	outcome := func(v any) { c.send(map[string]any{"type": "outcome", "id": id, "outcome": v}) }
	failed := func(err error, resultID string) {
		env := map[string]any{"error": toSocketError(err)}
		if resultID != "" {
			env["resultId"] = resultID
		}
		outcome(env)
	}
	if int64(len(raw)) > c.h.app.MaxRequestBody {
		failed(fault.New(fault.TooLarge, "The request is over the %d byte bound.", c.h.app.MaxRequestBody), "")
		return
	}
	var req executionRequest
	if err := decodeStrict(raw, &req); err != nil {
		failed(err, "")
		return
	}
	c.mu.Lock()
	if c.executions >= budgets.ExecutorSocketRuns {
		c.mu.Unlock()
		failed(fault.New(fault.Overloaded, "This connection has %d executions in flight, the most it may; wait for an outcome.", budgets.ExecutorSocketRuns), "")
		return
	}
	c.executions++
	c.mu.Unlock()
	go func() {
		defer func() {
			c.mu.Lock()
			c.executions--
			c.mu.Unlock()
		}()
		// A computation is cancelled when the connection closes, in its
		// worker too (docs/protocol.md): nobody is left to take its outcome.
		// A deploy goes on under its own bounds, so that it ends as a
		// handle or not at all, never as an isolate nobody recorded.
		ctx := c.ctx
		if req.RetainHandles {
			ctx = context.WithoutCancel(c.ctx)
		}
		tools := func(ctx context.Context, provider, tool string, args []json.RawMessage) (json.RawMessage, error) {
			return c.call(ctx, id, provider, tool, args)
		}
		resp, err := c.h.runExecution(ctx, c.caller, req, tools, received)
		// The run's calls still waiting give their places back before its
		// outcome is sent: the caller's next run may use them at once.
		c.endCalls(id)
		if err != nil {
			failed(err, resp.ResultID)
			return
		}
		outcome(resp)
	}()
}

// call asks the host for a caller tool's answer.
func (c *executorConn) call(ctx context.Context, execution int64, provider, tool string, args []json.RawMessage) (json.RawMessage, error) {
	c.mu.Lock()
	if c.ctx.Err() != nil {
		c.mu.Unlock()
		return nil, fault.New(fault.BadRequest, "The caller's connection has closed.")
	}
	if len(c.calls) >= budgets.ExecutorSocketCalls {
		c.mu.Unlock()
		return nil, fault.New(fault.Overloaded, "The caller has %d calls waiting for answers, the most one connection may.", budgets.ExecutorSocketCalls)
	}
	c.nextCall++
	m := c.nextCall
	ch := make(chan callAnswer, 1)
	c.calls[m] = ch
	c.callRuns[m] = execution
	c.mu.Unlock()
	c.send(map[string]any{"type": "call", "id": m, "execution": execution, "provider": provider, "tool": tool, "args": args})
	select {
	case a := <-ch:
		return a.value, a.err
	case <-ctx.Done():
		c.mu.Lock()
		delete(c.calls, m)
		delete(c.callRuns, m)
		c.mu.Unlock()
		return nil, ctx.Err()
	}
}

// endCalls ends the calls of an execution that ended and still wait for
// the caller's answer: they are answered with an error (nobody awaits
// them) and their places freed at once, not when each call's goroutine
// next runs.
func (c *executorConn) endCalls(execution int64) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for id, run := range c.callRuns {
		if run != execution {
			continue
		}
		c.calls[id] <- callAnswer{err: fault.New(fault.BadRequest, "The run that made this call has ended.")}
		delete(c.calls, id)
		delete(c.callRuns, id)
	}
}

// answer settles call id; an answer to no waiting call is dropped (its run
// ended, or it was answered already: each call is answered once).
func (c *executorConn) answer(id int64, a callAnswer) {
	c.mu.Lock()
	ch := c.calls[id]
	delete(c.calls, id)
	delete(c.callRuns, id)
	c.mu.Unlock()
	if ch != nil {
		ch <- a
	}
}

func (c *executorConn) invoke(id int64, m socketMessage) {
	failed := func(err error) { c.send(map[string]any{"type": "response", "id": id, "error": toSocketError(err)}) }
	if err := c.h.need(c.caller, authz.ScopeDeploy); err != nil {
		failed(err)
		return
	}
	var req program.WireRequest
	if err := decodeStrict(m.Request, &req); err != nil {
		failed(err)
		return
	}
	if req.Headers == nil {
		req.Headers = [][2]string{}
	}
	name := m.Name
	if name == "" {
		name = "fetch"
	}
	c.mu.Lock()
	if c.invokes >= budgets.ExecutorSocketInvokes {
		c.mu.Unlock()
		failed(fault.New(fault.Overloaded, "This connection has %d invocations in flight, the most it may; wait for a response.", budgets.ExecutorSocketInvokes))
		return
	}
	c.invokes++
	c.mu.Unlock()
	go func() {
		defer func() {
			c.mu.Lock()
			c.invokes--
			c.mu.Unlock()
		}()
		start := time.Now()
		// The body is charged to the tenant until it is sent (budgets).
		res, release, err := c.h.registry().InvokeHeld(c.ctx, c.caller.tenant, m.ExecutionID, name, req)
		defer release()
		observeInvocation("api", start, err)
		if err != nil {
			failed(err)
			return
		}
		c.send(map[string]any{"type": "response", "id": id, "response": res})
	}()
}

func (c *executorConn) closeHandle(id int64, executionID string) {
	err := c.h.need(c.caller, authz.ScopeDeploy)
	if err == nil {
		err = c.h.registry().Close(c.caller.tenant, executionID)
	}
	if err != nil {
		c.send(map[string]any{"type": "closed", "id": id, "error": toSocketError(err)})
		return
	}
	c.send(map[string]any{"type": "closed", "id": id})
}

// socketSet is the API's open sockets, closed when its config is replaced.
type socketSet struct {
	mu       sync.Mutex
	conns    map[*executorConn]bool
	byTenant budgets.Counts // sockets open or being opened, per tenant
}

// reserve takes one of tenant's socket places; false past the cap.
func (s *socketSet) reserve(tenant string) bool {
	return s.byTenant.Take(tenant, budgets.ExecutorSocketsPerTenant)
}

// release gives a place back when its socket has ended.
func (s *socketSet) release(tenant string) { s.byTenant.Give(tenant) }

func (s *socketSet) add(c *executorConn) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.conns == nil {
		s.conns = map[*executorConn]bool{}
	}
	s.conns[c] = true
}

func (s *socketSet) remove(c *executorConn) {
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.conns, c)
}

// closeAll tells every host the gateway is going away; their runs go on.
func (s *socketSet) closeAll() {
	s.mu.Lock()
	conns := make([]*executorConn, 0, len(s.conns))
	for c := range s.conns {
		conns = append(conns, c)
	}
	s.mu.Unlock()
	for _, c := range conns {
		go func() {
			c.ws.Close(websocket.StatusGoingAway, "the gateway's configuration changed; reconnect")
			c.cancel()
		}()
	}
}

// Cleanup closes the executor sockets this config opened (a reload or a
// stop); hosts reconnect to the new config. Their runs and handles go on.
func (h *API) Cleanup() error {
	if h.sockets != nil {
		h.sockets.closeAll()
	}
	return nil
}
