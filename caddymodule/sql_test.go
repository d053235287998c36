package caddymodule

import (
	"encoding/json"
	"fmt"
	"path/filepath"
	"strings"
	"testing"

	"github.com/caddyserver/caddy/v2/caddytest"
)

func sqlConfig(store string) string {
	return fmt.Sprintf(`{
	admin localhost:%d
	http_port %d
	https_port %d
	retainer {
		store %s
		workers 2
		timeout 2s
		sql_quota 1MiB
	}
}

http://api.localhost:%d {
	%s
	retainer_api apps
}

http://other.localhost:%d {
	%s
	retainer_api other
}

http://*.apps.localhost:%d {
	retainer apps {
		key {labels.2}
	}
}
`, adminPort, httpPort, httpsPort, store, httpPort, testJWT, httpPort, testJWT, httpPort)
}

// sqlTodo is docs/sql.md's handler example, with a closure counter that
// must survive what other programs do to the gateway.
const sqlTodo = `async () => {
	await db.exec("CREATE TABLE IF NOT EXISTS todos (id INTEGER PRIMARY KEY, title TEXT NOT NULL, done INTEGER NOT NULL DEFAULT 0 CHECK (done IN (0, 1)))");
	let served = 0;
	return { async fetch(req, env) {
		served++;
		const url = new URL(req.url);
		if (url.pathname === '/served') return Response.json({served});
		if (req.method === 'POST') {
			const {title} = await req.json();
			const {meta} = await env.db.prepare('INSERT INTO todos (title) VALUES (?)').bind(title).run();
			return Response.json({id: meta.last_row_id}, {status: 201});
		}
		const id = url.pathname.slice(1);
		if (id) {
			const todo = await env.db.prepare('SELECT * FROM todos WHERE id = ?').bind(Number(id)).first();
			return todo ? Response.json(todo) : new Response('not found', {status: 404});
		}
		const {results} = await env.db.prepare('SELECT id, title, done FROM todos ORDER BY id').all();
		return Response.json(results);
	} };
}`

