package client_test

import (
	"context"
	"errors"
	"io"
	"strings"
	"testing"
	"time"

	"github.com/retainer-gw/retainer/client"
)

// POST /sql and GET /sql/export through the client, against the real
// gateway: values and D1's shapes, a batch all or nothing, tenants apart,
// the export a SQLite file.
func TestSQL(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	db := &client.SQL{API: apiURL, Token: token("sql-client")}
	if _, err := db.Query(ctx, "CREATE TABLE t (id INTEGER PRIMARY KEY, s TEXT, n REAL, b BLOB, f INTEGER, z, CHECK (n >= 0))"); err != nil {
		t.Fatal(err)
	}
	res, err := db.Query(ctx, "INSERT INTO t (s, n, b, f, z) VALUES (?, ?, ?, ?, ?)", "tea", 2.5, client.BlobValue{Hex: "00ff"}, true, nil)
	if err != nil || !res.Success || res.Meta.LastRowID != 1 || res.Meta.Changes != 1 {
		t.Fatalf("%+v %v", res, err)
	}
	res, err = db.Query(ctx, "SELECT s, n, b, f, z FROM t WHERE id = ?1", 1)
	if err != nil || len(res.Results) != 1 || string(res.Results[0]) != `{"s":"tea","n":2.5,"b":{"blob":"00ff"},"f":1,"z":null}` {
		t.Fatalf("%+v %v", res, err)
	}
	// A batch that breaks the CHECK changes nothing.
	_, err = db.Batch(ctx, client.Statement{SQL: "INSERT INTO t (s, n) VALUES ('x', 1)"}, client.Statement{SQL: "INSERT INTO t (s, n) VALUES ('y', -1)"})
	var fault *client.Error
	if !errors.As(err, &fault) || fault.Code != "BAD_REQUEST" || !strings.HasPrefix(fault.Message, "SQL_ERROR: ") {
		t.Fatalf("a failing batch: %v", err)
	}
	out, err := db.Batch(ctx, client.Statement{SQL: "SELECT count(*) AS c FROM t"}, client.Statement{SQL: "SELECT s FROM t"})
	if err != nil || len(out) != 2 || string(out[0].Results[0]) != `{"c":1}` || string(out[1].Results[0]) != `{"s":"tea"}` {
		t.Fatalf("%+v %v", out, err)
	}
	// Another tenant's database is its own.
	other := &client.SQL{API: apiURL, Token: token("sql-client-other")}
	if _, err := other.Query(ctx, "SELECT * FROM t"); !errors.As(err, &fault) || !strings.Contains(fault.Message, "no such table") {
		t.Fatalf("another tenant: %v", err)
	}
	e, err := db.Export(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close()
	head := make([]byte, 16)
	if _, err := io.ReadFull(e, head); err != nil || string(head) != "SQLite format 3\x00" {
		t.Fatalf("the export begins %q (%v)", head, err)
	}
}
