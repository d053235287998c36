package caddymodule

import (
	"encoding/json"
	"fmt"
	"io"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/retainer-gw/retainer/internal/waitfor"
)

// Blame by CPU (docs/architecture.md, Blame): what the machine does to a
// worker is never the program's strike.

// burner spends ~ms of its thread's CPU on /burn: time is counted only in
// small steps, so a stop of its worker (one big step) does not count.
const burner = `let served = 0;
function burn(ms) {
	let spent = 0, last = Date.now();
	while (spent < ms) { const now = Date.now(); if (now - last <= 2) spent += now - last; last = now; }
}
export default { async fetch(request) {
	const path = new URL(request.url).pathname;
	if (path === '/burn') burn(150);
	if (path === '/wait') await new Promise(r => setTimeout(r, 600));
	return Response.json({ served: ++served });
} };`

// handleCounter follows a handle's closure counter through answers that
// may have cost it its isolate: a 200 must count on from the last one; a
// bound's error disposed the isolate, so the next count starts at 1.
type handleCounter struct {
	t    *testing.T
	last int
}

func (c *handleCounter) saw(what string, a answer, lostCodes ...string) {
	c.t.Helper()
	if a.status == 200 {
		if got := served(c.t, a); got != c.last+1 {
			c.t.Fatalf("%s: served %d, want %d: the handle's closure state was lost", what, got, c.last+1)
		}
		c.last++
		return
	}
	for _, code := range lostCodes {
		if a.code() == code {
			c.last = 0
			return
		}
	}
	c.t.Fatalf("%s: %d %s", what, a.status, a.body)
}

// handleLogs is the handle's log text, and asserts the handle still exists.
func handleLogs(t *testing.T, tok, id, after string) string {
	t.Helper()
	if a := do(t, "GET", api("/handles/"+id), tok, nil); a.status != 200 {
		t.Fatalf("after %s the handle was ended: %d %s", after, a.status, a.body)
	}
	// The whole stored log, page by page (request entries are many).
	var all strings.Builder
	q := "?since=2000-01-01T00:00:00Z&limit=1000"
	for pages := 0; pages < 100; pages++ {
		a := do(t, "GET", api("/handles/"+id+"/logs"+q), tok, nil)
		var page struct {
			Logs   []json.RawMessage
			Cursor string
		}
		if a.status != 200 || json.Unmarshal(a.body, &page) != nil {
			t.Fatalf("the handle's log after %s: %d %.300s", after, a.status, a.body)
		}
		if len(page.Logs) == 0 {
			break
		}
		for _, e := range page.Logs {
			all.Write(e)
			all.WriteByte('\n')
		}
		q = "?limit=1000&cursor=" + page.Cursor
	}
	return all.String()
}

// A handler that spends ~150 ms of CPU a call, whose worker is stopped for
// 0.8 s in the middle of calls (SIGSTOP, SIGCONT: what a busy machine does
// to it, only longer), is never struck: each call either answers or answers
// TIMEOUT (its 500 ms bound passed on the wall clock) with no strike, and
// the handle outlives more stops than bound_strikes. Before, a turn that
// had not yet held its isolate 20 ms was charged wall time: each stopped
// call was a strike and the third ended the handle.
func TestStoppedWorkerIsNoStrike(t *testing.T) {
	bob, mallory := attacked(t, "bound_strikes 3")
	id := deploy(t, mallory, burner, map[string]any{"timeoutMs": 500})
	handle := site(id+".apps.localhost", "/burn")
	c := &handleCounter{t: t}
	c.saw("the first call", do(t, "GET", site(id+".apps.localhost", "/"), "", nil))
	pid := hostPID(t, id) // mallory's worker: her handle stays there
	timeouts := 0
	// Back to back: an answer in between would reset the strike count.
	for round := 1; round <= 5; round++ {
		if now := hostPID(t, id); now != 0 {
			pid = now
		}
		answered := make(chan answer, 1)
		go func() { answered <- do(t, "GET", handle, "", nil) }()
		time.Sleep(40 * time.Millisecond) // the call is burning its CPU
		syscall.Kill(pid, syscall.SIGSTOP)
		time.Sleep(800 * time.Millisecond)
		syscall.Kill(pid, syscall.SIGCONT)
		a := <-answered
		if a.code() == "TIMEOUT" {
			timeouts++
		}
		c.saw(fmt.Sprintf("round %d", round), a, "TIMEOUT")
	}
	t.Logf("%d of 5 stopped calls answered TIMEOUT", timeouts)
	logs := handleLogs(t, mallory, id, "five stops")
	if strings.Contains(logs, "(strike ") {
		t.Fatalf("a stopped worker's call was struck: %.1500s", logs)
	}
	if timeouts > 0 && !strings.Contains(logs, "no strike") {
		t.Fatalf("the log does not say why the timeouts were no strikes: %.1500s", logs)
	}
	c.saw("after the stops", do(t, "GET", site(id+".apps.localhost", "/"), "", nil))
	bob.check("mallory's worker was stopped five times")
}

