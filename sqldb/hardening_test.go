package sqldb

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/ncruces/go-sqlite3"

	"github.com/retainer-gw/retainer/fault"
)

// The linear instr and replace answer as SQLite's own do: each expression
// is asked of a plain connection (SQLite's functions) and of a tenant's
// database (the package's).
func TestInstrReplaceAsSQLite(t *testing.T) {
	plain, err := sqlite3.Open(":memory:")
	if err != nil {
		t.Fatal(err)
	}
	defer plain.Close()
	d := open(t, 0)
	exprs := []string{
		"instr('hello world', 'o')", "instr('hello', '')", "instr('', '')", "instr('', 'a')",
		"instr('héllo wörld', 'w')", "instr('日本語テキスト', 'テ')", "instr('ééé', 'é')", "instr('aé', x'a9')",
		"instr(x'0102030405', x'0304')", "instr(x'01020304', x'')", "instr(x'c3a9c3a9', x'a9')",
		"instr('abc', NULL)", "instr(NULL, 'a')", "instr(NULL, NULL)", "instr(12345, 34)", "instr(1.5, '.')",
		"instr(x'616263', 'c')", "instr('abc', x'63')", "instr('aaab', 'ab')", "instr('a' || char(0) || 'b', 'b')",
		"instr('日本', '本本')",
		"replace('hello world', 'o', '0')", "replace('hello', '', 'x')", "replace('aaa', 'a', '')",
		"replace('aaaa', 'aa', 'b')", "replace('héllo', 'é', 'e')", "replace('abc', NULL, 'x')",
		"replace(NULL, 'a', 'x')", "replace('abc', 'b', NULL)", "replace(12321, 2, 9)", "replace(x'616263', 'b', 'X')",
		"typeof(replace(x'616263', '', 'X'))", "typeof(replace(5, '', 'X'))", "replace('abc', 'abcd', 'x')",
		"typeof(replace('abc', 'z', 'y'))", "replace('', 'a', 'b')", "replace('abab', 'ab', 'abab')",
		"typeof(instr(x'00', x'00'))", "replace('a' || char(0) || 'b', char(0), '-')",
		"trim('  xx  ', ' ')", "ltrim('xxayxx', 'x')", "rtrim('xxayxx', 'xy')", "trim('ééaéé', 'é')", "trim('日本語日', '日')",
		"trim('abc', '')", "trim('', 'a')", "trim(NULL, 'a')", "trim('a', NULL)", "trim(12321, 1)", "ltrim(x'616263', 'a')",
		"typeof(trim('aaa', 'a'))", "trim('abcba', 'ab')", "rtrim('a' || char(233), char(233))",
		"hex(trim(x'c3a9c3', x'c3'))", "hex(ltrim(x'c3a9a9c3', x'c3a9'))", "hex(rtrim(x'41c3a9', x'a9'))", "hex(trim(x'80c3a980', x'80c3'))",
		"hex(ltrim(x'c3a9a961', x'a9c3a9'))",
	}
	vals := []string{"'abc'", "'ABC'", "'a%c'", "'a_c'", "''", "'ab'", "'aXbXc'", "'héllo'", "'HÉLLO'", "'日本語'", "'[x]'", "'a-b'", "'a]b'", "'x\\y'",
		"NULL", "123", "x'616263'", "CAST(x'ff41' AS TEXT)", "CAST(x'c3' AS TEXT)", "CAST(x'41c3a9a9' AS TEXT)", "'abc\\\\'", "'a' || char(0) || 'b'", "'aaaaaab'", "'%'", "'_'", "char(233)", "'mississippi'"}
	pats := []string{"'abc'", "'a%'", "'%c'", "'%b%'", "'a_c'", "'_b_'", "'%'", "''", "'a%%c'", "'%_%'", "'___'", "'h_llo'", "'H%'", "'hÉ%'", "'日%'", "'%本%'",
		"'a\\%c'", "'%ss%ss%'", "'m%i%i%i'", "'%a%a%a%b'", "NULL", "'1%3'", "'a' || char(0) || 'x'", "'a*c'", "'*b*'", "'a?c'", "'[a-c]*'", "'[^a]*'",
		"'*[]]*'", "'[x]'", "'[[]x]'", "'a[-]b'", "'*'", "'?'", "'*[é]*'", "'x\\y'", "'[a-'", "'%\\%'", "'mi*ss*'", "'%é%'", "'abc\\\\'", "'%' || CAST(x'c3' AS TEXT)", "'_' || CAST(x'a9' AS TEXT)", "'[' || CAST(x'c3a9' AS TEXT) || '-ÿ]*'"}
	for _, v := range vals {
		for _, p := range pats {
			exprs = append(exprs, "like("+p+", "+v+")", "glob("+p+", "+v+")")
			for _, e := range []string{"'\\'", "'%'", "'_'", "'a'", "'é'"} {
				exprs = append(exprs, "like("+p+", "+v+", "+e+")")
			}
		}
	}
	exprs = append(exprs, "'abc' LIKE 'A%'", "'abc' GLOB 'a*'", "'a%c' LIKE 'a!%c' ESCAPE '!'", "like(NULL, 'a', NULL)")
	for _, e := range exprs {
		q := "SELECT quote(" + e + ")"
		st, _, err := plain.Prepare(q)
		if err != nil {
			t.Fatalf("%s: %v", q, err)
		}
		if !st.Step() {
			t.Fatalf("%s: %v", q, st.Err())
		}
		want := st.ColumnText(0)
		st.Close()
		got := mustCall(t, d, "a", "first", Statement{SQL: q})
		if !strings.Contains(got, fmt.Sprintf(`"rows":[[%q]]`, want)) {
			t.Errorf("%s: SQLite answers %s, the package %s", e, want, got)
		}
	}
	// A trim of characters that are not UTF-8 is SQLite's way, bounded.
	if _, err := sqlCall(t, d, "a", false, "first", Statement{SQL: "SELECT trim(printf('%.*c', 2000000, 'a'), x'80' || printf('%.*c', 1000000, 'b') || 'a')"}); err == nil || !strings.Contains(err.Error(), "too much work") {
		t.Fatalf("trim of bytes that are not UTF-8: %v", err)
	}
	// A replace whose result would pass a value's bound is SQLite's error.
	if _, err := sqlCall(t, d, "a", false, "first", Statement{SQL: "SELECT length(replace(printf('%.*c', 100000, 'a'), 'a', printf('%.*c', 1000, 'b')))"}); err == nil || !strings.Contains(err.Error(), "too big") {
		t.Fatalf("replace past the bound: %v", err)
	}
}

