package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/retainer-gw/retainer/internal/etcdtest"
	"github.com/retainer-gw/retainer/internal/pgtest"
)

// callWithHeaders is clusterCall answering the response's headers too.
func callWithHeaders(t *testing.T, method, url, token, body string) (int, http.Header, string) {
	t.Helper()
	req, _ := http.NewRequest(method, url, strings.NewReader(body))
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	res, err := clusterClient.Do(req)
	if err != nil {
		return 0, nil, err.Error()
	}
	defer res.Body.Close()
	data, _ := io.ReadAll(res.Body)
	return res.StatusCode, res.Header, string(data)
}

// With PostgreSQL stopped, a receipt written before and the receipt list
// answer 503 OVERLOADED, retryable, with Retry-After (not 404 and 500),
// the failure is logged and the log lines are few however many reads
// fail; a bystander handle goes on serving, a computation run meanwhile
// is answered with its receipt, and once PostgreSQL is back the old
// receipt is read again and the new one is written by the gateway's own
// retry (listed after the gateway is killed: written late, not lost).
// etcd's database size is measured without kv_budget.
func TestClusterReceiptsWhilePostgreSQLIsDown(t *testing.T) {
	srv := etcdtest.Start(t)
	pg := pgtest.Start(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	gw := startMember(t, ctx, 1, srv.Endpoint, pg.DSN)
	// etcd's size is read without kv_budget (the metric was 0 before).
	deadline := time.Now().Add(10 * time.Second)
	for {
		_, m := clusterCall(t, "GET", fmt.Sprintf("http://localhost:%d/metrics", memberAdmin(1)), "", "")
		if metricValue(m, "retainer_cluster_etcd_db_bytes") > 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("retainer_cluster_etcd_db_bytes without kv_budget: %v", metricValue(m, "retainer_cluster_etcd_db_bytes"))
		}
		time.Sleep(100 * time.Millisecond)
	}

	shop := deployThrough(t, gw, fmt.Sprintf(`{"retainHandles": true, "capabilities": ["kvRead", "kvWrite"], "code": %q}`, shopHandler))
	bindThrough(t, gw, "shop", shop)
	compute := func() string {
		status, body := clusterCall(t, "POST", gw.api+"/executions", gw.token, `{"code": "async () => 6 * 7"}`)
		var run struct{ ResultID string }
		json.Unmarshal([]byte(body), &run)
		if status != 200 || !strings.Contains(body, `"result":42`) || run.ResultID == "" {
			t.Fatalf("a computation: %d %s", status, body)
		}
		return run.ResultID
	}
	old := compute()
	// The list commits what waits: the old receipt is in PostgreSQL.
	if status, body := clusterCall(t, "GET", gw.api+"/results", gw.token, ""); status != 200 || !strings.Contains(body, old) {
		t.Fatalf("the receipt list: %d %s", status, body)
	}

	pg.Stop(t)
	for _, path := range []string{"/results/" + old + ".json", "/results/" + old, "/results"} {
		for range 10 {
			status, h, body := callWithHeaders(t, "GET", gw.api+path, gw.token, "")
			var env struct {
				Error struct {
					Code      string
					Retryable bool
				}
			}
			json.Unmarshal([]byte(body), &env)
			if status != 503 || env.Error.Code != "OVERLOADED" || !env.Error.Retryable || h.Get("Retry-After") == "" {
				t.Fatalf("GET %s with PostgreSQL stopped: %d %v %s, want 503 OVERLOADED retryable with Retry-After", path, status, h, body)
			}
		}
	}
	if lines := strings.Count(gw.log.String(), "the receipt store failed"); lines < 1 || lines > 3 {
		t.Fatalf("30 failed receipt reads logged %d lines, want 1 to 3 (rate-limited):\n%s", lines, gw.log.String())
	}
	// Handlers do not need PostgreSQL.
	for n := 1; n <= 3; n++ {
		if status, body := visit(t, 1, "/"); status != 200 || body != fmt.Sprintf("%d %d", n, n) {
			t.Fatalf("a visit with PostgreSQL stopped: %d %q", status, body)
		}
	}
	meanwhile := compute()

	pg.Restart(t)
	deadline = time.Now().Add(20 * time.Second)
	for {
		status, body := clusterCall(t, "GET", gw.api+"/results/"+old+".json", gw.token, "")
		if status == 200 && strings.Contains(body, old) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the old receipt 20 s after PostgreSQL came back: %d %s", status, body)
		}
		time.Sleep(200 * time.Millisecond)
	}
	// The writer tries again on its own (every second): the receipt of
	// the run meanwhile is in PostgreSQL before the gateway is killed,
	// with no other receipt or list to push it.
	time.Sleep(3 * time.Second)
	gw.cmd.Process.Kill()
	gw.cmd.Wait()
	gw = startMember(t, ctx, 1, srv.Endpoint, pg.DSN)
	if status, body := clusterCall(t, "GET", gw.api+"/results", gw.token, ""); status != 200 || !strings.Contains(body, old) || !strings.Contains(body, meanwhile) {
		t.Fatalf("the receipt list after PostgreSQL came back and the gateway was killed: %d %s, want %s and %s", status, body, old, meanwhile)
	}
}

