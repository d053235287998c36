package main

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/retainer-gw/retainer/internal/etcdtest"
	"github.com/retainer-gw/retainer/internal/pgtest"
	"github.com/retainer-gw/retainer/internal/waitfor"
)

// lateKVHandler (a 2 s bound) waits 1.2 s, then reads a key etcd must
// answer; its closure counts its visits, so an isolate disposed shows.
const lateKVHandler = `let served = 0; export default { async fetch(req, env) {
	const n = ++served;
	await new Promise(r => setTimeout(r, 1200));
	try { await env.kv.get('k' + Math.random()) } catch (e) { return new Response('refused ' + n + ': ' + e.message, {status: 503}) }
	return new Response('ok ' + n) } }`

// A kv call waits for etcd at most half what is left of its invocation's
// bound, which the worker sends with the call (docs/cluster.md,
// "Failures"), not half the whole bound: a handler with a 2 s bound that
// reads kv 1.2 s in, with etcd SIGSTOPped, gets OVERLOADED 0.4 s later and
// answers its own 503, its closure kept (before, the read waited 1 s and
// the bound ended the invocation at 2 s: 504 TIMEOUT, its isolate
// disposed, its count started again). Bob's closure, another tenant's, is
// served throughout.
func TestClusterKVCallWaitsHalfWhatIsLeft(t *testing.T) {
	late, _, got, n := visitLateWhileEtcdPaused(t, lateKVHandler, `["kvRead"]`)
	if got.status != 503 || !strings.HasPrefix(got.body, "refused 2: ") {
		t.Fatalf("the late reader with etcd paused: %d %q after %v, want its own 503 (refused 2: ...) before its 2 s bound", got.status, got.body, got.took.Round(time.Millisecond))
	}
	t.Logf("the late reader with etcd paused: %d %q after %v; bob served %d times meanwhile", got.status, got.body, got.took.Round(time.Millisecond), n-1)
	lateKeptItsClosure(t, late, "reader")
}

// lateAnswer is how a late kv caller was answered with etcd paused.
type lateAnswer struct {
	status int
	body   string
	took   time.Duration
}

// visitLateWhileEtcdPaused deploys code (a 2 s bound, capabilities caps)
// and bob's counter on one member, visits each once, then SIGSTOPs etcd
// and visits the late handle once while bob's closure is visited every
// 50 ms (each visit checked), and resumes etcd once the late visit is
// answered: it answers the late handle, bob's, the late visit's answer
// and bob's count.
func visitLateWhileEtcdPaused(t *testing.T, code, caps string) (late, bob string, got lateAnswer, n int) {
	t.Helper()
	etcd := etcdtest.StartProcess(t)
	pg := pgtest.Start(t)
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	gw := memberWithLease(t, ctx, 1, etcd.Endpoint, pg.DSN, "5s")
	late = deployThrough(t, gw, fmt.Sprintf(`{"retainHandles": true, "timeoutMs": 2000, "capabilities": %s, "code": %q}`, caps, code))
	status, answer := clusterCall(t, "POST", gw.api+"/executions", tokenFor(t, ctx, "bob"), fmt.Sprintf(`{"retainHandles": true, "code": %q}`, counterHandler))
	var dep struct{ ExecutionID string }
	if json.Unmarshal([]byte(answer), &dep) != nil || status != 200 {
		t.Fatalf("bob's deploy: %d %s", status, answer)
	}
	bob = dep.ExecutionID
	if status, body := visitKey(t, 1, late); status != 200 || body != "ok 1" {
		t.Fatalf("the late handle before the pause: %d %q", status, body)
	}
	if status, body := visitKey(t, 1, bob); status != 200 || body != "1" {
		t.Fatalf("bob before the pause: %d %q", status, body)
	}

	etcd.Pause()
	resumed := false
	defer func() {
		if !resumed {
			etcd.Resume()
		}
	}()
	lateDone := make(chan lateAnswer, 1)
	go func() {
		started := time.Now()
		status, body := visitKey(t, 1, late)
		lateDone <- lateAnswer{status, body, time.Since(started)}
	}()
	// Bob is visited until the late handle is answered.
	n = 1
	for waiting := true; waiting; {
		select {
		case got = <-lateDone:
			waiting = false
		case <-time.After(50 * time.Millisecond):
			n++
			if status, body := visitKey(t, 1, bob); status != 200 || body != fmt.Sprint(n) {
				t.Errorf("bob's visit %d with etcd paused: %d %q", n, status, body)
			}
		}
	}
	etcd.Resume()
	resumed = true
	return late, bob, got, n
}

// lateWriteHandler (a 2 s bound) writes kv once on its first visit (the
// worker learns its space then, so later writes are answered at once in
// the worker and sent in a batch), then on each visit waits 1.2 s and
// writes a key etcd must check; its closure counts its visits.
const lateWriteHandler = `let served = 0; export default { async fetch(req, env) {
	const n = ++served;
	if (n > 1) await new Promise(r => setTimeout(r, 1200));
	await env.kv.put('k' + Math.random(), 'v');
	return new Response('ok ' + n) } }`

// A kv write the worker answered at once and sent in its batch carries
// what was left of its invocation's bound (kv/cache's batch frame), and
// the gateway waits for etcd at most half of it, as for a kv call
// (docs/cluster.md, "Failures"): a handler with a 2 s bound that writes
// 1.2 s in, with etcd SIGSTOPped, is answered 503 OVERLOADED, the
// spec's answer for a write not made durable, before its bound, its
// closure kept (before, the batch's write waited half the whole bound, 1
// s, and the invocation passed its bound: 504 TIMEOUT, its isolate
// disposed, its count started again). Bob's closure, another tenant's,
// is served throughout.
func TestClusterKVBatchedWriteWaitsHalfWhatIsLeft(t *testing.T) {
	late, bob, got, n := visitLateWhileEtcdPaused(t, lateWriteHandler, `["kvRead", "kvWrite"]`)
	if got.status != 503 || !strings.Contains(got.body, "OVERLOADED") || got.took >= 2*time.Second {
		t.Fatalf("the late writer with etcd paused: %d %q after %v, want 503 OVERLOADED before its 2 s bound", got.status, got.body, got.took.Round(time.Millisecond))
	}
	t.Logf("the late writer with etcd paused: %d %q after %v; bob served %d times meanwhile", got.status, got.body, got.took.Round(time.Millisecond), n-1)
	lateKeptItsClosure(t, late, "writer")
	if status, body := visitKey(t, 1, bob); status != 200 || body != fmt.Sprint(n+1) {
		t.Fatalf("bob after the pause: %d %q, want %d", status, body, n+1)
	}
}

// lateKeptItsClosure visits the late handle once etcd answers again, until
// it answers 200 (within what 20 visits took), and fails t unless its
// closure was kept: its count goes on (ok 3 or later), not from 1.
func lateKeptItsClosure(t *testing.T, late, who string) {
	t.Helper()
	var status int
	var body string
	waitfor.Within(30*time.Second, func() bool {
		status, body = visitKey(t, 1, late)
		return status == 200
	})
	if !strings.HasPrefix(body, "ok ") || body == "ok 1" {
		t.Fatalf("the late %s after the pause: %d %q, want its closure kept (ok 3 or later)", who, status, body)
	}
}
