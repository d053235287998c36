package sqldb

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"sync"
	"sync/atomic"
	"time"

	"github.com/ncruces/go-sqlite3"

	"github.com/retainer-gw/retainer/budgets"
	"github.com/retainer-gw/retainer/fault"
	"github.com/retainer-gw/retainer/internal/wirejson"
)

// Defaults (docs/sql.md, "Limits"): sql_quota's, one database's file at
// most, is budgets.SQLQuota; one database's engine memory (its page
// cache, sorts, temporary tables and every statement's working memory) is
// budgets.SQLMemory.
const (
	// DefaultAnswer bounds one answer when the caller gives no bound.
	DefaultAnswer = 4 << 20
	// idleClose closes an engine no call used for this long: an engine
	// keeps the memory it grew to while it is open.
	idleClose = time.Minute
	pageSize  = 4096
)

// ErrNeedsWrite is a statement that writes, from a caller that may only
// read (package capability answers it as the sqlWrite denial).
var ErrNeedsWrite = errors.New("a statement that writes")

// Options configure the databases.
type Options struct {
	Dir    string // one file per tenant and registry here
	Quota  int64  // sql_quota; 0: budgets.SQLQuota
	Memory int64  // one database's engine memory; 0: budgets.SQLMemory
	// In a cluster (cluster.go): where the databases' pages are kept
	// (Dir then holds only exports' copies), and the fence of this
	// gateway's claim on a tenant's space, which every commit is checked
	// against. Nil on one machine.
	Pages Pages
	Fence func(ctx context.Context, registry, tenant string) (uint64, error)
}

// DBs is every tenant's database. Safe for concurrent use.
type DBs struct {
	opts   Options
	mu     sync.Mutex
	open   map[string]*db
	clock  uint64 // counts calls, for the least recently used
	closed bool
	stop   chan struct{} // closed by Close: ends sweep
}

// Open prepares the directory; databases open on their first call.
func Open(opts Options) (*DBs, error) {
	if opts.Quota <= 0 {
		opts.Quota = budgets.SQLQuota
	}
	if opts.Memory <= 0 {
		opts.Memory = budgets.SQLMemory
	}
	if err := os.MkdirAll(opts.Dir, 0o700); err != nil {
		return nil, err
	}
	d := &DBs{opts: opts, open: map[string]*db{}, stop: make(chan struct{})}
	go d.sweep()
	return d, nil
}

// sweep closes the engines idle for idleClose, until Close.
func (d *DBs) sweep() {
	t := time.NewTicker(idleClose / 4)
	defer t.Stop()
	for {
		select {
		case <-d.stop:
			return
		case <-t.C:
		}
		d.mu.Lock()
		for _, x := range d.open {
			if x.live.Load() && time.Since(x.at) > idleClose {
				select {
				case x.sem <- struct{}{}:
					x.drop()
					x.unlock()
				default:
				}
			}
		}
		d.mu.Unlock()
	}
}

// Close closes every database.
func (d *DBs) Close() {
	if d == nil {
		return
	}
	d.mu.Lock()
	dbs := d.open
	d.open = map[string]*db{}
	if !d.closed {
		close(d.stop)
	}
	d.closed = true
	d.mu.Unlock()
	for _, x := range dbs {
		x.lock(context.Background())
		x.drop()
		x.unlock()
	}
}

// Statement is one statement and its values: JSON null, a number, a
// string, a boolean (bound as 1 or 0) or {"blob": "<hex>"}.
type Statement struct {
	SQL    string            `json:"sql"`
	Params []json.RawMessage `json:"params,omitempty"`
}

// Request is one call: Mode "all", "raw" or "run" (every row), "first"
// (at most one row), "batch" (every statement in one transaction) or
// "exec" (the SQL's statements, no values, in one transaction).
type Request struct {
	Mode       string      `json:"mode"`
	Statements []Statement `json:"stmts"`
}

// Answer is one statement's: its columns, its rows (values as JSON: a
// BLOB is {"blob": "<hex>"}) and D1's meta.
type Answer struct {
	Columns []string `json:"columns"`
	Rows    [][]any  `json:"rows"`
	Meta    Meta     `json:"meta"`
}

// Meta is D1's meta of a statement.
type Meta struct {
	Duration    float64 `json:"duration"` // milliseconds
	Changes     int64   `json:"changes"`
	LastRowID   int64   `json:"last_row_id"`
	ChangedDB   bool    `json:"changed_db"`
	RowsRead    int64   `json:"rows_read"`
	RowsWritten int64   `json:"rows_written"`
	SizeAfter   int64   `json:"size_after"`
}

