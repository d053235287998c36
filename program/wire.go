package program

// WireRequest is a request as it crosses into an isolate (README.md, API): headers
// as ordered pairs, the body's bytes or nil for none (base64 or null in
// JSON, as encoding/json writes a []byte; the worker's frames carry the
// bytes as they are).
type WireRequest struct {
	Method  string      `json:"method"`
	URL     string      `json:"url"`
	Headers [][2]string `json:"headers"`
	Body    []byte      `json:"body"`
	// BodyStream, when set (and Body is null), names a request body the
	// visitor is still sending (README.md, API): the handler's request.body reads
	// it with the host call body.read as it arrives.
	BodyStream string `json:"bodyStream,omitempty"`
}

// WireResponse is a handler's answer as it leaves an isolate.
type WireResponse struct {
	Status     int         `json:"status"`
	StatusText string      `json:"statusText"`
	Headers    [][2]string `json:"headers"`
	// Body is the body's bytes (non-nil and empty for an empty body), nil
	// for none; in JSON base64 or null, as for WireRequest.
	Body []byte `json:"body"`
	// Stream, when not 0, names the streamed body that follows the head
	// (README.md, API): read it with ReadStream; Body is then nil.
	Stream int64 `json:"stream,omitempty"`
	// Relay, when set, names a streamed fetch answer the handler returned
	// as its body unread: the gateway sends it to the visitor itself.
	Relay string `json:"relay,omitempty"`
	// CPUNs is the isolate's CPU time the invocation was charged, in ns
	// (sandbox/threadhold.go; a failed invocation's too): usage metering's
	// (docs/usage.md). Set by the isolate's loop, never by the handler.
	CPUNs int64 `json:"cpuNs,omitempty"`
}

// BodyBytes is the body (nil for none).
func (r WireResponse) BodyBytes() []byte { return r.Body }

// NewWireRequest builds a wire request from raw parts.
func NewWireRequest(method, url string, headers [][2]string, body []byte) WireRequest {
	w := WireRequest{Method: method, URL: url, Headers: headers}
	if headers == nil {
		w.Headers = [][2]string{}
	}
	if body != nil {
		w.Body = body
	}
	return w
}
