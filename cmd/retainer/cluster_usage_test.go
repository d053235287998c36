package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/retainer-gw/retainer/internal/etcdtest"
	"github.com/retainer-gw/retainer/internal/pgtest"
	"github.com/retainer-gw/retainer/internal/waitfor"
)

// In a cluster of two (docs/usage.md): carol's token names a plan of 10
// requests a day; her visits through either gateway count to one day, so
// the 11th, through either, answers 429, and her API through the other
// gateway too; bob, on no plan, runs on through both. Her usage, read
// through either gateway's API or admin export, is her 10 requests; bob's
// reaches every export once his gateway has flushed it. Carol, cut, reads
// her usage through both gateways with a read-only token naming no plan:
// still cut. A token naming big issued later, used on the gateway that
// does not own her space (the forward carries its iat), lifts the cut
// through both; her older small token does not bring it back.
func TestClusterUsageAndPlans(t *testing.T) {
	srv := etcdtest.Start(t)
	pg := pgtest.Start(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	gws := map[int]*gateway{}
	for i := 1; i <= 2; i++ {
		config := clusterConfig(t, i, srv.Endpoint, pg.DSN)
		data, err := os.ReadFile(config)
		if err != nil {
			t.Fatal(err)
		}
		s := strings.Replace(string(data), "retainer {", `retainer {
		plans {
			small {
				requests_per_day 10
			}
			big {
				requests_per_day 1000
			}
		}`, 1)
		if err := os.WriteFile(config, []byte(s), 0o600); err != nil {
			t.Fatal(err)
		}
		gws[i] = startMemberAt(t, ctx, i, config)
	}
	tokenFor := func(args ...string) string {
		out, err := binary(ctx, append([]string{"retainer-token"}, args...)...).Output()
		if err != nil {
			t.Fatalf("retainer-token: %v", err)
		}
		return strings.TrimSpace(string(out))
	}
	carol, bob := tokenFor("--sub", "carol", "--plan", "small"), tokenFor("--sub", "bob")
	code := `{"retainHandles": true, "code": "export default { fetch() { return new Response('ok') } }"}`
	deployAs := func(gw *gateway, tok string) string {
		t.Helper()
		status, answer := clusterCall(t, "POST", gw.api+"/executions", tok, code)
		var dep struct{ ExecutionID string }
		json.Unmarshal([]byte(answer), &dep)
		if status != 200 || dep.ExecutionID == "" {
			t.Fatalf("deploying through %s: %d %s", gw.api, status, answer)
		}
		return dep.ExecutionID
	}
	carolID, bobID := deployAs(gws[1], carol), deployAs(gws[2], bob)
	for i := 1; i <= 10; i++ {
		if status, body := visitKey(t, 1+i%2, carolID); status != 200 || body != "ok" {
			t.Fatalf("carol's visit %d through gw-%d: %d %s", i, 1+i%2, status, body)
		}
	}
	for i := 1; i <= 2; i++ {
		if status, body := visitKey(t, i, carolID); status != 429 || !strings.Contains(body, "QUOTA_EXCEEDED") {
			t.Fatalf("carol's 11th visit through gw-%d: %d %s", i, status, body)
		}
		if status, body := clusterCall(t, "GET", gws[i].api+"/handles", carol, ""); status != 429 {
			t.Fatalf("carol's API through gw-%d: %d %s", i, status, body)
		}
		if status, body := visitKey(t, i, bobID); status != 200 || body != "ok" {
			t.Fatalf("bob through gw-%d: %d %s", i, status, body)
		}
	}
	for i := 1; i <= 2; i++ {
		status, body := clusterCall(t, "GET", gws[i].api+"/usage", carol, "")
		var out struct{ Usage []struct{ Requests int64 } }
		if json.Unmarshal([]byte(body), &out) != nil || status != 200 || len(out.Usage) != 1 || out.Usage[0].Requests != 10 {
			t.Fatalf("carol's usage through gw-%d: %d %s", i, status, body)
		}
		// Another gateway's counts reach the store at its next flush
		// (every 5 s): bob's were counted where his handle runs.
		var csv string
		waitfor.Within(15*time.Second, func() bool {
			res, err := clusterClient.Get(fmt.Sprintf("http://localhost:%d/retainer/usage?format=csv", memberAdmin(i)))
			if err != nil {
				t.Fatal(err)
			}
			data, _ := io.ReadAll(res.Body)
			res.Body.Close()
			csv = string(data)
			return strings.Contains(csv, "\napps,bob,")
		})
		if !strings.Contains(csv, "\napps,carol,2") || !strings.Contains(csv, "Z,10,") || !strings.Contains(csv, "\napps,bob,") {
			t.Fatalf("gw-%d's export: %s", i, csv)
		}
	}
	carolRead := tokenFor("--sub", "carol", "--scope", "retainer:read")
	for i := 1; i <= 2; i++ {
		if status, body := clusterCall(t, "GET", gws[i].api+"/usage", carolRead, ""); status != 200 {
			t.Fatalf("carol's read-only token through gw-%d: %d %s", i, status, body)
		}
	}
	for i := 1; i <= 2; i++ {
		if status, body := visitKey(t, i, carolID); status != 429 {
			t.Fatalf("carol's visit through gw-%d after a token naming no plan: %d %s", i, status, body)
		}
	}
	_, members := clusterCall(t, "GET", fmt.Sprintf("http://localhost:%d/retainer/cluster", memberAdmin(1)), "", "")
	var infos struct {
		Members []struct {
			Name   string
			Spaces []struct{ Registry, Tenant string }
		}
	}
	if err := json.Unmarshal([]byte(members), &infos); err != nil {
		t.Fatalf("the members: %v %s", err, members)
	}
	other := 0
	for _, m := range infos.Members {
		for _, sp := range m.Spaces {
			if sp.Tenant == "carol" {
				other = map[string]int{"gw-1": 2, "gw-2": 1}[m.Name]
			}
		}
	}
	if other == 0 {
		t.Fatalf("nobody owns carol's space: %s", members)
	}
	time.Sleep(1100 * time.Millisecond) // iat is in seconds
	carolBig := tokenFor("--sub", "carol", "--plan", "big", "--scope", "retainer:read")
	if status, body := clusterCall(t, "GET", gws[other].api+"/usage", carolBig, ""); status != 200 {
		t.Fatalf("carol's upgrade through gw-%d: %d %s", other, status, body)
	}
	clusterCall(t, "GET", gws[other].api+"/usage", carol, "")
	for i := 1; i <= 2; i++ {
		if status, body := visitKey(t, i, carolID); status != 200 {
			t.Fatalf("carol's visit through gw-%d on big: %d %s", i, status, body)
		}
		if status, body := clusterCall(t, "GET", gws[i].api+"/handles", carol, ""); status != 200 {
			t.Fatalf("carol's API through gw-%d on big: %d %s", i, status, body)
		}
		if status, body := visitKey(t, i, bobID); status != 200 || body != "ok" {
			t.Fatalf("bob through gw-%d: %d %s", i, status, body)
		}
	}
}