// Blob is a BLOB value in an answer.
type Blob struct {
	Hex string `json:"blob"`
}

// ExecAnswer is db.exec's answer.
type ExecAnswer struct {
	Count    int     `json:"count"`
	Duration float64 `json:"duration"`
}

// Serve runs req on the database of tenant in registry. mayWrite false
// refuses every statement that is not read-only (ErrNeedsWrite) before it
// runs. maxAnswer bounds the answer's rows (0: DefaultAnswer). The call
// ends at ctx's end (a TIMEOUT fault), and a write has committed, durably,
// when Serve answers.
func (d *DBs) Serve(ctx context.Context, registry, tenant string, mayWrite bool, maxAnswer int, req Request) (json.RawMessage, error) {
	if maxAnswer <= 0 {
		maxAnswer = DefaultAnswer
	}
	switch req.Mode {
	case "all", "raw", "run", "first":
		if len(req.Statements) != 1 {
			return nil, sqlError("one statement expected")
		}
	case "batch":
		if len(req.Statements) == 0 {
			return nil, sqlError("a batch needs at least one statement")
		}
	case "exec":
		if len(req.Statements) != 1 || len(req.Statements[0].Params) != 0 {
			return nil, sqlError("exec takes SQL and no values")
		}
	default:
		return nil, fault.New(fault.BadRequest, "Unknown SQL call %q.", req.Mode)
	}
	epoch, err := d.fence(ctx, registry, tenant)
	if err != nil {
		return nil, err
	}
	x, err := d.get(registry, tenant)
	if err != nil {
		return nil, err
	}
	c := &call{ctx: ctx, req: req, mayWrite: mayWrite, maxAnswer: maxAnswer, epoch: epoch, done: make(chan struct{})}
	x.qmu.Lock()
	x.queue = append(x.queue, c)
	lead := !x.leading
	x.leading = true
	x.qmu.Unlock()
	if lead {
		// The leader runs in a goroutine of its own, so the caller answers
		// at its bound even while a statement goes on past it (the engine
		// stays busy until the statement ends).
		go x.lead()
	}
	select {
	case <-c.done:
	case <-ctx.Done():
		return nil, timeoutFault()
	}
	if c.err != nil {
		return nil, c.err
	}
	// Encoded once, without HTML escaping, and bounded on its encoded
	// length (docs/sql.md, "Limits").
	out, err := wirejson.Marshal(c.res)
	if err != nil {
		return nil, err
	}
	if len(out) > maxAnswer {
		return nil, TooLarge()
	}
	return out, nil
}

// TooLarge is the fault of an answer past its bound (max_response_body).
func TooLarge() error {
	return sqlError("the answer is over its bound (max_response_body): select fewer rows or columns")
}

// Export is a consistent copy of a database being read: a file with no
// name left on disk (its space is freed when it is closed). Close it.
type Export struct {
	*os.File
	Size int64
	x    *db
}

// Close closes the copy and ends the tenant's export.
func (e *Export) Close() error {
	err := e.File.Close()
	e.x.exporting.Store(false)
	return err
}

// Export writes a consistent copy of the tenant's database to a new file
// (0600) in the databases' directory and answers it open, its name
// already removed. One export a tenant at a time: a second, while the
// first is open, is QUOTA_EXCEEDED.
func (d *DBs) Export(ctx context.Context, registry, tenant string) (*Export, error) {
	epoch, err := d.fence(ctx, registry, tenant)
	if err != nil {
		return nil, err
	}
	x, err := d.get(registry, tenant)
	if err != nil {
		return nil, err
	}
	if !x.exporting.CompareAndSwap(false, true) {
		return nil, fault.New(fault.QuotaExceeded, "QUOTA_EXCEEDED: an export of this database is in progress; one at a time.")
	}
	e, err := d.export(ctx, x, epoch)
	if err != nil {
		x.exporting.Store(false)
		return nil, err
	}
	return e, nil
}

func (d *DBs) export(ctx context.Context, x *db, epoch uint64) (*Export, error) {
	if err := x.lock(ctx); err != nil {
		return nil, timeoutFault()
	}
	defer x.unlock()
	if epoch < x.epoch {
		return nil, fencedFault()
	}
	x.useEpoch(epoch)
	// VACUUM INTO writes into an empty file: this one, created 0600.
	f, err := os.CreateTemp(d.opts.Dir, "export-*.sqlite")
	if err != nil {
		return nil, err
	}
	path := f.Name()
	f.Close()
	defer os.Remove(path)
	err = x.guard(func(c *sqlite3.Conn) error {
		c.SetInterrupt(ctx)
		defer c.SetInterrupt(context.Background())
		// VACUUM INTO attaches its target: the package's own statement.
		c.Limit(sqlite3.LIMIT_ATTACHED, 1)
		defer c.Limit(sqlite3.LIMIT_ATTACHED, 0)
		return c.Exec("VACUUM INTO " + quote(path))
	})
	if err != nil {
		return nil, err
	}
	if f, err = os.Open(path); err != nil {
		return nil, err
	}
	st, err := f.Stat()
	if err != nil {
		f.Close()
		return nil, err
	}
	return &Export{File: f, Size: st.Size(), x: x}, nil
}

