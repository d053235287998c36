package sandbox

import (
	"regexp"
	"testing"
)

// TestHostFunctionsAreDeclaredOnce: the runtime (js/runtime) reaches the
// host only through names install.go declares, once each, in hotHost (a
// native function each: host.name(...)) or coldHost (behind host.op:
// coldHost('name')); and every declared one is used. Adding a host
// function is a row there and its use here, and a mismatch fails this
// test instead of a program at run time. The startup snapshot's maker
// takes hotHost's names from the same table (hotHostNames).
func TestHostFunctionsAreDeclaredOnce(t *testing.T) {
	hot, cold := map[string]bool{}, map[string]bool{}
	for _, h := range hotHost {
		if hot[h.name] {
			t.Errorf("hotHost declares %q twice", h.name)
		}
		hot[h.name] = true
	}
	for _, c := range coldHost {
		if cold[c.name] || hot[c.name] {
			t.Errorf("coldHost declares %q again", c.name)
		}
		cold[c.name] = true
	}
	usedHot, usedCold := map[string]bool{}, map[string]bool{}
	for _, m := range regexp.MustCompile(`\bhost\.([A-Za-z]+)\(`).FindAllStringSubmatch(bootstrapSource, -1) {
		usedHot[m[1]] = true
	}
	for _, m := range regexp.MustCompile(`(?:coldHost|coldIndex\.indexOf)\('([A-Za-z]+)'\)`).FindAllStringSubmatch(bootstrapSource, -1) {
		usedCold[m[1]] = true
	}
	if len(usedHot) == 0 || len(usedCold) == 0 {
		t.Fatalf("found no host function in the runtime (%d hot, %d cold): the patterns no longer match its source", len(usedHot), len(usedCold))
	}
	for name := range usedHot {
		if !hot[name] {
			t.Errorf("the runtime calls host.%s, which hotHost does not declare", name)
		}
	}
	for name := range usedCold {
		if !cold[name] {
			t.Errorf("the runtime asks for the cold host function %q, which coldHost does not declare", name)
		}
	}
	for name := range hot {
		if !usedHot[name] {
			t.Errorf("hotHost declares %q, which the runtime never calls", name)
		}
	}
	for name := range cold {
		if !usedCold[name] {
			t.Errorf("coldHost declares %q, which the runtime never asks for", name)
		}
	}
}
