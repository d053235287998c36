package handles

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	"github.com/retainer-gw/retainer/fault"
	"github.com/retainer-gw/retainer/internal/readsome"
	"github.com/retainer-gw/retainer/internal/wirejson"
)

// Request bodies that stream into a handler (README.md, API): the data plane
// attaches the visitor's body to the invocation under a random token, the
// handler's request.body pulls it through the host call body.read as the
// visitor sends it, and the attachment ends with the invocation (or with
// its streamed response). Only the handle the body was sent to may read it.

// bodyChunk is the most one body.read answers.
const bodyChunk = 64 << 10

// RequestBody is a request body the visitor is still sending: it streams
// into the handler's request.body as it arrives (ServeStream).
type RequestBody struct {
	io.Reader
	// Began is when its request arrived: request_body_timeout counts
	// from it.
	Began time.Time
}

// bodyStream is one attached request body.
type bodyStream struct {
	handle string
	mu     sync.Mutex // one read at a time
	r      io.Reader
	began  time.Time
	done   bool
	// late: the visitor sent nothing for request_body_idle, or had not
	// sent it all after request_body_timeout; the handler's stream
	// errored, and an invocation that fails then answers this (408).
	late atomic.Pointer[fault.Fault]
}

type bodySet struct {
	mu   sync.Mutex
	open map[string]*bodyStream
}

// attachBody registers r for handle and answers its token, the stream and
// the detach.
func (s *Store) attachBody(handle string, body *RequestBody) (string, *bodyStream, func()) {
	var b [16]byte
	rand.Read(b[:])
	token := hex.EncodeToString(b[:])
	s.bodies.mu.Lock()
	if s.bodies.open == nil {
		s.bodies.open = map[string]*bodyStream{}
	}
	st := &bodyStream{handle: handle, r: body.Reader, began: body.Began}
	s.bodies.open[token] = st
	s.bodies.mu.Unlock()
	return token, st, func() {
		s.bodies.mu.Lock()
		delete(s.bodies.open, token)
		s.bodies.mu.Unlock()
	}
}

// readBody answers body.read for the handle id: what has arrived of the
// body, up to 64 KiB, as a Latin-1 string, and whether it ended.
func (s *Store) readBody(ctx context.Context, id string, raw json.RawMessage) (json.RawMessage, error) {
	var a struct {
		Stream string `json:"stream"`
	}
	if err := json.Unmarshal(raw, &a); err != nil {
		return nil, fault.New(fault.BadRequest, "body.read: malformed arguments.")
	}
	s.bodies.mu.Lock()
	b := s.bodies.open[a.Stream]
	s.bodies.mu.Unlock()
	if b == nil || b.handle != id {
		return nil, fault.New(fault.BadRequest, "The request body is no longer readable (its invocation has ended).")
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.done {
		return json.RawMessage(`{"done":true}`), nil
	}
	idle, whole := 10*time.Second, 60*time.Second
	if r := s.registryOf(id); r != nil {
		idle, whole = r.config().RequestBodyIdle, r.config().RequestBodyTimeout
	}
	// Waiting for the body is the visitor's time (the sandbox moves the
	// invocation's bound meanwhile), but not for ever: a body that stops
	// arriving for request_body_idle, or is not complete after
	// request_body_timeout, ends here.
	deadline := b.began.Add(whole)
	until := time.Now().Add(idle)
	if deadline.Before(until) {
		until = deadline
	}
	readCtx, cancel := context.WithDeadline(ctx, until)
	defer cancel()
	buf := make([]byte, bodyChunk)
	n, err := readsome.Read(readCtx, b.r, buf)
	var tooBig *http.MaxBytesError
	switch {
	case err != nil && ctx.Err() == nil && readCtx.Err() != nil:
		b.done = true
		late := fault.New(fault.RequestTimeout, "The request body stopped arriving for %v (request_body_idle).", idle)
		if !time.Now().Before(deadline) {
			late = fault.New(fault.RequestTimeout, "The request body was not complete after %v (request_body_timeout).", whole)
		}
		b.late.Store(late)
		return nil, late
	case errors.As(err, &tooBig):
		b.done = true
		return nil, fault.New(fault.TooLarge, "The request body is over the %d byte bound.", tooBig.Limit)
	case err == io.EOF:
		b.done = true
	case err != nil:
		b.done = true
		return nil, fault.New(fault.BadRequest, "The request body could not be read (the visitor went away).")
	}
	return wirejson.Chunk(buf[:n], b.done)
}

// takeBody hands handle id's request body, by token, to bucket.put
// (docs/objects.md): the gateway reads it into the object itself, within
// request_body_idle and request_body_timeout as body.read does, and it is
// not readable by body.read afterwards.
func (s *Store) takeBody(ctx context.Context, id, token string) (io.ReadCloser, error) {
	s.bodies.mu.Lock()
	b := s.bodies.open[token]
	s.bodies.mu.Unlock()
	if b == nil || b.handle != id {
		return nil, fault.New(fault.BadRequest, "bucket.put: the request body is no longer readable (its invocation has ended).")
	}
	b.mu.Lock()
	if b.done {
		b.mu.Unlock()
		return nil, fault.New(fault.BadRequest, "bucket.put: the request body was already read.")
	}
	b.done = true
	b.mu.Unlock()
	idle, whole := 10*time.Second, 60*time.Second
	if r := s.registryOf(id); r != nil {
		idle, whole = r.config().RequestBodyIdle, r.config().RequestBodyTimeout
	}
	return &takenRequestBody{ctx: ctx, b: b, idle: idle, whole: whole}, nil
}

// takenRequestBody reads a request body for bucket.put; a failure is the
// fault body.read would have answered.
type takenRequestBody struct {
	ctx         context.Context
	b           *bodyStream
	idle, whole time.Duration
	err         error
}

func (t *takenRequestBody) Read(p []byte) (int, error) {
	if t.err != nil {
		return 0, t.err
	}
	deadline := t.b.began.Add(t.whole)
	until := time.Now().Add(t.idle)
	if deadline.Before(until) {
		until = deadline
	}
	readCtx, cancel := context.WithDeadline(t.ctx, until)
	defer cancel()
	n, err := readsome.Read(readCtx, t.b.r, p)
	var tooBig *http.MaxBytesError
	switch {
	case err == nil || err == io.EOF:
		return n, err
	case t.ctx.Err() == nil && readCtx.Err() != nil:
		t.err = fault.New(fault.RequestTimeout, "The request body stopped arriving for %v (request_body_idle).", t.idle)
		if !time.Now().Before(deadline) {
			t.err = fault.New(fault.RequestTimeout, "The request body was not complete after %v (request_body_timeout).", t.whole)
		}
		t.b.late.Store(fault.As(t.err))
	case errors.As(err, &tooBig):
		t.err = fault.New(fault.TooLarge, "The request body is over the %d byte bound (max_request_body).", tooBig.Limit)
	case t.ctx.Err() != nil:
		t.err = t.ctx.Err()
	default:
		t.err = fault.New(fault.BadRequest, "The request body could not be read (the visitor went away).")
	}
	return 0, t.err
}

func (t *takenRequestBody) Close() error { return nil }
