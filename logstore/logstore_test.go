package logstore

import (
	"context"
	"fmt"
	"path/filepath"
	"strings"
	"testing"
	"time"

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
// it lost; a tenant holds at most TailsPerTenant.
func TestTails(t *testing.T) {
	b := openBolt(t, filepath.Join(t.TempDir(), "s.db"))
	defer b.Close()
	s := Open(b, 0, 0, nil)
	defer s.Close()
	var tails []*Tail
	for i := 0; i < TailsPerTenant; i++ {
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
	tails[0].Close()
	if _, err := s.Tail("alice", "h"); err != nil {
		t.Fatalf("a tail after one closed: %v", err)
	}
}