// Used is what tenant's database takes on disk now (its file and its
// write-ahead log; 0 for none), for usage metering (docs/usage.md). In a
// cluster its pages are in PostgreSQL and this answers 0 (not metered yet).
func (d *DBs) Used(registry, tenant string) int64 {
	path := filepath.Join(d.opts.Dir, Key(registry, tenant)+".sqlite")
	var n int64
	for _, p := range []string{path, path + "-wal"} {
		if st, err := os.Stat(p); err == nil {
			n += st.Size()
		}
	}
	return n
}

// fence answers this gateway's fence for the tenant's space (0 on one
// machine): an error when another gateway owns it.
func (d *DBs) fence(ctx context.Context, registry, tenant string) (uint64, error) {
	if d.opts.Pages == nil || d.opts.Fence == nil {
		return 0, nil
	}
	return d.opts.Fence(ctx, registry, tenant)
}

// Key names the tenant's database in the registry: its file's name on
// one machine, its key in the cluster's store.
func Key(registry, tenant string) string {
	sum := sha256.Sum256([]byte(registry + "\x00" + tenant))
	return hex.EncodeToString(sum[:16])
}

func (d *DBs) get(registry, tenant string) (*db, error) {
	name := Key(registry, tenant)
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.closed {
		return nil, fault.New(fault.Overloaded, "The gateway is stopping.")
	}
	x := d.open[name]
	if x == nil {
		x = &db{name: name, path: filepath.Join(d.opts.Dir, name+".sqlite"), opts: d.opts, sem: make(chan struct{}, 1)}
		d.open[name] = x
	}
	d.clock++
	x.used, x.at = d.clock, time.Now()
	if !x.live.Load() {
		d.trim()
	}
	return x, nil
}

// trim closes the least recently used idle engines past budgets.SQLOpen (d.mu
// held).
func (d *DBs) trim() {
	var live []*db
	for _, x := range d.open {
		if x.live.Load() {
			live = append(live, x)
		}
	}
	if len(live) < budgets.SQLOpen {
		return
	}
	sort.Slice(live, func(i, j int) bool { return live[i].used < live[j].used })
	for _, x := range live[:len(live)-budgets.SQLOpen+1] {
		select {
		case x.sem <- struct{}{}:
			x.drop()
			x.unlock()
		default: // busy: it stays
		}
	}
}

// db is one tenant's database: one connection, one caller at a time.
type db struct {
	name string // the hash of registry and tenant
	path string
	opts Options
	sem  chan struct{}
	live atomic.Bool // the engine is open
	// exporting: an export's copy is open (one at a time).
	exporting atomic.Bool
	// qmu guards the calls waiting for the next group, and whether a
	// leader runs them.
	qmu     sync.Mutex
	queue   []*call
	leading bool
	used    uint64    // DBs.clock at the last call (under DBs.mu)
	at      time.Time // the last call's time (under DBs.mu)
	// Under sem:
	conn *sqlite3.Conn
	// In a cluster: the fence the connection was opened under, its main
	// file, and the last failure of one (cluster.go).
	epoch   uint64
	file    *pageFile
	failure error
	tenant  bool // the statements being prepared or run are the tenant's
	// writes is set by the authorizer while a statement that writes
	// though SQLite calls it read-only (REINDEX) is prepared; writing
	// keeps those statements.
	writes  bool
	writing map[*sqlite3.Stmt]bool
	// readOnlyStep: a caller that may not write steps a statement;
	// deniedWrite: the authorizer refused it a write meanwhile.
	readOnlyStep, deniedWrite bool
	// stmts keeps the tenant's prepared statements by their SQL (at most
	// budgets.SQLCachedStmts), pageCount the package's own.
	stmts     map[string]*sqlite3.Stmt
	own       map[string]*sqlite3.Stmt
	pageCount *sqlite3.Stmt
}

