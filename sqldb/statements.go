package sqldb

import (
	"context"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"strconv"
	"strings"
	"time"

	"github.com/ncruces/go-sqlite3"

	"github.com/retainer-gw/retainer/budgets"
	"github.com/retainer-gw/retainer/fault"
	"github.com/retainer-gw/retainer/internal/wirejson"
)

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
		if len(x.stmts) >= budgets.SQLCachedStmts {
			for k, old := range x.stmts {
				delete(x.writing, old)
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
	readOnly := st.ReadOnly() && !x.writing[st]
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
	x.tenant, x.readOnlyStep, x.deniedWrite = true, !mayWrite, false
	defer func() { x.tenant, x.readOnlyStep = false, false }()
	for st.Step() {
		if first && len(ans.Rows) == 1 {
			continue // a write's every row is stepped; a read's could stop
		}
		row := make([]any, n)
		for i := range n {
			row[i] = value(st, i, budget)
		}
		if *budget < 0 {
			return Answer{}, TooLarge()
		}
		ans.Rows = append(ans.Rows, row)
		if first && readOnly {
			break
		}
	}
	x.tenant, x.readOnlyStep = false, false
	if err := st.Err(); err != nil {
		if x.deniedWrite {
			x.writing[st] = true
			return Answer{}, ErrNeedsWrite
		}
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
		x.tenant, x.writes = true, false
		st, tail, err := x.conn.Prepare(sql)
		x.tenant = false
		if err != nil {
			return ExecAnswer{}, err
		}
		if st != nil && x.writes {
			x.writing[st] = true
		}
		sql = tail
		if st == nil {
			continue
		}
		if isVacuum(st.SQL()) {
			delete(x.writing, st)
			st.Close()
			return ExecAnswer{}, notAuthorized()
		}
		budget := DefaultAnswer
		_, err = x.step(st, nil, mayWrite, false, &budget)
		delete(x.writing, st)
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
		*budget -= wirejson.StringLen(s)
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

func quote(s string) string { return "'" + strings.ReplaceAll(s, "'", "''") + "'" }

// fault turns the engine's errors into the contract's.
func (x *db) fault(ctx context.Context, err error) error {
	if err == nil || errors.Is(err, ErrNeedsWrite) || fault.As(err) != nil && !isSQLite(err) {
		return err
	}
	if x.file != nil && x.file.err != nil {
		return failureFault(x.file.err) // the store's, in a cluster
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
	meta, err := wirejson.Marshal(a.Meta)
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
			k, _ := wirejson.Marshal(a.Columns[j])
			b, err := wirejson.Marshal(v)
			if err != nil {
				return nil, err
			}
			out = append(append(append(out, k...), ':'), b...)
		}
		out = append(out, '}')
	}
	return append(out, "]}"...), nil
}