// A worker killed from outside (SIGKILL or SIGTERM from someone other than
// the gateway: the OOM killer, an operator) strikes nobody, even with a call
// in progress: the call answers WORKER_CRASHED (retryable), the handle is
// rebuilt on its next request (its closure state starts afresh), and its
// log says the worker was killed, not that a memory bound was hit. Before,
// the running handle was a suspect: three kills ended it "for exceeding
// its 64 MiB memory bound".
func TestWorkerKilledFromOutsideIsNoStrike(t *testing.T) {
	bob, mallory := attacked(t, "bound_strikes 3")
	id := deploy(t, mallory, burner, map[string]any{"timeoutMs": 2000})
	// Back to back (each call rebuilds the handle, then waits on its
	// timer): an answer in between would reset the strike count.
	for round := 1; round <= 5; round++ {
		answered := make(chan answer, 1)
		go func() { answered <- do(t, "GET", site(id+".apps.localhost", "/wait"), "", nil) }()
		pid := 0
		for deadline := time.Now().Add(5 * time.Second); pid == 0 && time.Now().Before(deadline); {
			select {
			case a := <-answered:
				t.Fatalf("kill %d: the call answered %d %s before its worker was killed", round, a.status, a.body)
			case <-time.After(20 * time.Millisecond):
			}
			pid = hostPID(t, id)
		}
		if pid == 0 {
			t.Fatalf("kill %d: no worker holds the handle", round)
		}
		time.Sleep(200 * time.Millisecond) // the call waits on its timer
		// The OOM killer's signal, or an operator's.
		sig := syscall.SIGKILL
		if round%2 == 0 {
			sig = syscall.SIGTERM
		}
		if err := syscall.Kill(pid, sig); err != nil {
			t.Fatal(err)
		}
		if a := <-answered; a.code() != "WORKER_CRASHED" {
			t.Fatalf("kill %d: the call in progress answered %d %s, want WORKER_CRASHED", round, a.status, a.body)
		}
	}
	logs := handleLogs(t, mallory, id, "five kills from outside")
	if !strings.Contains(logs, "was killed") {
		t.Fatalf("the log does not say the worker was killed: %.1500s", logs)
	}
	if strings.Contains(logs, "(strike ") || strings.Contains(logs, "memory") {
		t.Fatalf("a kill from outside was a strike, or named a memory bound: %.1500s", logs)
	}
	// Rebuilt: its closure state starts afresh.
	if a := do(t, "GET", site(id+".apps.localhost", "/"), "", nil); a.status != 200 || served(t, a) != 1 {
		t.Fatalf("after five kills: %d %s", a.status, a.body)
	}
	bob.check("mallory's worker was killed five times")
}

