package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"
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
		toks[i] = tokenFor(t, ctx, fmt.Sprintf("newcomer-%d", i))
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

// New tenants' first deploys at once, and the gateway killed (kill -9)
// as the first of them is answered, the others in flight, their records
// in the journal, in bbolt or in neither (store/journal.go): after the
// restart each deploy answered 200 serves its tenant, one not answered is
// there whole (its handle serves) or not at all, none is listed without
// serving, and a bystander's handle deployed before serves on.
func TestFirstDeploysKilledMidwayAreWholeOrNone(t *testing.T) {
	config := exampleConfig(t, filepath.Join(t.TempDir(), "registry.db"))
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	gw := startGateway(t, ctx, config)
	const n = 16
	toks := make([]string, n+1)
	for i := range toks {
		toks[i] = tokenFor(t, ctx, fmt.Sprintf("midway-%d", i))
	}
	const code = `{"retainHandles": true, "timeoutMs": 5000, "code": "let n = 0; export default { fetch() { return Response.json({served: ++n}) } }"}`
	// The bystander is toks[n].
	status, body := call(t, "POST", gw.api+"/executions", toks[n], code)
	var by struct{ ExecutionID string }
	json.Unmarshal([]byte(body), &by)
	if status != 200 || by.ExecutionID == "" {
		t.Fatalf("the bystander's deploy: %d %s", status, body)
	}
	ids := make([]string, n)
	answered := make(chan struct{}, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			req, _ := http.NewRequest("POST", gw.api+"/executions", strings.NewReader(code))
			req.Header.Set("Authorization", "Bearer "+toks[i])
			res, err := client.Do(req)
			if err != nil {
				return // killed before it answered
			}
			defer res.Body.Close()
			data, err := io.ReadAll(res.Body)
			var dep struct{ ExecutionID string }
			if err == nil && res.StatusCode == 200 && json.Unmarshal(data, &dep) == nil {
				ids[i] = dep.ExecutionID
				answered <- struct{}{}
			}
		}()
	}
	<-answered
	gw.cmd.Process.Kill() // kill -9 with the others in flight
	gw.cmd.Wait()
	wg.Wait()
	gw = startGateway(t, ctx, config)
	defer gw.stop()
	serves := func(id string) (int, string) {
		return call(t, "GET", fmt.Sprintf("http://%s.apps.localhost:%d/", id, testPort), "", "")
	}
	whole := 0
	for i := range n {
		status, body := call(t, "GET", gw.api+"/handles", toks[i], "")
		var list struct {
			Handles []struct{ ExecutionID string }
		}
		if status != 200 || json.Unmarshal([]byte(body), &list) != nil || len(list.Handles) > 1 {
			t.Fatalf("midway-%d's handles after kill -9: %d %s", i, status, body)
		}
		if ids[i] != "" && (len(list.Handles) != 1 || list.Handles[0].ExecutionID != ids[i]) {
			t.Fatalf("midway-%d's deploy answered %s is not listed after kill -9: %s", i, ids[i], body)
		}
		if len(list.Handles) == 1 {
			whole++
			if status, body := serves(list.Handles[0].ExecutionID); status != 200 || body != `{"served":1}` {
				t.Fatalf("midway-%d's handle listed after kill -9 does not serve: %d %s", i, status, body)
			}
		}
	}
	if status, body := serves(by.ExecutionID); status != 200 || body != `{"served":1}` {
		t.Fatalf("the bystander after kill -9: %d %s", status, body)
	}
	t.Logf("%d of %d deploys whole after the kill, the others absent", whole, n)
}

