package logstore

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/retainer-gw/retainer/internal/pgtest"
	"github.com/retainer-gw/retainer/store"
)

// Logs in PostgreSQL, where a cluster keeps them (docs/logs.md): what the
// owner of a handle wrote is read, page by page, through another gateway
// after the owner is gone (a failover).
func TestLogsSurviveFailoverInPostgres(t *testing.T) {
	srv := pgtest.Start(t)
	ctx := context.Background()
	open := func() (*Store, *store.Postgres) {
		p, err := store.OpenPostgres(ctx, srv.DSN)
		if err != nil {
			t.Fatal(err)
		}
		return Open(p, 0, 0, nil), p
	}
	a, pa := open()
	base := time.Now().Add(-time.Minute)
	for i := 0; i < 5; i++ {
		a.Append("apps\x00alice", "h", Entry{Time: base.Add(time.Duration(i) * time.Millisecond), Level: "request", Method: "GET", URL: fmt.Sprint("/", i), Status: 200})
	}
	a.Close()
	pa.Close()

	b, pb := open()
	defer func() { b.Close(); pb.Close() }()
	p, err := b.List("apps\x00alice", "h", base.Add(-time.Second), 3, "")
	if err != nil || len(p.Entries) != 3 || p.Entries[0].URL != "/0" {
		t.Fatalf("the first page through another gateway: %v %+v", err, p.Entries)
	}
	p, err = b.List("apps\x00alice", "h", time.Time{}, 3, p.Cursor)
	if err != nil || len(p.Entries) != 2 || p.Entries[1].URL != "/4" {
		t.Fatalf("the second page: %v %+v", err, p.Entries)
	}
	if p, _ := b.List("apps\x00bob", "h", time.Time{}, 3, ""); len(p.Entries) != 0 {
		t.Fatalf("bob's page: %+v", p.Entries)
	}
}
