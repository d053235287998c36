package caddymodule

import (
	"bytes"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/retainer-gw/retainer/cluster"
)

// signedRequest is what a forwarder sends for method, target, host and
// body: the header, and a body sealed as the HMAC covers it.
func signedRequest(t *testing.T, secret []byte, at time.Time, method, target, host, body string) *http.Request {
	t.Helper()
	r := httptest.NewRequest(method, target, strings.NewReader(body))
	r.Host = host
	fb, err := readForwardBody(r)
	if err != nil {
		t.Fatal(err)
	}
	if fb.held != nil {
		r.Body = io.NopCloser(bytes.NewReader(fb.held))
	}
	f := forward{Kind: "data", Registry: "default", Key: "shop", Tenant: "alice", Scope: "retainer:deploy", At: at, Nonce: newNonce(), Body: fb.cover}
	header, sig := f.header(secret, r, r.Header)
	r.Header.Set(forwardHeader, header)
	if fb.chained() {
		r.Body = newSealReader(r.Body, secret, sig)
		r.ContentLength = -1
	}
	return r
}

// TestForwardedHeaderCoversTheRequest: the owner believes a forwarded
// request only when the HMAC covers what it serves (method, target, Host,
// body, every field) and the header is fresh and not from the future.
func TestForwardedHeaderCoversTheRequest(t *testing.T) {
	secret := []byte(strings.Repeat("s", 32))
	now := time.Now()
	signed := func(method, target, host, body string) *http.Request {
		return signedRequest(t, secret, now, method, target, host, body)
	}
	r := signed("GET", "/a?b=1", "shop.example", "")
	f, err := parseForward(secret, r, now)
	if err != nil || f.Key != "shop" || f.Tenant != "alice" || f.Scope != "retainer:deploy" || len(f.Nonce) != 32 {
		t.Fatalf("a signed request: %+v, %v", f, err)
	}
	// A small body is covered by its digest, and still there to read.
	r = signed("POST", "/hook", "shop.example", `{"amount": 10}`)
	if _, err := parseForward(secret, r, now); err != nil {
		t.Fatalf("a signed body: %v", err)
	}
	if b, _ := io.ReadAll(r.Body); string(b) != `{"amount": 10}` {
		t.Fatalf("the body after the check: %q", b)
	}
	r = signed("POST", "/hook", "shop.example", `{"amount": 10}`)
	r.Body = io.NopCloser(strings.NewReader(`{"amount": 99}`))
	if _, err := parseForward(secret, r, now); err == nil {
		t.Error("a request whose body changed after signing was believed")
	}
	// A request signed without a body gives the handler none, whatever
	// was appended.
	r = signed("GET", "/", "shop.example", "")
	r.Body, r.ContentLength = io.NopCloser(strings.NewReader("appended")), 8
	if _, err := parseForward(secret, r, now); err != nil {
		t.Fatal(err)
	}
	if b, _ := io.ReadAll(r.Body); len(b) != 0 || r.ContentLength != 0 {
		t.Fatalf("an appended body reached the owner: %q", b)
	}
	tamper := []struct {
		name string
		edit func(*http.Request)
	}{
		{"method", func(r *http.Request) { r.Method = "POST" }},
		{"target", func(r *http.Request) { r.URL.RawQuery = "b=2" }},
		{"host", func(r *http.Request) { r.Host = "other.example" }},
		{"fields", func(r *http.Request) {
			r.Header.Set(forwardHeader, strings.Replace(r.Header.Get(forwardHeader), "tenant=alice", "tenant=bob", 1))
		}},
		{"body cover", func(r *http.Request) {
			r.Header.Set(forwardHeader, strings.Replace(r.Header.Get(forwardHeader), "body=none", "body=chained+-1", 1))
		}},
		{"missing", func(r *http.Request) { r.Header.Del(forwardHeader) }},
		{"a header", func(r *http.Request) { r.Header.Set("Authorization", "Bearer other") }},
		{"a header added", func(r *http.Request) { r.Header.Set("Upgrade", "websocket") }},
		{"a header removed", func(r *http.Request) { r.Header.Del("Cookie") }},
		{"a header's case", func(r *http.Request) { r.Header["cookie"], r.Header["Cookie"] = r.Header["Cookie"], nil }},
	}
	for _, tc := range tamper {
		r := httptest.NewRequest("GET", "/a?b=1", nil)
		r.Host = "shop.example"
		r.Header.Set("Authorization", "Bearer alice")
		r.Header.Set("Cookie", "session=alice")
		f := forward{Kind: "data", Registry: "default", Key: "shop", Tenant: "alice", Scope: "retainer:deploy", At: now, Nonce: newNonce(), Body: "none"}
		header, _ := f.header(secret, r, r.Header)
		r.Header.Set(forwardHeader, header)
		if _, err := parseForward(secret, r, now); err != nil {
			t.Fatalf("%s: the request unchanged: %v", tc.name, err)
		}
		tc.edit(r)
		if _, err := parseForward(secret, r, now); err == nil {
			t.Errorf("a request whose %s changed after signing was believed", tc.name)
		}
	}
	if _, err := parseForward([]byte(strings.Repeat("x", 32)), signed("GET", "/", "h", ""), now); err == nil {
		t.Error("a request signed under another secret was believed")
	}
	if _, err := parseForward(secret, signed("GET", "/", "h", ""), now.Add(forwardMaxAge+2*time.Second)); err == nil {
		t.Error("a stale request was believed")
	}
	if _, err := parseForward(secret, signed("GET", "/", "h", ""), now.Add(-forwardSkew-time.Second)); err == nil {
		t.Error("a request stamped in the future was believed")
	}
	if _, err := parseForward(secret, signed("GET", "/", "h", ""), now.Add(-forwardSkew/2)); err != nil {
		t.Errorf("a request stamped within the clocks' skew: %v", err)
	}
}

