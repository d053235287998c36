package main

import (
	"context"
	"encoding/json"
	"fmt"
	"path/filepath"
	"strings"
	"sync"
	"testing"
)

// New tenants' first deploys at once, each its tenant's first write (its
// claim goes to disk with its record, store/claims.go) and committed in
// groups (store/group.go): every deploy answered with an id survives
// kill -9 of the gateway right after the last answer, and serves its own
// tenant alone.
func TestAcknowledgedFirstDeploysSurviveKill9(t *testing.T) {
	config := exampleConfig(t, filepath.Join(t.TempDir(), "registry.db"))
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	gw := startGateway(t, ctx, config)
	const n = 8
	toks := make([]string, n)
	for i := range n {
		out, err := binary(ctx, "retainer-token", "--sub", fmt.Sprintf("newcomer-%d", i)).Output()
		if err != nil {
			t.Fatalf("retainer-token: %v", err)
		}
		toks[i] = strings.TrimSpace(string(out))
	}
	ids := make([]string, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			status, body := call(t, "POST", gw.api+"/executions", toks[i], `{"retainHandles": true, "timeoutMs": 5000, "code": "let n = 0; export default { fetch() { return Response.json({served: ++n}) } }"}`)
			var dep struct{ ExecutionID string }
			json.Unmarshal([]byte(body), &dep)
			if status != 200 || dep.ExecutionID == "" {
				t.Errorf("newcomer %d's first deploy: %d %s", i, status, body)
			}
			ids[i] = dep.ExecutionID
		}()
	}
	wg.Wait()
	if t.Failed() {
		gw.stop()
		return
	}
	gw.cmd.Process.Kill() // kill -9, right after the last acknowledged deploy
	gw.cmd.Wait()
	gw = startGateway(t, ctx, config)
	defer gw.stop()
	for i, id := range ids {
		if status, body := call(t, "GET", gw.api+"/handles/"+id, toks[i], ""); status != 200 {
			t.Fatalf("newcomer %d's handle after kill -9: %d %s", i, status, body)
		}
		if status, body := call(t, "GET", gw.api+"/handles/"+id, toks[(i+1)%n], ""); status == 200 {
			t.Fatalf("newcomer %d's handle answers another tenant: %s", i, body)
		}
		handle := fmt.Sprintf("http://%s.apps.localhost:%d/", id, testPort)
		if status, body := call(t, "GET", handle, "", ""); status != 200 || body != `{"served":1}` {
			t.Fatalf("newcomer %d's handle after kill -9: %d %s", i, status, body)
		}
	}
}
