package sandbox

import (
	"context"
	"sync"
	"testing"
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
				out, err := e.Run(context.Background(), Job{Program: Program{Code: "async () => [1, 2].map(x => x * 2)"}})
				if err != nil || string(out.Result) != "[2,4]" {
					t.Errorf("run: %v %s", err, out.Result)
					return
				}
			}
		}()
	}
	wg.Wait()
}
