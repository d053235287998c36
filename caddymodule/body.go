package caddymodule

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/retainer-gw/retainer/budgets"
	"github.com/retainer-gw/retainer/fault"
)

// Request bodies (README.md, API): a body of up to 1 MiB is
// read whole by the gateway before the handler is called, so a visitor who
// sends slowly holds no slot of the handle; a larger one streams into
// request.body as the visitor sends it (handles/body.go). Either way a body
// that stops arriving for request_body_idle, or is not complete after
// request_body_timeout, answers 408 REQUEST_TIMEOUT: the visitor's time is
// never the handler's.

// wholeBody is the longest request body read whole before the handler is
// called.
const wholeBody = budgets.WholeRequestBody

// presized is the longest known length read into a buffer of that length
// at once (one allocation, the fast path); a longer body's buffer grows as
// it arrives, so that a visitor who announces 1 MiB and sends nothing holds
// nothing.
const presized = 64 << 10

// visitorBodies is what the gateway holds of bodies it reads whole, in all,
// by visitor address and by the tenant whose handler they are for
// (budgets.RequestBodiesHeld). It lives in the runtime, so a reload keeps
// the counts.
type visitorBodies struct {
	mu     sync.Mutex
	total  int64
	by     map[string]int64 // by visitor address
	tenant map[string]int64 // by tenant
}

// take charges n bytes to addr and tenant, or answers why it cannot:
// QUOTA_EXCEEDED (429) past the visitor's share, OVERLOADED (503) past the
// tenant's (only its own visitors wait) or the gateway's.
func (v *visitorBodies) take(addr, tenant string, n int64) error {
	v.mu.Lock()
	defer v.mu.Unlock()
	if v.by[addr]+n > budgets.RequestBodiesHeldPerVisitor {
		return fault.New(fault.QuotaExceeded, "This visitor is sending %d MiB of request bodies at once, the most one visitor may.", budgets.RequestBodiesHeldPerVisitor>>20)
	}
	if v.tenant[tenant]+n > budgets.RequestBodiesHeldPerTenant {
		return fault.New(fault.Overloaded, "The gateway is reading as many request bodies for this tenant's handlers as it may; try again shortly.")
	}
	if v.total+n > budgets.RequestBodiesHeld {
		return fault.New(fault.Overloaded, "The gateway is reading as many request bodies as it may; try again shortly.")
	}
	if v.by == nil {
		v.by, v.tenant = map[string]int64{}, map[string]int64{}
	}
	v.by[addr] += n
	v.tenant[tenant] += n
	v.total += n
	return nil
}

// give returns n bytes addr took for tenant.
func (v *visitorBodies) give(addr, tenant string, n int64) {
	if n == 0 {
		return
	}
	v.mu.Lock()
	defer v.mu.Unlock()
	if v.by[addr] -= n; v.by[addr] <= 0 {
		delete(v.by, addr)
	}
	if v.tenant[tenant] -= n; v.tenant[tenant] <= 0 {
		delete(v.tenant, tenant)
	}
	v.total -= n
}

// wholeRead is a body read whole by a goroutine of its own: a read from
// the connection cannot be interrupted, and the data plane must be able
// to answer a visitor who stops sending.
type wholeRead struct {
	held   *visitorBodies
	addr   string
	tenant string       // whose handler the body is for
	want   int64        // the known length, -1 when chunked
	limit  int64        // read no more than this
	last   atomic.Int64 // when bytes last arrived (Unix ns)
	done   chan struct{}
	// After done: the bytes read and why the reading stopped early.
	buf []byte
	err error
	// mu guards charged and abandoned: once the data plane has answered
	// without the body, it has returned the charge and the reading grows
	// no more.
	mu        sync.Mutex
	charged   int64
	abandoned bool
}

// run reads the body in a goroutine of its own, noting when bytes arrive.
func (rd *wholeRead) run(body io.Reader) {
	defer close(rd.done)
	rd.read(body, func() { rd.last.Store(time.Now().UnixNano()) })
}