func (x *db) lock(ctx context.Context) error {
	select {
	case x.sem <- struct{}{}:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

func (x *db) unlock() { <-x.sem }

func (x *db) drop() {
	if x.conn != nil {
		func() {
			defer func() { recover() }() // an engine that ran out of memory
			for _, st := range x.stmts {
				st.Close()
			}
			for _, st := range x.own {
				st.Close()
			}
			if x.pageCount != nil {
				x.pageCount.Close()
			}
		}()
		x.stmts, x.own, x.pageCount, x.writing = nil, nil, nil, nil
		x.conn.Close()
		x.conn = nil
		x.file = nil
		x.live.Store(false)
	}
}

// guard runs f on the connection (opened if needed). The engine's running
// out of its memory is a panic in the driver: f fails and the connection is
// dropped (SQLite rolls back what it had not committed when the file is
// opened again).
func (x *db) guard(f func(c *sqlite3.Conn) error) (err error) {
	x.failure = nil
	if x.conn == nil {
		if err := x.openConn(); err != nil {
			if fault.As(err) != nil {
				return err
			}
			return fault.New(fault.Internal, "The database could not be opened: %v", err)
		}
	}
	defer func() {
		if r := recover(); r != nil {
			x.tenant = false
			x.drop()
			err = sqlError(fmt.Sprintf("out of memory: the statement needs more than the database's %d MiB", x.opts.Memory>>20))
		}
	}()
	err = f(x.conn)
	if x.file != nil && x.file.err != nil {
		// The store refused a commit (fenced) or failed: what the engine
		// holds may not be what the store does; it opens again, from the
		// store, on the next call.
		x.failure = x.file.err
		x.drop()
		return failureFault(x.failure)
	}
	if err != nil && fault.As(err) == nil {
		return x.fault(context.Background(), err)
	}
	return err
}

// useEpoch makes the next connection open under the fence epoch (in a
// cluster): one opened under another is dropped with its cache.
func (x *db) useEpoch(epoch uint64) {
	if x.opts.Pages == nil || epoch == x.epoch {
		return
	}
	x.drop()
	x.epoch = epoch
}

func (x *db) openConn() error {
	ctx := sqlite3.WithMaxMemory(context.Background(), x.opts.Memory+(16<<20))
	var c *sqlite3.Conn
	var err error
	// One machine: a file in WAL mode, synced at every commit. A cluster:
	// the store's pages, the journal in memory, one connection holding
	// the file (cluster.go); synchronous=FULL makes SQLite sync, which is
	// the store's commit, at every commit.
	journal := "PRAGMA journal_mode=WAL"
	if x.opts.Pages != nil {
		c, err = x.openPages(ctx)
		journal = "PRAGMA locking_mode=EXCLUSIVE; PRAGMA journal_mode=MEMORY"
	} else {
		c, err = sqlite3.OpenContext(ctx, x.path)
	}
	if err != nil {
		return err
	}
	fail := func(err error) error {
		c.Close()
		return err
	}
	if _, err := c.Config(sqlite3.DBCONFIG_DEFENSIVE, true); err != nil {
		return fail(err)
	}
	if _, err := c.Config(sqlite3.DBCONFIG_TRUSTED_SCHEMA, false); err != nil {
		return fail(err)
	}
	c.HardHeapLimit(x.opts.Memory)
	pages := x.opts.Quota / pageSize
	if pages < 2 {
		pages = 2
	}
	setup := fmt.Sprintf(`PRAGMA page_size=%d; %s; PRAGMA synchronous=FULL; PRAGMA foreign_keys=ON;
		PRAGMA temp_store=MEMORY; PRAGMA max_page_count=%d; PRAGMA journal_size_limit=%d; PRAGMA cache_size=-%d`,
		pageSize, journal, pages, 16<<20, x.opts.Memory/16>>10)
	if err := c.Exec(setup); err != nil {
		return fail(err)
	}
	c.Limit(sqlite3.LIMIT_LENGTH, budgets.SQLValueBytes)
	c.Limit(sqlite3.LIMIT_SQL_LENGTH, 1<<20)
	c.Limit(sqlite3.LIMIT_ATTACHED, 0)
	c.Limit(sqlite3.LIMIT_VARIABLE_NUMBER, budgets.SQLParams)
	c.Limit(sqlite3.LIMIT_TRIGGER_DEPTH, 100)
	c.Limit(sqlite3.LIMIT_EXPR_DEPTH, 500)
	c.Limit(sqlite3.LIMIT_COMPOUND_SELECT, 200)
	if err := c.SetAuthorizer(x.authorize); err != nil {
		return fail(err)
	}
	if err := registerFunctions(c); err != nil {
		return fail(err)
	}
	x.conn = c
	x.stmts, x.own = map[string]*sqlite3.Stmt{}, map[string]*sqlite3.Stmt{}
	x.writing = map[*sqlite3.Stmt]bool{}
	x.live.Store(true)
	return nil
}
