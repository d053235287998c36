package receipts

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/retainer-gw/retainer/budgets"
	"github.com/retainer-gw/retainer/internal/waitfor"
	"github.com/retainer-gw/retainer/store"
)

func open(t *testing.T, now *time.Time) *Store {
	db, err := store.OpenBolt(filepath.Join(t.TempDir(), "r.db"), time.Second)
	if err != nil {
		t.Fatal(err)
	}
	s, err := Open(db, 24*time.Hour, func() time.Time { return *now })
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close(); db.Close() })
	return s
}

func receipt(tenant string, at time.Time) Receipt {
	return Receipt{ID: NewID(), Tenant: tenant, Registry: "apps", Code: "async () => 1", Logs: []string{},
		Outcome: Outcome{Status: "ok", Result: json.RawMessage(`1`)}, Timing: Timing{Received: at, Started: at, Ended: at}}
}

func TestTenantsAndPages(t *testing.T) {
	now := time.Now()
	s := open(t, &now)
	var ids []string
	for i := 0; i < 7; i++ {
		r := receipt("alice", now)
		ids = append(ids, r.ID)
		if err := s.Put(r); err != nil {
			t.Fatal(err)
		}
		time.Sleep(2 * time.Millisecond) // UUIDv7 orders by millisecond
	}
	s.Put(receipt("bob", now))
	if _, err := s.Get("bob", ids[0]); err != ErrNotFound {
		t.Fatalf("bob reads alice's receipt: %v", err)
	}
	if _, err := s.Get("alice", ids[0]); err != nil {
		t.Fatal(err)
	}
	var seen []string
	cursor := ""
	for page := 0; page < 5; page++ {
		list, next, err := s.List("alice", 3, cursor)
		if err != nil {
			t.Fatal(err)
		}
		for _, r := range list {
			seen = append(seen, r.ID)
		}
		if next == "" {
			break
		}
		cursor = next
	}
	want := []string{}
	for i := len(ids) - 1; i >= 0; i-- {
		want = append(want, ids[i])
	}
	if fmt.Sprint(seen) != fmt.Sprint(want) {
		t.Fatalf("pages %v, want newest first %v", seen, want)
	}
	if list, _, _ := s.List("bob", 10, ""); len(list) != 1 {
		t.Fatalf("bob lists %d", len(list))
	}
}

func TestRetentionSweep(t *testing.T) {
	now := time.Now()
	s := open(t, &now)
	old := receipt("alice", now.Add(-48*time.Hour))
	fresh := receipt("alice", now.Add(-time.Hour))
	s.Put(old)
	s.Put(fresh)
	if n := s.Sweep(); n != 1 {
		t.Fatalf("swept %d", n)
	}
	if _, err := s.Get("alice", old.ID); err != ErrNotFound {
		t.Fatal("an expired receipt survived the sweep")
	}
	if _, err := s.Get("alice", fresh.ID); err != nil {
		t.Fatal("a fresh receipt was swept")
	}
}

func TestSizeBound(t *testing.T) {
	now := time.Now()
	s := open(t, &now)
	r := receipt("alice", now)
	for i := 0; i < 2000; i++ {
		r.Logs = append(r.Logs, strings.Repeat("x", 500))
	}
	if err := s.Put(r); err != nil {
		t.Fatal(err)
	}
	got, _ := s.Get("alice", r.ID)
	data, _ := json.Marshal(got)
	if len(data) > budgets.ReceiptBytes || fmt.Sprint(got.Truncated) != "[logs]" || len(got.Logs) == 0 {
		t.Fatalf("%d bytes, truncated %v, %d logs", len(data), got.Truncated, len(got.Logs))
	}
}

func TestPageEscapesEverything(t *testing.T) {
	r := receipt("alice", time.Now())
	r.Code = "async () => '<script>alert(1)</script>'"
	r.Logs = []string{`<img src=x onerror=alert(2)>`}
	r.Outcome = Outcome{Status: "error", Error: &Error{Code: "RUNTIME", Message: "<b>bold</b>"}}
	w := httptest.NewRecorder()
	if err := Render(w, r); err != nil {
		t.Fatal(err)
	}
	body := w.Body.String()
	for _, raw := range []string{"<script>alert", "<img src=x", "<b>bold"} {
		if strings.Contains(body, raw) {
			t.Fatalf("unescaped %q in the page", raw)
		}
	}
	if !strings.Contains(body, "&lt;script&gt;alert(1)&lt;/script&gt;") {
		t.Fatal("the code is not shown escaped")
	}
	csp := w.Header().Get("Content-Security-Policy")
	if !strings.Contains(csp, "default-src 'none'") || !strings.Contains(csp, "script-src 'none'") {
		t.Fatalf("CSP %q", csp)
	}
}

