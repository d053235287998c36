package store

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"sync"
	"testing"
	"time"

	bolt "go.etcd.io/bbolt"

	"github.com/retainer-gw/retainer/internal/waitfor"
)

// lastTx is the id of the file's last written transaction.
func lastTx(t *testing.T, b *Bolt) int {
	t.Helper()
	var id int
	if err := b.db.View(func(tx *bolt.Tx) error { id = tx.ID(); return nil }); err != nil {
		t.Fatal(err)
	}
	return id
}

// holdWriter holds bbolt's writer until the answer's release is called,
// as a long commit does, and answers once it holds it.
func holdWriter(t *testing.T, b *Bolt) (release func()) {
	held, done := make(chan struct{}), make(chan struct{})
	go b.db.Update(func(*bolt.Tx) error {
		close(held)
		<-done
		return nil
	})
	<-held
	return func() { close(done) }
}

// queued waits until n writes wait for the one under way.
func queued(t *testing.T, b *Bolt, n int) {
	t.Helper()
	waitfor.Until(t, 10*time.Second, "writes queued", func() bool {
		b.gmu.Lock()
		defer b.gmu.Unlock()
		return len(b.waiting) == n
	})
}

// Commits that arrive while one is being written are written after it in
// one transaction, each as if alone: a claim made meanwhile answers at
// once and its fence holds for a commit in the group (which writes its
// epoch), a commit whose condition fails writes nothing and is answered
// ErrConflict, one under a superseded fence is answered ErrFenced, and
// the others are on disk once answered.
func TestCommitsWaitingAreWrittenInOneTransaction(t *testing.T) {
	path := filepath.Join(t.TempDir(), "registry.db")
	b, err := OpenBolt(path, 0)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	old, err := b.Claim(ctx, "reg\x00old")
	if err != nil {
		t.Fatal(err)
	}
	release := holdWriter(t, b)
	before := lastTx(t, b)
	var wg sync.WaitGroup
	errs := make([]error, 24)
	// The first leads, alone; the rest wait for it and form one group.
	wg.Add(1)
	go func() {
		defer wg.Done()
		errs[0] = b.Commit(ctx, Txn{Fences: []Fence{old}, Then: []Op{Put("kv", []byte("k0"), []byte("v"))}})
	}()
	queued(t, b, 0)
	waitfor.Until(t, 10*time.Second, "the leader", func() bool { b.gmu.Lock(); defer b.gmu.Unlock(); return b.busy })
	var claimed Fence
	claimDone := make(chan struct{})
	go func() {
		defer close(claimDone)
		claimed, errs[1] = b.Claim(ctx, "reg\x00new")
	}()
	select {
	case <-claimDone:
	case <-time.After(10 * time.Second):
		t.Fatal("a claim waited for the file")
	}
	wg.Add(1)
	go func() {
		defer wg.Done()
		errs[1] = b.Commit(ctx, Txn{Fences: []Fence{claimed}, Then: []Op{Put("kv", []byte("k1"), []byte("v"))}})
	}()
	queued(t, b, 1)
	for i := 2; i < 22; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs[i] = b.Commit(ctx, Txn{Fences: []Fence{old}, Then: []Op{Put("kv", fmt.Appendf(nil, "k%d", i), []byte("v"))}})
		}()
		queued(t, b, i)
	}
	wg.Add(2)
	go func() {
		defer wg.Done()
		errs[22] = b.Commit(ctx, Txn{If: []Cond{Exists("kv", []byte("never"))}, Then: []Op{Put("kv", []byte("k22"), []byte("v"))}})
	}()
	queued(t, b, 22)
	go func() {
		defer wg.Done()
		errs[23] = b.Commit(ctx, Txn{Fences: []Fence{{Space: "reg\x00old", Epoch: old.Epoch - 1}}, Then: []Op{Put("kv", []byte("k23"), []byte("v"))}})
	}()
	queued(t, b, 23)
	release()
	wg.Wait()
	// The held transaction, the leader's, the group's.
	if got := lastTx(t, b) - before; got != 3 {
		t.Fatalf("%d transactions written, want 3", got)
	}
	for i, err := range errs {
		want := error(nil)
		switch i {
		case 22:
			want = ErrConflict
		case 23:
			want = ErrFenced
		}
		if !errors.Is(err, want) {
			t.Fatalf("write %d answered %v, want %v", i, err, want)
		}
	}
	if claimed.Epoch != 1 {
		t.Fatalf("the claim answered %+v", claimed)
	}
	// Claimed while the file was held, never written by a commit: written
	// when the store closes.
	unwritten, err := b.Claim(ctx, "reg\x00unwritten")
	if err != nil {
		t.Fatal(err)
	}
	b.Close()
	b, err = OpenBolt(path, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	for i := range 24 {
		v, err := b.Get(ctx, "kv", fmt.Appendf(nil, "k%d", i))
		if err != nil || (v != nil) != (i < 22) {
			t.Fatalf("k%d after reopening: %q %v", i, v, err)
		}
	}
	// The claims are on disk: their fences hold, and claims go on past them.
	for _, f := range []Fence{claimed, unwritten} {
		if err := b.Commit(ctx, Txn{Fences: []Fence{f}, Then: []Op{Put("kv", []byte(f.Space), []byte("v"))}}); err != nil {
			t.Fatalf("a commit under %+v after reopening: %v", f, err)
		}
		next, err := b.Claim(ctx, f.Space)
		if err != nil || next.Epoch != f.Epoch+1 {
			t.Fatalf("a claim after %+v: %+v %v", f, next, err)
		}
		if err := b.Commit(ctx, Txn{Fences: []Fence{f}, Then: []Op{Put("kv", []byte(f.Space), []byte("stale"))}}); !errors.Is(err, ErrFenced) {
			t.Fatalf("a commit under %+v, superseded before it was written: %v", f, err)
		}
	}
}

