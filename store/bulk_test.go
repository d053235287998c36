package store_test

import (
	"context"
	"fmt"
	"path/filepath"
	"testing"
	"time"

	"github.com/retainer-gw/retainer/store"
)

// CommitBulk writes 10,000 puts on bbolt (past its 128 operations a
// transaction), in order, then deletes half of them; nothing else is
// touched.
func TestCommitBulkBolt(t *testing.T) {
	b, err := store.OpenBolt(filepath.Join(t.TempDir(), "s.db"), time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	ctx := context.Background()
	if err := b.Commit(ctx, store.Txn{Then: []store.Op{store.Put("other", []byte("k"), []byte("v"))}}); err != nil {
		t.Fatal(err)
	}
	var ops, dels []store.Op
	for i := 0; i < 10000; i++ {
		k := []byte(fmt.Sprintf("k%05d", i))
		ops = append(ops, store.Put("bulk", k, []byte(fmt.Sprint(i))), store.Put("bulk", k, []byte(fmt.Sprint("v", i))))
		if i%2 == 0 {
			dels = append(dels, store.Delete("bulk", k))
		}
	}
	if err := store.CommitBulk(ctx, b, ops); err != nil {
		t.Fatal(err)
	}
	if err := store.CommitBulk(ctx, b, dels); err != nil {
		t.Fatal(err)
	}
	n := 0
	b.Scan(ctx, "bulk", store.Range{}, func(k, v []byte) bool {
		if want := fmt.Sprintf("k%05d", 2*n+1); string(k) != want || string(v) != fmt.Sprint("v", 2*n+1) {
			t.Fatalf("entry %d: %s=%s, want %s", n, k, v, want)
		}
		n++
		return true
	})
	if v, _ := b.Get(ctx, "other", []byte("k")); n != 5000 || string(v) != "v" {
		t.Fatalf("%d entries kept, the other table's key %q", n, v)
	}
}
