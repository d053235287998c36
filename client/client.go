// Package client is the Go host side of Retainer's executor socket
// (docs/protocol.md): a Go program runs JavaScript programs on a
// Retainer gateway, possibly on another machine, and the programs call
// tools that are Go functions in the host's own process.
//
// An Executor is one WebSocket connection; its methods may be called from
// many goroutines, and calls of one execution may overlap. It imports no
// part of the gateway: a host links only this package and its WebSocket
// library.
package client

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"sync"

	"github.com/coder/websocket"
)

// Subprotocol is the protocol and version this package speaks.
const Subprotocol = "retainer.executor.v1"

// ToolFunc is a caller tool: it runs in the host's process when a program
// calls it. args are the program's arguments, each as JSON; the answer is
// encoded as JSON for the program. An error reaches the program as a thrown
// Error with the error's text.
type ToolFunc func(ctx context.Context, args []json.RawMessage) (any, error)

// Provider is a caller provider: a program calls its tools as
// `<Name>.<tool>(...)`.
type Provider struct {
	Name  string
	Tools map[string]ToolFunc
}

// Upstream grants a provider declared in the gateway's Caddyfile (its tools
// are upstream URLs the gateway calls).
type Upstream struct {
	Name  string   `json:"name"`
	Tools []string `json:"tools"`
}

// Request is one execution: the body of POST /executions, with caller
// providers beside the upstream ones.
type Request struct {
	Code          string
	Modules       map[string]string
	RetainHandles bool
	// Zero values take the gateway's defaults.
	Concurrency   int
	TimeoutMs     int64
	MemoryLimitMb int
	Capabilities  []string
	// Language is "typescript" for a program in TypeScript (the gateway
	// strips its types; docs/deployments.md); empty is JavaScript.
	Language string
	// IdleMs is a retained handle's own idle bound (1,000 ms up to the
	// gateway's max_idle); zero takes the gateway's idle.
	IdleMs int64
	// Outbound is the allow list of the fetch capability.
	Outbound []string
	// OutboundHeaders are headers the gateway sets on fetch to a host,
	// naming the tenant's secrets: {"api.example.com": {"Authorization":
	// "Bearer {secret.API_KEY}"}} (the gateway's docs/secrets.md).
	OutboundHeaders map[string]map[string]string

	Env       map[string]string
	Providers []Provider
	Upstreams []Upstream
}

// Outcome is a successful run: its result as JSON, its logs, and for a
// program that answered a handler, the handle's id.
type Outcome struct {
	Result      json.RawMessage `json:"result,omitempty"`
	Logs        []string        `json:"logs"`
	ExecutionID string          `json:"executionId,omitempty"`
	Handles     []string        `json:"handles,omitempty"`
	ResultID    string          `json:"resultId,omitempty"`
}

// Error is a fault the gateway answered (the API's error codes (README.md, API)).
type Error struct {
	Code      string `json:"code"`
	Message   string `json:"message"`
	Retryable bool   `json:"retryable"`
	// ResultID names the receipt of a program that ran and failed.
	ResultID string `json:"-"`
}

func (e *Error) Error() string { return e.Code + ": " + e.Message }

// WireRequest is a request for a handle (README.md, API); Body nil is no body.
type WireRequest struct {
	Method  string      `json:"method"`
	URL     string      `json:"url"`
	Headers [][2]string `json:"headers"`
	Body    []byte      `json:"body"`
}

// WireResponse is a handle's answer.
type WireResponse struct {
	Status     int         `json:"status"`
	StatusText string      `json:"statusText"`
	Headers    [][2]string `json:"headers"`
	Body       []byte      `json:"body"`
}

// Options configure Dial.
type Options struct {
	// Token is the bearer token sent on the upgrade request.
	Token string
	// HTTPClient makes the upgrade request (default http.DefaultClient).
	HTTPClient *http.Client
}

// Executor is one connection to a gateway's executor socket.
type Executor struct {
	ws     *websocket.Conn
	ctx    context.Context // ends with the connection
	cancel context.CancelFunc

	mu      sync.Mutex
	nextID  int64
	pending map[int64]chan reply
	tools   map[int64]map[string]map[string]ToolFunc // by execution id
	err     error                                    // why the connection ended
}

type reply struct {
	msg incoming
	err error
}

// incoming is every message the gateway sends.
type incoming struct {
	Type      string            `json:"type"`
	ID        int64             `json:"id"`
	Execution int64             `json:"execution"`
	Provider  string            `json:"provider"`
	Tool      string            `json:"tool"`
	Args      []json.RawMessage `json:"args"`
	Outcome   json.RawMessage   `json:"outcome"`
	Response  *WireResponse     `json:"response"`
	Error     *Error            `json:"error"`
}