// A tenant whose id is another's plus a NUL and more must never show in
// the other's listing (keys are length-prefixed).
func TestTenantIDsThatShareAPrefix(t *testing.T) {
	now := time.Now()
	s := open(t, &now)
	for _, tenant := range []string{"bob\x00", "bob\x00x", "bo", "bobby"} {
		if err := s.Put(receipt(tenant, now)); err != nil {
			t.Fatal(err)
		}
	}
	mine := receipt("bob", now)
	if err := s.Put(mine); err != nil {
		t.Fatal(err)
	}
	list, _, err := s.List("bob", 100, "")
	if err != nil {
		t.Fatal(err)
	}
	if len(list) != 1 || list[0].ID != mine.ID {
		t.Fatalf("bob lists %+v, want only its own receipt", list)
	}
}

// A receipt is readable right after Put, and on disk once the store closes
// (or sooner): nothing waiting is lost.
func TestWaitingReceiptsAreWritten(t *testing.T) {
	now := time.Now()
	path := filepath.Join(t.TempDir(), "r.db")
	db, err := store.OpenBolt(path, time.Second)
	if err != nil {
		t.Fatal(err)
	}
	s, err := Open(db, 24*time.Hour, func() time.Time { return now })
	if err != nil {
		t.Fatal(err)
	}
	var ids []string
	for i := 0; i < 50; i++ {
		r := receipt("alice", now)
		ids = append(ids, r.ID)
		if err := s.Put(r); err != nil {
			t.Fatal(err)
		}
		if _, err := s.Get("alice", r.ID); err != nil {
			t.Fatalf("a receipt is not readable right after Put: %v", err)
		}
	}
	s.Close()
	db.Close()
	db, _ = store.OpenBolt(path, time.Second)
	defer db.Close()
	s, _ = Open(db, 24*time.Hour, func() time.Time { return now })
	defer s.Close()
	for _, id := range ids {
		if _, err := s.Get("alice", id); err != nil {
			t.Fatalf("receipt %s was lost: %v", id, err)
		}
	}
}

// A stream of receipts shares commits (commitEvery), and a lone receipt is
// still written without waiting for another.
func TestReceiptsShareCommits(t *testing.T) {
	now := time.Now()
	s := open(t, &now)
	var mu sync.Mutex
	commits, written := 0, 0
	s.onCommit = func(n int) {
		mu.Lock()
		commits++
		written += n
		mu.Unlock()
	}
	const puts = 100
	for i := 0; i < puts; i++ {
		if err := s.Put(receipt("alice", now)); err != nil {
			t.Fatal(err)
		}
		time.Sleep(2 * time.Millisecond) // a run's length
	}
	lone := receipt("bob", now)
	time.Sleep(2 * commitEvery)
	if err := s.Put(lone); err != nil {
		t.Fatal(err)
	}
	waitfor.Until(t, 30*time.Second, "a lone receipt written", func() bool {
		v, _ := s.st.Get(context.Background(), table, key("bob", lone.ID))
		return v != nil
	})
	mu.Lock()
	defer mu.Unlock()
	if written != puts+1 {
		t.Fatalf("%d receipts written, want %d", written, puts+1)
	}
	// Unpaced, the writer committed about once per receipt here; paced, at
	// most once per commitEvery (fewer on a slower machine).
	if commits > puts/3 {
		t.Fatalf("%d commits for %d receipts over %v: receipts do not share commits", commits, puts+1, time.Duration(puts)*2*time.Millisecond)
	}
}

