package caddymodule

import (
	"fmt"
	"sync"
	"testing"
	"time"
)

// A burst of new tenants larger than the spares kept (a small pool keeps
// one; workers/spares.go) is never refused: twelve first deploys and
// twelve first computations at once, on `workers auto` with room in
// memory, each answer 200, those past the spares after the worker starts
// they waited for (a start is not a wait for a slot, so no bound refuses
// it). Each newcomer's handle is in a worker of its own (one tenant a
// worker), and bob's counter, served throughout, keeps its state and its
// worker.
func TestABurstOfNewcomersLargerThanTheSparesIsNeverRefused(t *testing.T) {
	bob, _ := attacked(t, "workers auto")
	stop := make(chan struct{})
	bobErr := make(chan error, 1)
	go func() {
		defer close(bobErr)
		for {
			select {
			case <-stop:
				return
			default:
			}
			a := do(t, "GET", site(bob.route+".apps.localhost", "/"), "", nil)
			if a.status != 200 {
				bobErr <- fmt.Errorf("bob's handle answered %d %s during the burst", a.status, a.body)
				return
			}
			bob.count++
			var m struct{ Served int }
			if err := jsonUnmarshal(a.body, &m); err != nil || m.Served != bob.count {
				bobErr <- fmt.Errorf("bob's counter answered %s, want %d: his state was lost", a.body, bob.count)
				return
			}
			time.Sleep(5 * time.Millisecond)
		}
	}()

	const n = 12
	toks := make([]string, 2*n)
	for i := range toks {
		toks[i] = token(t, fmt.Sprintf("newcomer-%d", i), allScopes)
	}
	ids := make([]string, n)
	answers := make([]answer, 2*n)
	var wg sync.WaitGroup
	for i := range 2 * n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if i < n {
				answers[i] = execute(t, toks[i], map[string]any{"code": counter, "retainHandles": true, "timeoutMs": 5000})
			} else {
				answers[i] = execute(t, toks[i], map[string]any{"code": "async () => 1 + 1"})
			}
		}()
	}
	wg.Wait()
	close(stop)
	if err := <-bobErr; err != nil {
		t.Fatal(err)
	}
	for i, a := range answers {
		if a.status != 200 {
			t.Fatalf("newcomer %d's first request: %d %s", i, a.status, a.body)
		}
		if i < n {
			ids[i], _ = a.json(t)["executionId"].(string)
		} else if r := a.json(t)["result"]; r != 2.0 {
			t.Fatalf("newcomer %d's computation answered %v", i, r)
		}
	}
	pids := map[int]string{bob.pid: "bob"}
	for i, id := range ids {
		if got := served(t, do(t, "GET", site(id+".apps.localhost", "/"), "", nil)); got != 1 {
			t.Fatalf("newcomer %d's counter answered %d", i, got)
		}
		pid := hostPID(t, id)
		if other, ok := pids[pid]; ok || pid == 0 {
			t.Fatalf("newcomer %d's handle is in worker %d, with %s's", i, pid, other)
		}
		pids[pid] = fmt.Sprint("newcomer ", i)
	}
	bob.check("the burst")
}
