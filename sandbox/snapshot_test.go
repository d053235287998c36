package sandbox

import (
	"context"
	"crypto/sha256"
	"encoding/json"
	"flag"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/evanw/esbuild/pkg/api"

	"github.com/retainer-gw/retainer/program"
)

// TestIsolatesStartFromTheSnapshot: the process made its startup snapshot,
// and an isolate restores the runtime from it (the link wraps V8's
// constructors: snapshot_linux.go).
func TestIsolatesStartFromTheSnapshot(t *testing.T) {
	e := engine(t)
	if on, err := SnapshotStatus(); !on {
		t.Fatalf("isolates do not start from the snapshot: %v", err)
	}
	m, err := newVM(e, 64, false)
	if err != nil {
		t.Fatal(err)
	}
	restored := m.restored
	m.submit(func() { m.kill() })
	<-m.done
	if !restored {
		t.Fatal("a new isolate installed the compiled runtime")
	}
}

// TestSnapshotIsolatesShareNothing: what one program changes in its
// isolate is not in the next one's, whose random numbers and clock are its
// own, not the snapshot's.
func TestSnapshotIsolatesShareNothing(t *testing.T) {
	e := New(Config{}) // no prewarmed isolates: each is made for its run
	t.Cleanup(e.Shutdown)
	if on, err := SnapshotStatus(); !on {
		t.Fatalf("isolates do not start from the snapshot: %v", err)
	}
	probe := `() => [typeof leak, [].leak, ({}).leak, typeof URL.leak, console.leak, Response.prototype.leak, typeof Headers.prototype.get, Math.random(), crypto.randomUUID(), performance.timeOrigin]`
	first, err := e.Run(context.Background(), program.Job{Program: program.Program{Code: `() => {
		globalThis.leak = 1; Array.prototype.leak = 2; Map.prototype.leak = 3; URL.leak = 4;
		console.leak = 5; Response.prototype.leak = 6; delete Headers.prototype.get;
		return 0 }`}})
	if err != nil || string(first.Result) != "0" {
		t.Fatal(err, string(first.Result))
	}
	time.Sleep(20 * time.Millisecond)
	since := time.Now().UnixMilli()
	randoms, uuids := map[float64]bool{}, map[string]bool{}
	for i := 0; i < 8; i++ {
		out, err := e.Run(context.Background(), program.Job{Program: program.Program{Code: probe}})
		if err != nil {
			t.Fatal(err)
		}
		var got []any
		if err := json.Unmarshal(out.Result, &got); err != nil {
			t.Fatal(err)
		}
		if b, _ := json.Marshal(got[:7]); string(b) != `["undefined",null,null,"undefined",null,null,"function"]` {
			t.Fatalf("run %d sees another program's changes: %s", i, b)
		}
		randoms[got[7].(float64)] = true
		uuids[got[8].(string)] = true
		if origin := got[9].(float64); origin < float64(since) {
			t.Fatalf("run %d: performance.timeOrigin %v is older than its isolate (made after %d): the snapshot's clock", i, origin, since)
		}
	}
	if len(randoms) != 8 || len(uuids) != 8 {
		t.Fatalf("isolates repeat each other's random numbers: %d distinct Math.random, %d distinct UUIDs of 8", len(randoms), len(uuids))
	}
}

// TestDoubtfulSnapshotsAreRefused: a blob that changed since it was made,
// or that another V8 made, is refused before V8 reads it (V8 aborts the
// process on a snapshot it cannot read); the process then installs the
// compiled runtime (TestRuntimeSpecsOnTheCompiledRuntime).
func TestDoubtfulSnapshotsAreRefused(t *testing.T) {
	engine(t)
	SnapshotStatus() // V8 initialized, the process's own snapshot made
	start := time.Now()
	s, err := makeSnapshot()
	if err != nil {
		t.Fatal(err)
	}
	made := time.Since(start)
	defer s.free()
	if err := s.check(); err != nil {
		t.Fatalf("a fresh snapshot was refused: %v", err)
	}
	t.Logf("the runtime's snapshot: %d KiB, made in %v", len(s.blob)/1024, made)

	corrupted := s.copy()
	corrupted.blob[len(corrupted.blob)/2] ^= 0xff
	if err := corrupted.check(); err == nil || !strings.Contains(err.Error(), "corrupted") {
		t.Fatalf("a corrupted snapshot: %v", err)
	}

	// Another V8's: the version V8 wrote in the blob's header differs
	// (made consistent with its SHA-256, so only V8's check can see it).
	other := s.copy()
	for i := 0; i < 128 && i < len(other.blob); i++ {
		other.blob[i] = 'x'
	}
	other.resum()
	if err := other.check(); err == nil || !strings.Contains(err.Error(), "another V8") {
		t.Fatalf("another V8's snapshot: %v", err)
	}
}

// copy is a snapshot whose blob is a Go copy of s's (tests change it).
func (s *runtimeSnapshot) copy() *runtimeSnapshot {
	c := &runtimeSnapshot{blob: append([]byte(nil), s.blob...), sum: s.sum}
	return c
}

// resum makes the SHA-256 agree with the blob as it now is.
func (s *runtimeSnapshot) resum() { s.sum = sha256.Sum256(s.blob) }

// updateRuntimeMin rewrites js/gen/runtime.min.js instead of checking it
// (go generate ./sandbox runs it so): the file is made from the runtime
// the engine joins (joinRuntime), by the same code that checks it.
var updateRuntimeMin = flag.Bool("update-runtime-min", false, "rewrite js/gen/runtime.min.js from the runtime's files")

// TestMinifiedRuntimeIsCurrent: the runtime the snapshot holds
// (js/gen/runtime.min.js) is today's runtime, minified.
func TestMinifiedRuntimeIsCurrent(t *testing.T) {
	res := api.Transform(bootstrapSource, api.TransformOptions{Loader: api.LoaderJS, MinifyWhitespace: true, Target: api.ES2022})
	if len(res.Errors) > 0 {
		t.Fatal(res.Errors[0].Text)
	}
	if *updateRuntimeMin {
		if err := os.WriteFile("js/gen/runtime.min.js", res.Code, 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	if string(res.Code) != runtimeMinified {
		t.Fatal("sandbox/js/gen/runtime.min.js is not the runtime's files minified: run `go generate ./sandbox`")
	}
}
