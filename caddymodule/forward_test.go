package caddymodule

import (
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/retainer-gw/retainer/cluster"
)

// TestForwardedHeaderCoversTheRequest: the owner believes a forwarded
// request only when the HMAC covers what it serves (method, target, Host,
// body framing, every field) and the header is fresh.
func TestForwardedHeaderCoversTheRequest(t *testing.T) {
	secret := []byte(strings.Repeat("s", 32))
	now := time.Now()
	signed := func(method, target, host string, body string) *http.Request {
		r := httptest.NewRequest(method, target, strings.NewReader(body))
		r.Host = host
		f := forward{Kind: "data", Registry: "default", Key: "shop", Tenant: "alice", Scope: "retainer:deploy", At: now}
		framing, err := bodyFraming(r)
		if err != nil {
			t.Fatal(err)
		}
		r.Header.Set(forwardHeader, f.header(secret, r, framing))
		return r
	}
	r := signed("GET", "/a?b=1", "shop.example", "")
	f, err := parseForward(secret, r, now)
	if err != nil || f.Key != "shop" || f.Tenant != "alice" || f.Scope != "retainer:deploy" {
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
	tamper := []struct {
		name string
		edit func(*http.Request)
	}{
		{"method", func(r *http.Request) { r.Method = "POST" }},
		{"target", func(r *http.Request) { r.URL.RawQuery = "b=2" }},
		{"host", func(r *http.Request) { r.Host = "other.example" }},
		{"framing", func(r *http.Request) { r.ContentLength = 7 }},
		{"fields", func(r *http.Request) {
			r.Header.Set(forwardHeader, strings.Replace(r.Header.Get(forwardHeader), "tenant=alice", "tenant=bob", 1))
		}},
		{"missing", func(r *http.Request) { r.Header.Del(forwardHeader) }},
	}
	for _, tc := range tamper {
		r := signed("GET", "/a?b=1", "shop.example", "")
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
}

// TestForwarderLooksAgainOnce: a gateway that answers it does not own the
// space is not relayed to a bodiless request's visitor (the caller looks
// the owner up again); a request with a body gets the retryable answer,
// without the internal mark.
func TestForwarderLooksAgainOnce(t *testing.T) {
	owner := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		writeNotOwner(w, ownFault(cluster.ErrLost))
	}))
	defer owner.Close()
	n := &clusterNode{secret: []byte(strings.Repeat("s", 32)), transport: &http.Transport{}}
	addr := strings.TrimPrefix(owner.URL, "http://")

	w := httptest.NewRecorder()
	if got := n.forwardTo(w, httptest.NewRequest("GET", "/", nil), addr, forward{Kind: "data"}, true); got != forwardLookAgain {
		t.Fatal("a bodiless request was not looked up again")
	}
	if w.Code != 200 || w.Body.Len() != 0 || len(w.Header()) != 0 {
		t.Fatalf("the first answer was relayed: %d %v %q", w.Code, w.Header(), w.Body)
	}

	w = httptest.NewRecorder()
	if got := n.forwardTo(w, httptest.NewRequest("GET", "/", nil), addr, forward{Kind: "data"}, false); got != forwardRelayed {
		t.Fatal("a second look was asked for")
	}
	if w.Code != 503 || w.Header().Get(notOwnerHeader) != "" || w.Header().Get("Retry-After") == "" {
		t.Fatalf("the second answer: %d %v", w.Code, w.Header())
	}

	w = httptest.NewRecorder()
	if got := n.forwardTo(w, httptest.NewRequest("POST", "/", strings.NewReader("body")), addr, forward{Kind: "data"}, true); got != forwardRelayed {
		t.Fatal("a request with a body would be sent twice")
	}
	if w.Code != 503 || w.Header().Get(notOwnerHeader) != "" {
		t.Fatalf("a request with a body: %d %v", w.Code, w.Header())
	}
}
