package sandbox

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/retainer-gw/retainer/internal/waitfor"
	"github.com/retainer-gw/retainer/program"
)

// Isolates made on many threads at once (no prewarmed pool: every run
// makes its own) all run. Under
// -race this also caught the code caches' shared struct being written by
// two compilations together (consuming).
func TestIsolatesMadeConcurrently(t *testing.T) {
	e := New(Config{Prewarm: 0})
	defer e.Shutdown()
	var wg sync.WaitGroup
	for g := 0; g < 8; g++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; i < 20; i++ {
				out, err := e.Run(context.Background(), program.Job{Program: program.Program{Code: "async () => [1, 2].map(x => x * 2)"}})
				if err != nil || string(out.Result) != "[2,4]" {
					t.Errorf("run: %v %s", err, out.Result)
					return
				}
			}
		}()
	}
	wg.Wait()
}

// The prewarmed pool fills up again after each run took from it (the
// refill of a full pool waits refillDelay, then goes on).
func TestPoolRefillsAfterRuns(t *testing.T) {
	e := New(Config{Prewarm: 2})
	defer e.Shutdown()
	full := func() {
		t.Helper()
		if !waitfor.Within(30*time.Second, func() bool { return len(e.warm) >= 2 }) {
			t.Fatalf("the pool holds %d isolates after 30 s, want 2", len(e.warm))
		}
	}
	for i := 0; i < 10; i++ {
		full()
		// Both refillers finish the isolate each was making and wait to
		// push it: the next take lets one of them through, and the
		// delayed refill follows.
		time.Sleep(50 * time.Millisecond)
		if _, err := e.Run(context.Background(), program.Job{Program: program.Program{Code: "async () => 1"}}); err != nil {
			t.Fatal(err)
		}
	}
	full()
}

// An ended isolate is torn down a moment later, off its loop (done closes).
func TestEndedIsolateIsTornDown(t *testing.T) {
	e := engine(t)
	const id = "torn-down"
	if _, err := e.Run(context.Background(), program.Job{ID: id, RetainHandles: true, Program: program.Program{Code: "async () => ({ fetch() { return new Response('ok') } })"}}); err != nil {
		t.Fatal(err)
	}
	e.mu.Lock()
	m := e.handles[id]
	e.mu.Unlock()
	if err := e.Close(id); err != nil {
		t.Fatal(err)
	}
	select {
	case <-m.done:
	case <-time.After(10 * time.Second):
		t.Fatal("the closed handle's isolate was not disposed within 10 s")
	}
}
