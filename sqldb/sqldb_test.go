package sqldb

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/retainer-gw/retainer/budgets"
	"github.com/retainer-gw/retainer/fault"
)

func sqlCall(t *testing.T, d *DBs, tenant string, write bool, mode string, stmts ...Statement) (string, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	res, err := d.Serve(ctx, "r", tenant, write, 0, Request{Mode: mode, Statements: stmts})
	return string(res), err
}

func st(sql string, params ...any) Statement {
	s := Statement{SQL: sql}
	for _, p := range params {
		b, _ := json.Marshal(p)
		s.Params = append(s.Params, b)
	}
	return s
}

func mustCall(t *testing.T, d *DBs, tenant, mode string, stmts ...Statement) string {
	t.Helper()
	res, err := sqlCall(t, d, tenant, true, mode, stmts...)
	if err != nil {
		t.Fatalf("%s %v: %v", mode, stmts, err)
	}
	return res
}

func open(t *testing.T, quota int64) *DBs {
	d, err := Open(Options{Dir: t.TempDir(), Quota: quota})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(d.Close)
	return d
}

func TestStatementsAndRefusals(t *testing.T) {
	d := open(t, 0)
	mustCall(t, d, "a", "exec", st("CREATE TABLE t (id INTEGER PRIMARY KEY, name TEXT, at DATETIME, b BLOB, n INTEGER CHECK (n >= 0)); CREATE TABLE s (id INTEGER PRIMARY KEY AUTOINCREMENT, x)"))
	res := mustCall(t, d, "a", "run", st("INSERT INTO t (name, at, b, n) VALUES (?, ?2, ?3, ?4)", "x", "2024-01-01T10:00:00Z", Blob{Hex: "00ff"}, 3))
	if !strings.Contains(res, `"changes":1`) || !strings.Contains(res, `"last_row_id":1`) {
		t.Fatal(res)
	}
	res = mustCall(t, d, "a", "all", st("SELECT name, at, b, n FROM t WHERE id = ?", 1))
	if !strings.Contains(res, `["x","2024-01-01T10:00:00Z",{"blob":"00ff"},3]`) {
		t.Fatal(res)
	}
	// Tenants apart.
	mustCall(t, d, "b", "exec", st("CREATE TABLE t (id INTEGER PRIMARY KEY, name TEXT)"))
	if res := mustCall(t, d, "b", "all", st("SELECT count(*) AS c FROM t")); !strings.Contains(res, `[[0]]`) {
		t.Fatal(res)
	}
	// A batch that breaks a CHECK changes nothing.
	_, err := sqlCall(t, d, "a", true, "batch", st("INSERT INTO t (name, n) VALUES ('y', 1)"), st("INSERT INTO t (name, n) VALUES ('z', -1)"))
	if err == nil || !strings.Contains(err.Error(), "SQL_ERROR: ") || !strings.Contains(err.Error(), "CHECK") {
		t.Fatal(err)
	}
	if res := mustCall(t, d, "a", "all", st("SELECT count(*) FROM t")); !strings.Contains(res, `[[1]]`) {
		t.Fatal(res)
	}
	// Reads only.
	if _, err := sqlCall(t, d, "a", false, "run", st("DELETE FROM t")); !errors.Is(err, ErrNeedsWrite) {
		t.Fatal(err)
	}
	if _, err := sqlCall(t, d, "a", false, "all", st("SELECT * FROM t")); err != nil {
		t.Fatal(err)
	}
	for _, sql := range []string{
		"ATTACH DATABASE '/tmp/x.db' AS x", "DETACH DATABASE main", "PRAGMA writable_schema = 1", "PRAGMA foreign_keys = OFF",
		"PRAGMA journal_mode = DELETE", "SELECT load_extension('x')", "VACUUM INTO '/tmp/owned.db'", "/* c */ vacuum",
		"BEGIN", "COMMIT", "SAVEPOINT a", "UPDATE sqlite_sequence SET seq = 0", "INSERT INTO sqlite_stat1 VALUES (1, 2, 3)", "UPDATE sqlite_master SET sql = ''",
		"ATTACH ':memory:' AS m", "UPDATE sqlite_dbpage SET data = zeroblob(4096) WHERE pgno = 1", "PRAGMA main.journal_mode",
		"CREATE VIRTUAL TABLE x USING dbstat", "SELECT writefile('/tmp/x', 'y')", "SELECT readfile('/etc/passwd')", "RELEASE call", "END",
		"PRAGMA cache_size = -1000000", "PRAGMA max_page_count = 1000000000", "PRAGMA temp_store_directory = '/tmp'",
	} {
		_, err := sqlCall(t, d, "a", true, "run", st(sql))
		if err == nil || !strings.HasPrefix(fault.As(err).Message, "SQL_ERROR:") {
			t.Errorf("%s: %v", sql, err)
		}
	}
	for _, sql := range []string{"PRAGMA table_info(t)", "PRAGMA foreign_keys", "SELECT * FROM pragma_table_list"} {
		if _, err := sqlCall(t, d, "a", false, "all", st(sql)); err != nil {
			t.Errorf("%s: %v", sql, err)
		}
	}
	mustCall(t, d, "a", "run", st("DROP TABLE s"))
	// Foreign keys are enforced.
	mustCall(t, d, "a", "exec", st("CREATE TABLE p (id INTEGER PRIMARY KEY); CREATE TABLE c (p INTEGER REFERENCES p (id))"))
	if _, err := sqlCall(t, d, "a", true, "run", st("INSERT INTO c VALUES (5)")); err == nil || !strings.Contains(err.Error(), "FOREIGN KEY constraint failed") {
		t.Fatalf("a foreign key: %v", err)
	}
	if _, err := sqlCall(t, d, "a", true, "all", st("SELECT :x", 1)); err == nil {
		t.Fatal("named parameter bound")
	}
}

