package sandbox

import (
	"context"
	"testing"

	"github.com/retainer-gw/retainer/program"
)

// TestIsolatesSeedFromGetrandom: V8 takes each new isolate's random seed
// from the entropy source (entropy.cc), not from /dev/urandom, which a
// Landlocked worker cannot open, or from the time.
func TestIsolatesSeedFromGetrandom(t *testing.T) {
	e := New(Config{})
	defer e.Shutdown()
	before := entropySeeds()
	out, err := e.Run(context.Background(), program.Job{Program: program.Program{Code: "() => Math.random() !== Math.random()"}})
	if err != nil || string(out.Result) != "true" {
		t.Fatal(err, string(out.Result))
	}
	if entropySeeds() == before {
		t.Fatal("V8 made an isolate without asking the entropy source for its seed")
	}
}