// The store restored from a copy taken while the gateway was stopped,
// after a handle deployed and deleted since and a kill -9, then reset
// (registry.db removed) after the same: the journal beside the file
// brings neither deleted handle back (store/journal.go), the copy's own
// handle serves, and the gateway logs what it did not replay.
func TestARestoredOrResetStoreServesNoDeletedHandle(t *testing.T) {
	path := filepath.Join(t.TempDir(), "registry.db")
	config := exampleConfig(t, path)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	tok := tokenFor(t, ctx, "victim")
	const code = `{"retainHandles": true, "timeoutMs": 5000, "code": "let n = 0; export default { fetch() { return Response.json({served: ++n}) } }"}`
	deploy := func(gw *gateway) string {
		status, body := call(t, "POST", gw.api+"/executions", tok, code)
		var dep struct{ ExecutionID string }
		json.Unmarshal([]byte(body), &dep)
		if status != 200 || dep.ExecutionID == "" {
			t.Fatalf("deploy: %d %s", status, body)
		}
		return dep.ExecutionID
	}
	serves := func(id string) (int, string) {
		return call(t, "GET", fmt.Sprintf("http://%s.apps.localhost:%d/", id, testPort), "", "")
	}
	copyFile := func(from, to string) {
		data, err := os.ReadFile(from)
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(to, data, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	// Deployed, deleted (204), killed: the journal still holds its record.
	deletedThenKilled := func(gw *gateway) string {
		id := deploy(gw)
		if status, body := call(t, "DELETE", gw.api+"/handles/"+id, tok, ""); status != 204 {
			t.Fatalf("DELETE %s: %d %s", id, status, body)
		}
		gw.cmd.Process.Kill()
		gw.cmd.Wait()
		return id
	}
	gone := func(gw *gateway, id, after string) {
		if status, body := call(t, "GET", gw.api+"/handles/"+id, tok, ""); status != 404 {
			t.Fatalf("the handle deleted before the %s: %d %s", after, status, body)
		}
		if status, body := serves(id); status == 200 {
			t.Fatalf("the handle deleted before the %s serves: %s", after, body)
		}
		if !strings.Contains(gw.log.String(), "not replayed") {
			t.Fatalf("the gateway did not log the journal not replayed after the %s:\n%s", after, gw.log.String())
		}
	}

	gw := startGateway(t, ctx, config)
	kept := deploy(gw)
	gw.stop()
	copyFile(path, path+".copy")
	gw = startGateway(t, ctx, config)
	x2 := deletedThenKilled(gw)
	copyFile(path+".copy", path)
	gw = startGateway(t, ctx, config)
	gone(gw, x2, "restore")
	if status, body := serves(kept); status != 200 || body != `{"served":1}` {
		t.Fatalf("the copy's own handle after the restore: %d %s", status, body)
	}
	x3 := deletedThenKilled(gw)
	os.Remove(path)
	gw = startGateway(t, ctx, config)
	defer gw.stop()
	gone(gw, x3, "reset")
}

// Deploys answered (their records in the journal, or in bbolt), then the
// gateway killed (kill -9), then each of its next starts killed too, at
// moments from its first instant to past its replay, and twice as soon as
// it has said what it replayed: the start after
// serves every deploy answered and the bystander's handle and route bound
// before,
// and says what it replayed (store/journal.go; a start killed during the
// replay or before the journal is cleared replays nothing twice).
func TestStartsKilledMidwayLoseNoAnsweredDeploy(t *testing.T) {
	config := exampleConfig(t, filepath.Join(t.TempDir(), "registry.db"))
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	gw := startGateway(t, ctx, config)
	const n = 6
	toks := make([]string, n+1)
	for i := range toks {
		toks[i] = tokenFor(t, ctx, fmt.Sprintf("killed-start-%d", i))
	}
	const code = `{"retainHandles": true, "timeoutMs": 5000, "code": "let n = 0; export default { fetch() { return Response.json({served: ++n}) } }"}`
	deploy := func(tok string) string {
		status, body := call(t, "POST", gw.api+"/executions", tok, code)
		var dep struct{ ExecutionID string }
		json.Unmarshal([]byte(body), &dep)
		if status != 200 || dep.ExecutionID == "" {
			t.Fatalf("deploy: %d %s", status, body)
		}
		return dep.ExecutionID
	}
	by := deploy(toks[n]) // the bystander, and its route
	if status, body := call(t, "PUT", gw.api+"/routes/steady-bystander", toks[n], fmt.Sprintf(`{"executionId": %q}`, by)); status != 200 {
		t.Fatalf("the bystander's route: %d %s", status, body)
	}
	ids := make([]string, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			ids[i] = deploy(toks[i])
		}()
	}
	wg.Wait()
	gw.cmd.Process.Kill()
	gw.cmd.Wait()
	opened := 0
	for _, after := range []time.Duration{0, 10 * time.Millisecond, 40 * time.Millisecond, 120 * time.Millisecond, 300 * time.Millisecond, 700 * time.Millisecond} {
		cmd := binary(ctx, "run", "--config", config)
		var log bytes.Buffer
		cmd.Stdout, cmd.Stderr = &log, &log
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		time.Sleep(after)
		cmd.Process.Kill()
		cmd.Wait()
		if strings.Contains(log.String(), "journal entr") {
			opened++
		}
		if strings.Contains(log.String(), "damaged") {
			t.Fatalf("a start killed after %v left a journal found damaged:\n%s", after, log.String())
		}
	}
	t.Logf("%d of 6 starts killed after they had opened the store", opened)
	// Twice more, killed as soon as the start has said what it replayed.
	for range 2 {
		cmd := binary(ctx, "run", "--config", config)
		pr, pw := io.Pipe()
		cmd.Stdout, cmd.Stderr = pw, pw
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		said := make(chan string, 1)
		go func() {
			sc := bufio.NewScanner(pr)
			for sc.Scan() {
				if strings.Contains(sc.Text(), "journal entr") {
					said <- sc.Text()
					break
				}
			}
			io.Copy(io.Discard, pr)
		}()
		select {
		case line := <-said:
			if strings.Contains(line, "damaged") {
				t.Fatalf("a start killed after it opened the store left a journal found damaged: %s", line)
			}
		case <-time.After(60 * time.Second):
			t.Fatal("the start did not say what it replayed")
		}
		cmd.Process.Kill()
		cmd.Wait()
		pw.Close()
	}
	gw = startGateway(t, ctx, config)
	defer gw.stop()
	serves := func(id string) (int, string) {
		return call(t, "GET", fmt.Sprintf("http://%s.apps.localhost:%d/", id, testPort), "", "")
	}
	for i, id := range ids {
		if status, body := call(t, "GET", gw.api+"/handles/"+id, toks[i], ""); status != 200 {
			t.Fatalf("deploy %d answered before the kills: %d %s", i, status, body)
		}
		if status, body := serves(id); status != 200 || body != `{"served":1}` {
			t.Fatalf("deploy %d answered before the kills serves: %d %s", i, status, body)
		}
	}
	if status, body := serves("steady-bystander"); status != 200 || body != `{"served":1}` {
		t.Fatalf("the bystander's route after the kills: %d %s", status, body)
	}
	if status, body := serves(by); status != 200 || body != `{"served":2}` {
		t.Fatalf("the bystander after the kills: %d %s", status, body)
	}
}
