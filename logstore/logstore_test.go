package logstore

import (
	"context"
	"fmt"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/retainer-gw/retainer/budgets"
	"github.com/retainer-gw/retainer/fault"
	"github.com/retainer-gw/retainer/store"
)

func openBolt(t *testing.T, path string) *store.Bolt {
	t.Helper()
	b, err := store.OpenBolt(path, time.Second)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// Entries survive a close and reopen of the store, page forward with a
// limit and cursor, newest last, and since in the future answers none.
func TestSurvivesAndPages(t *testing.T) {
	path := filepath.Join(t.TempDir(), "s.db")
	b := openBolt(t, path)
	s := Open(b, 0, 0, nil)
	base := time.Now().Add(-time.Minute)
	for i := 0; i < 7; i++ {
		s.Append("alice", "h1", Entry{Time: base.Add(time.Duration(i) * time.Second), Level: "log", Message: fmt.Sprint("line ", i)})
	}
	s.Append("alice", "h1", Entry{Time: base.Add(10 * time.Second), Level: "request", Message: "GET /x 200", Method: "GET", URL: "http://h/x", Status: 200, DurationMs: 1.5})
	s.Append("bob", "h1", Entry{Level: "log", Message: "bob's"})
	s.Close()
	b.Close()

	b = openBolt(t, path)
	defer b.Close()
	s = Open(b, 0, 0, nil)
	defer s.Close()
	var got []string
	cursor := ""
	for pages := 0; ; pages++ {
		p, err := s.List("alice", "h1", base.Add(-time.Hour), 3, cursor)
		if err != nil {
			t.Fatal(err)
		}
		if len(p.Entries) == 0 {
			if p.Cursor != cursor {
				t.Fatalf("an empty page moved the cursor")
			}
			break
		}
		if len(p.Entries) > 3 || pages > 5 {
			t.Fatalf("page %d: %d entries", pages, len(p.Entries))
		}
		for _, e := range p.Entries {
			got = append(got, e.Message)
		}
		cursor = p.Cursor
	}
	want := "line 0,line 1,line 2,line 3,line 4,line 5,line 6,GET /x 200"
	if strings.Join(got, ",") != want {
		t.Fatalf("pages: %q", got)
	}
	p, _ := s.List("alice", "h1", time.Time{}, 2, "")
	if len(p.Entries) != 2 || p.Entries[1].Level != "request" || p.Entries[1].Status != 200 || p.Entries[0].Message != "line 6" {
		t.Fatalf("the newest page: %+v", p.Entries)
	}
	if p, _ := s.List("alice", "h1", time.Now().Add(time.Hour), 10, ""); len(p.Entries) != 0 {
		t.Fatalf("since in the future: %+v", p.Entries)
	}
	if p, _ := s.List("bob", "h1", time.Time{}, 10, ""); len(p.Entries) != 1 || p.Entries[0].Message != "bob's" {
		t.Fatalf("bob's log: %+v", p.Entries)
	}
	if _, err := s.List("alice", "h1", time.Time{}, 10, "!!"); fault.CodeOf(err) != fault.BadRequest {
		t.Fatalf("a bad cursor: %v", err)
	}
}

// A tenant over log_bytes loses its oldest entries, another tenant none;
// entries past the retention are swept.
func TestQuotaAndRetention(t *testing.T) {
	b := openBolt(t, filepath.Join(t.TempDir(), "s.db"))
	defer b.Close()
	now := time.Now()
	clock := func() time.Time { return now }
	s := Open(b, time.Hour, 256<<10, clock)
	defer s.Close()
	msg := strings.Repeat("x", 1000)
	for i := 0; i < 1000; i++ {
		s.Append("mallory", fmt.Sprint("h", i%3), Entry{Time: now.Add(time.Duration(i) * time.Millisecond), Level: "log", Message: fmt.Sprint(i, msg)})
		if i%60 == 59 {
			s.Flush() // a handle has at most 64 KiB waiting
		}
	}
	s.Append("bob", "b", Entry{Time: now, Level: "log", Message: "bystander"})
	s.Flush()
	if used := s.count(context.Background(), "mallory"); used > 256<<10 || used < 200<<10 {
		t.Fatalf("mallory stores %d bytes, quota 256 KiB", used)
	}
	p, _ := s.List("mallory", "h0", now.Add(-time.Minute), 1, "")
	if len(p.Entries) != 1 || strings.HasPrefix(p.Entries[0].Message, "0x") {
		t.Fatalf("mallory's oldest entry was kept: %.20v", p.Entries)
	}
	p, _ = s.List("mallory", "h0", time.Time{}, 1, "")
	if len(p.Entries) != 1 || !strings.HasPrefix(p.Entries[0].Message, "999") {
		t.Fatalf("mallory's newest entry: %.20v", p.Entries)
	}
	if p, _ := s.List("bob", "b", time.Time{}, 10, ""); len(p.Entries) != 1 {
		t.Fatalf("bob's log: %+v", p.Entries)
	}
	now = now.Add(2 * time.Hour)
	s.Sweep()
	if n := s.count(context.Background(), "mallory") + s.count(context.Background(), "bob"); n != 0 {
		t.Fatalf("after the retention %d bytes are left", n)
	}
}

// A tail sees entries as they come; one that falls behind is told how many
// it lost; a tenant holds at most budgets.LogTailsPerTenant.
func TestTails(t *testing.T) {
	b := openBolt(t, filepath.Join(t.TempDir(), "s.db"))
	defer b.Close()
	s := Open(b, 0, 0, nil)
	defer s.Close()
	var tails []*Tail
	for i := 0; i < budgets.LogTailsPerTenant; i++ {
		tl, err := s.Tail("alice", "h")
		if err != nil {
			t.Fatal(err)
		}
		tails = append(tails, tl)
	}
	if _, err := s.Tail("alice", "h"); fault.CodeOf(err) != fault.QuotaExceeded {
		t.Fatalf("the 11th tail: %v", err)
	}
	if tl, err := s.Tail("bob", "h"); err != nil {
		t.Fatalf("bob's tail: %v", err)
	} else {
		tl.Close()
	}
	for i := 0; i < tailBuffer+5; i++ {
		s.Append("alice", "h", Entry{Level: "log", Message: fmt.Sprint(i)})
	}
	if e := <-tails[0].C; e.Message != "0" {
		t.Fatalf("first entry %q", e.Message)
	}
	if n := tails[0].Dropped(); n != 5 {
		t.Fatalf("dropped %d, want 5", n)
	}
	// A tail is at most 1 MiB behind, whatever the entries' number.
	for len(tails[1].C) > 0 {
		tails[1].Took(<-tails[1].C)
	}
	tails[1].Dropped()
	for i := 0; i < 100; i++ {
		s.Append("alice", "h", Entry{Level: "log", Message: strings.Repeat("x", 16000)})
	}
	if n, lost := len(tails[1].C), tails[1].Dropped(); n < 60 || n > 66 || int(lost) != 100-n {
		t.Fatalf("100 entries of 16,000 bytes: %d kept, %d dropped", n, lost)
	}
	tails[0].Close()
	if _, err := s.Tail("alice", "h"); err != nil {
		t.Fatalf("a tail after one closed: %v", err)
	}
}

// A handle with 64 KiB waiting loses its own new entries, never another
// handle's; its stored log then says how many it lost; a read of one
// handle's log commits its own waiting entries and no other's; nothing
// stored or answered is HTML-escaped, and a long URL keeps 256 bytes.
func TestPendingPerHandle(t *testing.T) {
	b := openBolt(t, filepath.Join(t.TempDir(), "s.db"))
	defer b.Close()
	s := newStore(b, 0, 0, nil) // no writer: commits happen here only
	lostBefore := Lost()
	line := strings.Repeat("<", 1000)
	for i := 0; i < 100; i++ {
		s.Append("mallory", "flood", Entry{Level: "log", Message: line})
	}
	s.Append("bob", "b", Entry{Level: "log", Message: "bystander <b>"})
	s.Append("bob", "b", Entry{Level: "request", Method: "GET", URL: "http://b/" + strings.Repeat("q", 3000), Status: 200})
	if n := Lost() - lostBefore; n < 30 || n > 40 {
		t.Fatalf("%d entries lost, want the flood's excess over 64 KiB", n)
	}
	p, err := s.List("bob", "b", time.Time{}, 10, "")
	if err != nil || len(p.Entries) != 2 || p.Entries[0].Message != "bystander <b>" || len(p.Entries[1].URL) != budgets.LogURLBytes || !p.Entries[1].URLTruncated {
		t.Fatalf("bob's log: %v %+v", err, p.Entries)
	}
	if js, _ := p.Entries[0].MarshalJSON(); !strings.Contains(string(js), "<b>") {
		t.Fatalf("an answered entry: %s", js)
	}
	stored := 0
	b.Scan(context.Background(), pages, store.Range{Prefix: lp(nil, "mallory")}, func(_, v []byte) bool {
		stored++
		return true
	})
	if stored != 0 {
		t.Fatalf("bob's read committed %d of mallory's entries", stored)
	}
	s.Flush()
	p, _ = s.List("mallory", "flood", time.Time{}, 1000, "")
	if len(p.Entries) < 60 || len(p.Entries) > 70 || p.Entries[len(p.Entries)-1].Level != "system" ||
		!strings.Contains(p.Entries[len(p.Entries)-1].Message, "left out of the stored log") {
		t.Fatalf("mallory's log: %d entries, last %+v", len(p.Entries), p.Entries[len(p.Entries)-1])
	}
	b.Scan(context.Background(), pages, store.Range{Prefix: lp(nil, "mallory")}, func(_, v []byte) bool {
		if strings.Contains(string(v), `\u003c`) {
			t.Fatalf("a stored value is HTML-escaped: %.60s", v)
		}
		return true
	})
	if p, _ := s.List("mallory", "flood", time.Date(2300, 1, 1, 0, 0, 0, 0, time.UTC), 10, ""); len(p.Entries) != 0 {
		t.Fatalf("since 2300: %d entries", len(p.Entries))
	}
	if p, _ := s.List("mallory", "flood", time.Date(1900, 1, 1, 0, 0, 0, 0, time.UTC), 10, ""); len(p.Entries) != 10 {
		t.Fatalf("since 1900: %d entries", len(p.Entries))
	}
}

// A cursor naming the last key there can be reads nothing after it: it
// must not wrap round to the oldest entry (the red team's hand-made cursor
// of twelve 0xff bytes read the whole log again).
func TestTheLastCursorReadsNothing(t *testing.T) {
	b := openBolt(t, filepath.Join(t.TempDir(), "s.db"))
	defer b.Close()
	s := Open(b, 0, 0, nil)
	defer s.Close()
	s.Append("alice", "h1", Entry{Level: "log", Message: "before"})
	s.Append("alice", "h1", Entry{Level: "log", Message: "after"})
	last := strings.Repeat("_", 16) // base64url of twelve 0xff bytes
	p, err := s.List("alice", "h1", time.Time{}, 5, last)
	if err != nil || len(p.Entries) != 0 || p.Cursor != last {
		t.Fatalf("after the last cursor: %+v %v", p, err)
	}
}
