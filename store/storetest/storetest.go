// Package storetest is the store contract as tests: every backend of
// package store runs Run against a real instance of itself (bbolt in a temp
// file, etcd started by its test), so the packages above the store can
// rely on the same answers from each.
package storetest

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/retainer-gw/retainer/store"
)

// Backend opens the backend under test. It answers a function that opens
// a new handle on the same data each time it is called (a reopened file,
// another client): the suite uses two handles where it tests what one
// writer's commit does to another's.
type Backend func(t *testing.T) (open func() store.Store)

// Run runs the contract against a backend.
func Run(t *testing.T, backend Backend) {
	for _, c := range []struct {
		name string
		test func(*testing.T, func() store.Store)
	}{
		{"GetPutDelete", testGetPutDelete},
		{"Scan", testScan},
		{"ScanPages", testScanPages},
		{"ScanLargeValues", testScanLargeValues},
		{"Conditions", testConditions},
		{"CompareAndSwapRace", testCompareAndSwapRace},
		{"Fencing", testFencing},
		{"Limits", testLimits},
		{"CommitChunked", testCommitChunked},
		{"CommitSpaces", testCommitSpaces},
		{"Durable", testDurable},
	} {
		t.Run(c.name, func(t *testing.T) {
			open := backend(t)
			c.test(t, open)
		})
	}
}

var ctx = context.Background()

func opened(t *testing.T, open func() store.Store) store.Store {
	s := open()
	t.Cleanup(func() { s.Close() })
	return s
}

func claim(t *testing.T, s store.Store, space string) store.Fence {
	t.Helper()
	f, err := s.Claim(ctx, space)
	if err != nil {
		t.Fatalf("claim %q: %v", space, err)
	}
	return f
}

func commit(t *testing.T, s store.Store, txn store.Txn) {
	t.Helper()
	if err := s.Commit(ctx, txn); err != nil {
		t.Fatalf("commit: %v", err)
	}
}

func get(t *testing.T, s store.Store, table, key string) []byte {
	t.Helper()
	v, err := s.Get(ctx, table, []byte(key))
	if err != nil {
		t.Fatalf("get %s/%q: %v", table, key, err)
	}
	return v
}

func keys(t *testing.T, s store.Store, table string, r store.Range) string {
	t.Helper()
	var out []string
	err := s.Scan(ctx, table, r, func(k, v []byte) bool {
		out = append(out, fmt.Sprintf("%s=%s", k, v))
		return true
	})
	if err != nil {
		t.Fatalf("scan: %v", err)
	}
	return fmt.Sprint(out)
}

func testGetPutDelete(t *testing.T, open func() store.Store) {
	s := opened(t, open)
	f := claim(t, s, "reg/alice")
	if v := get(t, s, "kv", "a"); v != nil {
		t.Fatalf("a key never written: %q", v)
	}
	if v := get(t, s, "never-written-table", "a"); v != nil {
		t.Fatalf("a table never written: %q", v)
	}
	commit(t, s, store.Txn{Fences: []store.Fence{f}, Then: []store.Op{store.Put("kv", []byte("a"), []byte("1")), store.Put("kv", []byte("e"), []byte{})}})
	v := get(t, s, "kv", "a")
	if string(v) != "1" {
		t.Fatalf("after a put: %q", v)
	}
	v[0] = 'x' // the answer is the caller's
	if v := get(t, s, "kv", "a"); string(v) != "1" {
		t.Fatalf("an answer's change reached the store: %q", v)
	}
	if v := get(t, s, "kv", "e"); v == nil || len(v) != 0 {
		t.Fatalf("an empty value reads as %v", v)
	}
	commit(t, s, store.Txn{Fences: []store.Fence{f}, Then: []store.Op{store.Delete("kv", []byte("a")), store.Delete("kv", []byte("never")), store.Delete("nowhere", []byte("x"))}})
	if v := get(t, s, "kv", "a"); v != nil {
		t.Fatalf("after a delete: %q", v)
	}
}

