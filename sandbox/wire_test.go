package sandbox

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/retainer-gw/retainer/budgets"
	"github.com/retainer-gw/retainer/fault"
	"github.com/retainer-gw/retainer/program"
)

// The answer's head as lines (wire.go): a good one parses; every cut of it,
// and every field a hostile program could bend, is refused with the wire
// shape's fault, never taken as something else.
func TestParseWireResponseLines(t *testing.T) {
	good := "201\nCreated\n1\n0\n\n2\ncontent-type\ntext/plain\nx-empty\n\nhello"
	res, err := parseWireResponse(good, 1<<20)
	if err != nil {
		t.Fatal(err)
	}
	if res.Status != 201 || res.StatusText != "Created" || len(res.Headers) != 2 || res.Headers[1] != [2]string{"x-empty", ""} || string(res.BodyBytes()) != "hello" {
		t.Fatalf("parsed %+v", res)
	}
	// The body may hold newlines: it is everything after the head.
	res, err = parseWireResponse("200\n\n1\n0\n\n0\na\nb\n", 0)
	if err != nil || string(res.BodyBytes()) != "a\nb\n" || len(res.Headers) != 0 {
		t.Fatalf("a body with newlines: %+v, %v", res, err)
	}
	// A streamed head.
	res, err = parseWireResponse("200\nOK\n1\n3\n\n0\n", 0)
	if err != nil || res.Stream != 3 || res.Body != nil {
		t.Fatalf("a streamed head: %+v, %v", res, err)
	}
	headEnd := strings.Index(good, "hello")
	for i := 0; i < headEnd; i++ {
		if _, err := parseWireResponse(good[:i], 0); !errors.Is(err, fault.ErrBadResponse) {
			t.Fatalf("a head cut at %d (%q) answered %v", i, good[:i], err)
		}
	}
	for name, raw := range map[string]string{
		"status not a number":         "2O0\nOK\n0\n0\n\n0\n",
		"status out of range":         "199\nOK\n0\n0\n\n0\n",
		"hasBody not a flag":          "200\nOK\n2\n0\n\n0\n",
		"negative count":              "200\nOK\n0\n0\n\n-1\n",
		"count past the frame":        "200\nOK\n0\n0\n\n99999999\na\nb\n",
		"a header name not a token":   "200\nOK\n0\n0\n\n1\nbad name\nv\n",
		"a newline in statusText":     "200\nO\nK\n0\n0\n\n0\n",
		"a stream and a relay":        "200\nOK\n1\n3\nr\n0\n",
		"a negative stream":           "200\nOK\n1\n-3\n\n0\n",
		"a streamed head with a body": "200\nOK\n1\n3\n\n0\nbody",
		"a body outside Latin-1":      "200\nOK\n1\n0\n\n0\n\u0100",
		"a streamed head with text":   "200\nOK\nt\n3\n\n0\n",
	} {
		if _, err := parseWireResponse(raw, 0); !errors.Is(err, fault.ErrBadResponse) {
			t.Errorf("%s: answered %v", name, err)
		}
	}
	// A text body is taken as UTF-8 as it is, a lone surrogate's bytes
	// (as V8 writes them) mended to U+FFFD; an empty one is a body.
	res, err = parseWireResponse("200\nOK\nt\n0\n\n0\nh\u00e9\U0001F600 a\xed\xa0\x80b\xed\x9f\xbf", 0)
	if err != nil || string(res.BodyBytes()) != "h\u00e9\U0001F600 a\ufffdb\ud7ff" {
		t.Fatalf("a text body: %q, %v", res.BodyBytes(), err)
	}
	res, err = parseWireResponse("200\nOK\nt\n0\n\n0\n", 0)
	if err != nil || res.Body == nil || len(res.Body) != 0 {
		t.Fatalf("an empty text body: %+v, %v", res, err)
	}
	if _, err := parseWireResponse("200\nOK\nt\n0\n\n0\n"+strings.Repeat("\u00e9", 6), 11); err == nil || !strings.Contains(err.Error(), "response bound") {
		t.Fatalf("a text body of 12 bytes over a bound of 11 answered %v", err)
	}
	// The response bounds still hold.
	big := "200\nOK\n1\n0\n\n1\nx\n" + strings.Repeat("v", budgets.ResponseHeadBytes) + "\n"
	if _, err := parseWireResponse(big, 0); err == nil || !strings.Contains(err.Error(), "headers over") {
		t.Fatalf("a head over its bound answered %v", err)
	}
	if _, err := parseWireResponse("200\nOK\n1\n0\n\n0\n"+strings.Repeat("b", 11), 10); err == nil || !strings.Contains(err.Error(), "response bound") {
		t.Fatalf("a body over its bound answered %v", err)
	}
}

