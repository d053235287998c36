package logstore

import (
	"context"
	"fmt"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/retainer-gw/retainer/internal/pgtest"
	"github.com/retainer-gw/retainer/store"
)

// onBackends runs test on bbolt and on PostgreSQL (a cluster's store);
// open opens the store, again after a close with the same data (a
// restart, or another gateway after a failover).
func onBackends(t *testing.T, test func(t *testing.T, open func() store.Store)) {
	t.Run("bolt", func(t *testing.T) {
		path := filepath.Join(t.TempDir(), "s.db")
		test(t, func() store.Store { return openBolt(t, path) })
	})
	t.Run("postgres", func(t *testing.T) {
		srv := pgtest.Start(t)
		test(t, func() store.Store {
			p, err := store.OpenPostgres(context.Background(), srv.DSN)
			if err != nil {
				t.Fatal(err)
			}
			return p
		})
	})
}

// writeOld stores e as the writer did before pages: one key an entry in
// handles, and its size in the tenant's order of its kind.
func writeOld(t *testing.T, st store.Store, tenant, id string, e Entry, seq uint32) {
	t.Helper()
	v, err := marshalStored(e)
	if err != nil {
		t.Fatal(err)
	}
	when := unixNano(e.Time)
	hk := handleKey(tenant, id, when, seq)
	order := byTenant
	if e.Level == "request" {
		order = requestsByTenant
	}
	if err := st.Commit(context.Background(), store.Txn{Then: []store.Op{store.Put(handles, hk, v),
		store.Put(order, tenantKey(tenant, when, seq), tenantValue(int64(len(hk)+len(v)), id))}}); err != nil {
		t.Fatal(err)
	}
}

// readAll reads a handle's log from since, page by page with the cursor,
// each page at most limit entries.
func readAll(t *testing.T, s *Store, tenant, id string, since time.Time, limit int) []Entry {
	t.Helper()
	var all []Entry
	p, err := s.List(tenant, id, since, limit, "")
	for {
		if err != nil {
			t.Fatal(err)
		}
		if len(p.Entries) > limit {
			t.Fatalf("a page of %d entries, limit %d", len(p.Entries), limit)
		}
		all = append(all, p.Entries...)
		if len(p.Entries) == 0 {
			return all
		}
		p, err = s.List(tenant, id, time.Time{}, limit, p.Cursor)
	}
}

func messages(es []Entry) []string {
	var m []string
	for _, e := range es {
		if e.Level == "request" {
			m = append(m, e.URL)
		} else {
			m = append(m, e.Message)
		}
	}
	return m
}

// A handle's log of entries stored before pages and then of 2,500 entries
// in 68 pages (request and console entries mixed) reads whole and in order
// across the old entries' end and the pages' boundaries with limit 1,000
// and the cursor, from a since in the middle of a page, and newest last;
// after a restart whose clock is an hour behind, a reader polling with its
// cursor reads the new entries (placed after the handle's last, with
// their own times) once.
func TestPagesReadAcrossBoundaries(t *testing.T) {
	onBackends(t, pagesReadAcrossBoundaries)
}