func testScan(t *testing.T, open func() store.Store) {
	s := opened(t, open)
	f := claim(t, s, "reg/alice")
	var ops []store.Op
	for _, k := range []string{"a\x00", "a\x001", "a\x002", "a\x00\xff", "a\x01", "b", "\xff", "\xff\xff"} {
		ops = append(ops, store.Put("t", []byte(k), []byte("v"+k)))
	}
	ops = append(ops, store.Put("other", []byte("a\x003"), []byte("elsewhere")))
	commit(t, s, store.Txn{Fences: []store.Fence{f}, Then: ops})
	q := func(r store.Range) string {
		var out [][]byte
		s.Scan(ctx, "t", r, func(k, v []byte) bool {
			if !bytes.Equal(v, append([]byte("v"), k...)) {
				t.Errorf("key %q holds %q", k, v)
			}
			out = append(out, append([]byte{}, k...))
			return true
		})
		return fmt.Sprintf("%q", out)
	}
	for _, c := range []struct {
		r    store.Range
		want string
	}{
		{store.Range{}, `["a\x00" "a\x001" "a\x002" "a\x00\xff" "a\x01" "b" "\xff" "\xff\xff"]`},
		{store.Range{Prefix: []byte("a\x00")}, `["a\x00" "a\x001" "a\x002" "a\x00\xff"]`},
		{store.Range{Prefix: []byte("a\x00"), Reverse: true}, `["a\x00\xff" "a\x002" "a\x001" "a\x00"]`},
		{store.Range{Prefix: []byte("a\x00"), From: []byte("a\x001x"), Limit: 1}, `["a\x002"]`},
		{store.Range{Prefix: []byte("a\x00"), To: []byte("a\x002"), Reverse: true}, `["a\x001" "a\x00"]`},
		{store.Range{From: []byte("b"), To: []byte("\xff\xff")}, `["b" "\xff"]`},
		{store.Range{Prefix: []byte("\xff")}, `["\xff" "\xff\xff"]`},
		{store.Range{Prefix: []byte("\xff"), Reverse: true, Limit: 1}, `["\xff\xff"]`},
		{store.Range{Reverse: true, Limit: 2}, `["\xff\xff" "\xff"]`},
		{store.Range{Prefix: []byte("c")}, `[]`},
	} {
		if got := q(c.r); got != c.want {
			t.Errorf("scan %+v: %s, want %s", c.r, got, c.want)
		}
		// KeysOnly: the same keys, and no values.
		var only [][]byte
		r := c.r
		r.KeysOnly = true
		s.Scan(ctx, "t", r, func(k, v []byte) bool {
			if v != nil {
				t.Errorf("scan %+v: key %q came with %q", r, k, v)
			}
			only = append(only, append([]byte{}, k...))
			return true
		})
		if got := fmt.Sprintf("%q", only); got != c.want {
			t.Errorf("scan %+v: %s, want %s", r, got, c.want)
		}
	}
	// fn answering false stops the scan.
	n := 0
	s.Scan(ctx, "t", store.Range{}, func(k, v []byte) bool { n++; return n < 3 })
	if n != 3 {
		t.Errorf("a scan told to stop at the third key went on to %d", n)
	}
	// A scan of a table never written is empty.
	if got := keys(t, s, "never-written", store.Range{}); got != "[]" {
		t.Errorf("a table never written: %s", got)
	}
}

// A scan longer than a backend's read page (etcd reads a few hundred keys
// a round trip) is the same scan: every key once, in order, within the
// range and the limit, forwards and backwards.
func testScanPages(t *testing.T, open func() store.Store) {
	s := opened(t, open)
	f := claim(t, s, "reg/alice")
	const n = 1100
	var ops []store.Op
	for i := 0; i < n; i++ {
		ops = append(ops, store.Put("p", []byte(fmt.Sprintf("k%05d", i)), []byte("v")))
	}
	if err := store.CommitChunked(ctx, s, []store.Fence{f}, ops); err != nil {
		t.Fatal(err)
	}
	scan := func(r store.Range) (first, last string, count int) {
		prev := ""
		err := s.Scan(ctx, "p", r, func(k, v []byte) bool {
			key := string(k)
			if count > 0 && (key <= prev) != r.Reverse {
				t.Fatalf("scan %+v: %q after %q", r, key, prev)
			}
			if count == 0 {
				first = key
			}
			prev, last = key, key
			count++
			return true
		})
		if err != nil {
			t.Fatal(err)
		}
		return first, last, count
	}
	for _, c := range []struct {
		r           store.Range
		first, last string
		count       int
	}{
		{store.Range{}, "k00000", "k01099", n},
		{store.Range{Reverse: true}, "k01099", "k00000", n},
		{store.Range{From: []byte("k00100"), To: []byte("k00900")}, "k00100", "k00899", 800},
		{store.Range{From: []byte("k00100"), To: []byte("k00900"), Reverse: true}, "k00899", "k00100", 800},
		{store.Range{Prefix: []byte("k00"), Limit: 600}, "k00000", "k00599", 600},
		{store.Range{Prefix: []byte("k00"), Reverse: true, Limit: 300}, "k00999", "k00700", 300},
	} {
		first, last, count := scan(c.r)
		if first != c.first || last != c.last || count != c.count {
			t.Errorf("scan %+v: %d keys %s..%s, want %d %s..%s", c.r, count, first, last, c.count, c.first, c.last)
		}
	}
}

