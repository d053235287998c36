package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"
)

// Many visitors increment one kv counter at once, and the gateway is
// killed (kill -9) right after the 300th acknowledged answer, while the
// others' requests are still under way; five times. After the restarts
// the counter holds every acknowledged increment: each answer is a
// distinct count (a write lost to a kill would have its count answered
// again), and none is above what was stored (no answer left before its
// write was durable, whether it rode to the gateway with its write or
// not: docs/decisions.md, "kv answers carried with their writes").
func TestAcknowledgedConcurrentIncrementsSurviveKill9(t *testing.T) {
	config := exampleConfig(t, filepath.Join(t.TempDir(), "registry.db"))
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	gw := startGateway(t, ctx, config)
	status, body := call(t, "POST", gw.api+"/executions", gw.token, `{"retainHandles": true, "capabilities": ["kvRead", "kvWrite"],
		"code": "export default { async fetch(req, env) { const n = Number(await env.kv.get('c') || 0) + 1; await env.kv.put('c', String(n)); return new Response(String(n)) } }"}`)
	var dep struct{ ExecutionID string }
	json.Unmarshal([]byte(body), &dep)
	if status != 200 {
		t.Fatalf("deploy: %d %s", status, body)
	}
	handle := fmt.Sprintf("http://%s.apps.localhost:%d/", dep.ExecutionID, testPort)
	const visitors, killAt, rounds = 16, 300, 5
	var mu sync.Mutex
	var acked []int
	for round := 0; round < rounds; round++ {
		if round > 0 {
			gw = startGateway(t, ctx, config) // the handle comes back with its kv
		}
		want := len(acked) + killAt
		killed := false
		var wg sync.WaitGroup
		for v := 0; v < visitors; v++ {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for {
					mu.Lock()
					stop := killed
					mu.Unlock()
					if stop {
						return
					}
					res, err := client.Get(handle)
					if err != nil {
						continue // the gateway is gone: not acknowledged
					}
					data, _ := io.ReadAll(res.Body)
					res.Body.Close()
					if res.StatusCode != 200 {
						continue
					}
					n, err := strconv.Atoi(string(data))
					if err != nil {
						t.Errorf("an answer %q", data)
						return
					}
					mu.Lock()
					acked = append(acked, n)
					if len(acked) == want && !killed {
						killed = true
						gw.cmd.Process.Kill() // kill -9, right after this answer
					}
					mu.Unlock()
				}
			}()
		}
		wg.Wait()
		gw.cmd.Wait()
	}
	gw = startGateway(t, ctx, config)
	defer gw.stop()
	status, body = call(t, "POST", gw.api+"/executions", gw.token, `{"capabilities": ["kvRead"], "code": "async () => kv.get('c')"}`)
	var got struct{ Result string }
	json.Unmarshal([]byte(body), &got)
	stored, err := strconv.Atoi(got.Result)
	if status != 200 || err != nil {
		t.Fatalf("after kill -9: %d %s", status, body)
	}
	sort.Ints(acked)
	for i := 1; i < len(acked); i++ {
		if acked[i] == acked[i-1] {
			t.Fatalf("the count %d was answered twice", acked[i])
		}
	}
	if len(acked) < rounds*killAt || acked[len(acked)-1] > stored {
		t.Fatalf("%d answers acknowledged up to %d, and the counter holds %d after kill -9: %s", len(acked), acked[len(acked)-1], stored, strings.TrimSpace(body))
	}
	t.Logf("%d answers acknowledged (the highest %d), the counter holds %d", len(acked), acked[len(acked)-1], stored)
}
