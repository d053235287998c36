package receipts

import (
	"context"
	"testing"
	"time"

	"github.com/retainer-gw/retainer/internal/pgtest"
	"github.com/retainer-gw/retainer/store"
)

// Receipts in Postgres, as a cluster keeps them (docs/cluster.md): one
// gateway writes a receipt behind its answer; another reads and lists it,
// also after the writer is gone; retention deletes it for all.
func TestReceiptsThroughAnyGateway(t *testing.T) {
	srv := pgtest.Start(t)
	ctx := context.Background()
	now := time.Now()
	clock := func() time.Time { return now }
	openOne := func() (*Store, *store.Postgres) {
		p, err := store.OpenPostgres(ctx, srv.DSN)
		if err != nil {
			t.Fatal(err)
		}
		s, err := Open(p, 24*time.Hour, clock)
		if err != nil {
			t.Fatal(err)
		}
		return s, p
	}
	a, pa := openOne()
	b, pb := openOne()
	defer func() { b.Close(); pb.Close() }()

	r := receipt("alice", now)
	r.Code = "async () => 'from gateway a'"
	if err := a.Put(r); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(5 * time.Second)
	for {
		got, err := b.Get("alice", r.ID)
		if err == nil {
			if got.Code != r.Code {
				t.Fatalf("read through the other gateway: %+v", got)
			}
			break
		}
		if err != ErrNotFound || time.Now().After(deadline) {
			t.Fatalf("the receipt never reached the other gateway: %v", err)
		}
		time.Sleep(10 * time.Millisecond)
	}
	if _, err := b.Get("bob", r.ID); err != ErrNotFound {
		t.Fatalf("another tenant reads it: %v", err)
	}
	// The writer goes away; its receipt stays readable and listed.
	a.Close()
	pa.Close()
	list, _, err := b.List("alice", 10, "")
	if err != nil || len(list) != 1 || list[0].ID != r.ID {
		t.Fatalf("list after the writer left: %+v %v", list, err)
	}
	// Past the retention, a sweep by any gateway deletes it.
	now = now.Add(25 * time.Hour)
	if n := b.Sweep(); n != 1 {
		t.Fatalf("swept %d", n)
	}
	if _, err := b.Get("alice", r.ID); err != ErrNotFound {
		t.Fatalf("after retention: %v", err)
	}
}
