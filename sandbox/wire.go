package sandbox

import (
	"bytes"
	"strconv"
	"strings"
	"unicode/utf8"
	"unsafe"

	"github.com/retainer-gw/retainer/budgets"
	"github.com/retainer-gw/retainer/fault"
	"github.com/retainer-gw/retainer/internal/wirejson"
	"github.com/retainer-gw/retainer/program"
)

// validateRequest checks a request before it enters an isolate and
// answers its decoded body (nil for none).
func validateRequest(r program.WireRequest) ([]byte, error) {
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
	if !validHeaderValue(r.URL) {
		// A newline would end the url's line (requestLines).
		return nil, fault.New(fault.BadRequest, "The request's url is not valid.")
	}
	if len(r.BodyStream) > 64 || !validHeaderValue(r.BodyStream) || r.BodyStream != "" && r.Body != nil {
		return nil, fault.New(fault.BadRequest, "The request's body stream is not valid.")
	}
	return r.Body, nil
}

// The invocation protocol between the engine and the runtime's invoke
// (js/runtime/22-entry-points.js) is lines, not JSON: measured with perf on a worker
// under load, encoding the request and decoding the answer's head with
// encoding/json took ~10% of the worker's CPU, and JSON.parse and
// JSON.stringify in the jitless interpreter more. Splitting on newlines is
// one native call in JavaScript and strings.Cut in Go.
//
// The request is method, url, bodyStream, the body's kind ("a" when it is
// all ASCII: its Latin-1 string is then its text as well; "t" when it is
// UTF-8 and crosses as its text; empty for bytes as Latin-1: the first two
// spare the runtime's decoding for request.text() and request.json(),
// ~23 us for 2 KB of JSON), the header count, and each header's name and
// value, a line each (validate has refused any of them holding a newline);
// its body crosses apart, as its kind says.
//
// The answer is a letter (R: a response; W: a response with waitUntil work
// pending; N: not a Response) and, after it, the head as lines: status,
// statusText, the body's kind (0: none; 1: a Latin-1 string, a character a
// byte; t: text, the handler's own string), stream (a number, 0 for none),
// relay (a token, empty for none), the header count, each header's name and
// value; the body follows the last line. v8go hands Go the whole answer as
// UTF-8, so text needs no encoding at all (textBytes mends what V8 writes
// for a lone surrogate), where encoding it to Latin-1 in the jitless
// interpreter cost ~45% of a worker's CPU for a 17.8 KB page.

// How a request body crosses into the isolate: all ASCII (its Latin-1
// string is its text too), UTF-8 (it crosses as its text), or bytes (a
// Latin-1 string).
const (
	bodyASCII = 'a'
	bodyText  = 't'
	bodyBytes = 0
)

// bodyKind is how the request's body crosses (bodyBytes for none).
func bodyKind(r program.WireRequest) byte {
	switch {
	case r.Body == nil:
		return bodyBytes
	case wirejson.IsASCII(r.Body):
		return bodyASCII
	case utf8.Valid(r.Body):
		return bodyText
	}
	return bodyBytes
}

// requestLines encodes a validated request for invoke; kind is its
// bodyKind, which the caller also needs (to hand the body over), so the
// body is scanned once.
func requestLines(r program.WireRequest, kind byte) string {
	var b strings.Builder
	n := len(r.Method) + len(r.URL) + len(r.BodyStream) + 8
	for _, h := range r.Headers {
		n += len(h[0]) + len(h[1]) + 2
	}
	b.Grow(n)
	b.WriteString(r.Method)
	b.WriteByte('\n')
	b.WriteString(r.URL)
	b.WriteByte('\n')
	b.WriteString(r.BodyStream)
	b.WriteByte('\n')
	if kind != bodyBytes {
		b.WriteByte(kind)
	}
	b.WriteByte('\n')
	b.WriteString(strconv.Itoa(len(r.Headers)))
	for _, h := range r.Headers {
		b.WriteByte('\n')
		b.WriteString(h[0])
		b.WriteByte('\n')
		b.WriteString(h[1])
	}
	return b.String()
}

