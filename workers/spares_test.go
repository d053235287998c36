package workers

import (
	"context"
	"fmt"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/retainer-gw/retainer/budgets"
	"github.com/retainer-gw/retainer/internal/waitfor"
	"github.com/retainer-gw/retainer/program"
)

func TestSparesFor(t *testing.T) {
	for _, c := range []struct{ held, outran, every, want int }{
		{0, 0, 25, 1},
		{24, 5, 25, 1}, // a small pool keeps one, however fast newcomers come
		{25, 0, 25, 2},
		{50, 0, 25, 3},
		{200, 0, 25, budgets.SpareWorkers},
		{1000, 0, 25, budgets.SpareWorkers},
		{30, 4, 25, 5}, // newcomers outran the spares four times
		{30, 20, 25, budgets.SpareWorkers},
		{10, 0, 0, 1},
	} {
		if got := sparesFor(c.held, c.outran, c.every); got != c.want {
			t.Errorf("sparesFor(%d, %d, %d) = %d, want %d", c.held, c.outran, c.every, got, c.want)
		}
	}
}

// sparesPool is a `workers auto` pool with room for many workers that
// keeps one more spare for every `every` tenant workers (spares.go).
func sparesPool(t *testing.T, every int) *Pool {
	pool := startPool(t, Config{Isolation: IsolationTenant, WorkerMemory: 64 << 30, MaxWorkers: 32})
	pool.mu.Lock()
	pool.spareEvery = every
	pool.mu.Unlock()
	return pool
}

// spares answers the pids of the spares up, and how many the pool keeps.
func spares(pool *Pool) (map[int]bool, int) {
	up := map[int]bool{}
	for _, s := range pool.Status() {
		if s.State == "up" && s.Tenant == "" {
			up[s.PID] = true
		}
	}
	return up, pool.Budget().Spares
}

// waitSpares waits until as many spares as the pool keeps are up, and at
// least least, and answers their pids.
func waitSpares(t *testing.T, pool *Pool, least int) map[int]bool {
	t.Helper()
	var up map[int]bool
	waitfor.Until(t, 30*time.Second, fmt.Sprintf("at least %d spares up", least), func() bool {
		var want int
		up, want = spares(pool)
		return want >= least && len(up) >= want
	})
	return up
}

// bystanders deploys a counter for each of n tenants, one at a time, each
// after the spares are up again (so that none outran them), and serves
// them in a loop until the returned stop is called; stop checks that no
// call failed and that every counter kept its state (its next answer is
// the calls served plus one).
func bystanders(t *testing.T, pool *Pool, n int) (stop func()) {
	t.Helper()
	ctx := context.Background()
	for i := range n {
		waitSpares(t, pool, 1)
		id := fmt.Sprintf("bystander-%d", i)
		if _, err := pool.RunFor(ctx, id, program.Job{ID: id, RetainHandles: true, Program: program.Program{Code: counter}}); err != nil {
			t.Fatal(err)
		}
	}
	done := make(chan struct{})
	var wg sync.WaitGroup
	served := make([]int, n)
	failed := make([]error, n)
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			id := fmt.Sprintf("bystander-%d", i)
			for {
				select {
				case <-done:
					return
				default:
				}
				res, err := get(pool, id, "https://x/")
				if err == nil && string(res.BodyBytes()) != strconv.Itoa(served[i]+1) {
					err = fmt.Errorf("answered %q after %d calls: its state was lost", res.BodyBytes(), served[i])
				}
				if err != nil {
					failed[i] = err
					return
				}
				served[i]++
			}
		}()
	}
	return func() {
		t.Helper()
		close(done)
		wg.Wait()
		for i := range n {
			if failed[i] != nil {
				t.Fatalf("bystander %d: %v", i, failed[i])
			}
			id := fmt.Sprintf("bystander-%d", i)
			if body := getBody(t, pool, id, "https://x/"); body != strconv.Itoa(served[i]+1) {
				t.Fatalf("bystander %d answered %s after %d calls", i, body, served[i])
			}
		}
	}
}

// newcomers makes each tenant's first deploy at once, and checks that
// each answered and that its worker was one of the spares up before they
// came: none waited for a process to start.
func newcomers(t *testing.T, pool *Pool, ready map[int]bool, tenants ...string) {
	t.Helper()
	errs := make(chan error, len(tenants))
	for _, tenant := range tenants {
		go func() {
			_, err := pool.RunFor(context.Background(), tenant, program.Job{ID: tenant, RetainHandles: true, Program: program.Program{Code: counter}})
			errs <- err
		}()
	}
	for range tenants {
		if err := <-errs; err != nil {
			t.Fatalf("a newcomer's first deploy: %v", err)
		}
	}
	status := pool.Status()
	for _, tenant := range tenants {
		i := pool.WorkerOf(tenant)
		if i < 0 || !ready[status[i].PID] {
			t.Errorf("newcomer %s is served by worker %d, not by a spare up before it came (spares: %v; workers: %+v)", tenant, i, ready, status)
		}
		if body := getBody(t, pool, tenant, "https://x/"); body != "1" {
			t.Errorf("newcomer %s's counter answered %s", tenant, body)
		}
	}
}