// PostgreSQL paused (SIGSTOP of its processes: nothing answered, no
// reset, as a server cut off by dropped packets looks): a stored
// receipt's read answers 503 OVERLOADED with Retry-After within the
// store's call bound (before: held until the kernel gave up on the
// connection); a bystander handler keeps serving and a computation is
// answered meanwhile, its receipt from memory; once PostgreSQL is back
// the receipt is written.
func TestClusterReceiptsWhilePostgreSQLIsPaused(t *testing.T) {
	srv := etcdtest.Start(t)
	pg := pgtest.Start(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	gw := startMember(t, ctx, 1, srv.Endpoint, pg.DSN)
	bindThrough(t, gw, "shop", deployThrough(t, gw, fmt.Sprintf(`{"retainHandles": true, "code": %q}`, counterHandler)))
	compute := func() string {
		status, body := clusterCall(t, "POST", gw.api+"/executions", gw.token, `{"code": "async () => 6 * 7"}`)
		var run struct{ ResultID string }
		json.Unmarshal([]byte(body), &run)
		if status != 200 || run.ResultID == "" {
			t.Fatalf("a computation: %d %s", status, body)
		}
		return run.ResultID
	}
	old := compute()
	if status, body := clusterCall(t, "GET", gw.api+"/results", gw.token, ""); status != 200 || !strings.Contains(body, old) {
		t.Fatalf("the receipt list: %d %s", status, body)
	}

	pg.Pause(t)
	resumed := false
	defer func() {
		if !resumed {
			pg.Resume(t)
		}
	}()
	// Each read is answered within PostgreSQL's read bound (1.5 s; 5 s
	// before), well within the generous 4 s asked here.
	var took []time.Duration
	for _, path := range []string{"/results/" + old + ".json", "/results"} {
		started := time.Now()
		status, h, body := callWithHeaders(t, "GET", gw.api+path, gw.token, "")
		took = append(took, time.Since(started))
		if status != 503 || h.Get("Retry-After") == "" || !strings.Contains(body, "OVERLOADED") || time.Since(started) > 4*time.Second {
			t.Fatalf("GET %s with PostgreSQL paused: %d %v %s (after %v), want 503 OVERLOADED with Retry-After within 4 s", path, status, h, body, time.Since(started))
		}
	}
	if !strings.Contains(gw.log.String(), "the receipt store failed") {
		t.Errorf("the receipt store's failure was not logged:\n%s", gw.log.String())
	}
	for n := 1; n <= 3; n++ {
		if status, body := visit(t, 1, "/"); status != 200 || body != fmt.Sprint(n) {
			t.Fatalf("a bystander's visit with PostgreSQL paused: %d %q", status, body)
		}
	}
	meanwhile := compute()
	if status, body := clusterCall(t, "GET", gw.api+"/results/"+meanwhile+".json", gw.token, ""); status != 200 {
		t.Fatalf("the receipt of a run meanwhile, from memory: %d %s", status, body)
	}
	t.Logf("with PostgreSQL paused, a stored receipt's read answered 503 after %v, the receipt list after %v", took[0].Round(time.Millisecond), took[1].Round(time.Millisecond))

	pg.Resume(t)
	resumed = true
	deadline := time.Now().Add(20 * time.Second)
	for {
		status, body := clusterCall(t, "GET", gw.api+"/results", gw.token, "")
		if status == 200 && strings.Contains(body, old) && strings.Contains(body, meanwhile) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the receipt list 20 s after PostgreSQL came back: %d %s", status, body)
		}
		time.Sleep(200 * time.Millisecond)
	}
}