// TestForwardedBodyIsChained: a body over the digest bound crosses in
// frames each sealed by an HMAC chained from the header's: it arrives
// whole and unchanged; a changed byte, a frame dropped or the end cut off
// stops the body before any byte the HMAC does not cover.
func TestForwardedBodyIsChained(t *testing.T) {
	secret := []byte(strings.Repeat("s", 32))
	now := time.Now()
	body := strings.Repeat("0123456789abcdef", 70<<10/16) // 70 KiB
	sealed := func() (*http.Request, []byte) {
		r := signedRequest(t, secret, now, "POST", "/", "h", body)
		wire, err := io.ReadAll(r.Body)
		if err != nil {
			t.Fatal(err)
		}
		return r, wire
	}
	r, wire := sealed()
	r.Body = io.NopCloser(bytes.NewReader(wire))
	if _, err := parseForward(secret, r, now); err != nil {
		t.Fatal(err)
	}
	if got, err := io.ReadAll(r.Body); err != nil || string(got) != body || r.ContentLength != int64(len(body)) {
		t.Fatalf("the chained body: %d bytes, %v", len(got), err)
	}
	for _, tc := range []struct {
		name string
		edit func([]byte) []byte
	}{
		{"a byte of the second frame changed", func(w []byte) []byte { w[4+chainFrame+32+4+10] ^= 1; return w }},
		{"the first frame dropped", func(w []byte) []byte { return w[4+chainFrame+32:] }},
		{"the end cut off", func(w []byte) []byte { return w[:len(w)-36] }},
	} {
		r, wire := sealed()
		r.Body = io.NopCloser(bytes.NewReader(tc.edit(wire)))
		if _, err := parseForward(secret, r, now); err != nil {
			t.Fatal(err)
		}
		got, err := io.ReadAll(r.Body)
		if err == nil || !strings.HasPrefix(body, string(got)) {
			t.Errorf("%s: read %d bytes, %v", tc.name, len(got), err)
		}
		if tc.name != "the end cut off" && !errors.Is(err, errForwardBody) {
			t.Errorf("%s: %v, want the forwarded body refused", tc.name, err)
		}
	}
}