func TestBoundAndQuota(t *testing.T) {
	d := open(t, 256<<10)
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	_, err := d.Serve(ctx, "r", "a", true, 0, Request{Mode: "all", Statements: []Statement{st("WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM c) SELECT count(*) FROM c")}})
	if f := fault.As(err); f == nil || f.Code != fault.Timeout {
		t.Fatal(err)
	}
	mustCall(t, d, "a", "run", st("CREATE TABLE big (v BLOB)"))
	var qerr error
	for i := 0; i < 100 && qerr == nil; i++ {
		_, qerr = sqlCall(t, d, "a", true, "run", st("INSERT INTO big VALUES (randomblob(16384))"))
	}
	if f := fault.As(qerr); f == nil || f.Code != fault.QuotaExceeded {
		t.Fatal(qerr)
	}
	mustCall(t, d, "a", "all", st("SELECT count(*) FROM big"))
	// Memory: a sort bigger than the engine's memory fails the statement.
	_, err = sqlCall(t, d, "a", true, "all", st("WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM c LIMIT 1000000) SELECT count(DISTINCT randomblob(200)) FROM c"))
	if err == nil || !strings.Contains(err.Error(), "SQL_ERROR: out of memory") {
		t.Fatal(err)
	}
	mustCall(t, d, "a", "all", st("SELECT count(*) FROM big"))
}

// Past budgets.SQLOpen databases, the least recently used engines close and open
// again on their next call, their data kept.
func TestOpenEnginesAreBounded(t *testing.T) {
	d := open(t, 0)
	for i := 0; i < budgets.SQLOpen+10; i++ {
		tenant := fmt.Sprint("t", i)
		mustCall(t, d, tenant, "exec", st(fmt.Sprintf("CREATE TABLE t (x); INSERT INTO t VALUES (%d)", i)))
	}
	live := 0
	for _, x := range d.open {
		if x.live.Load() {
			live++
		}
	}
	if live > budgets.SQLOpen {
		t.Fatalf("%d engines open", live)
	}
	if res := mustCall(t, d, "t0", "all", st("SELECT x FROM t")); !strings.Contains(res, `[[0]]`) {
		t.Fatal(res)
	}
}

// Concurrent calls share commits (a group commit); a write interrupted at
// its bound, which rolls back SQLite's whole transaction, takes nothing of
// the others' acknowledged writes with it.
func TestGroupCommit(t *testing.T) {
	d := open(t, 0)
	mustCall(t, d, "a", "run", st("CREATE TABLE t (id INTEGER PRIMARY KEY)"))
	const n = 200
	var wg sync.WaitGroup
	errs := make(chan error, n+1)
	wg.Add(1)
	go func() {
		defer wg.Done()
		ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
		defer cancel()
		_, err := d.Serve(ctx, "r", "a", true, 0, Request{Mode: "run", Statements: []Statement{st("INSERT INTO t WITH RECURSIVE c(x) AS (SELECT 1000 UNION ALL SELECT x + 1 FROM c) SELECT x FROM c")}})
		if f := fault.As(err); f == nil || f.Code != fault.Timeout {
			errs <- fmt.Errorf("the endless insert: %v", err)
		}
	}()
	for i := 1; i <= n; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			time.Sleep(time.Duration(i) * 2 * time.Millisecond)
			if _, err := sqlCall(t, d, "a", true, "run", st("INSERT INTO t VALUES (?)", i)); err != nil {
				errs <- err
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	if res := mustCall(t, d, "a", "all", st("SELECT count(*), max(id) FROM t")); !strings.Contains(res, fmt.Sprintf("[[%d,%d]]", n, n)) {
		t.Fatal(res)
	}
}

// Within one group: a write interrupted at its bound rolls back the whole
// transaction; the call that had run before it runs again, the one after
// it commits, and the interrupted one answers TIMEOUT.
func TestGroupAfterALostTransaction(t *testing.T) {
	d := open(t, 0)
	mustCall(t, d, "a", "run", st("CREATE TABLE t (id INTEGER PRIMARY KEY)"))
	x, _ := d.get("r", "a")
	mk := func(ctx context.Context, sql string) *call {
		return &call{ctx: ctx, req: Request{Mode: "run", Statements: []Statement{st(sql)}}, mayWrite: true, maxAnswer: DefaultAnswer, done: make(chan struct{})}
	}
	short, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	first := mk(context.Background(), "INSERT INTO t VALUES (1)")
	endless := mk(short, "INSERT INTO t WITH RECURSIVE c(x) AS (SELECT 1000 UNION ALL SELECT x + 1 FROM c) SELECT x FROM c")
	last := mk(context.Background(), "INSERT INTO t VALUES (2)")
	x.lock(context.Background())
	again := x.runGroup([]*call{first, endless, last})
	if len(again) != 1 || again[0] != first {
		t.Fatalf("to run again: %v", again)
	}
	if f := fault.As(endless.err); f == nil || f.Code != fault.Timeout {
		t.Fatalf("the endless insert: %v", endless.err)
	}
	if last.err != nil {
		t.Fatalf("the last insert: %v", last.err)
	}
	if again = x.runGroup(again); len(again) != 0 || first.err != nil {
		t.Fatalf("the first insert again: %v %v", again, first.err)
	}
	x.unlock()
	if res := mustCall(t, d, "a", "all", st("SELECT group_concat(id) FROM t")); !strings.Contains(res, `[["2,1"]]`) && !strings.Contains(res, `[["1,2"]]`) {
		t.Fatal(res)
	}
}
