package sqldb

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/ncruces/go-sqlite3"

	"github.com/retainer-gw/retainer/budgets"
	"github.com/retainer-gw/retainer/fault"
)

// Defaults (docs/sql.md, "Limits"), defined in package budgets.
const (
	// DefaultQuota is sql_quota: one database's file at most.
	DefaultQuota = budgets.SQLQuota
	// DefaultMemory bounds one database's engine: its page cache, sorts,
	// temporary tables and every statement's working memory.
	DefaultMemory = budgets.SQLMemory
	// DefaultAnswer bounds one answer when the caller gives no bound.
	DefaultAnswer = 4 << 20
	// maxValue is SQLITE_LIMIT_LENGTH: one string or BLOB at most.
	maxValue = budgets.SQLValueBytes
	// maxOpen is how many databases keep their engine open at once: past
	// it the least recently used idle one closes (and opens again on its
	// next call), so the gateway's memory for SQL is bounded by this many
	// databases' engines, not by the number of tenants.
	maxOpen = budgets.SQLOpen
	// idleClose closes an engine no call used for this long: an engine
	// keeps the memory it grew to while it is open.
	idleClose = time.Minute
	// maxParams bounds one statement's parameters.
	maxParams = 1000
	pageSize  = 4096
)

// ErrNeedsWrite is a statement that writes, from a caller that may only
// read (package capability answers it as the sqlWrite denial).
var ErrNeedsWrite = errors.New("a statement that writes")

// Options configure the databases.
type Options struct {
	Dir    string // one file per tenant and registry here
	Quota  int64  // sql_quota; 0: DefaultQuota
	Memory int64  // one database's engine memory; 0: DefaultMemory
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
		opts.Quota = DefaultQuota
	}
	if opts.Memory <= 0 {
		opts.Memory = DefaultMemory
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
	x, err := d.get(registry, tenant)
	if err != nil {
		return nil, err
	}
	c := &call{ctx: ctx, req: req, mayWrite: mayWrite, maxAnswer: maxAnswer, done: make(chan struct{})}
	x.qmu.Lock()
	x.queue = append(x.queue, c)
	lead := !x.leading
	x.leading = true
	x.qmu.Unlock()
	if lead {
		x.lead()
	}
	select {
	case <-c.done:
	case <-ctx.Done():
		return nil, timeoutFault()
	}
	if c.err != nil {
		return nil, c.err
	}
	return json.Marshal(c.res)
}

// call is one Serve waiting for its turn in a group.
type call struct {
	ctx       context.Context
	req       Request
	mayWrite  bool
	maxAnswer int
	res       any
	err       error
	tries     int
	done      chan struct{}
}

// lead runs the calls queued on the database in groups, each group one
// transaction with a savepoint a call and one commit (one fsync) for all
// of it: a group commit. A call's answer waits for its group's commit. The
// leader runs one group and hands the next to a goroutine of its own, so no
// caller's answer waits behind others' later calls.
func (x *db) lead() {
	x.lock(context.Background())
	x.qmu.Lock()
	group := x.queue
	x.queue = nil
	x.qmu.Unlock()
	requeue := x.runGroup(group)
	x.unlock()
	x.qmu.Lock()
	x.queue = append(requeue, x.queue...)
	more := len(x.queue) > 0
	x.leading = more
	x.qmu.Unlock()
	if more {
		go x.lead()
	}
}

