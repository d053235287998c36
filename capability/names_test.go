package capability

import (
	"testing"

	"github.com/retainer-gw/retainer/fault"
	"github.com/retainer-gw/retainer/kv/kvop"
)

// TestAllowsKVIsTheOneKVGrantCheck: kvRead reads (get, list) and only
// reads, kvWrite writes (put, delete) and only writes, and an op that is
// no kv call is refused whatever the grants.
func TestAllowsKVIsTheOneKVGrantCheck(t *testing.T) {
	none, read, write, both := Grants{}, Grants{Capabilities: []string{KVRead}}, Grants{Capabilities: []string{KVWrite}}, Grants{Capabilities: Names}
	for _, c := range []struct {
		g    Grants
		op   kvop.Op
		want fault.Code
	}{
		{none, kvop.Get, fault.Forbidden}, {none, kvop.Put, fault.Forbidden},
		{read, kvop.Get, ""}, {read, kvop.List, ""}, {read, kvop.Put, fault.Forbidden}, {read, kvop.Delete, fault.Forbidden},
		{write, kvop.Put, ""}, {write, kvop.Delete, ""}, {write, kvop.Get, fault.Forbidden}, {write, kvop.List, fault.Forbidden},
		{both, kvop.Get, ""}, {both, kvop.Delete, ""},
		{both, "kv.batch", fault.BadRequest}, {both, "fetch", fault.BadRequest},
	} {
		err := c.g.AllowsKV(c.op)
		if got := fault.CodeOf(err); err == nil && c.want != "" || err != nil && got != c.want {
			t.Errorf("%v.AllowsKV(%s) = %v, want code %q", c.g.Capabilities, c.op, err, c.want)
		}
		if c.want == fault.Forbidden && !IsDenial(err) {
			t.Errorf("%v.AllowsKV(%s) = %v: not a denial", c.g.Capabilities, c.op, err)
		}
	}
}

func TestKnownCapabilities(t *testing.T) {
	for _, n := range Names {
		if !Known(n) {
			t.Errorf("Known(%q) = false", n)
		}
	}
	for _, n := range []string{"", "KVRead", "kv", "kvread", "spawn "} {
		if Known(n) {
			t.Errorf("Known(%q) = true", n)
		}
	}
}
