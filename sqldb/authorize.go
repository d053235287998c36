package sqldb

import (
	"strings"

	"github.com/ncruces/go-sqlite3"
)

// readPragmas are the PRAGMAs a tenant may run, to read only.
var readPragmas = map[string]bool{
	"table_info": true, "table_xinfo": true, "table_list": true, "index_list": true,
	"index_info": true, "index_xinfo": true, "foreign_key_list": true, "foreign_keys": true,
}

// writeAction is the authorizer's actions that write.
var writeAction = map[sqlite3.AuthorizerActionCode]bool{
	sqlite3.AUTH_CREATE_INDEX: true, sqlite3.AUTH_CREATE_TABLE: true, sqlite3.AUTH_CREATE_TEMP_INDEX: true,
	sqlite3.AUTH_CREATE_TEMP_TABLE: true, sqlite3.AUTH_CREATE_TEMP_TRIGGER: true, sqlite3.AUTH_CREATE_TEMP_VIEW: true,
	sqlite3.AUTH_CREATE_TRIGGER: true, sqlite3.AUTH_CREATE_VIEW: true, sqlite3.AUTH_DELETE: true,
	sqlite3.AUTH_DROP_INDEX: true, sqlite3.AUTH_DROP_TABLE: true, sqlite3.AUTH_DROP_TEMP_INDEX: true,
	sqlite3.AUTH_DROP_TEMP_TABLE: true, sqlite3.AUTH_DROP_TEMP_TRIGGER: true, sqlite3.AUTH_DROP_TEMP_VIEW: true,
	sqlite3.AUTH_DROP_TRIGGER: true, sqlite3.AUTH_DROP_VIEW: true, sqlite3.AUTH_INSERT: true, sqlite3.AUTH_UPDATE: true,
	sqlite3.AUTH_ALTER_TABLE: true, sqlite3.AUTH_REINDEX: true, sqlite3.AUTH_ANALYZE: true,
	sqlite3.AUTH_CREATE_VTABLE: true, sqlite3.AUTH_DROP_VTABLE: true,
}

// authorize is SQLite's authorizer: the tenant's statements are checked
// as they are prepared (docs/sql.md, "Where it runs, and what is refused"); the package's own are not.
func (x *db) authorize(action sqlite3.AuthorizerActionCode, name3, name4, schema, inner string) sqlite3.AuthorizerReturnCode {
	if !x.tenant {
		return sqlite3.AUTH_OK
	}
	// A statement SQLite called read-only as it was prepared because it
	// then did nothing (REINDEX with no index to rewrite, DROP TRIGGER IF
	// EXISTS of none) is prepared again as it runs when the schema changed
	// since: when a caller that may not write steps it, what it would now
	// write is refused (the sqlWrite denial).
	if x.readOnlyStep && writeAction[action] {
		x.deniedWrite = true
		return sqlite3.AUTH_DENY
	}
	switch action {
	case sqlite3.AUTH_REINDEX, sqlite3.AUTH_ANALYZE:
		// They rewrite indexes or sqlite_stat1: the statement counts as
		// a write whatever SQLite says of it.
		x.writes = true
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
	x.tenant, x.writes = true, false
	defer func() { x.tenant = false }()
	st, tail, err := x.conn.Prepare(sql)
	writes := x.writes
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
	if writes {
		x.writing[st] = true
	}
	return st, nil
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
