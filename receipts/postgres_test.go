package receipts

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/retainer-gw/retainer/internal/pgtest"
	"github.com/retainer-gw/retainer/internal/waitfor"
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
	var got Receipt
	var err error
	waitfor.Within(30*time.Second, func() bool {
		got, err = b.Get("alice", r.ID)
		return err != ErrNotFound
	})
	if err != nil {
		t.Fatalf("the receipt never reached the other gateway: %v", err)
	}
	if got.Code != r.Code {
		t.Fatalf("read through the other gateway: %+v", got)
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

// PostgreSQL paused (SIGSTOP: no reset, nothing answered, as a server
// cut off by dropped packets): a read of a stored receipt fails within
// the store's bound (ErrUnavailable) instead of waiting for the server;
// runs' receipts go on being put without waiting, readable from memory,
// held within the waiting bound (the oldest dropped and counted); once
// the server is back the writer writes those kept.
func TestReceiptsWhilePostgreSQLIsPaused(t *testing.T) {
	srv := pgtest.Start(t)
	ctx := context.Background()
	p, err := store.OpenPostgres(ctx, srv.DSN)
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	s, err := Open(p, 24*time.Hour, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	var told atomic.Int64
	s.SetDropped(func(n int) { told.Add(int64(n)) })
	old := receipt("alice", time.Now())
	if err := s.Put(old); err != nil {
		t.Fatal(err)
	}
	if _, _, err := s.List("alice", 10, ""); err != nil { // commits what waits
		t.Fatal(err)
	}
	one, _ := fit(&old)
	s.pmu.Lock()
	s.waitingMax = int64(20 * len(one))
	s.pmu.Unlock()

	srv.Pause(t)
	resumed := false
	defer func() {
		if !resumed {
			srv.Resume(t)
		}
	}()
	started := time.Now()
	if _, err := s.Get("alice", old.ID); !errors.Is(err, ErrUnavailable) {
		t.Fatalf("a stored receipt with PostgreSQL paused: %v, want ErrUnavailable", err)
	}
	t.Logf("a read with PostgreSQL paused failed after %v", time.Since(started).Round(time.Millisecond))
	var ids []string
	for i := 0; i < 100; i++ {
		r := receipt("alice", time.Now())
		ids = append(ids, r.ID)
		put := time.Now()
		if err := s.Put(r); err != nil {
			t.Fatal(err)
		}
		if took := time.Since(put); took > time.Second {
			t.Fatalf("a Put waited %v for the paused server", took)
		}
		time.Sleep(50 * time.Millisecond) // the writer tries meanwhile
	}
	s.pmu.Lock()
	waiting := len(s.pending) + len(s.committing)
	s.pmu.Unlock()
	if s.Dropped() == 0 || told.Load() != s.Dropped() || waiting > 40 {
		t.Fatalf("100 receipts put with PostgreSQL paused: %d dropped (%d told), %d waiting; want some dropped, at most 20 (+ a batch) waiting", s.Dropped(), told.Load(), waiting)
	}
	newest := ids[len(ids)-1]
	if _, err := s.Get("alice", newest); err != nil {
		t.Fatalf("the newest receipt from memory: %v", err)
	}

	srv.Resume(t)
	resumed = true
	var list []Summary
	found := false
	waitfor.Within(30*time.Second, func() bool {
		list, _, err = s.List("alice", 100, "")
		found = false
		for _, sum := range list {
			found = found || sum.ID == newest
		}
		return err == nil && found
	})
	if err != nil || !found {
		t.Fatalf("the newest receipt was not written 30 s after PostgreSQL came back: %v", err)
	}
	// Every receipt kept is written: the old one and those not dropped.
	if want := 1 + len(ids) - int(s.Dropped()); len(list) != want {
		t.Fatalf("%d receipts listed once PostgreSQL was back, want %d (%d put while paused, %d dropped)", len(list), want, len(ids), s.Dropped())
	}
	t.Logf("%d receipts put while paused, %d dropped; %d listed once it was back", len(ids), s.Dropped(), len(list))
}
