package kv

import "testing"

// TestSpaceNameIsPinned pins SpaceName's output: it names a space in the
// workers' caches and the gateway's hints, so a change would lose them.
func TestSpaceNameIsPinned(t *testing.T) {
	for _, c := range []struct{ registry, tenant, want string }{
		{"reg", "acme", "e0a032caf752703ee4054b3c195ec194"},
		{"", "", "6e340b9cffb37a989ca544e6bb780a2c"},
	} {
		if got := SpaceName(c.registry, c.tenant); got != c.want {
			t.Errorf("SpaceName(%q, %q) = %s, want %s", c.registry, c.tenant, got, c.want)
		}
	}
	// The separator keeps a registry's tail from passing as a tenant's head.
	if SpaceName("ab", "c") == SpaceName("a", "bc") {
		t.Error("SpaceName(ab, c) == SpaceName(a, bc)")
	}
}