// instr and replace of a long needle in a long haystack are one function
// call each, where SQLite's statement interrupt is not checked: SQLite's
// took (n-m)·m byte comparisons (23 s for these); the package's answer.
func TestQuadraticFunctionsAnswer(t *testing.T) {
	d := open(t, 0)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	for sql, want := range map[string]string{
		"SELECT instr(printf('%.*c', 2000000, 'a'), printf('%.*c', 1000000, 'a') || 'b') AS r":                        `[[0]]`,
		"SELECT instr(printf('%.*c', 2000000, 'a') || 'b', printf('%.*c', 1000000, 'a') || 'b') AS r":                 `[[1000001]]`,
		"SELECT length(replace(printf('%.*c', 2000000, 'a'), printf('%.*c', 1000000, 'a') || 'b', 'x')) AS r":         `[[2000000]]`,
		"SELECT instr(CAST(printf('%.*c', 2000000, 'a') AS BLOB), CAST(printf('%.*c', 1000000, 'a') || 'b' AS BLOB))": `[[0]]`,
		"SELECT length(trim(printf('%.*c', 2000000, 'a'), printf('%.*c', 1000000, 'b') || 'a')) AS r":                 `[[0]]`,
		"SELECT length(rtrim(printf('%.*c', 2000000, 'a') || 'c', printf('%.*c', 1000000, 'b') || 'a')) AS r":         `[[2000001]]`,
		"SELECT printf('%.*c', 2000000, 'a') LIKE '%b%' AS r":                                                         `[[0]]`,
	} {
		res, err := d.Serve(ctx, "r", "a", false, 0, Request{Mode: "all", Statements: []Statement{{SQL: sql}}})
		if err != nil || !strings.Contains(string(res), `"rows":`+want) {
			t.Fatalf("%s: %s %v", sql, res, err)
		}
	}
	// LIKE and GLOB are SQLite's algorithm, its steps bounded: past the
	// bound the statement fails (SQLite's took (len X)·(len pattern)).
	for _, sql := range []string{
		"SELECT printf('%.*c', 2000000, 'a') LIKE '%' || printf('%.*c', 40000, 'a') || 'b'",
		"SELECT printf('%.*c', 2000000, 'a') GLOB '*' || printf('%.*c', 40000, 'a') || 'b'",
		"SELECT like('%' || printf('%.*c', 40000, 'a') || 'b', printf('%.*c', 2000000, 'a'), '!')",
	} {
		_, err := d.Serve(ctx, "r", "a", false, 0, Request{Mode: "all", Statements: []Statement{{SQL: sql}}})
		if err == nil || !strings.Contains(err.Error(), "too complex") {
			t.Fatalf("%s: %v", sql, err)
		}
	}
}