// A scan over values of many sizes, large ones among small ones (etcd
// sizes its pages by the bytes they read), answers every key once, in
// order, with its value, forwards and backwards, with and without a limit.
func testScanLargeValues(t *testing.T, open func() store.Store) {
	s := opened(t, open)
	f := claim(t, s, "reg/alice")
	size := func(i int) int {
		if i < 10 || (i >= 300 && i < 310) {
			return 700 << 10
		}
		return 1 + i%50
	}
	const n = 400
	var ops []store.Op
	for i := 0; i < n; i++ {
		ops = append(ops, store.Put("big", []byte(fmt.Sprintf("k%05d", i)), bytes.Repeat([]byte{byte('a' + i%26)}, size(i))))
	}
	if err := store.CommitChunked(ctx, s, []store.Fence{f}, ops); err != nil {
		t.Fatal(err)
	}
	for _, r := range []store.Range{{}, {Reverse: true}, {Limit: 305}, {From: []byte("k00005"), To: []byte("k00310"), Reverse: true, Limit: 250}} {
		var got []int
		err := s.Scan(ctx, "big", r, func(k, v []byte) bool {
			var i int
			fmt.Sscanf(string(k), "k%05d", &i)
			if len(v) != size(i) || v[0] != byte('a'+i%26) {
				t.Errorf("scan %+v: %s holds %d bytes, want %d", r, k, len(v), size(i))
			}
			got = append(got, i)
			return true
		})
		if err != nil {
			t.Fatal(err)
		}
		var want []int
		for i := 0; i < n; i++ {
			if (r.From != nil && i < 5) || (r.To != nil && i >= 310) {
				continue
			}
			want = append(want, i)
		}
		if r.Reverse {
			for a, b := 0, len(want)-1; a < b; a, b = a+1, b-1 {
				want[a], want[b] = want[b], want[a]
			}
		}
		if r.Limit > 0 && len(want) > r.Limit {
			want = want[:r.Limit]
		}
		if fmt.Sprint(got) != fmt.Sprint(want) {
			t.Errorf("scan %+v: %d keys, want %d (%v...)", r, len(got), len(want), got[:min(len(got), 20)])
		}
	}
}

