package wire

import (
	"encoding/binary"
	"errors"
	"time"
	"unsafe"

	"github.com/retainer-gw/retainer/fault"
	"github.com/retainer-gw/retainer/program"
)

// The invocation frames (/invoke and its answer) are the data plane's hot
// path, so they are not JSON: each is a version byte and then its fields
// in a fixed order, every string as a uvarint length and its bytes, every
// number a varint, every optional part a presence byte, every list its
// count first. Measured with perf on a worker under load, encoding/json
// took ~20% of the worker's CPU per invocation (decoding the request,
// encoding the reply) and ~10% of the gateway's (decoding the reply);
// these frames are encoded and decoded with no reflection and one
// allocation per string.
//
// The gateway decodes what a worker sends, and a worker is hostile: every
// length is checked against what is left of the frame (so a count can never
// make the decoder allocate more than the frame's own size), and a frame
// with bytes left over, or too few, is malformed, which kills the worker
// (postOrdered).
//
// Each frame has its own version byte, so one frame's layout can change
// without the others'.
const (
	invokeRequestVersion = 1
	invokeReplyVersion   = 2
	streamReplyVersion   = 1
)

// FrameEncoder and FrameDecoder are payloads with their own encoding;
// postOrdered and the worker's read loop use them instead of JSON.
type FrameEncoder interface{ EncodeFrame() []byte }
type FrameDecoder interface{ DecodeFrame([]byte) error }

var errMalformedFrame = errors.New("a malformed binary frame")

type wireWriter struct{ b []byte }

func (w *wireWriter) str(s string) {
	w.b = binary.AppendUvarint(w.b, uint64(len(s)))
	w.b = append(w.b, s...)
}

func (w *wireWriter) bytes(b []byte) {
	w.b = binary.AppendUvarint(w.b, uint64(len(b)))
	w.b = append(w.b, b...)
}

// fault is an answer's fault: a presence flag, then its code, message,
// collateral flag and not-caused flag.
func (w *wireWriter) fault(f *Fault) {
	w.flag(f != nil)
	if f != nil {
		w.str(string(f.Code))
		w.str(f.Message)
		w.flag(f.Collateral)
		w.flag(f.NotCaused)
	}
}

func (w *wireWriter) num(v int64) { w.b = binary.AppendVarint(w.b, v) }

func (w *wireWriter) flag(v bool) {
	if v {
		w.b = append(w.b, 1)
	} else {
		w.b = append(w.b, 0)
	}
}

func (w *wireWriter) pairs(h [][2]string) {
	w.num(int64(len(h)))
	for _, p := range h {
		w.str(p[0])
		w.str(p[1])
	}
}

// wireReader reads what wireWriter wrote; the first malformed field sets
// bad, and every later read answers a zero value. With alias, strings
// share the frame's bytes instead of copying them (InvokeRequest).
type wireReader struct {
	b     []byte
	bad   bool
	alias bool
}

// fail marks the frame malformed and drops what is left of it.
func (r *wireReader) fail() {
	r.bad = true
	r.b = nil
}

func (r *wireReader) str() string {
	n, k := binary.Uvarint(r.b)
	if k <= 0 || n > uint64(len(r.b)-k) {
		r.fail()
		return ""
	}
	var s string
	if r.alias {
		if n > 0 {
			s = unsafe.String(&r.b[k], int(n))
		}
	} else {
		s = string(r.b[k : k+int(n)])
	}
	r.b = r.b[k+int(n):]
	return s
}

// bytes is a length-prefixed run of bytes: a slice of the frame itself,
// never copied (each frame is read into a buffer of its own, rpc.go) and
// never nil (an empty body is one).
func (r *wireReader) bytes() []byte {
	n, k := binary.Uvarint(r.b)
	if k <= 0 || n > uint64(len(r.b)-k) {
		r.fail()
		return []byte{}
	}
	b := r.b[k : k+int(n) : k+int(n)]
	r.b = r.b[k+int(n):]
	return b
}

// fault reads what wireWriter.fault wrote (nil for none).
func (r *wireReader) fault() *Fault {
	if !r.flag() {
		return nil
	}
	return &Fault{Code: fault.Code(r.str()), Message: r.str(), Collateral: r.flag(), NotCaused: r.flag()}
}

func (r *wireReader) num() int64 {
	v, k := binary.Varint(r.b)
	if k <= 0 {
		r.fail()
		return 0
	}
	r.b = r.b[k:]
	return v
}

func (r *wireReader) flag() bool {
	if len(r.b) == 0 || r.b[0] > 1 {
		r.fail()
		return false
	}
	v := r.b[0] == 1
	r.b = r.b[1:]
	return v
}

// count reads a list's length: each element takes at least min bytes, so
// a count larger than what is left is malformed before anything is made.
func (r *wireReader) count(min int) int {
	n := r.num()
	if n < 0 || n > int64(len(r.b)/min) {
		r.fail()
		return 0
	}
	return int(n)
}

func (r *wireReader) pairs() [][2]string { return r.pairsInto(nil) }

// pairsInto is pairs read into h's array when it is large enough.
func (r *wireReader) pairsInto(h [][2]string) [][2]string {
	n := r.count(2)
	if h == nil || cap(h) < n {
		h = make([][2]string, 0, n)
	} else {
		h = h[:0]
	}
	for i := 0; i < n && !r.bad; i++ {
		h = append(h, [2]string{r.str(), r.str()})
	}
	// Entries past the count still point into an earlier frame, which
	// they would keep from the collector (a frame too large to be read in
	// place has a buffer of its own, up to a request's whole body).
	clear(h[len(h):cap(h)])
	return h
}