// A write that fails half applied (bbolt refuses its second key) fails
// its group, and the group's writes are then written one by one: the
// others are written, and nothing of the failed one is.
func TestAGroupWithAFailedWriteIsWrittenOneByOne(t *testing.T) {
	path := filepath.Join(t.TempDir(), "registry.db")
	b, err := OpenBolt(path, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	ctx := context.Background()
	f, err := b.Claim(ctx, "reg\x00a")
	if err != nil {
		t.Fatal(err)
	}
	release := holdWriter(t, b)
	var wg sync.WaitGroup
	errs := make([]error, 6)
	for i := range 6 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			ops := []Op{Put("kv", fmt.Appendf(nil, "k%d", i), []byte("v"))}
			if i == 3 {
				ops = append(ops, Put("kv", nil, []byte("no key")))
			}
			errs[i] = b.Commit(ctx, Txn{Fences: []Fence{f}, Then: ops})
		}()
		if i == 0 {
			waitfor.Until(t, 10*time.Second, "the leader", func() bool { b.gmu.Lock(); defer b.gmu.Unlock(); return b.busy })
		} else {
			queued(t, b, i)
		}
	}
	release()
	wg.Wait()
	for i, err := range errs {
		if (err != nil) != (i == 3) {
			t.Fatalf("write %d answered %v", i, err)
		}
		v, gerr := b.Get(ctx, "kv", fmt.Appendf(nil, "k%d", i))
		if gerr != nil || (v != nil) != (i != 3) {
			t.Fatalf("k%d: %q %v", i, v, gerr)
		}
	}
}

// A write whose transaction panics in bbolt (a caller such as net/http
// may recover the panic) answers every write of its group with an error,
// since nothing of the group was written, and leaves the file writable:
// the next commit is written.
func TestAPanickingGroupLeavesTheFileWritable(t *testing.T) {
	b, err := OpenBolt(filepath.Join(t.TempDir(), "registry.db"), 0)
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	ctx := context.Background()
	// As if a commit were being written: the writes below wait for it.
	b.gmu.Lock()
	b.busy = true
	b.gmu.Unlock()
	errs := make(chan error, 3)
	for i := range 3 {
		go func() {
			if i == 1 {
				errs <- b.write(&boltWrite{inTx: func(*bolt.Tx) error { panic("a bbolt assertion") }})
				return
			}
			errs <- b.Commit(ctx, Txn{Then: []Op{Put("kv", fmt.Appendf(nil, "k%d", i), []byte("v"))}})
		}()
		queued(t, b, i+1)
	}
	// It ends, and its leader writes the group: bbolt panics in it, and
	// the leader's caller recovers.
	func() {
		defer func() {
			if r := recover(); r == nil {
				t.Fatal("the group's transaction did not panic")
			}
		}()
		b.lead()
	}()
	for range 3 {
		if err := <-errs; !errors.Is(err, errPanicked) {
			t.Fatalf("a write of the panicked group answered %v", err)
		}
	}
	for i := range 3 {
		if v, err := b.Get(ctx, "kv", fmt.Appendf(nil, "k%d", i)); err != nil || v != nil {
			t.Fatalf("k%d of the panicked group: %q %v", i, v, err)
		}
	}
	if err := b.Commit(ctx, Txn{Then: []Op{Put("kv", []byte("after"), []byte("v"))}}); err != nil {
		t.Fatalf("a commit after the panic: %v", err)
	}
}
