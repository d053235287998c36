package sandbox

import (
	"encoding/base64"
	"encoding/json"
	"strings"

	"github.com/retainer-gw/retainer/fault"
	"github.com/retainer-gw/retainer/internal/wirejson"
)

// WireRequest is a request as it crosses into an isolate (SPEC §7): headers
// as ordered pairs, the body base64-encoded or null.
type WireRequest struct {
	Method  string      `json:"method"`
	URL     string      `json:"url"`
	Headers [][2]string `json:"headers"`
	Body    *string     `json:"body"`
	// BodyStream, when set (and Body is null), names a request body the
	// visitor is still sending (SPEC §8): the handler's request.body reads
	// it with the host call body.read as it arrives.
	BodyStream string `json:"bodyStream,omitempty"`
}

// WireResponse is a handler's answer as it leaves an isolate.
type WireResponse struct {
	Status     int         `json:"status"`
	StatusText string      `json:"statusText"`
	Headers    [][2]string `json:"headers"`
	Body       *string     `json:"body"`
	// Stream, when not 0, names the streamed body that follows the head
	// (SPEC §8): read it with ReadStream; Body is then nil.
	Stream int64 `json:"stream,omitempty"`
	// Relay, when set, names a streamed fetch answer the handler returned
	// as its body unread: the gateway sends it to the visitor itself.
	Relay string `json:"relay,omitempty"`
}

// BodyBytes decodes the base64 body (nil for none).
func (r WireResponse) BodyBytes() []byte {
	if r.Body == nil {
		return nil
	}
	b, _ := base64.StdEncoding.DecodeString(*r.Body)
	return b
}

// NewWireRequest builds a wire request from raw parts.
func NewWireRequest(method, url string, headers [][2]string, body []byte) WireRequest {
	w := WireRequest{Method: method, URL: url, Headers: headers}
	if headers == nil {
		w.Headers = [][2]string{}
	}
	if body != nil {
		s := base64.StdEncoding.EncodeToString(body)
		w.Body = &s
	}
	return w
}

// validate checks a request before it enters an isolate and answers its
// decoded body (nil for none).
func (r WireRequest) validate() ([]byte, error) {
	if r.Method == "" || !isToken(r.Method) {
		return nil, fault.New(fault.BadRequest, "The request's method is not a valid HTTP method.")
	}
	if r.URL == "" {
		return nil, fault.New(fault.BadRequest, "The request has no url.")
	}
	for _, h := range r.Headers {
		if !isToken(h[0]) || !validHeaderValue(h[1]) {
			return nil, fault.New(fault.BadRequest, "The request has an invalid header.")
		}
	}
	if len(r.BodyStream) > 64 || r.BodyStream != "" && r.Body != nil {
		return nil, fault.New(fault.BadRequest, "The request's body stream is not valid.")
	}
	if r.Body == nil {
		return nil, nil
	}
	b, err := base64.StdEncoding.DecodeString(*r.Body)
	if err != nil {
		return nil, fault.New(fault.BadRequest, "The request's body is not base64.")
	}
	return b, nil
}

// parseWireResponse reads what the isolate answered — a JSON head, a
// newline, then the body as a Latin-1 string — and checks it again on the
// host side: a program may have replaced Response, so nothing the isolate
// says is trusted.
func parseWireResponse(raw string, maxBody int) (WireResponse, error) {
	head, body, ok := strings.Cut(raw, "\n")
	if !ok {
		return WireResponse{}, fault.OutsideWireShape()
	}
	if len(head) > 6*MaxResponseHeadBytes+1024 {
		return WireResponse{}, headTooLarge()
	}
	var w struct {
		Status     int         `json:"status"`
		StatusText string      `json:"statusText"`
		Headers    [][2]string `json:"headers"`
		HasBody    bool        `json:"hasBody"`
		Stream     int64       `json:"stream"`
		Relay      string      `json:"relay"`
	}
	dec := json.NewDecoder(strings.NewReader(head))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&w); err != nil {
		return WireResponse{}, fault.OutsideWireShape()
	}
	if w.Status < 200 || w.Status > 599 || !validHeaderValue(w.StatusText) {
		return WireResponse{}, fault.OutsideWireShape()
	}
	res := WireResponse{Status: w.Status, StatusText: w.StatusText, Headers: w.Headers, Stream: w.Stream, Relay: w.Relay}
	streamed := w.Stream != 0 || w.Relay != ""
	if w.Stream < 0 || len(w.Relay) > 64 || w.Stream != 0 && w.Relay != "" || streamed && (body != "" || w.Status == 204 || w.Status == 304) {
		return WireResponse{}, fault.OutsideWireShape()
	}
	if res.Headers == nil {
		res.Headers = [][2]string{}
	}
	headBytes := 0
	for _, h := range res.Headers {
		if !isToken(h[0]) || !validHeaderValue(h[1]) {
			return WireResponse{}, fault.OutsideWireShape()
		}
		headBytes += len(h[0]) + len(h[1])
	}
	if headBytes > MaxResponseHeadBytes {
		return WireResponse{}, headTooLarge()
	}
	if maxBody > 0 && len(body) > 2*maxBody {
		// Each byte is at most two bytes of UTF-8: far over the bound.
		return WireResponse{}, bodyTooLarge(maxBody)
	}
	bytes, ok := wirejson.Latin1BytesChecked(body)
	if !ok {
		return WireResponse{}, fault.OutsideWireShape()
	}
	if maxBody > 0 && len(bytes) > maxBody {
		return WireResponse{}, bodyTooLarge(maxBody)
	}
	if !streamed && (w.HasBody || len(bytes) > 0) {
		enc := base64.StdEncoding.EncodeToString(bytes)
		res.Body = &enc
	}
	return res, nil
}

func headTooLarge() error {
	return fault.New(fault.BadResponse, "The fetch handle answered headers over their %d KiB bound.", MaxResponseHeadBytes>>10)
}

func bodyTooLarge(maxBody int) error {
	return fault.New(fault.BadResponse, "The fetch handle answered a body over the %d byte response bound.", maxBody)
}

func isToken(s string) bool {
	if s == "" {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case c >= 'a' && c <= 'z', c >= 'A' && c <= 'Z', c >= '0' && c <= '9':
		case strings.IndexByte("!#$%&'*+-.^_`|~", c) >= 0:
		default:
			return false
		}
	}
	return true
}

func validHeaderValue(s string) bool {
	return !strings.ContainsAny(s, "\r\n\x00")
}
