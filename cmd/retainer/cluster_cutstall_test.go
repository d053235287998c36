package main

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"strings"
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
	config := clusterConfig(t, 1, srv.Endpoint, pg.DSN)
	data, err := os.ReadFile(config)
	if err != nil {
		t.Fatal(err)
	}
	s := strings.Replace(string(data), "isolation tenant", "isolation shared", 1)
	s = strings.Replace(s, "retainer {", `retainer {
		plans {
			tiny {
				requests_per_day 3
			}
		}`, 1)
	if err := os.WriteFile(config, []byte(s), 0o600); err != nil {
		t.Fatal(err)
	}
	gw := startMemberAt(t, ctx, 1, config)
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