// Dial connects to a gateway's executor socket. url is the API's address
// with /executor (ws://, wss://, http:// or https://).
func Dial(ctx context.Context, url string, opts Options) (*Executor, error) {
	switch {
	case strings.HasPrefix(url, "http://"):
		url = "ws://" + strings.TrimPrefix(url, "http://")
	case strings.HasPrefix(url, "https://"):
		url = "wss://" + strings.TrimPrefix(url, "https://")
	}
	header := http.Header{}
	if opts.Token != "" {
		header.Set("Authorization", "Bearer "+opts.Token)
	}
	ws, res, err := websocket.Dial(ctx, url, &websocket.DialOptions{
		HTTPClient: opts.HTTPClient, HTTPHeader: header, Subprotocols: []string{Subprotocol},
	})
	if err != nil {
		if res != nil && res.StatusCode != http.StatusSwitchingProtocols {
			var env struct {
				Error *Error `json:"error"`
			}
			if res.Body != nil && json.NewDecoder(res.Body).Decode(&env) == nil && env.Error != nil {
				return nil, env.Error
			}
		}
		return nil, fmt.Errorf("retainer: dialing %s: %w", url, err)
	}
	if ws.Subprotocol() != Subprotocol {
		ws.Close(websocket.StatusProtocolError, "subprotocol not accepted")
		return nil, fmt.Errorf("retainer: the gateway did not accept %s", Subprotocol)
	}
	ws.SetReadLimit(-1) // the gateway bounds its own messages
	cctx, cancel := context.WithCancel(context.Background())
	e := &Executor{ws: ws, ctx: cctx, cancel: cancel, pending: map[int64]chan reply{}, tools: map[int64]map[string]map[string]ToolFunc{}}
	go e.read()
	return e, nil
}

// Close ends the connection. Runs it started go on on the gateway; their
// caller tools throw from now on.
func (e *Executor) Close() error {
	err := e.ws.Close(websocket.StatusNormalClosure, "")
	e.cancel()
	return err
}

// Execute runs a program and waits for its outcome. A program that fails
// answers *Error (with its ResultID); a lost connection answers another
// error.
func (e *Executor) Execute(ctx context.Context, req Request) (Outcome, error) {
	body := map[string]any{"code": req.Code}
	if req.Modules != nil {
		body["modules"] = req.Modules
	}
	if req.RetainHandles {
		body["retainHandles"] = true
	}
	if req.Concurrency > 0 {
		body["concurrency"] = req.Concurrency
	}
	if req.TimeoutMs > 0 {
		body["timeoutMs"] = req.TimeoutMs
	}
	if req.MemoryLimitMb > 0 {
		body["memoryLimitMb"] = req.MemoryLimitMb
	}
	if len(req.Capabilities) > 0 {
		body["capabilities"] = req.Capabilities
	}
	if req.Language != "" {
		body["language"] = req.Language
	}
	if req.IdleMs != 0 {
		body["idleMs"] = req.IdleMs
	}
	if req.Outbound != nil || req.OutboundHeaders != nil {
		out := map[string]any{"allow": orNone(req.Outbound)}
		if req.OutboundHeaders != nil {
			out["headers"] = req.OutboundHeaders
		}
		body["outbound"] = out
	}
	if req.Env != nil {
		body["env"] = req.Env
	}
	tools := map[string]map[string]ToolFunc{}
	var providers []map[string]any
	for _, p := range req.Providers {
		names := make([]string, 0, len(p.Tools))
		for n := range p.Tools {
			names = append(names, n)
		}
		providers = append(providers, map[string]any{"name": p.Name, "tools": names, "caller": true})
		tools[p.Name] = p.Tools
	}
	for _, u := range req.Upstreams {
		providers = append(providers, map[string]any{"name": u.Name, "tools": u.Tools})
	}
	if providers != nil {
		body["providers"] = providers
	}
	msg, err := e.roundTrip(ctx, "execute", map[string]any{"request": body}, tools)
	if err != nil {
		return Outcome{}, err
	}
	var out struct {
		Outcome
		Error    *Error `json:"error"`
		ResultID string `json:"resultId"`
	}
	if err := json.Unmarshal(msg.Outcome, &out); err != nil {
		return Outcome{}, fmt.Errorf("retainer: malformed outcome: %w", err)
	}
	if out.Error != nil {
		out.Error.ResultID = out.ResultID
		return Outcome{}, out.Error
	}
	out.Outcome.ResultID = out.ResultID
	return out.Outcome, nil
}

