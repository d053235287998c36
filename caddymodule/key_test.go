package caddymodule

import (
	"fmt"
	"net/http/httptest"
	"testing"

	"github.com/caddyserver/caddy/v2/modules/caddyhttp"
)

// The data plane reads a host-label key from the Host header itself; the
// answer must be Caddy's own, for every label of every kind of host.
func TestHostLabelKeyIsCaddys(t *testing.T) {
	t.Parallel()
	hosts := []string{"a1b2.apps.localhost", "a1b2.apps.localhost:8080", "Shop.Apps.Example.COM", "x", "", ".", "..",
		"a..b", "trailing.dot.", ".leading", "127.0.0.1", "127.0.0.1:9", "[::1]:8080", "[::1]", "::1", "a.b:", "a.b:c:d",
		"very.deep.sub.domain.of.the.apps.example.com:443"}
	for _, host := range hosts {
		for n := 0; n < 8; n++ {
			r := httptest.NewRequest("GET", "http://placeholder/", nil)
			r.Host = host
			repl := caddyhttp.NewTestReplacer(r)
			want := repl.ReplaceAll(fmt.Sprintf("{http.request.host.labels.%d}", n), "")
			if got := hostLabelOf(host, n); got != want {
				t.Errorf("host %q label %d: %q, Caddy's %q", host, n, got, want)
			}
		}
	}
}

// Only the exact placeholder takes the direct path; anything else is the
// replacer's.
func TestHostLabelKeyOnlyForThePlaceholder(t *testing.T) {
	t.Parallel()
	for key, want := range map[string]int{
		"{http.request.host.labels.2}":   2,
		"{http.request.host.labels.0}":   0,
		"{http.request.host.labels.2}x":  -1,
		"x{http.request.host.labels.2}":  -1,
		"{http.request.host.labels.-1}":  -1,
		"{http.request.host.labels.two}": -1,
		"{http.request.uri.path.1}":      -1,
	} {
		h := &Retainer{Key: key}
		h.hostLabel = parseHostLabel(h.Key)
		if h.hostLabel != want {
			t.Errorf("key %q: label %d, want %d", key, h.hostLabel, want)
		}
	}
}