func testConditions(t *testing.T, open func() store.Store) {
	s := opened(t, open)
	f := claim(t, s, "reg")
	route := []byte("reg\x00shop")
	// Absent: the first bind takes the name; the second is refused, and
	// nothing of a refused transaction is applied.
	commit(t, s, store.Txn{Fences: []store.Fence{f}, If: []store.Cond{store.Absent("routes", route)}, Then: []store.Op{store.Put("routes", route, []byte("h1"))}})
	err := s.Commit(ctx, store.Txn{Fences: []store.Fence{f}, If: []store.Cond{store.Absent("routes", route)}, Then: []store.Op{store.Put("routes", route, []byte("h2")), store.Put("handles", []byte("h2"), []byte("rec"))}})
	if !errors.Is(err, store.ErrConflict) {
		t.Fatalf("a second bind of a taken name: %v", err)
	}
	if v := get(t, s, "handles", "h2"); v != nil {
		t.Fatalf("a refused transaction wrote %q", v)
	}
	// Holds: a move from h1 to h3 names what it moves from.
	if err := s.Commit(ctx, store.Txn{Fences: []store.Fence{f}, If: []store.Cond{store.Holds("routes", route, []byte("h9"))}, Then: []store.Op{store.Put("routes", route, []byte("h3"))}}); !errors.Is(err, store.ErrConflict) {
		t.Fatalf("a move from the wrong value: %v", err)
	}
	commit(t, s, store.Txn{Fences: []store.Fence{f}, If: []store.Cond{store.Holds("routes", route, []byte("h1"))}, Then: []store.Op{store.Put("routes", route, []byte("h3"))}})
	if v := get(t, s, "routes", "reg\x00shop"); string(v) != "h3" {
		t.Fatalf("after the move: %q", v)
	}
	// Every condition must hold, across tables; an empty value is a value.
	commit(t, s, store.Txn{Fences: []store.Fence{f}, Then: []store.Op{store.Put("t", []byte("empty"), []byte{})}})
	if err := s.Commit(ctx, store.Txn{Fences: []store.Fence{f}, If: []store.Cond{store.Absent("t", []byte("empty"))}, Then: []store.Op{store.Put("t", []byte("x"), []byte("1"))}}); !errors.Is(err, store.ErrConflict) {
		t.Fatalf("an empty value taken for none: %v", err)
	}
	err = s.Commit(ctx, store.Txn{Fences: []store.Fence{f}, If: []store.Cond{store.Holds("t", []byte("empty"), nil), store.Absent("routes", route)}, Then: []store.Op{store.Put("t", []byte("x"), []byte("1"))}})
	if !errors.Is(err, store.ErrConflict) || get(t, s, "t", "x") != nil {
		t.Fatalf("one of two conditions failing: %v", err)
	}
	// Exists: whatever the key holds (an update that must not bring back
	// what another transaction deleted).
	if err := s.Commit(ctx, store.Txn{Fences: []store.Fence{f}, If: []store.Cond{store.Exists("t", []byte("gone"))}, Then: []store.Op{store.Put("t", []byte("gone"), []byte("back"))}}); !errors.Is(err, store.ErrConflict) || get(t, s, "t", "gone") != nil {
		t.Fatalf("an update of a key that does not exist: %v", err)
	}
	commit(t, s, store.Txn{Fences: []store.Fence{f}, If: []store.Cond{store.Exists("t", []byte("empty")), store.Exists("routes", route)}, Then: []store.Op{store.Put("t", []byte("empty"), []byte("full"))}})
	commit(t, s, store.Txn{Fences: []store.Fence{f}, If: []store.Cond{store.Holds("t", []byte("empty"), []byte("full")), store.Holds("routes", route, []byte("h3"))}, Then: []store.Op{store.Delete("routes", route)}})
	if v := get(t, s, "routes", "reg\x00shop"); v != nil {
		t.Fatalf("a guarded delete left %q", v)
	}
}

// Twenty writers bind one name at once through two handles: exactly one
// wins, and the name holds the winner's value.
func testCompareAndSwapRace(t *testing.T, open func() store.Store) {
	a, b := opened(t, open), opened(t, open)
	fa := claim(t, a, "reg/a")
	fb := claim(t, b, "reg/b")
	var wins atomic.Int32
	var winner atomic.Value
	var wg sync.WaitGroup
	for i := 0; i < 20; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			s, f := a, fa
			if i%2 == 1 {
				s, f = b, fb
			}
			v := []byte(fmt.Sprint("h", i))
			err := s.Commit(ctx, store.Txn{Fences: []store.Fence{f}, If: []store.Cond{store.Absent("routes", []byte("r"))}, Then: []store.Op{store.Put("routes", []byte("r"), v)}})
			if err == nil {
				wins.Add(1)
				winner.Store(string(v))
			} else if !errors.Is(err, store.ErrConflict) {
				t.Errorf("a losing bind: %v", err)
			}
		}()
	}
	wg.Wait()
	if wins.Load() != 1 {
		t.Fatalf("%d writers bound one name", wins.Load())
	}
	if v := get(t, a, "routes", "r"); string(v) != winner.Load() {
		t.Fatalf("the name holds %q, the winner wrote %q", v, winner.Load())
	}
}