// runGroup runs a group's calls and answers them; it answers the calls to
// run again in the next group: those whose writes a lost transaction took
// (an interrupted write rolls back SQLite's whole transaction) before they
// were answered.
func (x *db) runGroup(group []*call) (requeue []*call) {
	var ran []*call // succeeded, not yet committed
	current := -1
	err := x.guard(func(c *sqlite3.Conn) error {
		if err := x.internal("BEGIN IMMEDIATE"); err != nil {
			return err
		}
		for i, cl := range group {
			current = i
			if cl.ctx.Err() != nil {
				cl.err = timeoutFault()
				continue
			}
			if err := x.internal("SAVEPOINT call"); err != nil {
				return err
			}
			c.SetInterrupt(cl.ctx)
			cl.res, cl.err = x.serveOne(cl)
			c.SetInterrupt(context.Background())
			x.tenant = false
			if cl.err == nil {
				if err := x.internal("RELEASE call"); err != nil {
					return err
				}
				ran = append(ran, cl)
				continue
			}
			cl.err = x.fault(cl.ctx, cl.err)
			if c.GetAutocommit() {
				// SQLite rolled the whole transaction back: the calls
				// that had run lost their writes; they run again.
				requeue = append(requeue, ran...)
				ran = nil
				if err := x.internal("BEGIN IMMEDIATE"); err != nil {
					return err
				}
				continue
			}
			if err := x.internal("ROLLBACK TO call"); err != nil {
				return err
			}
			if err := x.internal("RELEASE call"); err != nil {
				return err
			}
		}
		current = len(group)
		return x.internal("COMMIT")
	})
	if err != nil {
		// The group's transaction is gone, and with it every write of
		// the calls that had run: they run again, as do those that had
		// not had their turn; the one that failed answers the error.
		if current >= 0 && current < len(group) && group[current].err == nil {
			group[current].err = err
		}
		if x.conn != nil && !x.conn.GetAutocommit() {
			x.conn.Exec("ROLLBACK")
		}
		requeue = append(requeue, ran...)
		requeue = append(requeue, group[min(current+1, len(group)):]...)
	}
	again := requeue[:0]
	for _, cl := range requeue {
		// A call runs at most three times: a commit that keeps failing
		// answers its error.
		if cl.tries++; cl.tries < 3 {
			cl.res, cl.err = nil, nil
			again = append(again, cl)
		} else if cl.err == nil {
			cl.err = err
			if cl.err == nil {
				cl.err = fault.New(fault.Overloaded, "The database's transaction was lost three times; nothing of this call was written. Retry.")
			}
		}
	}
	for _, cl := range group {
		if !contains(again, cl) {
			close(cl.done)
		}
	}
	return again
}

func contains(cs []*call, c *call) bool {
	for _, x := range cs {
		if x == c {
			return true
		}
	}
	return false
}

// serveOne runs one call's statements inside the group's transaction.
func (x *db) serveOne(cl *call) (any, error) {
	switch cl.req.Mode {
	case "exec":
		return x.exec(cl.ctx, cl.req.Statements[0].SQL, cl.mayWrite)
	case "batch":
		return x.batch(cl.ctx, cl.req.Statements, cl.mayWrite, cl.maxAnswer)
	}
	budget := cl.maxAnswer
	return x.run(cl.ctx, cl.req.Statements[0], cl.mayWrite, cl.req.Mode == "first", &budget)
}

// internal runs one of the package's own statements (kept prepared).
func (x *db) internal(sql string) error {
	st := x.own[sql]
	if st == nil {
		var err error
		if st, _, err = x.conn.Prepare(sql); err != nil {
			return err
		}
		x.own[sql] = st
	}
	defer st.Reset()
	return st.Exec()
}

// Export writes a consistent copy of the tenant's database to a new file
// in the databases' directory and answers its path; the caller removes it.
func (d *DBs) Export(ctx context.Context, registry, tenant string) (string, error) {
	x, err := d.get(registry, tenant)
	if err != nil {
		return "", err
	}
	if err := x.lock(ctx); err != nil {
		return "", timeoutFault()
	}
	defer x.unlock()
	f, err := os.CreateTemp(d.opts.Dir, "export-*.sqlite")
	if err != nil {
		return "", err
	}
	path := f.Name()
	f.Close()
	os.Remove(path)
	err = x.guard(func(c *sqlite3.Conn) error {
		c.SetInterrupt(ctx)
		defer c.SetInterrupt(context.Background())
		// VACUUM INTO attaches its target: the package's own statement.
		c.Limit(sqlite3.LIMIT_ATTACHED, 1)
		defer c.Limit(sqlite3.LIMIT_ATTACHED, 0)
		return c.Exec("VACUUM INTO " + quote(path))
	})
	if err != nil {
		os.Remove(path)
		return "", err
	}
	return path, nil
}

