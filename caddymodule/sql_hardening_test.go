package caddymodule

import (
	"bufio"
	"encoding/json"
	"fmt"
	"net"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/caddyserver/caddy/v2/caddytest"

	"github.com/retainer-gw/retainer/internal/waitfor"
)

// TestSQLHardening is issue #55's SQL attacks through a real gateway, with
// bob's todo API as the bystander whose closure counter must survive: a
// quadratic function call answers (linear instr), an answer is bounded on
// its encoded bytes and '<' comes back literally, REINDEX needs sqlWrite,
// and one export a tenant at a time, its copy never named on disk.
func TestSQLHardening(t *testing.T) {
	store := filepath.Join(t.TempDir(), "registry.db")
	cfg := strings.Replace(sqlConfig(store), "sql_quota 1MiB", "sql_quota 64MiB\n\t\tmax_response_body 1MiB", 1)
	caddytest.NewTester(t).InitServer(cfg, "caddyfile")
	alice := token(t, "alice", allScopes)
	bob := token(t, "bob", allScopes)
	sql := func(tok string, body any) answer {
		t.Helper()
		return do(t, "POST", site("api.localhost", "/sql"), tok, mustJSON(body))
	}

	dep := do(t, "POST", site("api.localhost", "/executions"), bob, mustJSON(map[string]any{"code": sqlTodo, "retainHandles": true, "capabilities": []string{"sqlRead", "sqlWrite"}}))
	if dep.status != 200 {
		t.Fatalf("deploy the todo API: %d %s", dep.status, dep.body)
	}
	todo := dep.json(t)["executionId"].(string) + ".apps.localhost"
	if a := do(t, "POST", site(todo, "/"), "", []byte(`{"title":"milk"}`)); a.status != 201 {
		t.Fatalf("add a todo: %d %s", a.status, a.body)
	}

	// instr of a 1 MB needle in a 2 MB haystack: SQLite's took 23 CPU-s
	// past the 500 ms bound; the linear one answers.
	q := sql(alice, map[string]any{"sql": "SELECT instr(printf('%.*c', 2000000, 'a'), printf('%.*c', 1000000, 'a') || 'b') AS r, instr('日本語', '語') AS m, replace('a<b', '<', '&lt;') AS p"})
	if q.status != 200 || !strings.Contains(string(q.body), `"results":[{"r":0,"m":3,"p":"a&lt;b"}]`) {
		t.Fatalf("instr bomb: %d %.300s", q.status, q.body)
	}

	// 1.5 MB of '<' under max_response_body 1 MiB: the bound's error (it
	// was 9 MB of \u003c); a short one literally.
	q = sql(alice, map[string]any{"sql": "SELECT printf('%.*c', 1500000, '<') AS s"})
	if q.status != 400 || !strings.Contains(string(q.body), "max_response_body") {
		t.Fatalf("an answer past the bound: %d %d bytes %.200s", q.status, len(q.body), q.body)
	}
	q = sql(alice, map[string]any{"sql": "SELECT printf('%.*c', 900000, '<') AS s"})
	if q.status != 200 || len(q.body) > 900000+300 || !strings.Contains(string(q.body), `"s":"<<<`) {
		t.Fatalf("an answer under the bound: %d %d bytes %.200s", q.status, len(q.body), q.body)
	}
	// Column names repeat in D1's rows: the encoded whole is bounded.
	q = sql(alice, map[string]any{"sql": "WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM c LIMIT 20000) SELECT x AS " + strings.Repeat("c", 60) + " FROM c"})
	if q.status != 400 || !strings.Contains(string(q.body), "max_response_body") {
		t.Fatalf("D1 rows past the bound: %d %d bytes", q.status, len(q.body))
	}
	// The same through a handler: the db call throws the bound's error.
	hl := do(t, "POST", site("api.localhost", "/executions"), alice, mustJSON(map[string]any{"retainHandles": true, "capabilities": []string{"sqlRead"},
		"code": `async () => ({ async fetch(req, env) {
			try { const r = await env.db.prepare("SELECT printf('%.*c', 1500000, '<') AS s").first(); return new Response(String(r.s.length)); }
			catch (e) { return new Response(e.message, {status: 400}); } } })`}))
	if hl.status != 200 {
		t.Fatalf("deploy: %d %s", hl.status, hl.body)
	}
	if a := do(t, "GET", site(hl.json(t)["executionId"].(string)+".apps.localhost", "/"), "", nil); a.status != 400 || !strings.Contains(string(a.body), "max_response_body") {
		t.Fatalf("a handler's answer past the bound: %d %.200s", a.status, a.body)
	}

	// REINDEX under sqlRead is the sqlWrite denial.
	sql(alice, map[string]any{"sql": "CREATE TABLE t (a TEXT)"})
	sql(alice, map[string]any{"sql": "CREATE INDEX ix ON t (a COLLATE NOCASE)"})
	ri := do(t, "POST", site("api.localhost", "/executions"), alice, mustJSON(map[string]any{"capabilities": []string{"sqlRead"},
		"code": `async () => { const out = []; for (const s of ['REINDEX', 'REINDEX NOCASE', 'REINDEX ix']) { try { await db.prepare(s).run(); out.push('ran'); } catch (e) { out.push(e.message); } } return out; }`}))
	var ro struct{ Result []string }
	json.Unmarshal(ri.body, &ro)
	if len(ro.Result) != 3 {
		t.Fatalf("REINDEX: %d %s", ri.status, ri.body)
	}
	for _, m := range ro.Result {
		if !strings.Contains(m, "sqlWrite") {
			t.Fatalf("REINDEX under sqlRead: %s", ri.body)
		}
	}

	// One export a tenant at a time. 24 MB of database, read by nobody,
	// holds the first export past the sockets' buffers.
	if q := sql(alice, map[string]any{"sql": "CREATE TABLE big (v BLOB)"}); q.status != 200 {
		t.Fatalf("%d %s", q.status, q.body)
	}
	for i := 0; i < 3; i++ {
		if q := sql(alice, map[string]any{"sql": "WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM c LIMIT 8) INSERT INTO big SELECT randomblob(1000000) FROM c"}); q.status != 200 {
			t.Fatalf("fill: %d %s", q.status, q.body)
		}
	}
	conn, err := net.Dial("tcp", fmt.Sprintf("127.0.0.1:%d", httpPort))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	conn.(*net.TCPConn).SetReadBuffer(4096)
	fmt.Fprintf(conn, "GET /sql/export HTTP/1.1\r\nHost: api.localhost:%d\r\nAuthorization: Bearer %s\r\n\r\n", httpPort, alice)
	conn.SetReadDeadline(time.Now().Add(15 * time.Second))
	line, err := bufio.NewReaderSize(conn, 64).ReadString('\n')
	if err != nil || !strings.Contains(line, " 200 ") {
		t.Fatalf("the first export: %q %v", line, err)
	}
	if a := do(t, "GET", site("api.localhost", "/sql/export"), alice, nil); a.status != 429 || a.code() != "QUOTA_EXCEEDED" {
		t.Fatalf("a second export meanwhile: %d %.200s", a.status, a.body)
	}
	if a := do(t, "GET", site("api.localhost", "/sql/export"), bob, nil); a.status != 200 {
		t.Fatalf("another tenant's export: %d", a.status)
	}
	if files, _ := filepath.Glob(store + ".sql/export-*"); len(files) != 0 {
		t.Fatalf("an export's copy is named on disk: %v", files)
	}
	conn.Close()
	// Refused (429) until the first export's end reaches the gateway.
	var a answer
	if !waitfor.Within(15*time.Second, func() bool {
		a = do(t, "GET", site("api.localhost", "/sql/export"), alice, nil)
		return a.status != 429
	}) || a.status != 200 {
		t.Fatalf("the export after the first ended: %d %.200s", a.status, a.body)
	}
	if !strings.HasPrefix(string(a.body), "SQLite format 3\x00") {
		t.Fatalf("the export: %.100q", a.body)
	}

	if a := do(t, "GET", site(todo, "/served"), "", nil); string(a.body) != `{"served":2}` {
		t.Fatalf("the bystander's counter: %d %s", a.status, a.body)
	}
}
