// Package sqldb is the tenants' SQL databases (docs/sql.md): one SQLite
// file per tenant and registry under a directory beside the store, served
// in the gateway to the host calls of programs granted sqlRead or
// sqlWrite, and to the control plane's POST /sql and GET /sql/export.
//
// Tenant SQL is hostile input (docs/threat-model.md): every statement is
// prepared under an authorizer that refuses ATTACH, DETACH, transactions
// of the tenant's own, writes to sqlite_* tables, functions that reach
// outside the database and every PRAGMA but a read-only list; VACUUM INTO
// is refused before it runs; each database runs in its own SQLite instance
// whose memory is bounded (a statement that needs more fails, the gateway
// does not), its file at most a quota of pages, and every call is
// interrupted at its context's end (the run's bound). Writes commit with
// synchronous=FULL in WAL mode before the call answers. In a cluster the
// pages live in the cluster's PostgreSQL instead, each commit one
// transaction there fenced by the owner's epoch, before the call answers.
//
// Files: sqldb.go the databases, their engines and bounds; group.go the
// group commit (a database's waiting calls in one transaction);
// authorize.go what tenant SQL may do; statements.go running statements,
// values and D1's answers; cluster.go the VFS of a cluster's databases.
//
// It is the one package that imports the SQLite driver
// (github.com/ncruces/go-sqlite3, SQLite compiled to Go: no cgo, and
// values as SQLite holds them). It knows nothing of V8, workers, grants or
// HTTP (package capability checks grants before a call gets here).
package sqldb