// A request's fields become lines; a url or body stream holding a newline
// could end its line early, so validate refuses it.
func TestRequestLines(t *testing.T) {
	r := program.NewWireRequest("GET", "http://x.localhost/a?b=1", [][2]string{{"accept", "*/*"}, {"x-empty", ""}}, nil)
	if _, err := validateRequest(r); err != nil {
		t.Fatal(err)
	}
	if got, want := requestLines(r, bodyKind(r)), "GET\nhttp://x.localhost/a?b=1\n\n\n2\naccept\n*/*\nx-empty\n"; got != want {
		t.Fatalf("lines %q, want %q", got, want)
	}
	// A body all ASCII is marked so (its Latin-1 string is its text), one
	// that is UTF-8 crosses as its text; anything else (a lone surrogate's
	// bytes are not UTF-8) as bytes.
	for body, line := range map[string]string{`{"a":1}`: "a", "caf\xc3\xa9": "t", "": "a", "bad \xff": "", "\xed\xa0\x80": ""} {
		r := program.NewWireRequest("POST", "http://x.localhost/", nil, []byte(body))
		if got := strings.Split(requestLines(r, bodyKind(r)), "\n")[3]; got != line {
			t.Errorf("body %q: line %q, want %q", body, got, line)
		}
	}
	for _, bad := range []program.WireRequest{
		program.NewWireRequest("GET", "http://x.localhost/\nGET", nil, nil),
		{Method: "GET", URL: "http://x.localhost/", Headers: [][2]string{}, BodyStream: "s\n1"},
		program.NewWireRequest("GET", "http://x.localhost/", [][2]string{{"a", "b\nc"}}, nil),
	} {
		if _, err := validateRequest(bad); fault.CodeOf(err) != fault.BadRequest {
			t.Errorf("%+v answered %v", bad, err)
		}
	}
}

// The bootstrap is made into a V8 string for every new isolate; pure ASCII
// takes V8's copying path instead of its UTF-8 decoder (perf on a worker
// serving computations: the decoder was ~6% of its CPU for four "§" in
// comments).
func TestBootstrapIsASCII(t *testing.T) {
	for i := 0; i < len(bootstrapSource); i++ {
		if bootstrapSource[i] >= 0x80 {
			line := 1 + strings.Count(bootstrapSource[:i], "\n")
			t.Fatalf("the runtime (js/runtime/*.js joined) has a non-ASCII byte on line %d", line)
		}
	}
}

// BenchmarkWireLines is the engine's side of one invocation's protocol with
// the runtime: the request's lines out, the answer's head in (go test
// ./sandbox -run '^$' -bench WireLines).
func BenchmarkWireLines(b *testing.B) {
	req := program.NewWireRequest("GET", "http://shop.apps.localhost:8089/items?id=42&sort=asc",
		[][2]string{{"accept", "*/*"}, {"user-agent", "Go-http-client/1.1"}, {"x-forwarded-for", "127.0.0.1"}}, nil)
	answer := "200\n\n1\n0\n\n1\ncontent-type\napplication/json\n{\"id\":\"42\",\"served\":1}"
	b.ReportAllocs()
	for i := 0; i < b.N; i++ {
		if _, err := validateRequest(req); err != nil {
			b.Fatal(err)
		}
		_ = requestLines(req, bodyKind(req))
		if _, err := parseWireResponse(answer, 8<<20); err != nil {
			b.Fatal(err)
		}
	}
}

// An invocation's Request takes the gateway's url as it is and normalizes
// its method as the Request constructor does, whichever method it is: a
// common one, one the constructor upper-cases, one it leaves alone, one it
// refuses (the handler then fails).
func TestGatewayRequestMethodAndURL(t *testing.T) {
	e := engine(t)
	if _, err := e.Run(context.Background(), program.Job{ID: "gateway-request", RetainHandles: true, Program: program.Program{Code: `async () => ({
		fetch(req) { return Response.json({m: req.method, u: req.url}) } })`}}); err != nil {
		t.Fatal(err)
	}
	defer e.Close("gateway-request")
	for _, c := range []struct{ method, want string }{{"GET", "GET"}, {"get", "GET"}, {"patch", "patch"}, {"PROPFIND", "PROPFIND"}} {
		res, err := e.Invoke(context.Background(), "gateway-request", "fetch", program.NewWireRequest(c.method, "https://x.test/a/../b?q=%7e", nil, nil))
		if err != nil {
			t.Fatalf("%s: %v", c.method, err)
		}
		if got, want := string(res.BodyBytes()), `{"m":"`+c.want+`","u":"https://x.test/a/../b?q=%7e"}`; got != want {
			t.Errorf("%s: %s, want %s", c.method, got, want)
		}
	}
	if _, err := e.Invoke(context.Background(), "gateway-request", "fetch", program.NewWireRequest("TRACE", "https://x.test/", nil, nil)); fault.CodeOf(err) != fault.HandlerError {
		t.Fatalf("TRACE answered %v", err)
	}
}