func pagesReadAcrossBoundaries(t *testing.T, open func() store.Store) {
	b := open()
	base := time.Now().Add(-time.Hour).Truncate(time.Millisecond)
	var want []string
	entry := func(i int, at time.Time) Entry {
		if i%3 == 0 {
			return Entry{Time: at, Level: "request", Method: "GET", URL: fmt.Sprint("/", i), Status: 200, DurationMs: 1.5}
		}
		return Entry{Time: at, Level: "log", Message: fmt.Sprint(i)}
	}
	for i := 0; i < 150; i++ {
		e := entry(i, base.Add(time.Duration(i)*time.Millisecond))
		writeOld(t, b, "alice", "h", e, uint32(i))
		want = append(want, messages([]Entry{e})...)
		writeOld(t, b, "bob", "h", e, uint32(i))
	}
	s := Open(b, 0, 0, nil)
	for i := 150; i < 2650; i++ {
		at := base.Add(time.Second + time.Duration(i)*time.Millisecond)
		if i == 1000 {
			at = base.Add(-time.Minute) // a late entry: after the newer ones
		}
		e := entry(i, at)
		s.Append("alice", "h", e)
		want = append(want, messages([]Entry{e})...)
		if i%37 == 0 {
			s.Flush()
		}
	}
	got := messages(readAll(t, s, "alice", "h", base.Add(-2*time.Hour), 1000))
	if strings.Join(got, ",") != strings.Join(want, ",") {
		t.Fatalf("read %d entries of %d; first differing at %d", len(got), len(want), firstDiff(got, want))
	}
	if p, _ := s.List("alice", "h", base.Add(time.Second+1234*time.Millisecond), 3, ""); strings.Join(messages(p.Entries), ",") != "1234,1235,/1236" {
		t.Fatalf("since the middle of a page: %v", messages(p.Entries))
	}
	for _, limit := range []int{1, 37, 1000} {
		p, _ := s.List("alice", "h", time.Time{}, limit, "")
		if strings.Join(messages(p.Entries), ",") != strings.Join(want[len(want)-limit:], ",") {
			t.Fatalf("the newest %d: %d entries, first %v", limit, len(p.Entries), messages(p.Entries[:1]))
		}
	}
	// bob's log: only entries stored before pages, and 3 new ones.
	for i := 0; i < 3; i++ {
		s.Append("bob", "h", Entry{Level: "log", Message: fmt.Sprint("new ", i)})
	}
	if p, _ := s.List("bob", "h", time.Time{}, 5, ""); strings.Join(messages(p.Entries), ",") != "148,149,new 0,new 1,new 2" {
		t.Fatalf("the newest 5 of bob's, across the forms: %v", messages(p.Entries))
	}
	last, _ := s.List("alice", "h", time.Time{}, 1, "")
	s.Close()
	b.Close()

	b = open()
	defer b.Close()
	behind := func() time.Time { return time.Now().Add(-time.Hour) }
	s = Open(b, 0, 0, behind)
	defer s.Close()
	s.Append("alice", "h", Entry{Level: "log", Message: "after the restart"})
	p, err := s.List("alice", "h", time.Time{}, 10, last.Cursor)
	if err != nil || len(p.Entries) != 1 || p.Entries[0].Message != "after the restart" {
		t.Fatalf("polling on after a restart whose clock is behind: %v %+v", err, p.Entries)
	}
	if d := p.Entries[0].Time.Sub(behind()); d > time.Second || d < -time.Second {
		t.Fatalf("the entry's time moved: %v", p.Entries[0].Time)
	}
	if p, _ := s.List("alice", "h", time.Time{}, 10, p.Cursor); len(p.Entries) != 0 {
		t.Fatalf("read twice: %+v", p.Entries)
	}
}

func firstDiff(a, b []string) int {
	for i := range min(len(a), len(b)) {
		if a[i] != b[i] {
			return i
		}
	}
	return min(len(a), len(b))
}

// A tenant whose visitors' request entries hold more than half of
// log_bytes loses its oldest request entries, those stored before pages
// first, and keeps every console entry, its pages cut; once console
// entries hold most, whole oldest pages go; the writer's count stays
// what the store holds; a bystander loses nothing; the sweep empties both
// forms.
func TestQuotaDropsPagesAndOldEntries(t *testing.T) {
	onBackends(t, quotaDropsPagesAndOldEntries)
}