// InvokeHandle sends a request to a retained handle (any handle of the
// token's tenant, deployed over any connection or over HTTP).
func (e *Executor) InvokeHandle(ctx context.Context, executionID, name string, req WireRequest) (WireResponse, error) {
	if req.Headers == nil {
		req.Headers = [][2]string{}
	}
	msg, err := e.roundTrip(ctx, "invoke", map[string]any{"executionId": executionID, "name": name, "request": req}, nil)
	if err != nil {
		return WireResponse{}, err
	}
	if msg.Error != nil {
		return WireResponse{}, msg.Error
	}
	if msg.Response == nil {
		return WireResponse{}, errors.New("retainer: a response without a response")
	}
	return *msg.Response, nil
}

// CloseHandles closes a retained handle.
func (e *Executor) CloseHandles(ctx context.Context, executionID string) error {
	msg, err := e.roundTrip(ctx, "close", map[string]any{"executionId": executionID}, nil)
	if err != nil {
		return err
	}
	if msg.Error != nil {
		return msg.Error
	}
	return nil
}

// roundTrip sends one message with a fresh id and waits for its answer.
func (e *Executor) roundTrip(ctx context.Context, typ string, fields map[string]any, tools map[string]map[string]ToolFunc) (incoming, error) {
	ch := make(chan reply, 1)
	e.mu.Lock()
	if e.err != nil {
		e.mu.Unlock()
		return incoming{}, e.err
	}
	e.nextID++
	id := e.nextID
	e.pending[id] = ch
	if tools != nil {
		e.tools[id] = tools
	}
	e.mu.Unlock()
	defer func() {
		e.mu.Lock()
		delete(e.pending, id)
		delete(e.tools, id)
		e.mu.Unlock()
	}()
	if err := e.write(ctx, message(typ, id, fields)); err != nil {
		return incoming{}, err
	}
	select {
	case r := <-ch:
		return r.msg, r.err
	case <-ctx.Done():
		return incoming{}, ctx.Err()
	}
}

// message encodes type and id first, so a gateway can answer a message it
// refuses whole (over the size bound) by its type and id.
func message(typ string, id int64, fields map[string]any) json.RawMessage {
	rest, _ := json.Marshal(fields)
	head := fmt.Sprintf(`{"type":%q,"id":%d`, typ, id)
	if len(rest) > 2 {
		return json.RawMessage(head + "," + string(rest[1:]))
	}
	return json.RawMessage(head + "}")
}

func (e *Executor) write(ctx context.Context, v any) error {
	data, err := json.Marshal(v)
	if err != nil {
		return err
	}
	return e.ws.Write(ctx, websocket.MessageText, data)
}

// read dispatches the gateway's messages until the connection ends.
func (e *Executor) read() {
	var end error
	for {
		_, data, err := e.ws.Read(e.ctx)
		if err != nil {
			end = fmt.Errorf("retainer: the connection ended: %w", err)
			break
		}
		var m incoming
		if err := json.Unmarshal(data, &m); err != nil {
			continue
		}
		if m.Type == "call" {
			go e.serveCall(m)
			continue
		}
		e.mu.Lock()
		ch := e.pending[m.ID]
		delete(e.pending, m.ID)
		e.mu.Unlock()
		if ch != nil {
			if m.Type == "fault" && m.Error != nil {
				ch <- reply{err: m.Error}
			} else {
				ch <- reply{msg: m}
			}
		}
	}
	e.mu.Lock()
	e.err = end
	for id, ch := range e.pending {
		ch <- reply{err: end}
		delete(e.pending, id)
	}
	e.mu.Unlock()
	e.cancel()
}

// serveCall runs a caller tool and answers the gateway.
func (e *Executor) serveCall(m incoming) {
	e.mu.Lock()
	fn := e.tools[m.Execution][m.Provider][m.Tool]
	e.mu.Unlock()
	answer := map[string]any{}
	var value any
	var err error
	if fn == nil {
		err = fmt.Errorf("the host has no tool %s.%s for this execution", m.Provider, m.Tool)
	} else {
		value, err = callTool(e.ctx, fn, m.Args)
	}
	if err == nil {
		var data []byte
		if data, err = json.Marshal(value); err == nil {
			answer["value"] = json.RawMessage(data)
		}
	}
	typ := "result"
	if err != nil {
		typ = "error"
		answer = map[string]any{"message": err.Error()}
	}
	e.write(e.ctx, message(typ, m.ID, answer))
}

// callTool runs fn, turning a panic into the program's error.
func callTool(ctx context.Context, fn ToolFunc, args []json.RawMessage) (v any, err error) {
	defer func() {
		if p := recover(); p != nil {
			err = fmt.Errorf("the tool panicked: %v", p)
		}
	}()
	return fn(ctx, args)
}

// orNone is an empty list for nil (outbound.allow is a list).
func orNone(s []string) []string {
	if s == nil {
		return []string{}
	}
	return s
}
