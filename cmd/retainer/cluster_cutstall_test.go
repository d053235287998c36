package main

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/retainer-gw/retainer/internal/etcdtest"
	"github.com/retainer-gw/retainer/internal/pgtest"
	"github.com/retainer-gw/retainer/internal/waitfor"
)

// A tenant's first refusal by its plan in a day, on a handle and on the
// API, is decided from the gateway's memory; whether the handle's log was
// told of the cut already is PostgreSQL's word (plans.cuts.v1), which the
// refusal waits for at most 100 ms (docs/usage.md, "What counts, and
// where"). Here cora is cut while PostgreSQL is SIGSTOPped: her visit's
// and her API call's 429 come within 1 s (before, each waited for the
// table's read and write bounds, 6.5 s), and once PostgreSQL resumes her
// handle's log holds the cut's one entry. bea, another tenant, is visited
// throughout: every visit 200 and counted once by her closure and in her
// usage.
func TestClusterFirstCutWhilePostgreSQLIsPaused(t *testing.T) {
	srv := etcdtest.Start(t)
	pg := pgtest.Start(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	gw := memberWithPlans(t, ctx, srv.Endpoint, pg.DSN, `
		plans {
			tiny {
				requests_per_day 3
			}
		}`)
	planToken := func(args ...string) string {
		out, err := binary(ctx, append([]string{"retainer-token"}, args...)...).Output()
		if err != nil {
			t.Fatalf("retainer-token: %v", err)
		}
		return strings.TrimSpace(string(out))
	}
	deployAs := func(tok, code string) string {
		status, answer := clusterCall(t, "POST", gw.api+"/executions", tok, fmt.Sprintf(`{"retainHandles": true, "code": %q}`, code))
		var dep struct{ ExecutionID string }
		if json.Unmarshal([]byte(answer), &dep) != nil || status != 200 || dep.ExecutionID == "" {
			t.Fatalf("deploying: %d %s", status, answer)
		}
		return dep.ExecutionID
	}
	requests := func(tok string) (int64, string) {
		status, body := clusterCall(t, "GET", gw.api+"/usage", tok, "")
		var out struct{ Usage []struct{ Requests int64 } }
		if json.Unmarshal([]byte(body), &out) != nil || status != 200 {
			return -1, fmt.Sprintf("%d %s", status, body)
		}
		var n int64
		for _, u := range out.Usage {
			n += u.Requests
		}
		return n, body
	}

	cora := planToken("--sub", "cora", "--plan", "tiny")
	bea := tokenFor(t, ctx, "bea")
	coraID := deployAs(cora, counterHandler)
	beaID := deployAs(bea, counterHandler)
	for i := 1; i <= 3; i++ {
		if status, body := visitKey(t, 1, coraID); status != 200 || body != fmt.Sprint(i) {
			t.Fatalf("cora's visit %d: %d %q", i, status, body)
		}
	}
	if n, body := requests(cora); n != 3 {
		t.Fatalf("cora's usage before the pause: %s", body)
	}
	beaVisits := 0
	visitBea := func(when string) {
		beaVisits++
		if status, body := visitKey(t, 1, beaID); status != 200 || body != fmt.Sprint(beaVisits) {
			t.Errorf("bea's visit %d %s: %d %q", beaVisits, when, status, body)
		}
	}
	visitBea("before the pause")

	pg.Pause(t)
	resumed := false
	defer func() {
		if !resumed {
			pg.Resume(t)
		}
	}()
	paused := time.Now()
	stop := make(chan struct{})
	beaDone := make(chan struct{})
	go func() {
		defer close(beaDone)
		for {
			select {
			case <-stop:
				return
			case <-time.After(50 * time.Millisecond):
			}
			visitBea("with PostgreSQL paused")
		}
	}()
	time.Sleep(200 * time.Millisecond)
	const bound = time.Second
	refusedWithin := func(what string, call func() (int, string)) {
		started := time.Now()
		status, body := call()
		took := time.Since(started)
		if status != 429 || !strings.Contains(body, "QUOTA_EXCEEDED") || took > bound {
			t.Errorf("%s with PostgreSQL paused: %d %q after %v, want 429 QUOTA_EXCEEDED within %v", what, status, body, took.Round(time.Millisecond), bound)
			return
		}
		t.Logf("%s with PostgreSQL paused: 429 after %v", what, took.Round(time.Millisecond))
	}
	refusedWithin("cora's first refused visit", func() (int, string) { return visitKey(t, 1, coraID) })
	refusedWithin("cora's next visit", func() (int, string) { return visitKey(t, 1, coraID) })
	refusedWithin("cora's first refused API call", func() (int, string) { return clusterCall(t, "GET", gw.api+"/handles", cora, "") })
	time.Sleep(time.Until(paused.Add(3 * time.Second)))
	close(stop)
	<-beaDone
	pg.Resume(t)
	resumed = true
	visitBea("after the pause")

	var body string
	if !waitfor.Within(20*time.Second, func() bool {
		var status int
		status, body = clusterCall(t, "GET", gw.api+"/handles/"+coraID+"/logs", cora, "")
		return status == 200 && strings.Count(body, "plan allows") >= 1
	}) || strings.Count(body, "plan allows") != 1 {
		t.Fatalf("cora's log once PostgreSQL resumed: %s, want the cut's one entry", body)
	}
	var got int64
	if !waitfor.Within(20*time.Second, func() bool {
		got, body = requests(bea)
		return got >= int64(beaVisits)
	}) || got != int64(beaVisits) {
		t.Fatalf("bea's usage once PostgreSQL resumed: %d requests, want her %d visits: %s", got, beaVisits, body)
	}
	if n, body := requests(cora); n != 3 {
		t.Fatalf("cora's usage: %s, want her 3 visits served", body)
	}
	t.Logf("bea visited %d times, each 200 and counted once", beaVisits)
}

// An API call whose token names a plan later than the one recorded
// records it in PostgreSQL (plans.v1), and waits for that at most 250 ms
// (docs/usage.md, "How the data plane knows a tenant's plan"): four
// tenants' first calls naming a plan, at once while PostgreSQL is
// SIGSTOPped, are each answered 200 within 1 s (before, the records ran
// one after another under one lock, each waiting for its read's 1.5 s:
// the last answered after ~6 s). Once PostgreSQL resumes, each tenant's
// next call records its plan, which then holds: two visits served, the
// third refused. A bystander with no plan is visited throughout, each
// visit 200 and counted once by its closure.
func TestClusterPlanRecordsWhilePostgreSQLIsPaused(t *testing.T) {
	srv := etcdtest.Start(t)
	pg := pgtest.Start(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	gw := memberWithPlans(t, ctx, srv.Endpoint, pg.DSN, `
		plans {
			tiny {
				requests_per_day 2
			}
		}`)
	deployAs := func(tok string) string {
		status, answer := clusterCall(t, "POST", gw.api+"/executions", tok, fmt.Sprintf(`{"retainHandles": true, "code": %q}`, counterHandler))
		var dep struct{ ExecutionID string }
		if json.Unmarshal([]byte(answer), &dep) != nil || status != 200 || dep.ExecutionID == "" {
			t.Fatalf("deploying: %d %s", status, answer)
		}
		return dep.ExecutionID
	}
	// The tenants deploy with tokens naming no plan (nothing recorded).
	const tenants = 4
	ids := make([]string, tenants)
	planned := make([]string, tenants)
	for i := range ids {
		sub := fmt.Sprintf("rec%d", i)
		ids[i] = deployAs(tokenFor(t, ctx, sub))
		out, err := binary(ctx, "retainer-token", "--sub", sub, "--plan", "tiny").Output()
		if err != nil {
			t.Fatal(err)
		}
		planned[i] = strings.TrimSpace(string(out))
	}
	bystander := deployAs(tokenFor(t, ctx, "dot"))
	dotVisits := 0
	visitDot := func(when string) {
		dotVisits++
		if status, body := visitKey(t, 1, bystander); status != 200 || body != fmt.Sprint(dotVisits) {
			t.Errorf("dot's visit %d %s: %d %q", dotVisits, when, status, body)
		}
	}
	visitDot("before the pause")

	pg.Pause(t)
	resumed := false
	defer func() {
		if !resumed {
			pg.Resume(t)
		}
	}()
	stop := make(chan struct{})
	dotDone := make(chan struct{})
	go func() {
		defer close(dotDone)
		for {
			select {
			case <-stop:
				return
			case <-time.After(50 * time.Millisecond):
			}
			visitDot("with PostgreSQL paused")
		}
	}()
	const bound = time.Second
	var wg sync.WaitGroup
	for i := range planned {
		wg.Add(1)
		go func() {
			defer wg.Done()
			started := time.Now()
			status, body := clusterCall(t, "GET", gw.api+"/handles", planned[i], "")
			took := time.Since(started)
			if status != 200 || took > bound {
				t.Errorf("rec%d's first call naming a plan with PostgreSQL paused: %d %q after %v, want 200 within %v", i, status, body, took.Round(time.Millisecond), bound)
				return
			}
			t.Logf("rec%d's first call naming a plan with PostgreSQL paused: 200 after %v", i, took.Round(time.Millisecond))
		}()
	}
	wg.Wait()
	time.Sleep(2 * time.Second)
	close(stop)
	<-dotDone
	pg.Resume(t)
	resumed = true

	// Each tenant's next call records its plan (its first did not reach
	// PostgreSQL, or did behind the answer): then it holds.
	for i, tok := range planned {
		if !waitfor.Within(20*time.Second, func() bool {
			status, _ := clusterCall(t, "GET", gw.api+"/handles", tok, "")
			return status == 200
		}) {
			t.Fatalf("rec%d's call once PostgreSQL resumed", i)
		}
		for v := 1; v <= 2; v++ {
			if status, body := visitKey(t, 1, ids[i]); status != 200 || body != fmt.Sprint(v) {
				t.Fatalf("rec%d's visit %d on its plan: %d %q", i, v, status, body)
			}
		}
		if status, body := visitKey(t, 1, ids[i]); status != 429 {
			t.Fatalf("rec%d's third visit on a plan of 2 a day: %d %q, want 429 (its plan recorded)", i, status, body)
		}
	}
	visitDot("after the pause")
	t.Logf("dot visited %d times, each 200 and counted once", dotVisits)
}