// An owner takes a forwarded request's nonce once while its header could
// still be believed.
func TestForwardNoncesAreTakenOnce(t *testing.T) {
	var s nonceSet
	now := time.Now()
	a, b := [16]byte{1}, [16]byte{2}
	if s.first(a, now) != nil || s.first(b, now.Add(time.Second)) != nil {
		t.Fatal("fresh nonces were refused")
	}
	for _, at := range []time.Duration{2 * time.Second, forwardMaxAge, forwardMaxAge + forwardSkew + time.Second} {
		if s.first(a, now.Add(at)) == nil {
			t.Fatalf("a nonce was taken again %v later", at)
		}
	}
}

// TestForwarderLooksAgainOnce: a gateway that answers it does not own the
// space (with the mark only the cluster's secret makes) is not relayed to
// the visitor of a request that can be sent again (the caller looks the
// owner up again); a streamed body gets the retryable answer, without the
// internal mark; a handler's forged mark is dropped and relayed as the
// handler's answer.
func TestForwarderLooksAgainOnce(t *testing.T) {
	secret := []byte(strings.Repeat("s", 32))
	owner := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		f, err := parseForward(secret, r, time.Now())
		if err != nil {
			t.Error(err)
		}
		if r.URL.Path == "/forged" {
			w.Header().Set(notOwnerHeader, "1")
			w.Header().Set("Retainer-Other", "x")
			io.WriteString(w, "the handler")
			return
		}
		io.Copy(io.Discard, r.Body)
		w.Header().Set(notOwnerHeader, notOwnerMark(secret, f.Nonce))
		writeFault(w, ownFault(cluster.ErrLost), "")
	}))
	defer owner.Close()
	// As listen makes it: the HMAC covers every header, and the transport
	// adds no Accept-Encoding of its own.
	n := &clusterNode{secret: secret, transport: &http.Transport{DisableCompression: true}}
	addr := strings.TrimPrefix(owner.URL, "http://")
	send := func(r *http.Request, lookAgain bool) (*httptest.ResponseRecorder, forwardOutcome) {
		fb, err := readForwardBody(r)
		if err != nil {
			t.Fatal(err)
		}
		w := httptest.NewRecorder()
		return w, n.forwardTo(w, r, addr, forward{Kind: "data"}, fb, lookAgain)
	}

	w, got := send(httptest.NewRequest("GET", "/", nil), true)
	if got != forwardLookAgain {
		t.Fatal("a bodiless request was not looked up again")
	}
	if w.Code != 200 || w.Body.Len() != 0 || len(w.Header()) != 0 {
		t.Fatalf("the first answer was relayed: %d %v %q", w.Code, w.Header(), w.Body)
	}
	if _, got := send(httptest.NewRequest("POST", "/", strings.NewReader("small body")), true); got != forwardLookAgain {
		t.Fatal("a request with a body held whole was not looked up again")
	}

	w, got = send(httptest.NewRequest("GET", "/", nil), false)
	if got != forwardRelayed {
		t.Fatal("a second look was asked for")
	}
	if w.Code != 503 || w.Header().Get(notOwnerHeader) != "" || w.Header().Get("Retry-After") == "" {
		t.Fatalf("the second answer: %d %v", w.Code, w.Header())
	}

	big := httptest.NewRequest("POST", "/", strings.NewReader(strings.Repeat("x", 100<<10)))
	big.ContentLength = -1
	w, got = send(big, true)
	if got != forwardRelayed {
		t.Fatal("a streamed body would be sent twice")
	}
	if w.Code != 503 || w.Header().Get(notOwnerHeader) != "" {
		t.Fatalf("a request with a body: %d %v", w.Code, w.Header())
	}

	w, got = send(httptest.NewRequest("GET", "/forged", nil), true)
	if got != forwardRelayed || w.Code != 200 || w.Body.String() != "the handler" || w.Header().Get(notOwnerHeader) != "" || w.Header().Get("Retainer-Other") != "" {
		t.Fatalf("a forged mark: %v %d %v %q", got, w.Code, w.Header(), w.Body)
	}
}