// TestSQL is docs/sql.md through a real gateway: D1's API and its shapes,
// grants, tenants and registries apart, an atomic batch, the refused
// statements, a query without end interrupted at the run's bound while a
// bystander's handler keeps its state, and the quota.
func TestSQL(t *testing.T) {
	store := filepath.Join(t.TempDir(), "registry.db")
	caddytest.NewTester(t).InitServer(sqlConfig(store), "caddyfile")
	alice := token(t, "alice", allScopes)
	bob := token(t, "bob", allScopes)
	exec := func(host, tok, code string, caps ...string) answer {
		t.Helper()
		return do(t, "POST", site(host, "/executions"), tok, mustJSON(map[string]any{"code": code, "capabilities": caps}))
	}
	result := func(a answer) string {
		t.Helper()
		if a.status != 200 {
			t.Fatalf("%d %s", a.status, a.body)
		}
		b, _ := json.Marshal(a.json(t)["result"])
		return string(b)
	}

	// The bystander: a todo API of bob's, its closure counter kept.
	dep := do(t, "POST", site("api.localhost", "/executions"), bob, mustJSON(map[string]any{"code": sqlTodo, "retainHandles": true, "capabilities": []string{"sqlRead", "sqlWrite"}}))
	if dep.status != 200 {
		t.Fatalf("deploy the todo API: %d %s", dep.status, dep.body)
	}
	todo := dep.json(t)["executionId"].(string) + ".apps.localhost"
	if a := do(t, "POST", site(todo, "/"), "", []byte(`{"title":"milk"}`)); a.status != 201 || string(a.body) != `{"id":1}` {
		t.Fatalf("add a todo: %d %s", a.status, a.body)
	}
	if a := do(t, "GET", site(todo, "/1"), "", nil); string(a.body) != `{"id":1,"title":"milk","done":0}` {
		t.Fatalf("a todo: %d %s", a.status, a.body)
	}

	api := `async () => {
		const out = {};
		out.exec = (await db.exec('CREATE TABLE t (id INTEGER PRIMARY KEY, name TEXT NOT NULL, n INTEGER CHECK (n >= 0), b BLOB, at DATETIME); CREATE TABLE o (x)')).count;
		const ins = await db.prepare('INSERT INTO t (name, n, b, at) VALUES (?1, ?2, ?3, ?4)').bind('a', true, new Uint8Array([0, 255, 7]), '2024-01-01 10:00:00').run();
		out.ins = [ins.success, ins.meta.changes, ins.meta.last_row_id, ins.results.length, ins.meta.rows_written];
		const row = await db.prepare('SELECT * FROM t WHERE id = ?').bind(1).first();
		out.row = [row.name, row.n, row.b instanceof ArrayBuffer, [...new Uint8Array(row.b)], row.at];
		out.col = await db.prepare('SELECT name FROM t').first('name');
		out.none = await db.prepare('SELECT * FROM t WHERE id = 99').first();
		out.raw = await db.prepare('SELECT id, name FROM t').raw({columnNames: true});
		const all = await db.prepare('SELECT id, name FROM t').all();
		out.all = [all.success, all.results, typeof all.meta.duration, all.meta.size_after > 0];
		try { db.prepare('SELECT ?').bind(undefined); out.undef = 'bound'; } catch (e) { out.undef = e instanceof TypeError; }
		try { await db.prepare('SELEC 1').all(); } catch (e) { out.err = e.message; }
		try { await db.prepare('SELECT :name').bind(1).all(); out.named = 'bound'; } catch (e) { out.named = e.message.startsWith('SQL_ERROR:'); }
		try {
			await db.batch([db.prepare('INSERT INTO t (name, n) VALUES (?, ?)').bind('b', 1), db.prepare('INSERT INTO t (name, n) VALUES (?, ?)').bind('c', -1)]);
		} catch (e) { out.batchErr = e.message; }
		out.afterBatch = await db.prepare('SELECT count(*) AS c FROM t').first('c');
		const b = await db.batch([db.prepare('INSERT INTO t (name, n) VALUES (?, ?)').bind('d', 2), db.prepare('SELECT count(*) AS c FROM t')]);
		out.batch = [b.length, b[0].meta.changes, b[1].results[0].c];
		out.refused = [];
		for (const sql of ["ATTACH DATABASE 'x.db' AS x", 'PRAGMA writable_schema = 1', 'PRAGMA foreign_keys = OFF', "SELECT load_extension('/tmp/x')", "VACUUM INTO '/tmp/x.db'", 'BEGIN', "UPDATE sqlite_master SET sql = ''"]) {
			try { await db.prepare(sql).run(); out.refused.push('ran: ' + sql); } catch (e) { out.refused.push(e.message); }
		}
		out.fk = await db.prepare('PRAGMA foreign_keys').first('foreign_keys');
		out.env = typeof db.prepare;
		return out;
	}`
	got := result(exec("api.localhost", alice, api, "sqlRead", "sqlWrite"))
	want := []string{`"exec":2`, `"ins":[true,1,1,0,1]`, `"row":["a",1,true,[0,255,7],"2024-01-01 10:00:00"]`, `"col":"a"`, `"none":null`,
		`"raw":[["id","name"],[1,"a"]]`, `"all":[true,[{"id":1,"name":"a"}],"number",true]`, `"undef":true`, `"err":"SQL_ERROR: near \"SELEC\": syntax error"`,
		`"named":true`, `"batchErr":"SQL_ERROR: CHECK constraint failed: n \u003e= 0"`, `"afterBatch":1`, `"batch":[2,1,2]`, `"fk":1`,
		`"refused":["SQL_ERROR: not authorized","SQL_ERROR: not authorized","SQL_ERROR: not authorized","SQL_ERROR: no such function: load_extension","SQL_ERROR: not authorized","SQL_ERROR: not authorized","SQL_ERROR: table sqlite_master may not be modified"]`}
	for _, w := range want {
		if !strings.Contains(got, w) {
			t.Errorf("the API: want %s in %s", w, got)
		}
	}

	// Tenants and registries apart: the same table name, other data.
	count := `async () => { try { return await db.prepare('SELECT count(*) AS c FROM t').first('c'); } catch (e) { return e.message; } }`
	if got := result(exec("api.localhost", bob, count, "sqlRead")); got != `"SQL_ERROR: no such table: t"` {
		t.Fatalf("bob sees alice's table: %s", got)
	}
	result(exec("api.localhost", bob, `async () => { await db.exec('CREATE TABLE t (x); INSERT INTO t VALUES (1), (2), (3), (4), (5)'); }`, "sqlWrite"))
	if got := result(exec("api.localhost", bob, count, "sqlRead")); got != `5` {
		t.Fatalf("bob's table: %s", got)
	}
	if got := result(exec("api.localhost", alice, count, "sqlRead")); got != `2` {
		t.Fatalf("alice's table: %s", got)
	}
	if got := result(exec("other.localhost", alice, count, "sqlRead")); got != `"SQL_ERROR: no such table: t"` {
		t.Fatalf("another registry sees alice's table: %s", got)
	}

	// The control plane: POST /sql as the tenant, D1's .all() shape;
	// GET /sql/export, the database as a file.
	q := do(t, "POST", site("api.localhost", "/sql"), alice, mustJSON(map[string]any{"sql": "SELECT id, name, b FROM t WHERE n >= ? ORDER BY id", "params": []any{0}}))
	if q.status != 200 || !strings.HasPrefix(string(q.body), `{"success":true,"meta":{`) || !strings.Contains(string(q.body), `"results":[{"id":1,"name":"a","b":{"blob":"00ff07"}},{"id":2,"name":"d","b":null}]}`) {
		t.Fatalf("POST /sql: %d %s", q.status, q.body)
	}
	q = do(t, "POST", site("api.localhost", "/sql"), bob, mustJSON(map[string]any{"batch": []map[string]any{{"sql": "INSERT INTO t VALUES (?)", "params": []any{6}}, {"sql": "SELECT count(*) AS c FROM t"}}}))
	if q.status != 200 || !strings.Contains(string(q.body), `"results":[{"c":6}]}]`) {
		t.Fatalf("POST /sql, a batch: %d %s", q.status, q.body)
	}
	if q := do(t, "POST", site("api.localhost", "/sql"), alice, mustJSON(map[string]any{"sql": "ATTACH 'x' AS y"})); q.status != 400 || !strings.Contains(string(q.body), "SQL_ERROR: not authorized") {
		t.Fatalf("POST /sql, ATTACH: %d %s", q.status, q.body)
	}
	ex := do(t, "GET", site("api.localhost", "/sql/export"), alice, nil)
	if ex.status != 200 || !strings.HasPrefix(string(ex.body), "SQLite format 3\x00") || !strings.Contains(string(ex.body), "CREATE TABLE t") {
		t.Fatalf("GET /sql/export: %d %.100q", ex.status, ex.body)
	}
	bobDB := do(t, "GET", site("api.localhost", "/sql/export"), bob, nil)
	if strings.Contains(string(bobDB.body), "CREATE TABLE o") || !strings.Contains(string(bobDB.body), "CREATE TABLE t") {
		t.Fatal("bob's export holds alice's tables")
	}
	b6 := result(exec("api.localhost", bob, count, "sqlRead"))
	if b6 != `6` {
		t.Fatalf("bob's count after POST /sql: %s", b6)
	}

	// Grants: no grant, no db; a write under sqlRead is a recorded denial.
	if got := result(exec("api.localhost", alice, `async () => typeof db`)); got != `"undefined"` {
		t.Fatalf("db without a grant: %s", got)
	}
	a := exec("api.localhost", alice, `async () => { try { await db.prepare("INSERT INTO t (name) VALUES ('x')").run(); return 'wrote'; } catch (e) { return e.message; } }`, "sqlRead")
	if got := result(a); !strings.Contains(got, "sqlWrite") {
		t.Fatalf("a write under sqlRead: %s", got)
	}
	if r := do(t, "GET", site("api.localhost", "/results/"+a.json(t)["resultId"].(string)+".json"), alice, nil); !strings.Contains(string(r.body), `"denials":["`) || !strings.Contains(string(r.body), "sqlWrite") {
		t.Fatalf("the denial is not in the receipt: %s", r.body)
	}
	if got := result(exec("api.localhost", alice, count, "sqlRead")); got != `2` {
		t.Fatalf("the refused write changed the table: %s", got)
	}

	// A query without end is interrupted at the run's bound; the database
	// answers again at once, and the bystander kept its state.
	loop := do(t, "POST", site("api.localhost", "/executions"), alice, mustJSON(map[string]any{"timeoutMs": 500, "capabilities": []string{"sqlRead"},
		"code": `async () => db.prepare('WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM c) SELECT count(*) FROM c').first()`}))
	if loop.code() != "TIMEOUT" {
		t.Fatalf("an endless query: %d %s", loop.status, loop.body)
	}
	if got := result(exec("api.localhost", alice, count, "sqlRead")); got != `2` {
		t.Fatalf("after the endless query: %s", got)
	}
	// The same from a handler: its invocation's bound ends the statement.
	hl := do(t, "POST", site("api.localhost", "/executions"), alice, mustJSON(map[string]any{"timeoutMs": 500, "retainHandles": true, "capabilities": []string{"sqlRead"},
		"code": `async () => ({ async fetch(req, env) { return Response.json(await env.db.prepare('WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM c) SELECT count(*) FROM c').first()); } })`}))
	if hl.status != 200 {
		t.Fatalf("deploy the endless handler: %d %s", hl.status, hl.body)
	}
	if a := do(t, "GET", site(hl.json(t)["executionId"].(string)+".apps.localhost", "/"), "", nil); a.status < 500 || !strings.Contains(string(a.body), "TIMEOUT") {
		t.Fatalf("an endless query in a handler: %d %s", a.status, a.body)
	}
	if got := result(exec("api.localhost", alice, count, "sqlRead")); got != `2` {
		t.Fatalf("after the endless handler: %s", got)
	}
	if a := do(t, "GET", site(todo, "/served"), "", nil); string(a.body) != `{"served":3}` {
		t.Fatalf("the bystander's counter: %d %s", a.status, a.body)
	}
	if a := do(t, "GET", site(todo, "/"), "", nil); string(a.body) != `[{"id":1,"title":"milk","done":0}]` {
		t.Fatalf("the bystander's todos: %d %s", a.status, a.body)
	}

	// A statement that needs more than its database's memory fails; the
	// database and the gateway go on.
	mem := do(t, "POST", site("api.localhost", "/executions"), alice, mustJSON(map[string]any{"timeoutMs": 20000, "capabilities": []string{"sqlRead"},
		"code": `async () => { try { return await db.prepare('WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM c LIMIT 1000000) SELECT count(DISTINCT randomblob(200)) AS n FROM c').first('n'); } catch (e) { return e.message; } }`}))
	if got := result(mem); !strings.Contains(got, "SQL_ERROR: out of memory") {
		t.Fatalf("a statement past the engine's memory: %s", got)
	}
	if got := result(exec("api.localhost", alice, count, "sqlRead")); got != `2` {
		t.Fatalf("after the memory bomb: %s", got)
	}

	// The quota (1 MiB here): a write past it throws QUOTA_EXCEEDED and
	// changes nothing.
	fill := `async () => {
		await db.exec('CREATE TABLE big (v BLOB)');
		let rows = 0;
		for (;;) {
			try { await db.prepare('INSERT INTO big VALUES (randomblob(65536))').run(); rows++; }
			catch (e) { return [rows, e.code, e.message, await db.prepare('SELECT count(*) AS c FROM big').first('c')]; }
			if (rows > 100) return 'no quota';
		}
	}`
	got = result(exec("api.localhost", alice, fill, "sqlWrite"))
	var fl []any
	json.Unmarshal([]byte(got), &fl)
	if len(fl) != 4 || fl[1] != "QUOTA_EXCEEDED" || !strings.Contains(fl[2].(string), "sql_quota") || fl[0] != fl[3] {
		t.Fatalf("the quota: %s", got)
	}
}
