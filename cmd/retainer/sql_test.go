package main

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
)

// Every INSERT a handler's response acknowledged survives kill -9 of the
// gateway in the middle of the load (docs/sql.md, "Durability on one
// machine"): 320 requests, 16 at a time, into a handler with concurrency
// 8, the gateway killed once half were acknowledged.
func TestAcknowledgedSQLRowsSurviveKill9(t *testing.T) {
	config := exampleConfig(t, filepath.Join(t.TempDir(), "registry.db"))
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	gw := startGateway(t, ctx, config)
	status, body := call(t, "POST", gw.api+"/executions", gw.token, `{"capabilities": ["sqlWrite"], "code": "async () => db.exec('CREATE TABLE rows (id INTEGER PRIMARY KEY)')"}`)
	if status != 200 {
		t.Fatalf("create the table: %d %s", status, body)
	}
	status, body = call(t, "POST", gw.api+"/executions", gw.token, `{"retainHandles": true, "concurrency": 8, "capabilities": ["sqlWrite"],
		"code": "export default { async fetch(req, env) { const id = Number(new URL(req.url).pathname.slice(1)); await env.db.prepare('INSERT INTO rows (id) VALUES (?)').bind(id).run(); return new Response('ok ' + id) } }"}`)
	var dep struct{ ExecutionID string }
	json.Unmarshal([]byte(body), &dep)
	if status != 200 {
		t.Fatalf("deploy: %d %s", status, body)
	}
	const n = 320
	var acked []int
	var mu sync.Mutex
	var done atomic.Int64
	killed := make(chan struct{})
	var once sync.Once
	ids := make(chan int, n)
	for i := 1; i <= n; i++ {
		ids <- i
	}
	close(ids)
	var wg sync.WaitGroup
	for w := 0; w < 16; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for id := range ids {
				req, _ := http.NewRequest("GET", fmt.Sprintf("http://%s.apps.localhost:%d/%d", dep.ExecutionID, testPort, id), nil)
				res, err := client.Do(req)
				if err != nil {
					continue // the gateway is gone: not acknowledged
				}
				buf := make([]byte, 64)
				k, _ := res.Body.Read(buf)
				res.Body.Close()
				if res.StatusCode == 200 && string(buf[:k]) == fmt.Sprint("ok ", id) {
					mu.Lock()
					acked = append(acked, id)
					mu.Unlock()
					if done.Add(1) == n/2 {
						once.Do(func() {
							gw.cmd.Process.Kill() // kill -9, mid-load
							close(killed)
						})
					}
				}
			}
		}()
	}
	wg.Wait()
	once.Do(func() { gw.cmd.Process.Kill(); close(killed) })
	<-killed
	gw.cmd.Wait()
	if len(acked) < n/2 {
		t.Fatalf("only %d inserts acknowledged before the kill", len(acked))
	}
	gw = startGateway(t, ctx, config)
	defer gw.stop()
	status, body = call(t, "POST", gw.api+"/sql", gw.token, `{"sql": "SELECT id FROM rows ORDER BY id"}`)
	if status != 200 {
		t.Fatalf("after kill -9: %d %s", status, body)
	}
	var ans struct{ Results []struct{ ID int } }
	json.Unmarshal([]byte(body), &ans)
	have := map[int]bool{}
	for _, r := range ans.Results {
		have[r.ID] = true
	}
	var lost []string
	sort.Ints(acked)
	for _, id := range acked {
		if !have[id] {
			lost = append(lost, fmt.Sprint(id))
		}
	}
	if len(lost) > 0 {
		t.Fatalf("%d of %d acknowledged rows lost: %s", len(lost), len(acked), strings.Join(lost, " "))
	}
	t.Logf("%d acknowledged, %d rows after kill -9", len(acked), len(ans.Results))
}
