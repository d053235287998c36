package kv

import (
	"context"

	"github.com/retainer-gw/retainer/fault"
)

// Barrier waits until every write owner made so far is durable; it fails
// when a commit that held one of them failed, or when ctx ends or the
// Bound passes first.
func (kv *KV) Barrier(ctx context.Context, owner string) error {
	kv.mu.Lock()
	seq := kv.owners[owner]
	kv.mu.Unlock()
	if seq == 0 {
		return nil
	}
	if kv.Bound > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, kv.Bound)
		defer cancel()
	}
	err := kv.waitFor(ctx, seq)
	kv.mu.Lock()
	if kv.owners[owner] == seq && kv.committed >= seq {
		delete(kv.owners, owner)
	}
	kv.mu.Unlock()
	return err
}

// gateWaiter is one wait for write seq's commit: done is closed once it
// ended (kv.mu).
type gateWaiter struct {
	seq  uint64
	done chan struct{}
}

// waitFor waits until write seq is committed or its commit failed.
func (kv *KV) waitFor(ctx context.Context, seq uint64) error {
	if seq == 0 {
		return nil
	}
	kv.mu.Lock()
	if kv.committed >= seq {
		err := kv.failure(seq)
		kv.mu.Unlock()
		return err
	}
	w := &gateWaiter{seq: seq, done: make(chan struct{})}
	kv.waiters = append(kv.waiters, w)
	kv.mu.Unlock()
	select {
	case <-w.done:
	case <-ctx.Done():
	}
	kv.mu.Lock()
	defer kv.mu.Unlock()
	if kv.committed < seq {
		for i, o := range kv.waiters {
			if o == w {
				kv.waiters = append(kv.waiters[:i], kv.waiters[i+1:]...)
				break
			}
		}
		return fault.New(fault.Overloaded, "The write was not saved in time; nothing that depends on it was sent.")
	}
	return kv.failure(seq)
}

// endWaits ends the waits for writes up to kv.committed. kv.mu is held.
func (kv *KV) endWaits() {
	kept := kv.waiters[:0]
	for _, w := range kv.waiters {
		if w.seq <= kv.committed {
			close(w.done)
		} else {
			kept = append(kept, w)
		}
	}
	for i := len(kept); i < len(kv.waiters); i++ {
		kv.waiters[i] = nil
	}
	kv.waiters = kept
}

// failure is the error of the failed commit that held seq, if any. kv.mu
// is held.
func (kv *KV) failure(seq uint64) error {
	for _, f := range kv.failed {
		if seq >= f.from && seq <= f.to {
			return f.err
		}
	}
	return nil
}