// read reads the body into rd.buf, up to rd.limit, calling arrived after
// each read that brought bytes.
func (rd *wholeRead) read(body io.Reader, arrived func()) {
	size := int64(presized)
	if rd.want >= 0 && rd.want < size {
		size = rd.want
	}
	if rd.err = rd.charge(size); rd.err != nil {
		return
	}
	buf := make([]byte, 0, size)
	for rd.want < 0 || int64(len(buf)) < rd.want {
		if len(buf) == cap(buf) {
			if int64(len(buf)) >= rd.limit {
				break // more than limit follows: the rest streams
			}
			next := min(2*int64(cap(buf)), rd.limit)
			if rd.want >= 0 {
				next = min(next, rd.want)
			}
			if rd.err = rd.charge(next - int64(cap(buf))); rd.err != nil {
				return
			}
			grown := make([]byte, len(buf), next)
			copy(grown, buf)
			buf = grown
		}
		n, err := body.Read(buf[len(buf):cap(buf)])
		if n > 0 {
			buf = buf[:len(buf)+n]
			arrived()
		}
		if err == io.EOF {
			break
		}
		if err != nil {
			rd.err = err
			return
		}
	}
	rd.buf = buf
}

// charge takes n more bytes of the budget for the body.
func (rd *wholeRead) charge(n int64) error {
	rd.mu.Lock()
	defer rd.mu.Unlock()
	if rd.abandoned {
		return errAbandoned
	}
	if rd.held == nil {
		return nil
	}
	if err := rd.held.take(rd.addr, rd.tenant, n); err != nil {
		return err
	}
	rd.charged += n
	return nil
}

// release returns the body's charge; the reading, if it goes on, grows no
// more.
func (rd *wholeRead) release() {
	rd.mu.Lock()
	defer rd.mu.Unlock()
	rd.abandoned = true
	if rd.held != nil {
		rd.held.give(rd.addr, rd.tenant, rd.charged)
	}
	rd.charged = 0
}

var errAbandoned = errors.New("the body was abandoned")

