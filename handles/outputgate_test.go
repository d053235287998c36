package handles

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestOneOutputGateExitPoint: outputGate is the only code of handles that
// waits at kv's output gate (a Barrier), so a new way out cannot skip it
// by calling the kv store directly, and every way out is listed there.
func TestOneOutputGateExitPoint(t *testing.T) {
	files, err := filepath.Glob("*.go")
	if err != nil {
		t.Fatal(err)
	}
	calls := 0
	for _, f := range files {
		if strings.HasSuffix(f, "_test.go") {
			continue
		}
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		n := strings.Count(string(b), ".Barrier(")
		if n > 0 && f != "outputgate.go" {
			t.Errorf("%s waits at the output gate itself (%d times): call outputGate", f, n)
		}
		calls += strings.Count(string(b), ".outputGate(")
	}
	// The four ways out outputGate's comment lists: a host call that
	// leaves, a response, a stream's chunk, a run's answer.
	if calls != 4 {
		t.Errorf("outputGate is called %d times, want 4 (update its list of ways out)", calls)
	}
}
