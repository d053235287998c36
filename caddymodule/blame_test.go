package caddymodule

import (
	"fmt"
	"strings"
	"syscall"
	"testing"
	"time"
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
	return string(do(t, "GET", api("/handles/"+id+"/logs"), tok, nil).body)
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
