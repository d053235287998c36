package kv

import (
	"context"
	"time"

	"github.com/retainer-gw/retainer/fault"
)

// storeCtx is ctx within the bound of one store call. Without a bound
// (one machine's bbolt) the caller's deadline is not applied either: the
// call waits for the store, as it always did.
func (kv *KV) storeCtx(ctx context.Context) (context.Context, context.CancelFunc) {
	if kv.Bound <= 0 {
		return context.WithoutCancel(ctx), func() {}
	}
	return context.WithTimeout(ctx, kv.Bound)
}

// readStore runs read, a call that must reach the store for ns's space
// (a get, a listing, a write's check of what it replaces), under the
// stall rule, applied here only: it is refused at once while another's
// read went unanswered (stallRefusal), it waits for the store within the
// bound (storeCtx), and one left unanswered past its bound marks the
// store stalled (noteStall), so that the calls after it are refused at
// once rather than each waiting as long. kv.mu is held, and released
// while read runs.
func (kv *KV) readStore(ctx context.Context, ns []byte, read func(ctx context.Context) error) error {
	if err := kv.stallRefusal(); err != nil {
		return err
	}
	kv.mu.Unlock()
	rctx, cancel := kv.storeCtx(ctx)
	start := time.Now()
	err := read(rctx)
	// A read cut short by its caller's own deadline (a call made with
	// little of its invocation's bound left, or from a handle with a short
	// bound) says nothing of the store, and the mark refuses every
	// tenant's reads: only one the store left unanswered for
	// stallEvidence marks it.
	expired := rctx.Err() == context.DeadlineExceeded && time.Since(start) >= min(kv.Bound, stallEvidence)
	cancel()
	kv.mu.Lock()
	if err != nil && expired {
		kv.noteStall(ns)
	}
	return err
}

// stallEvidence is how long a read must have waited, unanswered, to mark
// the store stalled (readStore). A tenant chooses how long its own reads
// may wait (half what is left of its invocation's bound), so a mark from a
// read cut short at a wait shorter than the store's real answer time
// would refuse every tenant's reads, the store answering them in time (the
// second red team: etcd answering in 130 ms, a handler with a 240 ms bound
// reading in a loop kept a bystander's reads refused, 1,828 of 1,845). A
// read must wait 200 ms unanswered, a little under the 250 ms a default
// invocation's first read waits: a store that slow fails everyone's reads
// soon anyway; a paused etcd leaves every read so.
const stallEvidence = 200 * time.Millisecond

// stallRefusal refuses a call that must read the store while another's
// read of it went unanswered: this one would wait as long. A worker's
// batch holds several runs' writes, each applied in turn, and a handle's
// invocations run one at a time; were each to wait out its bound, the
// last would pass its run's bound (TIMEOUT, its isolate disposed) however
// short the stall (docs/cluster.md, "Failures"). kv.mu is held.
func (kv *KV) stallRefusal() error {
	if kv.stalled.IsZero() {
		return nil
	}
	return notAnswered(kv.stalled)
}

// notAnswered refuses a call because the store has not answered since
// then (a read went unanswered, or the commit under way began).
func notAnswered(since time.Time) error {
	return fault.New(fault.Overloaded, "The kv store has not answered for %v; retry shortly.", time.Since(since).Round(100*time.Millisecond))
}

// noteStall records that a read of ns's space went unanswered within its
// bound and starts the probe. kv.mu is held.
func (kv *KV) noteStall(ns []byte) {
	if kv.Bound > 0 && kv.stalled.IsZero() && !kv.closed {
		kv.stalled = time.Now()
		go kv.probe(ns)
	}
}

// probe reads the store (ns's usage), each read within the bound, until
// it answers or the KV closes, then lets writes read it again.
func (kv *KV) probe(ns []byte) {
	for {
		ctx, cancel := context.WithTimeout(context.Background(), kv.Bound)
		_, err := kv.storedUsage(ctx, ns)
		cancel()
		kv.mu.Lock()
		if err == nil || kv.closed {
			kv.stalled = time.Time{}
			kv.mu.Unlock()
			return
		}
		kv.mu.Unlock()
		time.Sleep(50 * time.Millisecond)
	}
}

// unanswered is the fault of a store call that failed: the store is
// unreachable or slow (a cluster's etcd), and a retry may find it back.
func (kv *KV) unanswered(err error) error {
	return fault.Wrap(fault.Overloaded, err, "The kv store did not answer in time; retry shortly.")
}

// overdue refuses a write while the commit under way has taken longer
// than the bound (the store stalled or unreachable): the write could not
// be made durable in time anyway. kv.mu is held.
func (kv *KV) overdue() error {
	if kv.Bound > 0 && !kv.commitStarted.IsZero() && time.Since(kv.commitStarted) > kv.Bound {
		return notAnswered(kv.commitStarted)
	}
	return nil
}
