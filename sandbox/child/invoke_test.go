package child

import (
	"encoding/json"
	"fmt"
	"maps"
	"strings"
	"testing"

	"github.com/retainer-gw/retainer/program"
	"github.com/retainer-gw/retainer/workers/wire"
)

const echoHandler = `export default { async fetch(request) {
	return Response.json({method: request.method, url: request.url, headers: Object.fromEntries(request.headers), body: await request.text()}, {headers: {'x-echo': request.method}});
} }`

type echoed struct {
	Method  string            `json:"method"`
	URL     string            `json:"url"`
	Headers map[string]string `json:"headers"`
	Body    string            `json:"body"`
}

// The worker reads an invocation in place (its frame in the read loop's
// buffer, its headers into one array), and encodes its answer into a
// buffer it keeps (serve.go, takeInvoke and answerInvoke): a long
// request, with many headers, a long url and a body, and a long answer,
// followed by short ones, each answered with only its own request's
// parts, in turns, through a real isolate.
func TestAShortInvocationAfterALongOneIsOnlyItsOwn(t *testing.T) {
	_, g := startWorker(t, echoHandler)
	long := func(i int) program.WireRequest {
		var h [][2]string
		for j := 0; j < 60; j++ {
			h = append(h, [2]string{fmt.Sprintf("x-long-%d", j), strings.Repeat(fmt.Sprint(i), 200)})
		}
		return program.NewWireRequest("POST", "http://h1.apps.test/long?"+strings.Repeat("q", 3000), h, []byte(strings.Repeat("b", 20000)))
	}
	short := func(i int) program.WireRequest {
		return program.NewWireRequest("GET", fmt.Sprintf("http://h1.apps.test/s%d", i), [][2]string{{"x-short", fmt.Sprint(i)}}, nil)
	}
	for i := 0; i < 6; i++ {
		// A POST without a body after one with a body: nothing of the
		// first's body shows in the second.
		bodiless := program.NewWireRequest("POST", "http://h1.apps.test/post", nil, nil)
		for _, req := range []program.WireRequest{long(i), short(i), long(i + 1), bodiless, short(i + 100)} {
			payload := g.roundTrip(t, invokeFrame(uint64(i+1), wire.InvokeRequest{ID: "h1", Name: "fetch", Request: req}))
			var reply wire.InvokeReply
			if err := reply.DecodeFrame(payload); err != nil {
				t.Fatal(err)
			}
			if reply.Fault != nil || reply.Response.Status != 200 {
				t.Fatalf("answer %d %+v", reply.Response.Status, reply.Fault)
			}
			var got echoed
			if err := json.Unmarshal(reply.Response.Body, &got); err != nil {
				t.Fatalf("the answer's body is not the handler's JSON: %v: %.200q", err, reply.Response.Body)
			}
			want := echoed{Method: req.Method, URL: req.URL, Headers: map[string]string{}, Body: string(req.Body)}
			for _, h := range req.Headers {
				want.Headers[h[0]] = h[1]
			}
			if got.Method != want.Method || got.URL != want.URL || got.Body != want.Body || !maps.Equal(got.Headers, want.Headers) {
				t.Fatalf("request %s %.60s: the handler saw %s %.60s with %d headers and %d body bytes, want %d and %d",
					req.Method, req.URL, got.Method, got.URL, len(got.Headers), len(got.Body), len(want.Headers), len(want.Body))
			}
			if n := len(reply.Response.Headers); n == 0 || reply.Response.Headers[len(reply.Response.Headers)-1][0] == "" {
				t.Fatalf("answer headers %v", reply.Response.Headers)
			}
		}
	}
}