// readVisitorBody reads r's body for a handler of tenant, its request
// having arrived at began: whole when it is at most wholeBody long (body,
// held against the runtime's budget, the visitor's and the tenant's
// shares of it, until release), or as a stream that the
// handler reads as it arrives (streamed: what was read of it first, then
// the rest). A body past max_request_body answers TOO_LARGE; one that
// stops arriving for request_body_idle, or is not complete after
// request_body_timeout, answers REQUEST_TIMEOUT.
func (h *Retainer) readVisitorBody(w http.ResponseWriter, r *http.Request, tenant string, began time.Time) (body []byte, streamed *trackedBody, release func(), err error) {
	release = func() {}
	bound := h.app.MaxRequestBody
	switch {
	case r.ContentLength > bound:
		return nil, nil, release, fault.New(fault.TooLarge, "The request body is over the %d byte bound.", bound)
	case r.ContentLength > wholeBody:
		return nil, &trackedBody{r: http.MaxBytesReader(w, r.Body, bound)}, release, nil
	}
	limit := min(int64(wholeBody), bound)
	rd := &wholeRead{addr: visitorAddr(r), tenant: tenant, want: r.ContentLength, limit: limit + 1}
	if rt := h.live.rt.Load(); rt != nil {
		rd.held = &rt.bodies
	}
	idle, deadline := time.Duration(h.app.RequestBodyIdle), began.Add(time.Duration(h.app.RequestBodyTimeout))
	late := func(now time.Time) error {
		rd.release()
		if !now.Before(deadline) {
			return fault.New(fault.RequestTimeout, "The request body was not complete after %v (request_body_timeout).", time.Duration(h.app.RequestBodyTimeout))
		}
		return fault.New(fault.RequestTimeout, "The request body stopped arriving for %v (request_body_idle).", idle)
	}
	// The bounds are the connection's read deadline where the transport
	// has one (HTTP/1 and 2): read here, no goroutine. The deadline moves
	// as bytes arrive (by steps of at least 10 ms), and is lifted once the
	// body is read, before anything else reads the connection.
	until := func() time.Time {
		if t := time.Now().Add(idle); t.Before(deadline) {
			return t
		}
		return deadline
	}
	rc := http.NewResponseController(w)
	if armed := until(); rc.SetReadDeadline(armed) == nil {
		rd.read(r.Body, func() {
			if t := until(); t.Sub(armed) > 10*time.Millisecond {
				rc.SetReadDeadline(t)
				armed = t
			}
		})
		rc.SetReadDeadline(time.Time{})
		if errors.Is(rd.err, os.ErrDeadlineExceeded) {
			return nil, nil, release, late(time.Now())
		}
	} else {
		// Elsewhere (HTTP/3) a goroutine reads, and the bounds are kept
		// here.
		rd.last.Store(began.UnixNano())
		rd.done = make(chan struct{})
		go rd.run(r.Body)
		timer := time.NewTimer(min(idle, time.Until(deadline)))
		defer timer.Stop()
	wait:
		for {
			select {
			case <-rd.done:
				break wait
			case <-r.Context().Done():
				rd.release()
				return nil, nil, release, fault.New(fault.BadRequest, "The request body could not be read (the visitor went away).")
			case now := <-timer.C:
				if next := time.Unix(0, rd.last.Load()).Add(idle); now.Before(next) && now.Before(deadline) {
					timer.Reset(min(next.Sub(now), deadline.Sub(now)))
					continue
				}
				return nil, nil, release, late(now)
			}
		}
	}
	release = rd.release
	if rd.err != nil {
		release()
		if f := (*fault.Fault)(nil); errors.As(rd.err, &f) {
			return nil, nil, func() {}, f
		}
		return nil, nil, func() {}, fault.New(fault.BadRequest, "The request body could not be read.")
	}
	if int64(len(rd.buf)) <= limit {
		if rd.buf == nil {
			rd.buf = []byte{}
		}
		return rd.buf, nil, release, nil
	}
	if limit == bound {
		release()
		return nil, nil, func() {}, fault.New(fault.TooLarge, "The request body is over the %d byte bound.", bound)
	}
	// Over 1 MiB: the handler reads what arrived, then the rest as it
	// comes.
	rest := &prefixedBody{head: rd.buf, rest: http.MaxBytesReader(w, r.Body, bound-int64(len(rd.buf))), max: bound}
	return nil, &trackedBody{r: rest}, release, nil
}

// prefixedBody is a body whose first bytes were read already; past max
// in all it fails as http.MaxBytesReader does, naming max.
type prefixedBody struct {
	head []byte
	rest io.Reader
	max  int64
}

func (b *prefixedBody) Read(p []byte) (int, error) {
	if len(b.head) > 0 {
		n := copy(p, b.head)
		b.head = b.head[n:]
		return n, nil
	}
	n, err := b.rest.Read(p)
	var tooBig *http.MaxBytesError
	if errors.As(err, &tooBig) {
		err = &http.MaxBytesError{Limit: b.max}
	}
	return n, err
}