func testFencing(t *testing.T, open func() store.Store) {
	a, b := opened(t, open), opened(t, open)
	if err := a.Commit(ctx, store.Txn{Fences: []store.Fence{{Space: "reg/alice", Epoch: 1}}, Then: []store.Op{store.Put("kv", []byte("k"), []byte("unclaimed"))}}); !errors.Is(err, store.ErrFenced) {
		t.Fatalf("a fence nobody was given: %v", err)
	}
	old := claim(t, a, "reg/alice")
	commit(t, a, store.Txn{Fences: []store.Fence{old}, Then: []store.Op{store.Put("kv", []byte("k"), []byte("first"))}})
	// Another writer claims the space: the old fence is stale at once,
	// through either handle, and its transaction is refused whole.
	fresh := claim(t, b, "reg/alice")
	if fresh.Epoch == old.Epoch {
		t.Fatalf("a second claim answered the first one's fence %+v", fresh)
	}
	for _, s := range []store.Store{a, b} {
		err := s.Commit(ctx, store.Txn{Fences: []store.Fence{old}, Then: []store.Op{store.Put("kv", []byte("k"), []byte("stale")), store.Put("kv", []byte("k2"), []byte("stale"))}})
		if !errors.Is(err, store.ErrFenced) {
			t.Fatalf("a stale fence's commit: %v", err)
		}
	}
	if err := store.CommitChunked(ctx, a, []store.Fence{old}, []store.Op{store.Put("kv", []byte("k3"), []byte("stale"))}); !errors.Is(err, store.ErrFenced) {
		t.Fatalf("a stale fence's chunked commit: %v", err)
	}
	if v := get(t, b, "kv", "k"); string(v) != "first" || get(t, b, "kv", "k2") != nil || get(t, b, "kv", "k3") != nil {
		t.Fatalf("a stale writer's commit landed: %q", v)
	}
	commit(t, b, store.Txn{Fences: []store.Fence{fresh}, Then: []store.Op{store.Put("kv", []byte("k"), []byte("second"))}})
	// Spaces are independent: bob's writer is not fenced by alice's claim.
	bob := claim(t, a, "reg/bob")
	commit(t, a, store.Txn{Fences: []store.Fence{bob}, Then: []store.Op{store.Put("kv", []byte("b"), []byte("bob"))}})
	// A transaction in two spaces needs both fences current.
	alice := claim(t, a, "reg/alice")
	if err := a.Commit(ctx, store.Txn{Fences: []store.Fence{bob, fresh}, Then: []store.Op{store.Put("kv", []byte("two"), []byte("x"))}}); !errors.Is(err, store.ErrFenced) || get(t, a, "kv", "two") != nil {
		t.Fatalf("a group commit with one stale fence: %v", err)
	}
	commit(t, a, store.Txn{Fences: []store.Fence{bob, alice}, Then: []store.Op{store.Put("kv", []byte("two"), []byte("x"))}})
	// Without fences, a transaction is guarded by its conditions alone.
	commit(t, a, store.Txn{Then: []store.Op{store.Put("meta", []byte("m"), []byte("1"))}})
}

func testLimits(t *testing.T, open func() store.Store) {
	s := opened(t, open)
	f := claim(t, s, "reg/alice")
	l := s.Limits()
	if l.Ops < 16 || l.Bytes < 1<<20 {
		t.Fatalf("limits too small for the gateway's writes: %+v", l)
	}
	ops := make([]store.Op, l.Ops+1)
	for i := range ops {
		ops[i] = store.Put("t", []byte(fmt.Sprint(i)), []byte("v"))
	}
	if err := s.Commit(ctx, store.Txn{Fences: []store.Fence{f}, Then: ops}); !errors.Is(err, store.ErrTooLarge) {
		t.Fatalf("%d operations in one transaction: %v", len(ops), err)
	}
	big := bytes.Repeat([]byte("x"), l.Bytes)
	if err := s.Commit(ctx, store.Txn{Fences: []store.Fence{f}, Then: []store.Op{store.Put("t", []byte("big"), big)}}); !errors.Is(err, store.ErrTooLarge) {
		t.Fatalf("a value of %d bytes: %v", len(big), err)
	}
	if got := keys(t, s, "t", store.Range{Limit: 1}); got != "[]" {
		t.Fatalf("a refused transaction wrote %s", got)
	}
	// The most the limits allow commits.
	commit(t, s, store.Txn{Fences: []store.Fence{f}, Then: ops[:l.Ops-1]})
	commit(t, s, store.Txn{Fences: []store.Fence{f}, Then: []store.Op{store.Put("t", []byte("1MiB"), bytes.Repeat([]byte("y"), 1<<20))}})
	if v := get(t, s, "t", "1MiB"); len(v) != 1<<20 {
		t.Fatalf("a 1 MiB value read back as %d bytes", len(v))
	}
}

