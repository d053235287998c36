package main

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/retainer-gw/retainer/internal/etcdtest"
	"github.com/retainer-gw/retainer/internal/pgtest"
	"github.com/retainer-gw/retainer/internal/waitfor"
)

// notesHandler inserts a row a request (its value the path) and answers
// its id; /slow waits, then inserts 'late'. served counts the requests its
// isolate answered, so an answer tells which isolate computed it.
const notesHandler = `let served = 0;
export default { async fetch(req, env) {
	const u = new URL(req.url);
	if (u.pathname === '/slow') {
		await new Promise(r => setTimeout(r, 600));
		await env.db.prepare("INSERT INTO t (v) VALUES ('late')").run();
		served++;
		return new Response('late ' + served);
	}
	await env.db.prepare('INSERT INTO t (v) VALUES (?)').bind(u.pathname.slice(1)).run();
	served++;
	return new Response('ok ' + served);
} }`

// sqlThrough runs POST /sql through gw as the token's tenant until the
// space is served (503 while it moves between owners, within lease + 5 s
// and some), answering the status and the body.
func sqlThrough(t *testing.T, api, token, body string) (int, string) {
	t.Helper()
	var status int
	var answer string
	waitfor.Within(15*time.Second, func() bool {
		status, answer = clusterCall(t, "POST", api+"/sql", token, body)
		return status != 503 && status != 0
	})
	return status, answer
}

// sqlValues answers the v column of POST /sql's rows.
func sqlValues(t *testing.T, answer string) []string {
	t.Helper()
	var ans struct{ Results []struct{ V string } }
	if err := json.Unmarshal([]byte(answer), &ans); err != nil {
		t.Fatalf("%v: %s", err, answer)
	}
	var out []string
	for _, r := range ans.Results {
		out = append(out, r.V)
	}
	return out
}

// aliceOwner answers the member that owns alice's space in apps, as the
// gateway with the admin port sees the cluster.
func aliceOwner(t *testing.T, admin int) string {
	t.Helper()
	_, body := clusterCall(t, "GET", fmt.Sprintf("http://localhost:%d/retainer/cluster", admin), "", "")
	var view struct {
		Members []struct {
			Name   string
			Spaces []struct{ Registry, Tenant string }
		}
	}
	if err := json.Unmarshal([]byte(body), &view); err != nil {
		t.Fatalf("%v: %s", err, body)
	}
	for _, m := range view.Members {
		for _, sp := range m.Spaces {
			if sp.Registry == "apps" && sp.Tenant == "alice" {
				return m.Name
			}
		}
	}
	return ""
}