// refuseBody answers a request whose body the handler will not see (err),
// and ends the connection: a read of the body may still be waiting on it
// (wholeRead), and the deadline set here ends that read now.
//
// A body refused for what it is (over max_request_body, past a budget) has
// no read waiting, and its visitor is likely still sending it: closing a
// connection with bytes unread resets it, and a visitor whose answer is
// not yet read then sees the reset and not the answer (Go's client did,
// in 5-14% of 2 MiB uploads to a 1 MiB bound on an idle machine: net/http
// skips its own wait before that close here, as Caddy wraps the body). So
// what it still sends is read and dropped first, for at most lingerFor and
// lingerBytes; a visitor who reads the answer and closes ends it sooner.
func refuseBody(w http.ResponseWriter, r *http.Request, err error) {
	w.Header().Set("Connection", "close")
	switch fault.CodeOf(err) {
	case fault.TooLarge, fault.QuotaExceeded, fault.Overloaded, fault.NotFound:
		// With its length, the answer is complete for the visitor while
		// the rest of the body is read (not only once the handler ends).
		var answer heldAnswer
		answer.h = w.Header()
		writeFault(&answer, err, "")
		w.Header().Set("Content-Length", strconv.Itoa(answer.body.Len()))
		w.WriteHeader(answer.status)
		w.Write(answer.body.Bytes())
		rc := http.NewResponseController(w)
		rc.Flush()
		rc.SetReadDeadline(time.Now().Add(lingerFor))
		io.CopyN(io.Discard, r.Body, lingerBytes)
	default:
		writeFault(w, err, "")
	}
	dropBody(w)
}

// heldAnswer is an answer written to memory, to be sent with its length.
type heldAnswer struct {
	h      http.Header
	status int
	body   bytes.Buffer
}

func (a *heldAnswer) Header() http.Header         { return a.h }
func (a *heldAnswer) WriteHeader(status int)      { a.status = status }
func (a *heldAnswer) Write(p []byte) (int, error) { return a.body.Write(p) }

// lingerFor and lingerBytes bound what is read and dropped of a refused
// body before its connection closes (refuseBody).
const (
	lingerFor   = 2 * time.Second
	lingerBytes = 4 << 20
)

// dropBody sends what was written and gives up reading the request's
// body: a read of it still waiting on the connection ends now (where the
// transport allows), so the connection closes after the answer instead of
// waiting for a visitor who may never send more.
func dropBody(w http.ResponseWriter) {
	rc := http.NewResponseController(w)
	rc.Flush()
	rc.SetReadDeadline(time.Now())
}

// A JSON request body (the API's and the executor socket's), read within
// a bound and decoded strictly: an unknown field is a BAD_REQUEST.

// decodeBody reads a JSON request body of at most max bytes into v, and
// answers the fault itself when it cannot (false).
func decodeBody(w http.ResponseWriter, r *http.Request, max int64, v any) bool {
	body, err := readBody(w, r, max)
	if err == nil {
		err = decodeStrict(body, v)
	}
	if err != nil {
		writeFault(w, err, "")
		return false
	}
	return true
}

// readBody reads a request body within max_request_body (TOO_LARGE past it).
// A body of known length within the bound is read into a buffer of that
// length at once (net/http ends it there): io.ReadAll grows its buffer
// from 512 bytes, which cost a 3.8 KB webhook body ~10 µs of the gateway's
// CPU in allocations and copies.
func readBody(w http.ResponseWriter, r *http.Request, max int64) ([]byte, error) {
	if n := r.ContentLength; n >= 0 && n <= max {
		data := make([]byte, n)
		if _, err := io.ReadFull(r.Body, data); err != nil {
			if errors.Is(err, errForwardBody) {
				return nil, err
			}
			return nil, fault.New(fault.BadRequest, "The request body could not be read.")
		}
		return data, nil
	}
	data, err := io.ReadAll(http.MaxBytesReader(w, r.Body, max))
	if err != nil {
		var tooBig *http.MaxBytesError
		if errors.As(err, &tooBig) {
			return nil, fault.New(fault.TooLarge, "The request body is over the %d byte bound.", max)
		}
		if errors.Is(err, errForwardBody) {
			return nil, err
		}
		return nil, fault.New(fault.BadRequest, "The request body could not be read.")
	}
	return data, nil
}

func decodeStrict(data []byte, v any) error {
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return fault.New(fault.BadRequest, "The body is not the expected JSON: %s.", strings.TrimPrefix(err.Error(), "json: "))
	}
	return nil
}