func (d *DBs) get(registry, tenant string) (*db, error) {
	sum := sha256.Sum256([]byte(registry + "\x00" + tenant))
	name := hex.EncodeToString(sum[:16])
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.closed {
		return nil, fault.New(fault.Overloaded, "The gateway is stopping.")
	}
	x := d.open[name]
	if x == nil {
		x = &db{path: filepath.Join(d.opts.Dir, name+".sqlite"), opts: d.opts, sem: make(chan struct{}, 1)}
		d.open[name] = x
	}
	d.clock++
	x.used, x.at = d.clock, time.Now()
	if !x.live.Load() {
		d.trim()
	}
	return x, nil
}

// trim closes the least recently used idle engines past maxOpen (d.mu
// held).
func (d *DBs) trim() {
	var live []*db
	for _, x := range d.open {
		if x.live.Load() {
			live = append(live, x)
		}
	}
	if len(live) < maxOpen {
		return
	}
	sort.Slice(live, func(i, j int) bool { return live[i].used < live[j].used })
	for _, x := range live[:len(live)-maxOpen+1] {
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
	path string
	opts Options
	sem  chan struct{}
	live atomic.Bool // the engine is open
	// qmu guards the calls waiting for the next group, and whether a
	// leader runs them.
	qmu     sync.Mutex
	queue   []*call
	leading bool
	used    uint64    // DBs.clock at the last call (under DBs.mu)
	at      time.Time // the last call's time (under DBs.mu)
	// Under sem:
	conn   *sqlite3.Conn
	tenant bool // the statements being prepared or run are the tenant's
	// stmts keeps the tenant's prepared statements by their SQL (at most
	// maxCached), pageCount the package's own.
	stmts     map[string]*sqlite3.Stmt
	own       map[string]*sqlite3.Stmt
	pageCount *sqlite3.Stmt
}

// maxCached bounds one database's kept prepared statements.
const maxCached = budgets.SQLCachedStmts

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
		x.stmts, x.own, x.pageCount = nil, nil, nil
		x.conn.Close()
		x.conn = nil
		x.live.Store(false)
	}
}

