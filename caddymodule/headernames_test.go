package caddymodule

import (
	"net/textproto"
	"strings"
	"testing"
)

// The header name tables answer what strings.ToLower and
// textproto.CanonicalMIMEHeaderKey would, for every name they hold.
func TestHeaderNameTables(t *testing.T) {
	for name, canonical := range canonicalHeaderNames {
		if want := textproto.CanonicalMIMEHeaderKey(name); canonical != want {
			t.Errorf("canonicalHeaderNames[%q] = %q, CanonicalMIMEHeaderKey %q", name, canonical, want)
		}
	}
	for name, lower := range lowerHeaderNames {
		if lower != strings.ToLower(name) || textproto.CanonicalMIMEHeaderKey(name) != name {
			t.Errorf("lowerHeaderNames[%q] = %q", name, lower)
		}
	}
}