func testCommitChunked(t *testing.T, open func() store.Store) {
	s := opened(t, open)
	f := claim(t, s, "reg/alice")
	l := s.Limits()
	n := 3*l.Ops + 7
	ops := make([]store.Op, 0, n+4)
	for i := 0; i < n; i++ {
		ops = append(ops, store.Put("t", []byte(fmt.Sprintf("%05d", i)), []byte("v")))
	}
	// Values that fill the byte limit in a few ops each.
	chunk := bytes.Repeat([]byte("z"), l.Bytes/3)
	for i := 0; i < 4; i++ {
		ops = append(ops, store.Put("big", []byte(fmt.Sprint(i)), chunk))
	}
	if err := store.CommitChunked(ctx, s, []store.Fence{f}, ops); err != nil {
		t.Fatalf("%d operations chunked: %v", len(ops), err)
	}
	count := 0
	s.Scan(ctx, "t", store.Range{}, func(k, v []byte) bool { count++; return true })
	if count != n {
		t.Fatalf("chunked: %d of %d keys written", count, n)
	}
	for i := 0; i < 4; i++ {
		if v := get(t, s, "big", fmt.Sprint(i)); len(v) != len(chunk) {
			t.Fatalf("big value %d: %d bytes", i, len(v))
		}
	}
	// Deletes chunk the same way (an end removing many names).
	dels := make([]store.Op, n)
	for i := range dels {
		dels[i] = store.Delete("t", []byte(fmt.Sprintf("%05d", i)))
	}
	if err := store.CommitChunked(ctx, s, []store.Fence{f}, dels); err != nil {
		t.Fatal(err)
	}
	if got := keys(t, s, "t", store.Range{}); got != "[]" {
		t.Fatalf("after chunked deletes: %s", got)
	}
}

func testDurable(t *testing.T, open func() store.Store) {
	s := open()
	f, err := s.Claim(ctx, "reg/alice")
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Commit(ctx, store.Txn{Fences: []store.Fence{f}, Then: []store.Op{store.Put("kv", []byte("k"), []byte("kept"))}}); err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	again := opened(t, open)
	if v := get(t, again, "kv", "k"); string(v) != "kept" {
		t.Fatalf("after a reopen: %q", v)
	}
	// The claim outlives the handle that made it: its fence is still the
	// space's, and a new claim supersedes it.
	if err := again.Commit(ctx, store.Txn{Fences: []store.Fence{f}, Then: []store.Op{store.Put("kv", []byte("k"), []byte("same owner"))}}); err != nil {
		t.Fatalf("the fence after a reopen: %v", err)
	}
	next := claim(t, again, "reg/alice")
	if next.Epoch <= f.Epoch {
		t.Fatalf("a claim after a reopen went back: %d after %d", next.Epoch, f.Epoch)
	}
}

// A group commit of 300 spaces' writes packs them into transactions within
// the limits, each under its spaces' fences; a stale fence fails its
// transaction and leaves the others' writes.
func testCommitSpaces(t *testing.T, open func() store.Store) {
	s := opened(t, open)
	w := store.NewWriter(s)
	bySpace := map[string][]store.Op{}
	for i := 0; i < 300; i++ {
		sp := fmt.Sprintf("reg/t%03d", i)
		for j := 0; j < 1+i%3; j++ {
			bySpace[sp] = append(bySpace[sp], store.Put("kv", []byte(fmt.Sprintf("%s/%d", sp, j)), []byte("v")))
		}
	}
	if err := w.CommitSpaces(ctx, bySpace); err != nil {
		t.Fatal(err)
	}
	count := 0
	s.Scan(ctx, "kv", store.Range{}, func(k, v []byte) bool { count++; return true })
	if count != 600 {
		t.Fatalf("%d of 600 writes", count)
	}
	// Another writer takes one space: the first writer's next group
	// commit to it is refused.
	claim(t, opened(t, open), "reg/t007")
	err := w.CommitSpaces(ctx, map[string][]store.Op{"reg/t007": {store.Put("kv", []byte("late"), []byte("x"))}})
	if !errors.Is(err, store.ErrFenced) || get(t, s, "kv", "late") != nil {
		t.Fatalf("a group commit to a space claimed since: %v", err)
	}
}
