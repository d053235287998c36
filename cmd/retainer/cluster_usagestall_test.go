package main

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/retainer-gw/retainer/internal/etcdtest"
	"github.com/retainer-gw/retainer/internal/pgtest"
	"github.com/retainer-gw/retainer/internal/waitfor"
)

// A tenant's first plan check of a day on a gateway reads its day from
// PostgreSQL (docs/usage.md); right after UTC midnight every tenant's is
// the first, as after a start. Here twelve tenants on a plan make their
// first plan-checked visit at once while PostgreSQL is SIGSTOPped for 6 s
// and dora, on a plan, visits throughout: every visit is answered 200
// within 4 s (a read's own bound is 1.5 s; before, each first check waited
// for the usage flush's lock, held across PostgreSQL's calls, and then for
// each other's reads, one at a time). Once PostgreSQL resumes, dora's
// usage is every visit she was answered, and each newcomer's its one
// visit: none lost (a flush during the stall wrote a row from a failed
// read, or gave up its counts when its commit failed) nor counted twice.
func TestClusterFirstPlanChecksWhilePostgreSQLIsPaused(t *testing.T) {
	srv := etcdtest.Start(t)
	pg := pgtest.Start(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	// Thirteen tenants share the two workers (isolation is not what is
	// tested here).
	gw := memberWithPlans(t, ctx, srv.Endpoint, pg.DSN, `
		plans {
			small {
				requests_per_day 100000
			}
		}`)
	tokenFor := func(args ...string) string {
		out, err := binary(ctx, append([]string{"retainer-token"}, args...)...).Output()
		if err != nil {
			t.Errorf("retainer-token: %v", err)
		}
		return strings.TrimSpace(string(out))
	}
	code := `{"retainHandles": true, "code": "export default { fetch() { return new Response('ok') } }"}`
	deployAs := func(tok string) (string, error) {
		status, answer := clusterCall(t, "POST", gw.api+"/executions", tok, code)
		var dep struct{ ExecutionID string }
		json.Unmarshal([]byte(answer), &dep)
		if status != 200 || dep.ExecutionID == "" {
			return "", fmt.Errorf("deploying: %d %s", status, answer)
		}
		return dep.ExecutionID, nil
	}
	usageOf := func(tok string) (int64, string) {
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

	dora := tokenFor("--sub", "dora", "--plan", "small")
	doraID, err := deployAs(dora)
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 3; i++ {
		if status, body := visitKey(t, 1, doraID); status != 200 {
			t.Fatalf("dora's visit: %d %s", status, body)
		}
	}
	// Her reading of her usage writes what waits: her hour's row is in
	// PostgreSQL before it stops.
	before, body := usageOf(dora)
	if before != 3 {
		t.Fatalf("dora's usage before the stall: %s", body)
	}

	// The newcomers deploy with a token naming no plan (no plan check),
	// then read their logs with one naming small: that records the plan
	// and checks nothing (a tenant may always read its logs), so their
	// first plan check is their visit below.
	const newcomers = 12
	type newcomer struct{ id, token string }
	news := make([]newcomer, newcomers)
	for i := range news {
		sub := fmt.Sprintf("new%d", i)
		id, err := deployAs(tokenFor("--sub", sub))
		if err != nil {
			t.Fatal(err)
		}
		tok := tokenFor("--sub", sub, "--plan", "small")
		if status, body := clusterCall(t, "GET", gw.api+"/handles/"+id+"/logs", tok, ""); status != 200 {
			t.Fatalf("%s's logs: %d %s", sub, status, body)
		}
		news[i] = newcomer{id, tok}
	}

	pg.Pause(t)
	resumed := false
	defer func() {
		if !resumed {
			pg.Resume(t)
		}
	}()
	paused := time.Now()
	const bound = 4 * time.Second
	var wg sync.WaitGroup
	var mu sync.Mutex
	var slow []string
	answered := int64(0) // dora's visits answered 200
	var slowest time.Duration
	visitWithin := func(who, id string) bool {
		started := time.Now()
		status, body := visitKey(t, 1, id)
		took := time.Since(started)
		mu.Lock()
		defer mu.Unlock()
		slowest = max(slowest, took)
		if status != 200 || took > bound {
			slow = append(slow, fmt.Sprintf("%s: %d %q after %v (%v after the pause)", who, status, body, took.Round(time.Millisecond), started.Sub(paused).Round(time.Millisecond)))
			return false
		}
		return true
	}
	stop := make(chan struct{})
	doraDone := make(chan struct{})
	go func() {
		defer close(doraDone)
		for {
			select {
			case <-stop:
				return
			case <-time.After(50 * time.Millisecond):
			}
			if visitWithin("dora", doraID) {
				mu.Lock()
				answered++
				mu.Unlock()
			}
		}
	}()
	time.Sleep(300 * time.Millisecond)
	for i, n := range news {
		wg.Add(1)
		go func() {
			defer wg.Done()
			visitWithin(fmt.Sprintf("new%d's first visit", i), n.id)
		}()
	}
	wg.Wait()
	time.Sleep(time.Until(paused.Add(6 * time.Second)))
	close(stop)
	<-doraDone
	pg.Resume(t)
	resumed = true
	if len(slow) > 0 {
		t.Fatalf("visits with PostgreSQL paused not answered 200 within %v:\n%s", bound, strings.Join(slow, "\n"))
	}
	t.Logf("with PostgreSQL paused 6 s: %d visits of dora's and %d newcomers' first visits answered 200, the slowest after %v", answered, newcomers, slowest.Round(time.Millisecond))

	want := before + answered
	var got int64
	if !waitfor.Within(20*time.Second, func() bool {
		got, body = usageOf(dora)
		return got >= want
	}) || got != want {
		t.Fatalf("dora's usage once PostgreSQL resumed: %d requests, want %d (3 before, %d answered meanwhile): %s", got, want, answered, body)
	}
	for i, n := range news {
		var got int64
		var body string
		if !waitfor.Within(10*time.Second, func() bool {
			got, body = usageOf(n.token)
			return got >= 1
		}) || got != 1 {
			t.Errorf("new%d's usage once PostgreSQL resumed: %s, want its 1 visit", i, body)
		}
	}
	// Read again (each read writes what waits first): still as counted.
	if got, body = usageOf(dora); got != want {
		t.Fatalf("dora's usage read again: %d, want %d: %s", got, want, body)
	}
}

// memberWithPlans starts member 1 on etcd and dsn with its tenants in
// shared workers (isolation is not what the plans' tests test) and plans,
// the Caddyfile's plans block, in its retainer options.
func memberWithPlans(t *testing.T, ctx context.Context, etcd, dsn, plans string) *gateway {
	t.Helper()
	config := clusterConfig(t, 1, etcd, dsn)
	data, err := os.ReadFile(config)
	if err != nil {
		t.Fatal(err)
	}
	s := strings.Replace(string(data), "isolation tenant", "isolation shared", 1)
	s = strings.Replace(s, "retainer {", "retainer {"+plans, 1)
	if err := os.WriteFile(config, []byte(s), 0o600); err != nil {
		t.Fatal(err)
	}
	return startMemberAt(t, ctx, 1, config)
}