// A receipt fits its 256 KiB whatever the run (docs/architecture.md, Budgets): a chain
// of 32 steps each taking and answering 8 MiB (a 2 KB request once wrote a
// 252 MiB receipt), 44,381 caught denials, a 1 MB prompt. What was cut is
// named, and the steps' names and outcomes stay.
func TestEveryReceiptFitsItsBound(t *testing.T) {
	now := time.Now()
	s := open(t, &now)
	big := json.RawMessage(`"` + strings.Repeat("y", 8<<20) + `"`)
	chain := receipt("alice", now)
	chain.Kind = "chain"
	for i := 0; i < 32; i++ {
		chain.Steps = append(chain.Steps, Step{Name: fmt.Sprintf("step-%d", i), Code: "async (input) => input + input", Input: big,
			Outcome: Outcome{Status: "ok", Result: big}, Logs: []string{strings.Repeat("l", 60<<10)}})
	}
	chain.Outcome.Result = big
	denied := receipt("alice", now)
	for i := 0; i < 44381; i++ {
		denied.Outcome.Denials = append(denied.Outcome.Denials, fmt.Sprintf("fetch needs the fetch capability (%d)", i))
	}
	prompted := receipt("alice", now)
	prompted.Kind, prompted.Prompt = "generate", strings.Repeat("p", 1<<20)
	for name, r := range map[string]Receipt{"chain": chain, "denials": denied, "prompt": prompted} {
		start := time.Now()
		if err := s.Put(r); err != nil {
			t.Fatal(name, err)
		}
		took := time.Since(start)
		got, err := s.Get("alice", r.ID)
		if err != nil {
			t.Fatal(name, err)
		}
		data, _ := json.Marshal(got)
		if len(data) > budgets.ReceiptBytes || len(got.Truncated) == 0 {
			t.Fatalf("%s: %d bytes (bound %d), truncated %v", name, len(data), budgets.ReceiptBytes, got.Truncated)
		}
		t.Logf("%s: %d bytes, cut %v, in %v", name, len(data), got.Truncated, took)
	}
	got, _ := s.Get("alice", chain.ID)
	if len(got.Steps) != 32 || got.Steps[31].Name != "step-31" || got.Steps[31].Outcome.Status != "ok" {
		t.Fatalf("the chain's steps were not kept: %d", len(got.Steps))
	}
}

// Receipts are charged to their tenant (docs/architecture.md, Budgets): past the
// tenant's byte quota its oldest receipts go first, and another tenant's
// stay.
func TestTenantReceiptQuota(t *testing.T) {
	now := time.Now()
	s := open(t, &now)
	s.SetTenantBytes(512 << 10)
	bobs := receipt("bob", now)
	if err := s.Put(bobs); err != nil {
		t.Fatal(err)
	}
	var ids []string
	for i := 0; i < 10; i++ {
		r := receipt("alice", now)
		r.Logs = []string{strings.Repeat("a", 100<<10)}
		if err := s.Put(r); err != nil {
			t.Fatal(err)
		}
		ids = append(ids, r.ID)
		s.flush()
	}
	kept := 0
	for i, id := range ids {
		if _, err := s.Get("alice", id); err == nil {
			kept++
		} else if i >= 5 {
			t.Fatalf("alice's receipt %d of 10 (a recent one) is gone", i+1)
		}
	}
	if kept < 4 || kept > 5 {
		t.Fatalf("alice keeps %d receipts of ~100 KB under a 512 KiB quota", kept)
	}
	if _, err := s.Get("bob", bobs.ID); err != nil {
		t.Fatalf("bob's receipt went with alice's: %v", err)
	}
	list, _, _ := s.List("alice", 100, "")
	if len(list) != kept {
		t.Fatalf("alice's listing shows %d, the store keeps %d", len(list), kept)
	}
}

// A receipt's JSON is written without HTML escaping (docs/architecture.md,
// Budgets): '<', '>' and '&' in logs and results are stored as themselves,
// so 200 KB of '<' (1.2 MB escaped) fits the 256 KiB bound uncut.
func TestStoredReceiptIsNotHTMLEscaped(t *testing.T) {
	now := time.Now()
	s := open(t, &now)
	r := receipt("alice", now)
	r.Logs = []string{"<script>&</script>"}
	r.Outcome.Result = json.RawMessage(`{"html":"<script>&"}`)
	big := receipt("alice", now)
	big.Logs = []string{strings.Repeat("<", 200<<10)}
	for _, rc := range []Receipt{r, big} {
		if err := s.Put(rc); err != nil {
			t.Fatal(err)
		}
	}
	if err := s.flush(); err != nil {
		t.Fatal(err)
	}
	stored, err := s.st.Get(context.Background(), table, key("alice", r.ID))
	if err != nil || stored == nil {
		t.Fatalf("stored: %v %q", err, stored)
	}
	if bytes.Contains(stored, []byte(`\u003c`)) || bytes.Contains(stored, []byte(`\u0026`)) ||
		!bytes.Contains(stored, []byte(`"<script>&</script>"`)) || !bytes.Contains(stored, []byte(`{"html":"<script>&"}`)) {
		t.Fatalf("stored receipt is HTML-escaped: %s", stored)
	}
	if stored[len(stored)-1] != '}' {
		t.Fatalf("stored receipt ends with %q", stored[len(stored)-1:])
	}
	got, err := s.Get("alice", big.ID)
	if err != nil || len(got.Truncated) != 0 || len(got.Logs) != 1 || len(got.Logs[0]) != 200<<10 {
		t.Fatalf("200 KB of '<' was cut: %v, truncated %v", err, got.Truncated)
	}
	got, _ = s.Get("alice", r.ID)
	if string(got.Outcome.Result) != `{"html":"<script>&"}` {
		t.Fatalf("result read back as %s", got.Outcome.Result)
	}
}
