package workers

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/retainer-gw/retainer/internal/waitfor"
	"github.com/retainer-gw/retainer/program"
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

// A worker a pick chose is not idle: between the pick and its call (the
// pool's lock let go) a newcomer waiting for a worker does not recycle it
// from under the run, which would answer "never started" and go looking
// for another worker. Bob's run is held there while mallory waits; bob's
// worker stays his, and mallory gets it once bob's run is answered and
// the worker has been idle for RecycleIdle.
func TestAPickedWorkerIsNotRecycled(t *testing.T) {
	ctx := context.Background()
	pool := startPool(t, Config{Workers: 1, Isolation: IsolationTenant, RecycleIdle: time.Millisecond})
	if _, err := pool.RunFor(ctx, "bob", job("async () => 1")); err != nil {
		t.Fatal(err)
	}
	bobs := pidsOf(pool)
	held := make(chan *process, 1)
	release := make(chan struct{})
	pool.pickHold = func(p *process) {
		if p.owner() != "bob" {
			return
		}
		held <- p
		<-release
	}
	bobDone := make(chan error, 1)
	go func() {
		_, err := pool.RunFor(ctx, "bob", job("async () => 2"))
		bobDone <- err
	}()
	p := <-held
	malloryDone := make(chan error, 1)
	go func() {
		_, err := pool.RunFor(ctx, "mallory", program.Job{Timeout: 5 * time.Second, Program: program.Program{Code: "async () => 3"}})
		malloryDone <- err
	}()
	waitfor.Until(t, 10*time.Second, "mallory waiting for a worker", func() bool {
		pool.mu.Lock()
		defer pool.mu.Unlock()
		return pool.waiters["mallory"] > 0
	})
	time.Sleep(100 * time.Millisecond) // mallory's waits poll for a worker meanwhile
	p.mu.Lock()
	retiring := p.retiring
	p.mu.Unlock()
	close(release)
	if retiring {
		t.Fatalf("bob's worker (pid %d) was recycled for mallory while bob's run was placed on it", p.pid)
	}
	if err := <-bobDone; err != nil {
		t.Fatalf("bob's run: %v", err)
	}
	if err := <-malloryDone; err != nil {
		t.Fatalf("mallory, once bob's run was answered: %v", err)
	}
	if len(bobs) != 1 || bobs[0] != p.pid {
		t.Fatalf("bob's second run went to pid %d, his worker was %v", p.pid, bobs)
	}
}