func (r *wireReader) version(v byte) {
	if len(r.b) == 0 || r.b[0] != v {
		r.fail()
		return
	}
	r.b = r.b[1:]
}

// end reports whether the frame was read whole and well formed.
func (r *wireReader) end() error {
	if r.bad || len(r.b) != 0 {
		return errMalformedFrame
	}
	return nil
}

func (q InvokeRequest) EncodeFrame() []byte {
	size := 128 + len(q.ID) + len(q.Request.URL) + len(q.Request.BodyStream)
	if q.Request.Body != nil {
		size += len(q.Request.Body)
	}
	for _, h := range q.Request.Headers {
		size += len(h[0]) + len(h[1]) + 4
	}
	w := wireWriter{b: make([]byte, 0, size)} // one allocation, not a growing few
	w.b = append(w.b, invokeRequestVersion)
	w.str(q.ID)
	w.str(q.Name)
	w.str(q.Request.Method)
	w.str(q.Request.URL)
	w.str(q.Request.BodyStream)
	w.flag(q.Request.Body != nil)
	if q.Request.Body != nil {
		w.bytes(q.Request.Body)
	}
	w.pairs(q.Request.Headers)
	return w.b
}

// DecodeFrame reads an invocation frame. Its strings share b's bytes, as
// its body does (wireReader.bytes): they are valid only while b is, and a
// worker's frame may be the reader's own buffer, overwritten by the next
// frame once Conn.Take returns (rpc.go). A copy a string, a header's name
// and value each, was an allocation apiece on the worker's hot path; what
// must outlive the read loop's turn is copied by whoever keeps it
// (child's takeInvoke: the id and name; InvokeAsync: the rest, before it
// returns).
// The headers are read into the array q's Headers already has when it is
// large enough (the worker's read loop decodes every frame into one
// InvokeRequest), so no entry of an earlier frame shows past their count.
func (q *InvokeRequest) DecodeFrame(b []byte) error {
	headers := q.Request.Headers
	*q = InvokeRequest{} // nothing of an earlier frame stays
	r := wireReader{b: b, alias: true}
	r.version(invokeRequestVersion)
	q.ID = r.str()
	q.Name = r.str()
	q.Request.Method = r.str()
	q.Request.URL = r.str()
	q.Request.BodyStream = r.str()
	if r.flag() {
		q.Request.Body = r.bytes()
	}
	q.Request.Headers = r.pairsInto(headers)
	return r.end()
}

func (a InvokeReply) EncodeFrame() []byte {
	res := a.Response
	size := 64 + len(res.StatusText) + len(res.Relay)
	if res.Body != nil {
		size += len(res.Body)
	}
	for _, h := range res.Headers {
		size += len(h[0]) + len(h[1]) + 4
	}
	for _, l := range a.Logs {
		size += len(l.Level) + len(l.Message) + 16
	}
	return a.AppendFrame(make([]byte, 0, size))
}

// AppendFrame is EncodeFrame appended to dst: the worker encodes its
// answers into a buffer it reuses (child's answerInvoke), as the frame
// is copied where it is written (Conn.ReplyLater).
func (a InvokeReply) AppendFrame(dst []byte) []byte {
	res := a.Response
	w := wireWriter{b: dst}
	w.b = append(w.b, invokeReplyVersion)
	w.num(int64(res.Status))
	w.str(res.StatusText)
	w.pairs(res.Headers)
	w.flag(res.Body != nil)
	if res.Body != nil {
		w.bytes(res.Body)
	}
	w.num(res.Stream)
	w.str(res.Relay)
	w.num(int64(len(a.Logs)))
	for _, l := range a.Logs {
		w.num(l.Time.UnixNano())
		w.str(l.Level)
		w.str(l.Message)
	}
	w.fault(a.Fault)
	w.num(res.CPUNs)
	return w.b
}

func (a *InvokeReply) DecodeFrame(b []byte) error {
	r := wireReader{b: b}
	r.version(invokeReplyVersion)
	res := &a.Response
	res.Status = int(r.num())
	res.StatusText = r.str()
	res.Headers = r.pairs()
	if r.flag() {
		res.Body = r.bytes()
	}
	res.Stream = r.num()
	res.Relay = r.str()
	if n := r.count(3); n > 0 {
		a.Logs = make([]program.LogEntry, 0, n)
		for i := 0; i < n && !r.bad; i++ {
			a.Logs = append(a.Logs, program.LogEntry{Time: time.Unix(0, r.num()).UTC(), Level: r.str(), Message: r.str()})
		}
	}
	a.Fault = r.fault()
	res.CPUNs = r.num()
	return r.end()
}

// A stream read's answer (/stream-read, /stream-cancel) is binary too: a
// streamed response's chunks are bytes, which JSON would carry as base64.
func (a StreamReply) EncodeFrame() []byte {
	w := wireWriter{b: make([]byte, 0, 16+len(a.Data))}
	w.b = append(w.b, streamReplyVersion)
	w.bytes(a.Data)
	w.flag(a.Done)
	w.fault(a.Fault)
	return w.b
}

func (a *StreamReply) DecodeFrame(b []byte) error {
	r := wireReader{b: b}
	r.version(streamReplyVersion)
	a.Data = r.bytes()
	a.Done = r.flag()
	a.Fault = r.fault()
	return r.end()
}