// guard runs f on the connection (opened if needed). The engine's running
// out of its memory is a panic in the driver: f fails and the connection is
// dropped (SQLite rolls back what it had not committed when the file is
// opened again).
func (x *db) guard(f func(c *sqlite3.Conn) error) (err error) {
	if x.conn == nil {
		if err := x.openConn(); err != nil {
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
	if err != nil && fault.As(err) == nil {
		return x.fault(context.Background(), err)
	}
	return err
}

func (x *db) openConn() error {
	ctx := sqlite3.WithMaxMemory(context.Background(), x.opts.Memory+(16<<20))
	c, err := sqlite3.OpenContext(ctx, x.path)
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
	setup := fmt.Sprintf(`PRAGMA page_size=%d; PRAGMA journal_mode=WAL; PRAGMA synchronous=FULL; PRAGMA foreign_keys=ON;
		PRAGMA temp_store=MEMORY; PRAGMA max_page_count=%d; PRAGMA journal_size_limit=%d; PRAGMA cache_size=-%d`,
		pageSize, pages, 16<<20, x.opts.Memory/16>>10)
	if err := c.Exec(setup); err != nil {
		return fail(err)
	}
	c.Limit(sqlite3.LIMIT_LENGTH, maxValue)
	c.Limit(sqlite3.LIMIT_SQL_LENGTH, 1<<20)
	c.Limit(sqlite3.LIMIT_ATTACHED, 0)
	c.Limit(sqlite3.LIMIT_VARIABLE_NUMBER, maxParams)
	c.Limit(sqlite3.LIMIT_TRIGGER_DEPTH, 100)
	c.Limit(sqlite3.LIMIT_EXPR_DEPTH, 500)
	c.Limit(sqlite3.LIMIT_COMPOUND_SELECT, 200)
	if err := c.SetAuthorizer(x.authorize); err != nil {
		return fail(err)
	}
	x.conn = c
	x.stmts, x.own = map[string]*sqlite3.Stmt{}, map[string]*sqlite3.Stmt{}
	x.live.Store(true)
	return nil
}

// readPragmas are the PRAGMAs a tenant may run, to read only.
var readPragmas = map[string]bool{
	"table_info": true, "table_xinfo": true, "table_list": true, "index_list": true,
	"index_info": true, "index_xinfo": true, "foreign_key_list": true, "foreign_keys": true,
}

// authorize is SQLite's authorizer: the tenant's statements are checked
// as they are prepared (docs/sql.md, "Refused"); the package's own are not.
func (x *db) authorize(action sqlite3.AuthorizerActionCode, name3, name4, schema, inner string) sqlite3.AuthorizerReturnCode {
	if !x.tenant {
		return sqlite3.AUTH_OK
	}
	switch action {
	case sqlite3.AUTH_ATTACH, sqlite3.AUTH_DETACH, sqlite3.AUTH_TRANSACTION, sqlite3.AUTH_SAVEPOINT:
		return sqlite3.AUTH_DENY
	case sqlite3.AUTH_PRAGMA:
		p := strings.ToLower(name3)
		if !readPragmas[p] || p == "foreign_keys" && name4 != "" {
			return sqlite3.AUTH_DENY
		}
	case sqlite3.AUTH_FUNCTION:
		switch strings.ToLower(name4) {
		case "load_extension", "readfile", "writefile", "edit", "fts3_tokenizer":
			return sqlite3.AUTH_DENY
		}
	case sqlite3.AUTH_CREATE_VTABLE, sqlite3.AUTH_DROP_VTABLE:
		if strings.ToLower(name4) != "fts5" {
			return sqlite3.AUTH_DENY
		}
	case sqlite3.AUTH_INSERT, sqlite3.AUTH_UPDATE, sqlite3.AUTH_DELETE:
		t := strings.ToLower(name3)
		if strings.HasPrefix(t, "sqlite_") {
			switch t {
			// SQLite writes its schema table as it creates and drops
			// (and refuses a statement's own writes to it: defensive).
			case "sqlite_master", "sqlite_temp_master", "sqlite_schema", "sqlite_temp_schema":
			case "sqlite_sequence":
				// DROP TABLE deletes a table's counter.
				if action != sqlite3.AUTH_DELETE {
					return sqlite3.AUTH_DENY
				}
			default:
				return sqlite3.AUTH_DENY
			}
		}
	}
	return sqlite3.AUTH_OK
}

// prepare prepares one tenant statement, refusing what follows it.
func (x *db) prepare(sql string) (*sqlite3.Stmt, error) {
	x.tenant = true
	defer func() { x.tenant = false }()
	st, tail, err := x.conn.Prepare(sql)
	if err != nil {
		return nil, err
	}
	if st == nil {
		return nil, sqlError("no statement in the SQL")
	}
	if strings.TrimSpace(tail) != "" {
		more, _, err := x.conn.Prepare(tail)
		if more != nil {
			more.Close()
			st.Close()
			return nil, sqlError("prepare takes one statement (db.exec runs several)")
		}
		if err != nil {
			st.Close()
			return nil, err
		}
	}
	if isVacuum(st.SQL()) {
		st.Close()
		return nil, notAuthorized()
	}
	return st, nil
}

// run runs one statement; first stops at its first row. budget is what is
// left of the answer's bytes.
func (x *db) run(ctx context.Context, s Statement, mayWrite, first bool, budget *int) (Answer, error) {
	start := time.Now()
	st := x.stmts[s.SQL]
	if st == nil {
		var err error
		if st, err = x.prepare(s.SQL); err != nil {
			return Answer{}, err
		}
		if len(x.stmts) >= maxCached {
			for k, old := range x.stmts {
				old.Close()
				delete(x.stmts, k)
				break
			}
		}
		x.stmts[s.SQL] = st
	}
	defer func() {
		st.Reset()
		st.ClearBindings()
	}()
	ans, err := x.step(st, s.Params, mayWrite, first, budget)
	if err != nil {
		return Answer{}, err
	}
	ans.Meta.Duration = float64(time.Since(start).Microseconds()) / 1000
	return ans, nil
}

func (x *db) step(st *sqlite3.Stmt, params []json.RawMessage, mayWrite, first bool, budget *int) (Answer, error) {
	readOnly := st.ReadOnly()
	if !readOnly && !mayWrite {
		return Answer{}, ErrNeedsWrite
	}
	if err := bind(st, params); err != nil {
		return Answer{}, err
	}
	n := st.ColumnCount()
	ans := Answer{Columns: make([]string, n), Rows: [][]any{}}
	for i := range n {
		ans.Columns[i] = st.ColumnName(i)
		*budget -= len(ans.Columns[i]) + 4
	}
	// Stepping may prepare the statement again (after a change of the
	// schema): under the authorizer's rules, as the tenant's.
	x.tenant = true
	defer func() { x.tenant = false }()
	for st.Step() {
		if first && len(ans.Rows) == 1 {
			continue // a write's every row is stepped; a read's could stop
		}
		row := make([]any, n)
		for i := range n {
			row[i] = value(st, i, budget)
		}
		if *budget < 0 {
			return Answer{}, sqlError("the answer is over its bound (max_response_body): select fewer rows or columns")
		}
		ans.Rows = append(ans.Rows, row)
		if first && readOnly {
			break
		}
	}
	x.tenant = false
	if err := st.Err(); err != nil {
		return Answer{}, err
	}
	ans.Meta.RowsRead = int64(len(ans.Rows)) + int64(st.Status(sqlite3.STMTSTATUS_FULLSCAN_STEP, false))
	if !readOnly {
		ans.Meta.Changes = x.conn.Changes()
		ans.Meta.RowsWritten = ans.Meta.Changes
		ans.Meta.ChangedDB = ans.Meta.Changes > 0
	}
	ans.Meta.LastRowID = x.conn.LastInsertRowID()
	ans.Meta.SizeAfter = x.size()
	return ans, nil
}

func (x *db) size() int64 {
	if x.pageCount == nil {
		st, _, err := x.conn.Prepare("PRAGMA page_count")
		if err != nil || st == nil {
			return 0
		}
		x.pageCount = st
	}
	defer x.pageCount.Reset()
	if !x.pageCount.Step() {
		return 0
	}
	return x.pageCount.ColumnInt64(0) * pageSize
}

// batch runs the statements: all, or none (the call's savepoint).
func (x *db) batch(ctx context.Context, stmts []Statement, mayWrite bool, maxAnswer int) ([]Answer, error) {
	out := make([]Answer, 0, len(stmts))
	budget := maxAnswer
	for _, s := range stmts {
		a, err := x.run(ctx, s, mayWrite, false, &budget)
		if err != nil {
			return nil, err // guard rolls back
		}
		out = append(out, a)
	}
	return out, nil
}

// exec runs every statement of sql, no values: all, or none.
func (x *db) exec(ctx context.Context, sql string, mayWrite bool) (ExecAnswer, error) {
	start := time.Now()
	count := 0
	for strings.TrimSpace(sql) != "" {
		x.tenant = true
		st, tail, err := x.conn.Prepare(sql)
		x.tenant = false
		if err != nil {
			return ExecAnswer{}, err
		}
		sql = tail
		if st == nil {
			continue
		}
		if isVacuum(st.SQL()) {
			st.Close()
			return ExecAnswer{}, notAuthorized()
		}
		budget := DefaultAnswer
		_, err = x.step(st, nil, mayWrite, false, &budget)
		st.Close()
		if err != nil {
			return ExecAnswer{}, err
		}
		count++
	}
	return ExecAnswer{Count: count, Duration: float64(time.Since(start).Microseconds()) / 1000}, nil
}

func bind(st *sqlite3.Stmt, params []json.RawMessage) error {
	want := st.BindCount()
	for i := 1; i <= want; i++ {
		if name := st.BindName(i); name != "" && name[0] != '?' {
			return sqlError("named parameters (" + name + ") are not supported: use ? or ?NNN")
		}
	}
	if len(params) != want {
		return sqlError(fmt.Sprintf("the statement has %d parameters and %d values were bound", want, len(params)))
	}
	for i, raw := range params {
		if err := bindOne(st, i+1, raw); err != nil {
			return err
		}
	}
	return nil
}

func bindOne(st *sqlite3.Stmt, i int, raw json.RawMessage) error {
	s := strings.TrimSpace(string(raw))
	switch {
	case s == "null" || s == "":
		return st.BindNull(i)
	case s == "true":
		return st.BindInt64(i, 1)
	case s == "false":
		return st.BindInt64(i, 0)
	case s[0] == '"':
		var v string
		if err := json.Unmarshal(raw, &v); err != nil {
			return sqlError("a malformed value")
		}
		return st.BindText(i, v)
	case s[0] == '{':
		var b Blob
		if err := json.Unmarshal(raw, &b); err != nil {
			return sqlError("a malformed value")
		}
		v, err := hex.DecodeString(b.Hex)
		if err != nil {
			return sqlError("a malformed BLOB")
		}
		return st.BindBlob(i, v)
	}
	if !strings.ContainsAny(s, ".eE") {
		if v, err := strconv.ParseInt(s, 10, 64); err == nil {
			return st.BindInt64(i, v)
		}
	}
	v, err := strconv.ParseFloat(s, 64)
	if err != nil {
		return sqlError("a value of a type SQLite does not store")
	}
	return st.BindFloat(i, v)
}

func value(st *sqlite3.Stmt, i int, budget *int) any {
	switch st.ColumnType(i) {
	case sqlite3.INTEGER:
		*budget -= 20
		return st.ColumnInt64(i)
	case sqlite3.FLOAT:
		*budget -= 24
		v := st.ColumnFloat(i)
		if math.IsInf(v, 0) || math.IsNaN(v) {
			return nil
		}
		return v
	case sqlite3.TEXT:
		s := st.ColumnText(i)
		*budget -= len(s) + 2
		return s
	case sqlite3.BLOB:
		b := st.ColumnRawBlob(i)
		*budget -= 2*len(b) + 12
		if *budget < 0 {
			return nil
		}
		return Blob{Hex: hex.EncodeToString(b)}
	}
	*budget -= 4
	return nil
}

// isVacuum reports a VACUUM statement (VACUUM INTO writes a file of the
// caller's naming; a plain VACUUM rewrites the whole file): SQL is one
// prepared statement, so VACUUM is its first word after comments.
func isVacuum(sql string) bool {
	words := strings.Fields(strings.ToLower(stripComments(sql)))
	return len(words) > 0 && strings.HasPrefix(words[0], "vacuum")
}

func stripComments(s string) string {
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		switch {
		case strings.HasPrefix(s[i:], "--"):
			j := strings.IndexByte(s[i:], '\n')
			if j < 0 {
				return b.String()
			}
			i += j
			b.WriteByte(' ')
		case strings.HasPrefix(s[i:], "/*"):
			j := strings.Index(s[i+2:], "*/")
			if j < 0 {
				return b.String()
			}
			i += j + 3
			b.WriteByte(' ')
		default:
			b.WriteByte(s[i])
		}
	}
	return b.String()
}

func quote(s string) string { return "'" + strings.ReplaceAll(s, "'", "''") + "'" }

// fault turns the engine's errors into the contract's.
func (x *db) fault(ctx context.Context, err error) error {
	if err == nil || errors.Is(err, ErrNeedsWrite) || fault.As(err) != nil && !isSQLite(err) {
		return err
	}
	switch {
	case errors.Is(err, sqlite3.INTERRUPT) || ctx.Err() != nil:
		return timeoutFault()
	case errors.Is(err, sqlite3.FULL):
		return fault.New(fault.QuotaExceeded, "QUOTA_EXCEEDED: the database is at its bound of %d bytes (sql_quota); the statement changed nothing.", x.opts.Quota)
	case errors.Is(err, sqlite3.AUTH):
		return notAuthorized()
	case errors.Is(err, sqlite3.NOMEM):
		return sqlError(fmt.Sprintf("out of memory: the statement needs more than the database's %d MiB", x.opts.Memory>>20))
	}
	// SQLite's own text, without the driver's name of the code before it.
	msg := err.Error()
	var se *sqlite3.Error
	if errors.As(err, &se) {
		for _, code := range []error{se.ExtendedCode(), se.Code()} {
			if p := code.Error() + ": "; strings.HasPrefix(msg, p) {
				msg = msg[len(p):]
				break
			}
		}
	}
	return sqlError(strings.TrimPrefix(msg, "sqlite3: "))
}

func isSQLite(err error) bool {
	var se *sqlite3.Error
	var code sqlite3.ErrorCode
	var xcode sqlite3.ExtendedErrorCode
	return errors.As(err, &se) || errors.As(err, &code) || errors.As(err, &xcode)
}

func sqlError(msg string) error { return fault.New(fault.BadRequest, "SQL_ERROR: %s", msg) }

func notAuthorized() error { return sqlError("not authorized") }

func timeoutFault() error {
	return fault.New(fault.Timeout, "TIMEOUT: the statement ran to its run's bound and was interrupted.")
}

// D1 is an answer of Serve (one statement's, or a batch's) in the shape of
// D1's .all(): {success, meta, results: [row objects, columns in order]},
// or an array of them; a BLOB stays {"blob": "<hex>"}. The control
// plane's POST /sql answers it.
func D1(raw json.RawMessage, batch bool) (json.RawMessage, error) {
	if !batch {
		var a Answer
		if err := json.Unmarshal(raw, &a); err != nil {
			return nil, err
		}
		return a.d1()
	}
	var as []Answer
	if err := json.Unmarshal(raw, &as); err != nil {
		return nil, err
	}
	out := []byte{'['}
	for i, a := range as {
		if i > 0 {
			out = append(out, ',')
		}
		b, err := a.d1()
		if err != nil {
			return nil, err
		}
		out = append(out, b...)
	}
	return append(out, ']'), nil
}

func (a Answer) d1() (json.RawMessage, error) {
	meta, err := json.Marshal(a.Meta)
	if err != nil {
		return nil, err
	}
	out := append([]byte(`{"success":true,"meta":`), meta...)
	out = append(out, `,"results":[`...)
	for i, row := range a.Rows {
		if i > 0 {
			out = append(out, ',')
		}
		out = append(out, '{')
		for j, v := range row {
			if j > 0 {
				out = append(out, ',')
			}
			k, _ := json.Marshal(a.Columns[j])
			b, err := json.Marshal(v)
			if err != nil {
				return nil, err
			}
			out = append(append(append(out, k...), ':'), b...)
		}
		out = append(out, '}')
	}
	return append(out, "]}"...), nil
}
