package sqldb

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ncruces/go-sqlite3"

	"github.com/retainer-gw/retainer/fault"
	"github.com/retainer-gw/retainer/internal/pgtest"
	"github.com/retainer-gw/retainer/store"
)

// gateway is one cluster gateway's databases on the cluster's PostgreSQL,
// with the fence of its claim on every space in epoch.
type gateway struct {
	*DBs
	epoch atomic.Uint64
}

func clusterGateway(t *testing.T, pg *store.Postgres, epoch uint64, quota int64) *gateway {
	t.Helper()
	g := &gateway{}
	g.epoch.Store(epoch)
	d, err := Open(Options{Dir: t.TempDir(), Quota: quota, Pages: pg,
		Fence: func(context.Context, string, string) (uint64, error) { return g.epoch.Load(), nil }})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(d.Close)
	g.DBs = d
	return g
}

func clusterPG(t *testing.T) *store.Postgres {
	t.Helper()
	srv := pgtest.Start(t)
	pg, err := store.OpenPostgres(context.Background(), srv.DSN)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { pg.Close() })
	return pg
}

// integrity is SQLite's integrity_check of the tenant's database (a
// pragma tenants may not run).
func integrity(t *testing.T, d *DBs, tenant string) string {
	t.Helper()
	x, err := d.get("r", tenant)
	if err != nil {
		t.Fatal(err)
	}
	x.lock(context.Background())
	defer x.unlock()
	var out string
	err = x.guard(func(c *sqlite3.Conn) error {
		s, _, err := c.Prepare("PRAGMA integrity_check")
		if err != nil {
			return err
		}
		defer s.Close()
		for s.Step() {
			out += s.ColumnText(0)
		}
		return s.Err()
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

func count(t *testing.T, d *DBs, tenant, table string) string {
	t.Helper()
	return mustCall(t, d, tenant, "raw", st("SELECT count(*), coalesce(sum(length(v)), 0) FROM "+table))
}

// A gateway's acknowledged writes are in PostgreSQL when Serve answers: a
// new owner, starting with nothing of the old one's (its engine and cache
// abandoned, as a gateway killed with -9 leaves them), serves every one;
// a bystander tenant's database is its own.
func TestClusterNewOwnerServesEveryAcknowledgedWrite(t *testing.T) {
	pg := clusterPG(t)
	a := clusterGateway(t, pg, 10, 0)
	mustCall(t, a.DBs, "bystander", "exec", st("CREATE TABLE b (id INTEGER PRIMARY KEY, v TEXT); INSERT INTO b (v) VALUES ('kept')"))
	mustCall(t, a.DBs, "t", "exec", st("CREATE TABLE t (id INTEGER PRIMARY KEY, v TEXT NOT NULL CHECK (v <> 'bad')); CREATE INDEX tv ON t (v)"))
	// Enough rows for hundreds of pages, each its own commit or batch.
	for i := 0; i < 300; i++ {
		mustCall(t, a.DBs, "t", "run", st("INSERT INTO t (v) VALUES (?)", strings.Repeat(fmt.Sprint(i%10), 1000)))
	}
	mustCall(t, a.DBs, "t", "batch", st("INSERT INTO t (v) VALUES ('x')"), st("UPDATE t SET v = 'y' WHERE id = 1"))
	// A batch that fails changes nothing, here or in the store.
	if _, err := sqlCall(t, a.DBs, "t", true, "batch", st("INSERT INTO t (v) VALUES ('z')"), st("INSERT INTO t (v) VALUES ('bad')")); err == nil {
		t.Fatal("a batch breaking a CHECK was applied")
	}
	mustCall(t, a.DBs, "t", "run", st("DELETE FROM t WHERE id BETWEEN 100 AND 149"))
	want := count(t, a.DBs, "t", "t")
	if !strings.Contains(want, `"rows":[[251,249002]]`) {
		t.Fatalf("on the owner: %s", want)
	}

	b := clusterGateway(t, pg, 20, 0) // the next owner: a later fence
	if got := count(t, b.DBs, "t", "t"); !strings.Contains(got, `[[251,249002]]`) {
		t.Fatalf("the new owner reads %s, the old one acknowledged %s", got, want)
	}
	if got := mustCall(t, b.DBs, "t", "raw", st("SELECT v FROM t WHERE id = 1")); !strings.Contains(got, `[["y"]]`) {
		t.Fatal(got)
	}
	if got := integrity(t, b.DBs, "t"); got != "ok" {
		t.Fatalf("integrity: %s", got)
	}
	if got := mustCall(t, b.DBs, "bystander", "raw", st("SELECT v FROM b")); !strings.Contains(got, `[["kept"]]`) {
		t.Fatal(got)
	}
	mustCall(t, b.DBs, "t", "run", st("INSERT INTO t (v) VALUES ('from b')"))
	// And the one after sees b's write too.
	c := clusterGateway(t, pg, 30, 0)
	if got := count(t, c.DBs, "t", "t"); !strings.Contains(got, `[[252,`) {
		t.Fatal(got)
	}
}

// A replaced owner's late write is refused: once the new owner has opened
// the database under its later fence, the old owner's commit changes
// nothing (its call answers a retryable fault), and it cannot open the
// database again under its old fence.
func TestClusterReplacedOwnersLateWriteIsRefused(t *testing.T) {
	pg := clusterPG(t)
	a := clusterGateway(t, pg, 10, 0)
	mustCall(t, a.DBs, "t", "exec", st("CREATE TABLE t (id INTEGER PRIMARY KEY, v TEXT)"))
	mustCall(t, a.DBs, "t", "run", st("INSERT INTO t (v) VALUES ('acknowledged')"))
	mustCall(t, a.DBs, "bystander", "exec", st("CREATE TABLE b (v); INSERT INTO b VALUES ('kept')"))

	b := clusterGateway(t, pg, 20, 0)
	if got := count(t, b.DBs, "t", "t"); !strings.Contains(got, `[[1,12]]`) {
		t.Fatal(got)
	}
	// a still has its engine open and believes it owns the space.
	for _, late := range []Request{
		{Mode: "run", Statements: []Statement{st("INSERT INTO t (v) VALUES ('late')")}},
		{Mode: "batch", Statements: []Statement{st("DELETE FROM t"), st("INSERT INTO t (v) VALUES ('late')")}},
		{Mode: "exec", Statements: []Statement{st("DROP TABLE t")}},
	} {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		_, err := a.Serve(ctx, "r", "t", true, 0, late)
		cancel()
		if f := fault.As(err); f == nil || f.Code != fault.Overloaded {
			t.Fatalf("a late %s answered %v, not a retryable fault", late.Mode, err)
		}
	}
	// Nor may it read as the owner any more.
	if _, err := sqlCall(t, a.DBs, "t", false, "all", st("SELECT * FROM t")); fault.As(err) == nil || fault.As(err).Code != fault.Overloaded {
		t.Fatalf("a stale read answered %v", err)
	}
	if got := mustCall(t, b.DBs, "t", "raw", st("SELECT v FROM t")); !strings.Contains(got, `"rows":[["acknowledged"]]`) {
		t.Fatalf("after the late writes: %s", got)
	}
	// A fresh owner reads the store itself: nothing late landed there.
	c := clusterGateway(t, pg, 30, 0)
	if got := mustCall(t, c.DBs, "t", "raw", st("SELECT v FROM t")); !strings.Contains(got, `"rows":[["acknowledged"]]`) {
		t.Fatalf("in the store: %s", got)
	}
	if got := mustCall(t, c.DBs, "bystander", "raw", st("SELECT v FROM b")); !strings.Contains(got, `[["kept"]]`) {
		t.Fatal(got)
	}
	// A gateway that claims the space again (a later fence) serves it,
	// from the store: its old cache is gone.
	a.epoch.Store(40)
	mustCall(t, a.DBs, "t", "run", st("INSERT INTO t (v) VALUES ('a again')"))
	if got := mustCall(t, a.DBs, "t", "raw", st("SELECT v FROM t ORDER BY id")); !strings.Contains(got, `"rows":[["acknowledged"],["a again"]]`) {
		t.Fatal(got)
	}
}

// A claim raises the database's epoch before the new owner serves
// anything (the gateway does it as it claims a space): the replaced
// owner's first commit, even on a database it never opened, changes
// nothing.
func TestClusterClaimFencesTheOldOwnerFirst(t *testing.T) {
	pg := clusterPG(t)
	b := clusterGateway(t, pg, 10, 0)
	mustCall(t, b.DBs, "t", "exec", st("CREATE TABLE t (v)"))
	b.Close() // its engine closed: the old owner opens the database anew
	a := clusterGateway(t, pg, 10, 0)
	if _, ok, err := pg.SQLOpen(context.Background(), []byte(Key("r", "t")), 20); !ok || err != nil {
		t.Fatal(ok, err)
	}
	if _, err := sqlCall(t, a.DBs, "t", true, "run", st("INSERT INTO t VALUES ('late')")); fault.As(err) == nil || fault.As(err).Code != fault.Overloaded {
		t.Fatalf("the replaced owner's write answered %v", err)
	}
	c := clusterGateway(t, pg, 20, 0)
	if got := count(t, c.DBs, "t", "t"); !strings.Contains(got, "[[0,0]]") {
		t.Fatal(got)
	}
}

// sql_quota holds in a cluster: the write past it is QUOTA_EXCEEDED and
// changes nothing, there or in the store.
func TestClusterQuota(t *testing.T) {
	pg := clusterPG(t)
	a := clusterGateway(t, pg, 10, 64<<10)
	mustCall(t, a.DBs, "t", "exec", st("CREATE TABLE t (id INTEGER PRIMARY KEY, v BLOB)"))
	var err error
	n := 0
	for ; n < 100; n++ {
		if _, err = sqlCall(t, a.DBs, "t", true, "run", st("INSERT INTO t (v) VALUES (zeroblob(5000))")); err != nil {
			break
		}
	}
	if f := fault.As(err); f == nil || f.Code != fault.QuotaExceeded {
		t.Fatalf("after %d rows: %v", n, err)
	}
	want := fmt.Sprintf("[[%d,%d]]", n, n*5000)
	if got := count(t, a.DBs, "t", "t"); !strings.Contains(got, want) {
		t.Fatalf("%s, want %s", got, want)
	}
	b := clusterGateway(t, pg, 20, 64<<10)
	if got := count(t, b.DBs, "t", "t"); !strings.Contains(got, want) {
		t.Fatalf("in the store %s, want %s", got, want)
	}
	// The export is a consistent copy in a file.
	e, err := b.Export(context.Background(), "r", "t")
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close()
	if e.Size < 4096 {
		t.Fatalf("export of %d bytes", e.Size)
	}
}

// A transaction that changes more than a cluster's bound (its pages are
// held in the gateway until its commit) fails and changes nothing; the
// database and the gateway's count of held pages are as before.
func TestClusterTransactionTooLarge(t *testing.T) {
	pg := clusterPG(t)
	a := clusterGateway(t, pg, 10, 0)
	mustCall(t, a.DBs, "t", "exec", st("CREATE TABLE t (v BLOB); INSERT INTO t VALUES ('kept')"))
	before := dirtyAll.Load()
	_, err := sqlCall(t, a.DBs, "t", true, "batch",
		st("INSERT INTO t VALUES (zeroblob(15000000))"), st("INSERT INTO t VALUES (zeroblob(15000000))"),
		st("INSERT INTO t VALUES (zeroblob(15000000))"), st("INSERT INTO t VALUES (zeroblob(15000000))"),
		st("INSERT INTO t VALUES (zeroblob(15000000))"))
	if err == nil || !strings.Contains(err.Error(), "at most 64 MiB") {
		t.Fatalf("a 75 MB transaction answered %v", err)
	}
	if got := count(t, a.DBs, "t", "t"); !strings.Contains(got, "[[1,4]]") {
		t.Fatal(got)
	}
	mustCall(t, a.DBs, "t", "run", st("INSERT INTO t VALUES ('after')"))
	if n := dirtyAll.Load(); n != before {
		t.Fatalf("%d bytes of pages held after the transactions, %d before", n, before)
	}
	b := clusterGateway(t, pg, 20, 0)
	if got := count(t, b.DBs, "t", "t"); !strings.Contains(got, "[[2,9]]") {
		t.Fatal(got)
	}
}

// PostgreSQL stopped under a database: a commit answers a retryable
// fault saying it may or may not have been saved, and its calls are not
// run again (they could be applied twice); once PostgreSQL is back the
// database opens again from it, with what was committed.
func TestClusterPostgreSQLDown(t *testing.T) {
	srv := pgtest.Start(t)
	pg, err := store.OpenPostgres(context.Background(), srv.DSN)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { pg.Close() })
	a := clusterGateway(t, pg, 10, 0)
	mustCall(t, a.DBs, "t", "exec", st("CREATE TABLE t (v); INSERT INTO t VALUES ('kept')"))
	srv.Stop(t)
	_, err = sqlCall(t, a.DBs, "t", true, "run", st("INSERT INTO t VALUES ('while down')"))
	if f := fault.As(err); f == nil || f.Code != fault.Overloaded || !strings.Contains(f.Message, "may or may not") {
		t.Fatalf("a commit with PostgreSQL down answered %v", err)
	}
	// A cold engine cannot even open.
	if _, err := sqlCall(t, a.DBs, "t", false, "all", st("SELECT * FROM t")); fault.As(err) == nil || fault.As(err).Code != fault.Overloaded {
		t.Fatalf("a read with PostgreSQL down answered %v", err)
	}
	srv.Restart(t)
	deadline := time.Now().Add(20 * time.Second)
	for {
		got, err := sqlCall(t, a.DBs, "t", false, "raw", st("SELECT v FROM t"))
		if err == nil {
			if !strings.Contains(got, `"rows":[["kept"]]`) {
				t.Fatalf("after PostgreSQL came back: %s", got)
			}
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("PostgreSQL back, the database still answers %v", err)
		}
		time.Sleep(200 * time.Millisecond)
	}
	mustCall(t, a.DBs, "t", "run", st("INSERT INTO t VALUES ('after')"))
}

// Calls in groups (one commit for many) and a write interrupted at its
// bound after SQLite spilled pages to the file: every acknowledged row is
// in PostgreSQL, the interrupted write's pages are not, and the database
// is whole.
func TestClusterGroupsAndInterruptedWrites(t *testing.T) {
	pg := clusterPG(t)
	a := clusterGateway(t, pg, 10, 0)
	mustCall(t, a.DBs, "t", "exec", st("CREATE TABLE t (id INTEGER PRIMARY KEY, v TEXT); CREATE INDEX tv ON t (v)"))
	var wg sync.WaitGroup
	var failed atomic.Int64
	for g := 0; g < 16; g++ {
		wg.Add(1)
		go func(g int) {
			defer wg.Done()
			for i := 0; i < 20; i++ {
				if _, err := sqlCall(t, a.DBs, "t", true, "run", st("INSERT INTO t (v) VALUES (?)", fmt.Sprint(g, "-", i))); err != nil {
					failed.Add(1)
				}
			}
		}(g)
	}
	wg.Wait()
	if failed.Load() != 0 {
		t.Fatalf("%d inserts failed", failed.Load())
	}
	// Millions of rows' worth of index pages, interrupted at 300 ms: the
	// page cache spills to the file long before.
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	_, err := a.Serve(ctx, "r", "t", true, 0, Request{Mode: "run", Statements: []Statement{
		st("WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM c LIMIT 5000000) INSERT INTO t (v) SELECT printf('%0200d', x) FROM c")}})
	cancel()
	if f := fault.As(err); f == nil || f.Code != fault.Timeout {
		t.Fatalf("the long write answered %v", err)
	}
	mustCall(t, a.DBs, "t", "run", st("INSERT INTO t (v) VALUES ('after')"))
	b := clusterGateway(t, pg, 20, 0)
	if got := count(t, b.DBs, "t", "t"); !strings.Contains(got, "[[321,") {
		t.Fatalf("the next owner reads %s", got)
	}
	if got := integrity(t, b.DBs, "t"); got != "ok" {
		t.Fatalf("integrity: %s", got)
	}
}