// Under load, a pool at a platform's scale keeps a spare for every
// spareEvery tenant workers (here 2), so newcomers arriving together each
// find a process up: every first deploy answers, from a spare started
// before it came, the spares are replenished, and the bystanders' counters
// keep their state. With one spare kept, two of the three waited for a
// start (and under 200 tenants' load a start took 0.5-2 s).
func TestNewcomersArrivingTogetherFindSparesReady(t *testing.T) {
	pool := sparesPool(t, 2)
	stop := bystanders(t, pool, 4)
	ready := waitSpares(t, pool, 3) // 4 tenant workers: 1 + 4/2
	newcomers(t, pool, ready, "new-a", "new-b", "new-c")
	waitSpares(t, pool, 4) // 7 tenant workers: 1 + 7/2
	stop()
}

// When newcomers outrun the spares (a burst larger than the spares kept),
// the pool keeps one more for each that found none ready, for
// spareWindow: the next burst of that size finds them up. Once the pool
// keeps fewer, and has for spareLinger, the spares above that number are
// retired.
func TestSparesFollowNewcomersThatOutranThem(t *testing.T) {
	pool := sparesPool(t, 4)
	stop := bystanders(t, pool, 4)
	ready := waitSpares(t, pool, 2) // 4 tenant workers: 1 + 4/4
	// Five at once: two find spares up, three outrun them.
	errs := make(chan error, 5)
	for i := range 5 {
		go func() {
			id := fmt.Sprintf("first-%d", i)
			_, err := pool.RunFor(context.Background(), id, program.Job{ID: id, RetainHandles: true, Program: program.Program{Code: counter}})
			errs <- err
		}()
	}
	for range 5 {
		if err := <-errs; err != nil {
			t.Fatalf("a newcomer's first deploy: %v", err)
		}
	}
	_ = ready
	ready = waitSpares(t, pool, 4) // 1 + 3 that outran (9 tenant workers: 1 + 9/4 is less)
	newcomers(t, pool, ready, "second-a", "second-b", "second-c", "second-d")
	stop()
	// A pool that keeps one spare retires the others, one a second.
	pool.mu.Lock()
	pool.spareEvery, pool.outran, pool.spareLinger = 1000, nil, 2*time.Second
	pool.mu.Unlock()
	waitfor.Until(t, 30*time.Second, "the spares retired down to one", func() bool {
		up, want := spares(pool)
		return want == 1 && len(up) == 1
	})
}

// A spare's start that begins while a newcomer's first run in the spare it
// took is under way waits for that run to be answered (spareDefer): every
// start the pool makes then finds no such run pending; a start a newcomer
// claims begins at once, with the first run still under way.
func TestASparesStartWaitsForTheFirstRunOfTheSpareTaken(t *testing.T) {
	pool := sparesPool(t, 25)
	pool.mu.Lock()
	pool.spareDefer = time.Minute
	pool.mu.Unlock()
	waitSpares(t, pool, 1)
	starts := make(chan int, 8) // the first runs pending at each start
	hold := func(int) {
		pool.mu.Lock()
		starts <- pool.takenRuns
		pool.mu.Unlock()
	}
	pool.startHold.Store(&hold)
	defer pool.startHold.Store(nil)
	run := func(tenant, code string) error {
		_, err := pool.RunFor(context.Background(), tenant, program.Job{Program: program.Program{Code: code}, Timeout: 10 * time.Second})
		return err
	}
	// newcomer-0 takes the spare up and waits; the spare that replaces it
	// is not started until its run is answered.
	if err := run("newcomer-0", `async () => { await new Promise(r => setTimeout(r, 500)); return 1 }`); err != nil {
		t.Fatal(err)
	}
	select {
	case pending := <-starts:
		if pending != 0 {
			t.Fatalf("a spare started with %d first runs of spares taken pending", pending)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("no spare started after the first run was answered")
	}
	waitSpares(t, pool, 1)
	// newcomer-1 takes it, newcomer-2 claims the deferred start: it
	// begins while newcomer-1's first run is under way.
	done := make(chan error, 1)
	go func() {
		done <- run("newcomer-1", `async () => { await new Promise(r => setTimeout(r, 3000)); return 1 }`)
	}()
	waitfor.Until(t, 10*time.Second, "newcomer-1 in the spare", func() bool {
		pool.mu.Lock()
		defer pool.mu.Unlock()
		return pool.takenRuns == 1 && len(pool.spareStarts) == 1
	})
	claimed := make(chan error, 1)
	go func() { claimed <- run("newcomer-2", `async () => 2`) }()
	select {
	case pending := <-starts:
		if pending != 1 {
			t.Fatalf("the claimed start began with %d first runs pending, want newcomer-1's", pending)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("the claimed spare did not start while newcomer-1's first run was under way")
	}
	for _, ch := range []chan error{claimed, done} {
		if err := <-ch; err != nil {
			t.Fatal(err)
		}
	}
}