// A tenant's SQL database in a three-gateway cluster (docs/sql.md, "In a
// cluster"): every write acknowledged is served by the next owner after
// kill -9 of the first in the middle of the load; an owner paused past its lease
// (SIGSTOP) with a write under way commits nothing once another gateway
// serves the database; a bystander tenant's database, on the killed
// gateway too, is untouched; sql_quota holds.
func TestClusterSQLSurvivesItsOwner(t *testing.T) {
	srv := etcdtest.Start(t)
	pg := pgtest.Start(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	gws := map[int]*gateway{}
	for i := 1; i <= 3; i++ {
		config := clusterConfig(t, i, srv.Endpoint, pg.DSN)
		data, _ := os.ReadFile(config)
		os.WriteFile(config, []byte(strings.Replace(string(data), "retainer {", "retainer {\n\t\tsql_quota 256KiB", 1)), 0o600)
		gws[i] = startMemberAt(t, ctx, i, config)
	}
	for _, gw := range gws {
		t.Cleanup(func() { gw.cmd.Process.Signal(syscall.SIGCONT) })
	}
	a := gws[1]
	token := func(sub string) string {
		out, err := binary(ctx, "retainer-token", "--sub", sub).Output()
		if err != nil {
			t.Fatal(err)
		}
		return strings.TrimSpace(string(out))
	}
	bob, carol := token("bob"), token("carol")

	// Bob's database, through the gateway about to die: the same table
	// name as alice's, other data.
	if status, body := sqlThrough(t, a.api, bob, `{"batch": [{"sql": "CREATE TABLE t (v TEXT)"}, {"sql": "INSERT INTO t VALUES ('bob kept')"}]}`); status != 200 {
		t.Fatalf("bob's table: %d %s", status, body)
	}
	if status, body := sqlThrough(t, a.api, a.token, `{"sql": "CREATE TABLE t (id INTEGER PRIMARY KEY, v TEXT NOT NULL)"}`); status != 200 {
		t.Fatalf("alice's table: %d %s", status, body)
	}
	notes := deployThrough(t, a, fmt.Sprintf(`{"retainHandles": true, "concurrency": 8, "timeoutMs": 15000, "capabilities": ["sqlRead", "sqlWrite"], "code": %q}`, notesHandler))
	bindThrough(t, a, "notes", notes)
	visitNotes := func(i int, path string) (int, string) {
		return clusterCall(t, "POST", fmt.Sprintf("http://notes.apps.localhost:%d%s", memberPort(i), path), "", "")
	}

	if o := aliceOwner(t, memberAdmin(2)); o != "gw-1" {
		t.Fatalf("gw-1 should own alice's space, not %q", o)
	}
	// 160 inserts, 8 at a time, through every gateway (forwarded to the
	// owner, gw-1), and kill -9 of the owner once 60 are acknowledged;
	// the load goes on through the other two, which serve once one of
	// them owns the space.
	var mu sync.Mutex
	acked := map[string]bool{}
	var killOnce sync.Once
	var killed time.Time
	kill := func() {
		killOnce.Do(func() {
			a.cmd.Process.Kill()
			a.cmd.Wait()
			killed = time.Now()
		})
	}
	var wg sync.WaitGroup
	for w := 0; w < 8; w++ {
		wg.Add(1)
		go func(w int) {
			defer wg.Done()
			for k := w; k < 160; k += 8 {
				v := fmt.Sprint("row-", k)
				if status, body := visitNotes(1+k%3, "/"+v); status == 200 && strings.HasPrefix(body, "ok ") {
					mu.Lock()
					acked[v] = true
					n := len(acked)
					mu.Unlock()
					if n == 60 {
						go kill()
					}
				}
			}
		}(w)
	}
	wg.Wait()
	kill()

	b, c := gws[2], gws[3]
	status, body := sqlThrough(t, b.api, b.token, `{"sql": "SELECT v FROM t ORDER BY id"}`)
	if status != 200 {
		t.Fatalf("alice's rows after kill -9 of the owner: %d %s", status, body)
	}
	t.Logf("alice's database served %v after kill -9 of its owner (lease 2s); %d inserts acknowledged", time.Since(killed).Round(time.Millisecond), len(acked))
	have := map[string]bool{}
	rowsBefore := 0
	for _, v := range sqlValues(t, body) {
		have[v] = true
		rowsBefore++
		if !strings.HasPrefix(v, "row-") {
			t.Errorf("a row nobody wrote: %q", v)
		}
	}
	for v := range acked {
		if !have[v] {
			t.Errorf("acknowledged %s lost", v)
		}
	}
	if len(acked) < 60 {
		t.Fatalf("only %d inserts acknowledged", len(acked))
	}
	if status, body := sqlThrough(t, c.api, bob, `{"sql": "SELECT * FROM t"}`); status != 200 || !strings.Contains(body, `"results":[{"v":"bob kept"}]`) {
		t.Fatalf("bob's database after the kill: %d %s", status, body)
	}

	// sql_quota: carol's writes past 256 KiB are refused, and change
	// nothing.
	sqlThrough(t, c.api, carol, `{"sql": "CREATE TABLE t (v BLOB)"}`)
	rows := 0
	for ; rows < 100; rows++ {
		status, body := sqlThrough(t, c.api, carol, `{"sql": "INSERT INTO t VALUES (zeroblob(20000))"}`)
		if status == 429 && strings.Contains(body, "QUOTA_EXCEEDED") {
			break
		}
		if status != 200 {
			t.Fatalf("carol's insert %d: %d %s", rows, status, body)
		}
	}
	if status, body := sqlThrough(t, b.api, carol, `{"sql": "SELECT count(*) AS v FROM t"}`); status != 200 || !strings.Contains(body, fmt.Sprintf(`"results":[{"v":%d}]`, rows)) || rows == 0 || rows == 100 {
		t.Fatalf("carol's rows after %d inserts and the refusal: %d %s", rows, status, body)
	}

	// The new owner's isolate serves three more visitors.
	for k := 0; k < 3; k++ {
		if status, body := visitNotes(2, fmt.Sprint("/after-", k)); status != 200 || !strings.HasPrefix(body, "ok ") {
			t.Fatalf("after the failover: %d %q", status, body)
		}
	}
	owner, other := b, c
	ownerPort, otherPort, otherAPI := 2, 3, c.api
	switch aliceOwner(t, memberAdmin(3)) {
	case "gw-2":
	case "gw-3":
		owner, other, ownerPort, otherPort, otherAPI = c, b, 3, 2, b.api
	default:
		t.Fatal("nobody owns alice's space")
	}
	// The owner paused past its lease with a write under way: its
	// handler's INSERT comes once the other gateway serves the database.
	late := make(chan string, 1)
	go func() {
		status, body := visitNotes(ownerPort, "/slow")
		late <- fmt.Sprintf("%d %s", status, body)
	}()
	waitInFlight(t, ownerPort, 1)
	paused := pauseMember(t, owner) // stopped, not only signalled
	status, body = sqlThrough(t, otherAPI, other.token, `{"sql": "SELECT v FROM t WHERE v = 'late'"}`)
	if status != 200 {
		t.Fatalf("after the owner paused: %d %s", status, body)
	}
	// Served by the other gateway, which claimed the space (the paused
	// owner answers nothing): what follows is about a replaced owner.
	if o := aliceOwner(t, memberAdmin(otherPort)); o != fmt.Sprint("gw-", otherPort) {
		t.Fatalf("alice's database was served while its owner was paused, but the space's owner is %q, not gw-%d", o, otherPort)
	}
	t.Logf("the other gateway served alice's database %v after SIGSTOP of its owner", time.Since(paused).Round(time.Millisecond))
	owner.cmd.Process.Signal(syscall.SIGCONT)
	got := <-late
	t.Logf("the paused owner's slow request answered %.160s", got)
	var lateServed int
	if _, err := fmt.Sscanf(got, "200 late %d", &lateServed); err == nil && lateServed > 1 {
		t.Fatalf("the paused owner's write was acknowledged: %s", got)
	}
	if lateServed == 0 && !strings.HasPrefix(got, "503 ") {
		t.Fatalf("the paused owner answered %s, not a retryable 503", got)
	}
	want := 0
	if lateServed == 1 {
		want = 1 // read only once the owner woke: served by the new owner
	}
	status, body = sqlThrough(t, otherAPI, other.token, `{"sql": "SELECT v FROM t WHERE v = 'late' OR v LIKE 'after-%' ORDER BY id"}`)
	if status != 200 {
		t.Fatalf("%d %s", status, body)
	}
	vs := sqlValues(t, body)
	if strings.Join(vs, " ") != strings.TrimSpace("after-0 after-1 after-2 "+strings.Repeat("late", want)) {
		t.Fatalf("after the paused owner woke: %v (its slow request answered %s)", vs, got)
	}
	status, body = sqlThrough(t, otherAPI, other.token, `{"sql": "SELECT count(*) AS v FROM t"}`)
	if status != 200 || !strings.Contains(body, fmt.Sprintf(`"results":[{"v":%d}]`, rowsBefore+3+want)) {
		t.Fatalf("alice's rows at the end: %d %s", status, body)
	}
	if status, body := sqlThrough(t, otherAPI, bob, `{"sql": "SELECT * FROM t"}`); status != 200 || !strings.Contains(body, `"results":[{"v":"bob kept"}]`) {
		t.Fatalf("bob's database at the end: %d %s", status, body)
	}
}

// TestClusterSQLCosts measures SQL in a handler on one machine (a file,
// WAL, synchronous=FULL) against a cluster member (pages committed in
// PostgreSQL): the trivial handler, a primary-key SELECT and one INSERT a
// request, each with concurrency 8, 32 connections, interleaved; the
// PostgreSQL on the same machine, fsync on. Run it
// with RETAINER_CLUSTER_BENCH=1 (`go test ./cmd/retainer -run
// TestClusterSQLCosts -v`); it asserts no timing.
func TestClusterSQLCosts(t *testing.T) {
	if os.Getenv("RETAINER_CLUSTER_BENCH") == "" {
		t.Skip("a measurement: RETAINER_CLUSTER_BENCH=1 runs it")
	}
	srv := etcdtest.Start(t)
	pg := pgtest.StartDurable(t) // fsync on: a commit costs what it would
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	one := startGateway(t, ctx, exampleConfig(t, filepath.Join(t.TempDir(), "registry.db")))
	member := startMember(t, ctx, 1, srv.Endpoint, pg.DSN)
	const setup = `{"capabilities": ["sqlWrite"], "code": "async () => db.exec(\"CREATE TABLE items (id INTEGER PRIMARY KEY, name TEXT, price REAL); WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM c LIMIT 1000) INSERT INTO items SELECT x, 'item ' || x, x * 1.5 FROM c; CREATE TABLE hits (id INTEGER PRIMARY KEY, at INTEGER)\")"}`
	handlers := map[string]string{
		"trivial": `let s = 0; export default { fetch() { return Response.json({served: ++s}) } }`,
		"select":  `let n = 0; export default { async fetch(r, env) { n = n % 1000 + 1; return Response.json(await env.db.prepare('SELECT * FROM items WHERE id = ?').bind(n).first()) } }`,
		"insert":  `export default { async fetch(r, env) { const {meta} = await env.db.prepare('INSERT INTO hits (at) VALUES (?)').bind(Date.now()).run(); return Response.json({id: meta.last_row_id}) } }`,
	}
	type target struct {
		label, url string
	}
	var targets []target
	for _, gw := range []struct {
		name string
		g    *gateway
		port int
	}{{"one machine", one, testPort}, {"cluster", member, memberPort(1)}} {
		if status, body := clusterCall(t, "POST", gw.g.api+"/executions", gw.g.token, setup); status != 200 {
			t.Fatalf("%s: the tables: %d %s", gw.name, status, body)
		}
		for _, h := range []string{"trivial", "select", "insert"} {
			id := deployThrough(t, gw.g, fmt.Sprintf(`{"retainHandles": true, "concurrency": 8, "capabilities": ["sqlRead", "sqlWrite"], "code": %q}`, handlers[h]))
			targets = append(targets, target{gw.name + " " + h, fmt.Sprintf("http://%s.apps.localhost:%d/", id, gw.port)})
		}
	}
	for round := 1; round <= 2; round++ {
		for _, tg := range targets {
			r := closedLoop(tg.url, 32, 4*time.Second)
			t.Logf("round %d %-20s %7.0f req/s  p50 %6.2f ms  p99 %6.2f ms  (%d errors)", round, tg.label, r.rps, r.p50, r.p99, r.errors)
		}
	}
}
