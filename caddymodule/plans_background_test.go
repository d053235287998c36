package caddymodule

import (
	"context"
	"path/filepath"
	"testing"
	"time"

	"github.com/retainer-gw/retainer/internal/waitfor"
	"github.com/retainer-gw/retainer/logstore"
	"github.com/retainer-gw/retainer/store"
)

// slowStore is the real bbolt store answering each Get and Commit after
// delay: a PostgreSQL that answers slowly, or resumes from a short pause.
type slowStore struct {
	store.Store
	delay time.Duration
}

func (s slowStore) Get(ctx context.Context, table string, key []byte) ([]byte, error) {
	time.Sleep(s.delay)
	return s.Store.Get(ctx, table, key)
}

func (s slowStore) Commit(ctx context.Context, txn store.Txn) error {
	time.Sleep(s.delay)
	return s.Store.Commit(ctx, txn)
}

func openPlansTestStore(t *testing.T) store.Store {
	st, err := store.OpenBolt(filepath.Join(t.TempDir(), "plans.db"), time.Second)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	return st
}

// An operator's later token (a downgrade) used while the tenant's older
// token is still being recorded, each read and write of the store taking
// 200 ms (past recordWait for the two): the later token ends up recorded,
// in memory and in the store. Before, the later call waited 250 ms for
// the earlier record, returned without starting its own, and the older
// plan landed and held.
func TestPlanLaterTokenRecordedBehindAnEarlierRecord(t *testing.T) {
	t.Parallel()
	st := openPlansTestStore(t)
	p := openTenantPlans(slowStore{st, 200 * time.Millisecond})
	done := make(chan struct{})
	go func() {
		defer close(done)
		p.record("alice", "pro", 100) // the tenant's older token, first used
	}()
	waitRecording(t, p, "alice") // the later call finds the earlier record under way
	s := time.Now()
	p.record("alice", "small", 200) // the operator's later token
	t.Logf("the later token's call returned after %v; memory says %q", time.Since(s).Round(time.Millisecond), p.get("alice"))
	<-done
	p.stop()
	v, err := st.Get(context.Background(), plansTable, []byte("alice"))
	if err != nil {
		t.Fatal(err)
	}
	if r := decodePlanRecord(v); r != (planRecord{Plan: "small", Issued: 200}) {
		t.Fatalf("alice's row after tokens pro@100 then small@200: %s, want small@200", v)
	}
	if got := p.get("alice"); got != "small" {
		t.Fatalf("alice's plan in memory after tokens pro@100 then small@200: %q, want small", got)
	}
	// An older token queued behind a later one's record changes nothing.
	q := openTenantPlans(slowStore{st, 50 * time.Millisecond})
	later := make(chan struct{})
	go func() {
		defer close(later)
		q.record("bob", "small", 300)
	}()
	waitRecording(t, q, "bob")
	q.record("bob", "pro", 100)
	<-later
	q.stop()
	q.load()
	if got := q.get("bob"); got != "small" {
		t.Fatalf("bob's plan after tokens small@300 then pro@100: %q, want small", got)
	}
}

// waitRecording waits until tenant's record is being written in p.
func waitRecording(t *testing.T, p *tenantPlans, tenant string) {
	t.Helper()
	waitfor.Until(t, 10*time.Second, tenant+"'s record under way", func() bool {
		p.rmu.Lock()
		defer p.rmu.Unlock()
		return p.recording[tenant] != nil
	})
}

// A gateway stopped while its store answers slowly (PostgreSQL resuming
// from a short pause) right after a handle's first refusal of the day:
// the cut's entry is in the handle's log, and the plans.cuts.v1 row that
// says so is never written without it. A cut told once the stop began
// writes neither. Before, the log store closed first and the background
// check, once the store answered, wrote the row and appended the entry to
// the closed log store, which dropped it: after a restart the row said
// the handle was told, so it never was.
func TestPlanCutToldBeforeTheLogStoreCloses(t *testing.T) {
	t.Parallel()
	st := openPlansTestStore(t)
	zero := func(registry, tenant string) int64 { return 0 }
	u := openUsage(slowStore{st, 300 * time.Millisecond}, "", zero, zero, zero)
	l := logstore.Open(st, 0, 0, nil)
	const tenant, limit = "reg\x00alice", "requests_per_day 2"
	day := time.Now().UTC().Format(time.DateOnly)
	tell := func(id string) func() {
		return func() {
			l.Append(tenant, id, logstore.Entry{Time: time.Now(), Level: "system", Message: "cut by " + limit})
		}
	}
	u.plans.tellCut(tenant, day, "h1", limit, tell("h1")) // answers at cutTellWait, still reading
	closeUsageAndLogs(u, l)
	u.plans.tellCut(tenant, day, "h2", limit, tell("h2")) // a WebSocket's admit as the runtime stops
	u.plans.record(tenant, "pro", 100)
	// What a restart finds.
	after := logstore.Open(st, 0, 0, nil)
	defer after.Close()
	for _, id := range []string{"h1", "h2"} {
		row, err := st.Get(context.Background(), cutsTable, []byte(day+tenant+"\x00"+id+"\x00"+limit))
		if err != nil {
			t.Fatal(err)
		}
		page, err := after.List(tenant, id, time.Time{}, 0, "")
		if err != nil {
			t.Fatal(err)
		}
		t.Logf("%s: cuts row %v, %d log entries", id, row != nil, len(page.Entries))
		switch {
		case id == "h1" && (row == nil || len(page.Entries) != 1):
			t.Fatalf("h1, told before the stop: cuts row written %v, log entries %d; want the row and 1 entry", row != nil, len(page.Entries))
		case id == "h2" && (row != nil || len(page.Entries) != 0):
			t.Fatalf("h2, told after the stop began: cuts row written %v, log entries %d; want neither (told after a restart)", row != nil, len(page.Entries))
		}
	}
}
