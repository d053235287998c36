package workers

import (
	"context"
	"sync"
	"testing"
	"time"
)

// Two runs arriving together go to two workers when two are free: a pick
// counts the worker it chose as busy at once (reserve), not only once the
// run's call is on record, which comes after the pick has let the pool's
// lock go. The hook holds each run between its pick and its call until
// both are picked.
func TestRunsArrivingTogetherTakeTwoFreeWorkers(t *testing.T) {
	pool := startPool(t, Config{Workers: 2})
	for i := range 2 {
		pool.mu.Lock()
		p := pool.workers[i]
		pool.mu.Unlock()
		if p == nil || !p.alive() {
			t.Fatalf("worker %d is not up", i)
		}
	}
	var mu sync.Mutex
	var picked []*process
	both := make(chan struct{})
	pool.pickHold = func(p *process) {
		mu.Lock()
		picked = append(picked, p)
		if len(picked) == 2 {
			close(both)
		}
		mu.Unlock()
		select {
		case <-both:
		case <-time.After(10 * time.Second):
		}
	}
	var wg sync.WaitGroup
	errs := make([]error, 2)
	for i := range 2 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			_, errs[i] = pool.Run(context.Background(), job("async () => 1"))
		}()
	}
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			t.Fatalf("run %d: %v", i, err)
		}
	}
	if len(picked) != 2 {
		t.Fatalf("%d picks", len(picked))
	}
	if picked[0] == picked[1] {
		t.Fatalf("both runs went to worker %d (pid %d) while worker %d was free", picked[0].index, picked[0].pid, 1-picked[0].index)
	}
	// Nothing stays reserved once the runs are answered.
	for _, p := range picked {
		if retained, inflight := p.load(); retained != 0 || inflight != 0 {
			t.Fatalf("worker %d: %d retained, %d in flight after its run", p.index, retained, inflight)
		}
	}
}
