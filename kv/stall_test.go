package kv

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/retainer-gw/retainer/internal/waitfor"
)

// The stall rule itself (readStore, which a get, a listing and a write's
// check of what it replaces all go through; docs/cluster.md, "Failures").
func TestTheStallRule(t *testing.T) {
	ns := space("apps", "t")
	call := func(kv *KV, ctx context.Context, read func(ctx context.Context) error) error {
		kv.mu.Lock()
		defer kv.mu.Unlock()
		return kv.readStore(ctx, ns, read)
	}
	reached := 0
	count := func(context.Context) error { reached++; return nil }
	storeRead := func(kv *KV) func(ctx context.Context) error {
		return func(ctx context.Context) error {
			_, err := kv.w.Get(ctx, tableKV, append(ns, 'k'))
			return err
		}
	}

	// With a Bound: a read that fails within it marks nothing. With the
	// store stalled, a read still unanswered after suspectAfter has the
	// gateway read the store itself; that read unanswered for
	// stallEvidence marks the store stalled, whatever the caller's
	// deadline: a read with none is cut short by the mark (refused as
	// the next ones are), one whose short deadline passed first fails by
	// it, and the mark follows all the same. The next read is refused at
	// once without reaching the store, until the store answers again (the
	// probe).
	for _, callerBound := range []time.Duration{0, 120 * time.Millisecond} {
		kv, st := stallingKV(t, 1500*time.Millisecond)
		failing := errors.New("refused by the store")
		if err := call(kv, context.Background(), func(context.Context) error { return failing }); err != failing {
			t.Fatalf("a read that failed at once: %v", err)
		}
		reached = 0
		if err := call(kv, context.Background(), count); err != nil || reached != 1 {
			t.Fatalf("a read after one that failed within its bound: %v, reached the store %d times", err, reached)
		}
		st.reads.Store(true)
		ctx, cancel := context.Background(), context.CancelFunc(func() {})
		if callerBound > 0 {
			ctx, cancel = context.WithTimeout(ctx, callerBound)
		}
		err := call(kv, ctx, storeRead(kv))
		cancel()
		if callerBound == 0 && (!isOverloaded(err) || !strings.Contains(err.Error(), "has not answered")) {
			t.Fatalf("no caller's bound: a read of the stalled store: %v, want it cut short by the mark", err)
		}
		if callerBound > 0 && !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("caller's bound %v: a read of the stalled store: %v", callerBound, err)
		}
		waitfor.Until(t, 10*time.Second, "the store marked stalled", func() bool {
			kv.mu.Lock()
			defer kv.mu.Unlock()
			return !kv.stalled.IsZero()
		})
		reached = 0
		err = call(kv, context.Background(), count)
		if !isOverloaded(err) || !strings.Contains(err.Error(), "has not answered") || reached != 0 {
			t.Fatalf("caller's bound %v: the read after one went unanswered: %v, reached the store %d times", callerBound, err, reached)
		}
		st.reads.Store(false)
		if !waitfor.Within(30*time.Second, func() bool { return call(kv, context.Background(), count) == nil }) {
			t.Fatalf("caller's bound %v: reads still refused after the store answers again", callerBound)
		}
	}

	// Without a Bound (one machine's bbolt): a read waits for the store
	// whatever the caller's deadline, and nothing is ever marked.
	kv, _ := stallingKV(t, 0)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Millisecond)
	defer cancel()
	err := call(kv, ctx, func(ctx context.Context) error {
		if _, ok := ctx.Deadline(); ok {
			return errors.New("the read has a deadline")
		}
		time.Sleep(30 * time.Millisecond) // past the caller's deadline
		return context.DeadlineExceeded
	})
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("without a bound: %v", err)
	}
	reached = 0
	if err := call(kv, context.Background(), count); err != nil || reached != 1 {
		t.Fatalf("without a bound, the read after a failed one: %v, reached the store %d times", err, reached)
	}
}