func quotaDropsPagesAndOldEntries(t *testing.T, open func() store.Store) {
	b := open()
	defer b.Close()
	now := time.Now()
	clock := func() time.Time { return now }
	const quota = 256 << 10
	url := "/" + strings.Repeat("u", 200)
	for i := 0; i < 200; i++ {
		writeOld(t, b, "mallory", "h", Entry{Time: now.Add(-time.Minute + time.Duration(i)*time.Millisecond), Level: "request", Method: "GET", URL: fmt.Sprint(url, i), Status: 200}, uint32(i))
	}
	s := Open(b, time.Hour, quota, clock)
	defer s.Close()
	s.Append("bob", "b", Entry{Time: now, Level: "log", Message: "bystander"})
	// Each commit: 30 request entries and 2 console entries of one handle.
	for c := 0; c < 100; c++ {
		for i := 0; i < 30; i++ {
			s.Append("mallory", "h", Entry{Time: now.Add(time.Duration(c*32+i) * time.Millisecond), Level: "request", Method: "GET", URL: fmt.Sprint(url, "new", c*30+i), Status: 200})
		}
		for i := 0; i < 2; i++ {
			s.Append("mallory", "h", Entry{Time: now.Add(time.Duration(c*32+30+i) * time.Millisecond), Level: "log", Message: fmt.Sprint("console ", c*2+i)})
		}
		s.Flush()
	}
	ctx := context.Background()
	u := s.countUsed(ctx, "mallory")
	if u.console+u.requests > quota || u.console+u.requests < quota*3/4 {
		t.Fatalf("mallory stores %d bytes, quota %d", u.console+u.requests, quota)
	}
	if u.oldRequests != 0 {
		t.Fatalf("%d bytes of the oldest request entries (stored before pages) are kept", u.oldRequests)
	}
	if s.used["mallory"] != u {
		t.Fatalf("the writer counts %+v, the store holds %+v", s.used["mallory"], u)
	}
	all := readAll(t, s, "mallory", "h", now.Add(-time.Hour), 1000)
	console := 0
	for _, e := range all {
		if e.Level == "log" {
			if e.Message != fmt.Sprint("console ", console) {
				t.Fatalf("console entry %d is %q", console, e.Message)
			}
			console++
		}
	}
	if console != 200 || len(all) == console {
		t.Fatalf("%d of 200 console entries kept, %d request entries", console, len(all)-console)
	}
	// Now console entries only, 2 KiB each: once request entries hold
	// less than half, their own oldest pages go (and the request entries
	// in them).
	msg := strings.Repeat("c", 2000)
	for c := 0; c < 40; c++ {
		for i := 0; i < 8; i++ {
			s.Append("mallory", "h", Entry{Time: now.Add(time.Hour + time.Duration(c*8+i)*time.Millisecond), Level: "log", Message: fmt.Sprint(c*8+i, msg)})
		}
		s.Flush()
	}
	u = s.countUsed(ctx, "mallory")
	if u.console+u.requests > quota || u.requests > quota/2 || u.console < quota/3 || s.used["mallory"] != u {
		t.Fatalf("after the console flood mallory stores %+v (the writer counts %+v)", u, s.used["mallory"])
	}
	all = readAll(t, s, "mallory", "h", now.Add(-time.Hour), 1000)
	if len(all) < 100 || !strings.HasPrefix(all[len(all)-1].Message, "319c") || strings.HasPrefix(all[0].Message, "0c") {
		t.Fatalf("after the console flood: %d entries, from %.10q to %.10q", len(all), all[0].Message, all[len(all)-1].Message)
	}
	if p, _ := s.List("bob", "b", time.Time{}, 10, ""); len(p.Entries) != 1 {
		t.Fatalf("bob's log: %+v", p.Entries)
	}
	writeOld(t, b, "mallory", "h2", Entry{Time: now.Add(-time.Minute), Level: "log", Message: "old"}, 1)
	now = now.Add(3 * time.Hour)
	s.Sweep()
	if n := s.count(ctx, "mallory") + s.count(ctx, "bob"); n != 0 {
		t.Fatalf("after the retention %d bytes are left", n)
	}
	for _, table := range []string{pages, handles} {
		b.Scan(ctx, table, store.Range{}, func(k, _ []byte) bool {
			t.Fatalf("after the retention %s holds %q", table, k)
			return false
		})
	}
}

// A handle's request entries have a bound of their own waiting for the
// writer (budgets.LogPendingRequestsPerHandle), four times its console
// entries': 2,000 request entries (~180 KiB) wait whole beside a console
// flood cut at budgets.LogPendingPerHandle; 4,000 do not, and the system
// entry says how many were left out.
func TestRequestEntriesWaitingBoundOfTheirOwn(t *testing.T) {
	b := openBolt(t, filepath.Join(t.TempDir(), "s.db"))
	defer b.Close()
	s := newStore(b, 0, 0, nil) // no writer: commits happen here only
	before := Lost()
	line := strings.Repeat("x", 1000)
	url := "http://h.apps.localhost/" + strings.Repeat("p", 60)
	for i := 0; i < 2000; i++ {
		s.Append("alice", "h", Entry{Level: "request", Method: "GET", URL: fmt.Sprint(url, i), Status: 200, DurationMs: 1})
		if i%20 == 0 {
			s.Append("alice", "h", Entry{Level: "log", Message: line})
		}
	}
	if n := Lost() - before; n < 30 || n > 40 {
		t.Fatalf("%d entries left out, want the console flood's excess over 64 KiB (~36)", n)
	}
	s.Flush()
	requests := 0
	for _, e := range readAll(t, s, "alice", "h", time.Unix(0, 0), 1000) {
		if e.Level == "request" {
			requests++
		}
	}
	if requests != 2000 {
		t.Fatalf("%d of 2,000 request entries stored", requests)
	}
	before = Lost()
	for i := 0; i < 4000; i++ {
		s.Append("alice", "h", Entry{Level: "request", Method: "GET", URL: fmt.Sprint(url, i), Status: 200, DurationMs: 1})
	}
	s.Flush()
	n := Lost() - before
	if n < 500 || n > 2000 {
		t.Fatalf("4,000 request entries at once: %d left out", n)
	}
	p, _ := s.List("alice", "h", time.Time{}, 1, "")
	if len(p.Entries) != 1 || !strings.HasPrefix(p.Entries[0].Message, fmt.Sprint(n, " log entries of this handle were left out")) {
		t.Fatalf("the last entry: %+v", p.Entries)
	}
}