// A statement that runs past its caller's bound is answered TIMEOUT at the
// bound: the caller does not wait for the statement's end.
func TestCallerAnswersAtItsBound(t *testing.T) {
	d := open(t, 0)
	// The leader is busy: the database is locked by another (an export's
	// lock stands for a statement that goes on).
	x, err := d.get("r", "a")
	if err != nil {
		t.Fatal(err)
	}
	x.lock(context.Background())
	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	done := make(chan error, 1)
	go func() {
		_, err := d.Serve(ctx, "r", "a", false, 0, Request{Mode: "all", Statements: []Statement{{SQL: "SELECT 1"}}})
		done <- err
	}()
	select {
	case err := <-done:
		if f := fault.As(err); f == nil || f.Code != fault.Timeout {
			t.Fatalf("want TIMEOUT, got %v", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the caller waited past its bound for the engine")
	}
	x.unlock()
	// The engine, free again, serves the next caller.
	if res := mustCall(t, d, "a", "all", st("SELECT 2 AS n")); !strings.Contains(res, `[[2]]`) {
		t.Fatal(res)
	}
}

// An answer is bounded on its encoded length and '<' stays one byte.
func TestAnswerBoundIsEncoded(t *testing.T) {
	d := open(t, 0)
	ctx := context.Background()
	res, err := d.Serve(ctx, "r", "a", false, 1<<20, Request{Mode: "all", Statements: []Statement{{SQL: "SELECT printf('%.*c', 1000, '<') || '&>' AS s"}}})
	if err != nil || !strings.Contains(string(res), `"`+strings.Repeat("<", 1000)+`&>"`) {
		t.Fatalf("%.200s %v", res, err)
	}
	// 8.3 MB of '<' under a bound of 8 MiB is 8.3 MB (it was 49.8 MB of
	// \u003c through POST /sql); 9 MB is the bound's error.
	res, err = d.Serve(ctx, "r", "a", false, 8<<20, Request{Mode: "all", Statements: []Statement{{SQL: "SELECT printf('%.*c', 8300000, '<') AS s"}}})
	if err != nil || len(res) > 8300000+300 {
		t.Fatalf("%d bytes, %v", len(res), err)
	}
	res, err = d.Serve(ctx, "r", "a", false, 8<<20, Request{Mode: "all", Statements: []Statement{{SQL: "SELECT printf('%.*c', 9000000, '<') AS s"}}})
	if f := fault.As(err); f == nil || !strings.Contains(f.Message, "max_response_body") || len(res) != 0 {
		t.Fatalf("%d bytes, %v", len(res), err)
	}
	// Control characters take six bytes each encoded: counted so.
	_, err = d.Serve(ctx, "r", "a", false, 4<<20, Request{Mode: "all", Statements: []Statement{{SQL: "SELECT printf('%.*c', 1000000, char(1)) AS s"}}})
	if f := fault.As(err); f == nil || !strings.Contains(f.Message, "max_response_body") {
		t.Fatalf("%v", err)
	}
	raw, err := d.Serve(ctx, "r", "a", false, 1<<20, Request{Mode: "all", Statements: []Statement{{SQL: "SELECT '<b>' AS \"x<y\""}}})
	if err != nil {
		t.Fatal(err)
	}
	out, err := D1(raw, false)
	if err != nil || !strings.Contains(string(out), `"results":[{"x<y":"<b>"}]`) {
		t.Fatalf("%s %v", out, err)
	}
}

// REINDEX rewrites indexes though SQLite calls it read-only: it needs the
// right to write, cached or not.
func TestReindexNeedsWrite(t *testing.T) {
	d := open(t, 0)
	// Prepared (and kept) while there is no index to rewrite, SQLite
	// calls REINDEX read-only: stepped once there is one, it is refused.
	mustCall(t, d, "a", "exec", st("CREATE TABLE t (a TEXT)"))
	for _, s := range []string{"REINDEX", "REINDEX NOCASE"} {
		if _, err := sqlCall(t, d, "a", false, "run", st(s)); err != nil {
			t.Fatalf("%s, no index yet: %v", s, err)
		}
	}
	mustCall(t, d, "a", "exec", st("CREATE INDEX ix ON t (a COLLATE NOCASE); INSERT INTO t VALUES ('x')"))
	for _, s := range []string{"REINDEX", "REINDEX NOCASE"} {
		for range 2 {
			if _, err := sqlCall(t, d, "a", false, "run", st(s)); err != ErrNeedsWrite {
				t.Fatalf("%s, kept from before the index: %v", s, err)
			}
		}
	}
	// The same for any statement that is a no-op, so read-only, as it is
	// first prepared: DROP TABLE IF EXISTS a table not made yet.
	for _, s := range []string{"DROP TABLE IF EXISTS v", "DROP INDEX IF EXISTS vx", "CREATE TABLE IF NOT EXISTS t (a)", "DROP VIEW IF EXISTS vv", "DROP TRIGGER IF EXISTS vt"} {
		if _, err := sqlCall(t, d, "a", false, "run", st(s)); err != nil && err != ErrNeedsWrite {
			t.Fatalf("%s, a no-op: %v", s, err)
		} else {
			t.Logf("%s, a no-op: %v", s, err)
		}
	}
	mustCall(t, d, "a", "exec", st("CREATE TABLE v (a); CREATE INDEX vx ON v (a); INSERT INTO v VALUES (1); CREATE VIEW vv AS SELECT 1; CREATE TRIGGER vt AFTER INSERT ON v BEGIN SELECT 1; END; DROP TABLE t"))
	for _, s := range []string{"DROP TABLE IF EXISTS v", "DROP INDEX IF EXISTS vx", "CREATE TABLE IF NOT EXISTS t (a)", "DROP VIEW IF EXISTS vv", "DROP TRIGGER IF EXISTS vt"} {
		if _, err := sqlCall(t, d, "a", false, "run", st(s)); err != ErrNeedsWrite {
			t.Fatalf("%s, kept from when it was a no-op: %v", s, err)
		}
	}
	if res := mustCall(t, d, "a", "all", st("SELECT count(*) FROM sqlite_schema WHERE name IN ('v', 'vx', 'vv', 'vt', 't')")); !strings.Contains(res, "[[4]]") {
		t.Fatalf("the schema changed under sqlRead: %s", res)
	}
	d = open(t, 0)
	mustCall(t, d, "a", "exec", st("CREATE TABLE t (a TEXT); CREATE INDEX ix ON t (a COLLATE NOCASE); INSERT INTO t VALUES ('x')"))
	for _, s := range []string{"REINDEX", "REINDEX NOCASE", "REINDEX ix", "REINDEX t", "ANALYZE"} {
		mustCall(t, d, "a", "run", st(s)) // a writer may: cached now
		if _, err := sqlCall(t, d, "a", false, "run", st(s)); err != ErrNeedsWrite {
			t.Errorf("%s read-only: %v", s, err)
		}
		if _, err := sqlCall(t, d, "a", false, "exec", st(s)); err != ErrNeedsWrite {
			t.Errorf("exec %s read-only: %v", s, err)
		}
	}
	if _, err := sqlCall(t, d, "a", false, "all", st("SELECT a FROM t")); err != nil {
		t.Fatal(err)
	}
}

// One export a tenant at a time, its copy 0600 and gone once closed.
func TestExportOneAtATime(t *testing.T) {
	d := open(t, 0)
	mustCall(t, d, "a", "exec", st("CREATE TABLE t (a); INSERT INTO t VALUES (1)"))
	ctx := context.Background()
	e, err := d.Export(ctx, "r", "a")
	if err != nil {
		t.Fatal(err)
	}
	if e.Size == 0 {
		t.Fatal("empty export")
	}
	if _, err := d.Export(ctx, "r", "a"); fault.As(err) == nil || fault.As(err).Code != fault.QuotaExceeded {
		t.Fatalf("second export: %v", err)
	}
	e2, err := d.Export(ctx, "r", "b") // another tenant's is its own
	if err != nil {
		t.Fatal(err)
	}
	e2.Close()
	files, _ := filepath.Glob(filepath.Join(d.opts.Dir, "export-*"))
	if len(files) != 0 {
		t.Fatalf("the copy keeps a name on disk: %v", files)
	}
	e.Close()
	e, err = d.Export(ctx, "r", "a")
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close()
	if fi, err := os.Stat(fmt.Sprintf("/proc/self/fd/%d", e.Fd())); err == nil && fi.Mode().Perm() != 0o600 {
		t.Fatalf("the copy's mode is %v", fi.Mode().Perm())
	}
}