// parseWireResponse reads what the isolate answered after its letter — the
// head's lines, then the body as a Latin-1 string — and checks it again on
// the host side: a program may have replaced Response, so nothing the
// isolate says is trusted. Whatever a program puts in a field (a newline
// included) can only shift later fields, each of which is checked, so the
// worst it can make is an answer it could have made anyway, or a refusal.
func parseWireResponse(raw string, maxBody int) (program.WireResponse, error) {
	rest := raw
	line := func() (string, bool) {
		l, r, ok := strings.Cut(rest, "\n")
		rest = r
		return l, ok
	}
	var res program.WireResponse
	statusLine, ok1 := line()
	statusText, ok2 := line()
	hasBodyLine, ok3 := line()
	streamLine, ok4 := line()
	relay, ok5 := line()
	countLine, ok6 := line()
	if !(ok1 && ok2 && ok3 && ok4 && ok5 && ok6) {
		return program.WireResponse{}, fault.OutsideWireShape()
	}
	status, err := strconv.Atoi(statusLine)
	// 101 is an accepted WebSocket, whose records are its stream (websocket.go).
	accepted := status == 101 && streamLine != "0" && relay == ""
	if err != nil || (status < 200 || status > 599) && !accepted || !validHeaderValue(statusText) || hasBodyLine != "0" && hasBodyLine != "1" && hasBodyLine != "t" {
		return program.WireResponse{}, fault.OutsideWireShape()
	}
	stream, err := strconv.ParseInt(streamLine, 10, 64)
	if err != nil {
		return program.WireResponse{}, fault.OutsideWireShape()
	}
	count, err := strconv.Atoi(countLine)
	if err != nil || count < 0 || count > len(rest)/2+1 {
		return program.WireResponse{}, fault.OutsideWireShape()
	}
	res.Status, res.StatusText, res.Stream, res.Relay = status, statusText, stream, relay
	res.Headers = make([][2]string, 0, count)
	headBytes := 0
	for i := 0; i < count; i++ {
		name, okName := line()
		value, okValue := line()
		// Every line of the head ends in a newline, the last one too (the
		// body follows it).
		if !okName || !okValue || !isToken(name) || !validHeaderValue(value) {
			return program.WireResponse{}, fault.OutsideWireShape()
		}
		headBytes += len(name) + len(value)
		if headBytes > budgets.ResponseHeadBytes {
			return program.WireResponse{}, headTooLarge()
		}
		res.Headers = append(res.Headers, [2]string{name, value})
	}
	if stream != 0 && maxBody > 0 {
		// A stream that says its length (a large body the runtime held,
		// js/runtime/23-streamed-responses.js, streamLatin1) is refused over the bound at once.
		for _, h := range res.Headers {
			if strings.EqualFold(h[0], "content-length") {
				if n, err := strconv.ParseInt(h[1], 10, 64); err == nil && n > int64(maxBody) {
					// The stream is named, so the caller drops it.
					return program.WireResponse{Stream: stream}, bodyTooLarge(maxBody)
				}
			}
		}
	}
	body := rest
	streamed := stream != 0 || relay != ""
	if stream < 0 || len(relay) > 64 || stream != 0 && relay != "" || streamed && (body != "" || hasBodyLine == "t" || status == 204 || status == 304) {
		return program.WireResponse{}, fault.OutsideWireShape()
	}
	if hasBodyLine == "t" {
		if maxBody > 0 && len(body) > maxBody {
			return program.WireResponse{}, bodyTooLarge(maxBody)
		}
		res.Body = textBytes(body)
		return res, nil
	}
	if maxBody > 0 && len(body) > 2*maxBody {
		// Each byte is at most two bytes of UTF-8: far over the bound.
		return program.WireResponse{}, bodyTooLarge(maxBody)
	}
	bytes, ok := wirejson.Latin1BytesChecked(body)
	if !ok {
		return program.WireResponse{}, fault.OutsideWireShape()
	}
	if maxBody > 0 && len(bytes) > maxBody {
		return program.WireResponse{}, bodyTooLarge(maxBody)
	}
	if !streamed && (hasBodyLine == "1" || len(bytes) > 0) {
		if bytes == nil {
			bytes = []byte{}
		}
		res.Body = bytes
	}
	return res, nil
}

// textBytes is the UTF-8 of a body the handler gave as text. V8 writes a
// lone surrogate as its own three bytes (ED A0–BF xx: not UTF-8, which no
// valid sequence starting ED continues at A0 or above); the Fetch
// Standard's conversion of a body string makes it U+FFFD, which is three
// bytes too (EF BF BD), so it is replaced in place, in a copy.
//
// A body with no lone surrogate is s's own bytes, not a copy: s is the
// answer's string as v8go made it for this answer alone (serve), which
// nothing reads once the answer is parsed, and the body's bytes are only
// read from then on (encoded into the answer's frame). A copy was an
// allocation of the body's size a request (docs/performance.md, "A
// worker's bytes a request").
func textBytes(s string) []byte {
	if s == "" {
		return []byte{} // an empty body is a body
	}
	if !hasLoneSurrogate(s) {
		return unsafe.Slice(unsafe.StringData(s), len(s))
	}
	b := []byte(s)
	for i := 0; i < len(b); i++ {
		j := bytes.IndexByte(b[i:], 0xED)
		if j < 0 {
			break
		}
		i += j
		if i+2 < len(b) && b[i+1] >= 0xA0 && b[i+1] <= 0xBF {
			b[i], b[i+1], b[i+2] = 0xEF, 0xBF, 0xBD
			i += 2
		}
	}
	return b
}

// hasLoneSurrogate says whether s holds V8's bytes for a lone surrogate
// (textBytes).
func hasLoneSurrogate(s string) bool {
	for i := 0; i < len(s); i++ {
		j := strings.IndexByte(s[i:], 0xED)
		if j < 0 {
			return false
		}
		i += j
		if i+2 < len(s) && s[i+1] >= 0xA0 && s[i+1] <= 0xBF {
			return true
		}
	}
	return false
}

func headTooLarge() error {
	return fault.New(fault.BadResponse, "The fetch handle answered headers over their %d KiB bound.", budgets.ResponseHeadBytes>>10)
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
