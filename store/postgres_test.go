package store_test

import (
	"context"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/retainer-gw/retainer/internal/pgtest"
	"github.com/retainer-gw/retainer/store"
	"github.com/retainer-gw/retainer/store/storetest"
)

// The contract against a real PostgreSQL: each case in a schema of its
// own (the DSN's search_path), every handle a pool of its own.
func TestPostgresContract(t *testing.T) {
	srv := pgtest.Start(t)
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, srv.DSN)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	n := 0
	storetest.Run(t, func(t *testing.T) func() store.Store {
		n++
		schema := "contract" + strings.Repeat("x", n)
		if _, err := conn.Exec(ctx, "CREATE SCHEMA "+schema); err != nil {
			t.Fatal(err)
		}
		return func() store.Store {
			p, err := store.OpenPostgres(ctx, srv.DSN+"&search_path="+schema)
			if err != nil {
				t.Fatal(err)
			}
			return p
		}
	})
}

// Tables of another application, or a newer schema, are refused; a
// server that cannot be reached fails naming host:port, never the
// password.
func TestPostgresRefusesOtherTablesAndNamesTheServer(t *testing.T) {
	srv := pgtest.Start(t)
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, srv.DSN)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	for _, q := range []string{
		"CREATE SCHEMA other", "CREATE TABLE other.retainer_meta (k text PRIMARY KEY, v text NOT NULL)", "INSERT INTO other.retainer_meta VALUES ('app', 'wiki')",
		"CREATE SCHEMA newer", "CREATE TABLE newer.retainer_meta (k text PRIMARY KEY, v text NOT NULL)", "INSERT INTO newer.retainer_meta VALUES ('app', 'retainer'), ('schema', '99')",
	} {
		if _, err := conn.Exec(ctx, q); err != nil {
			t.Fatal(err)
		}
	}
	for schema, want := range map[string]string{"other": "another application", "newer": `schema version "99"`} {
		if _, err := store.OpenPostgres(ctx, srv.DSN+"&search_path="+schema); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("schema %s: %v, want %q", schema, err, want)
		}
	}
	_, err = store.OpenPostgres(ctx, "postgres://retainer:hunter2-secret@127.0.0.1:1/receipts?sslmode=disable&connect_timeout=2")
	if err == nil || !strings.Contains(err.Error(), "127.0.0.1:1") || strings.Contains(err.Error(), "hunter2") {
		t.Fatalf("an unreachable server: %v", err)
	}
}