// An anonymous flood against one tenant's handle beside another tenant's
// handles that each spend ~45 ms of CPU a call: the machine is busy with
// the flood, so the busy handles' calls take long on the wall clock and
// answer TIMEOUT, but none of that is their program's doing, and none of
// them is ended. Before, a call that began an activity after a short one
// (the deploy, a rebuild) was charged wall time: each timeout was a
// strike, and the rebuild it caused made the next call count on the wall
// clock again (the issue counted 13 of 16 such handles ended under wrk).
// Bob's counter is sampled during the flood, its p50 logged.
func TestAnonymousFloodEndsNoBusyHandle(t *testing.T) {
	bob, mallory := attacked(t, "bound_strikes 3")
	target := deploy(t, mallory, `export default { fetch() { return new Response('ok'); } };`, nil)
	carol := token(t, "carol", allScopes)
	// A bound of 150 ms: under the flood, on two cores, most calls pass it
	// on the wall clock (before, 5 of 6 handles were ended by their first
	// three calls).
	busy := make([]string, 6)
	for i := range busy {
		req := map[string]any{"code": strings.Replace(burner, "burn(150)", "burn(45)", 1), "retainHandles": true, "timeoutMs": 150}
		// The previous test's calls may still hold the workers a moment.
		var a answer
		waitfor.Within(30*time.Second, func() bool {
			a = execute(t, carol, req)
			return a.code() != "OVERLOADED"
		})
		if id, _ := a.json(t)["executionId"].(string); a.status == 200 && id != "" {
			busy[i] = id
		} else {
			t.Fatalf("deploy: %d %.300s", a.status, a.body)
		}
	}
	stop := make(chan struct{})
	var wg sync.WaitGroup
	get := func(url string) (int, string) {
		res, err := client.Get(url)
		if err != nil {
			return 0, err.Error()
		}
		defer res.Body.Close()
		data, _ := io.ReadAll(res.Body)
		return res.StatusCode, string(data)
	}
	var flooded atomic.Int64
	for i := 0; i < 32; i++ {
		untilStopped(&wg, stop, func() {
			get(site(target+".apps.localhost", "/"))
			flooded.Add(1)
		})
	}
	type tally struct{ ok, timeouts, other int }
	tallies := make([]tally, len(busy))
	var mu sync.Mutex
	var others []string
	for i, id := range busy {
		untilStopped(&wg, stop, func() {
			status, body := get(site(id+".apps.localhost", "/burn"))
			mu.Lock()
			switch {
			case status == 200:
				tallies[i].ok++
			case strings.Contains(body, `"TIMEOUT"`):
				tallies[i].timeouts++
			default:
				tallies[i].other++
				others = append(others, fmt.Sprintf("%d %.200s", status, body))
			}
			mu.Unlock()
		})
	}
	var bobLatencies []time.Duration
	bobSamples := make(chan string, 1)
	go func() {
		defer close(bobSamples)
		for {
			select {
			case <-stop:
				return
			case <-time.After(100 * time.Millisecond):
			}
			start := time.Now()
			status, body := get(site(bob.route+".apps.localhost", "/"))
			if status != 200 {
				bobSamples <- fmt.Sprintf("%d %.200s", status, body)
				return
			}
			bobLatencies = append(bobLatencies, time.Since(start))
		}
	}()
	time.Sleep(8 * time.Second)
	close(stop)
	wg.Wait()
	if bad, failed := <-bobSamples; failed {
		t.Fatalf("bob's handle during the flood: %s", bad)
	}
	bob.count += len(bobLatencies)
	slices.Sort(bobLatencies)
	p50 := time.Duration(0)
	if len(bobLatencies) > 0 {
		p50 = bobLatencies[len(bobLatencies)/2]
	}
	t.Logf("%d flood requests in 8 s; carol's busy handles (ok/timeouts/other): %v; bob's p50 %v over %d samples", flooded.Load(), tallies, p50, len(bobLatencies))
	for _, o := range others {
		if !strings.Contains(o, "OVERLOADED") {
			t.Fatalf("a busy handle answered %s", o)
		}
	}
	for i, id := range busy {
		if logs := handleLogs(t, carol, id, "the flood"); strings.Contains(logs, "(strike ") {
			t.Fatalf("busy handle %d was struck during the flood: %.1500s", i, logs)
		}
	}
	bob.check("the anonymous flood")
}
