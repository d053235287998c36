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
// stall rule, applied here only: it is refused at once while the store
// is marked stalled (stallRefusal), it waits for the store within the
// Bound and the caller's deadline, and one still unanswered after suspectAfter has the
// gateway read the store itself (check), which marks the store stalled
// if that read too goes unanswered for stallEvidence; the mark cuts short
// the reads then waiting and refuses the calls after them at once, rather
// than each waiting as long. No caller's deadline marks anything: the
// evidence is the gateway's own read, whose wait no tenant chooses
// (docs/cluster.md, "Failures"). kv.mu is held, and released while read
// runs.
func (kv *KV) readStore(ctx context.Context, ns []byte, read func(ctx context.Context) error) error {
	if err := kv.stallRefusal(); err != nil {
		return err
	}
	if kv.Bound <= 0 {
		kv.mu.Unlock()
		err := read(context.WithoutCancel(ctx))
		kv.mu.Lock()
		return err
	}
	marked := kv.marked
	kv.mu.Unlock()
	rctx, cancel := context.WithTimeout(ctx, kv.Bound)
	unmarked := context.AfterFunc(marked, cancel)
	space := string(ns)
	suspect := time.AfterFunc(suspectAfter, func() { kv.check(space) })
	err := read(rctx)
	suspect.Stop()
	unmarked()
	cancel()
	kv.mu.Lock()
	if err != nil && marked.Err() != nil && !kv.stalled.IsZero() {
		// Cut short by the mark: say so, as the calls after it will.
		return notAnswered(kv.stalled)
	}
	return err
}

// suspectAfter is how long a read waits unanswered before the gateway
// reads the store itself (check): a store that answers does so in a few
// milliseconds, and the check costs one read at a time.
const suspectAfter = 50 * time.Millisecond

// stallEvidence is how long the gateway's own read (check) must wait,
// unanswered, to mark the store stalled. It is the gateway's number, not
// a tenant's: before, a tenant's read cut short by its own deadline after
// 200 ms marked the store, so a tenant whose reads waited 200-250 ms (a
// handle bound of 400-500 ms) could keep every tenant's reads refused
// while the store answered within the 250 ms a default invocation's first
// read waits (the second red team's handler did so at 100 ms, with etcd
// answering in 130 ms). At 250 ms a store that answers that default read
// in time is never marked, and a paused etcd is marked within
// suspectAfter + stallEvidence of a read's start.
const stallEvidence = 250 * time.Millisecond

// check reads the store (ns's usage) as the gateway's own read, within
// stallEvidence (or the bound, if shorter), one at a time, and marks the
// store stalled if it goes unanswered as long: the reads waiting are cut
// short (marked), and the probe reads until the store answers.
func (kv *KV) check(ns string) {
	kv.mu.Lock()
	if kv.closed || kv.checking || !kv.stalled.IsZero() {
		kv.mu.Unlock()
		return
	}
	kv.checking = true
	kv.mu.Unlock()
	start := time.Now()
	ctx, cancel := context.WithTimeout(context.Background(), min(kv.Bound, stallEvidence))
	_, err := kv.storedUsage(ctx, []byte(ns))
	unanswered := err != nil && ctx.Err() == context.DeadlineExceeded
	cancel()
	kv.mu.Lock()
	kv.checking = false
	if !unanswered || kv.closed || !kv.stalled.IsZero() {
		kv.mu.Unlock()
		return
	}
	kv.stalled = start
	kv.mark()
	kv.mu.Unlock()
	kv.probe([]byte(ns))
}

// stallRefusal refuses a call that must read the store while it is
// marked stalled: this one would wait as long. A worker's batch holds
// several runs' writes, each applied in turn, and a handle's invocations
// run one at a time; were each to wait out its bound, the last would pass
// its run's bound (TIMEOUT, its isolate disposed) however short the stall
// (docs/cluster.md, "Failures"). kv.mu is held.
func (kv *KV) stallRefusal() error {
	if kv.stalled.IsZero() {
		return nil
	}
	return notAnswered(kv.stalled)
}

// notAnswered refuses a call because the store has not answered since
// then (the gateway's read went unanswered, or the commit under way
// began).
func notAnswered(since time.Time) error {
	return fault.New(fault.Overloaded, "The kv store has not answered for %v; retry shortly.", time.Since(since).Round(100*time.Millisecond))
}

// unmark clears the stall mark: the store answered. kv.mu is held.
func (kv *KV) unmark() {
	if kv.stalled.IsZero() {
		return
	}
	kv.stalled = time.Time{}
	kv.marked, kv.mark = context.WithCancel(context.Background())
}

// probe reads the store (ns's usage), each read within the bound, until
// it answers or the KV closes, then lets calls read it again.
func (kv *KV) probe(ns []byte) {
	for {
		ctx, cancel := context.WithTimeout(context.Background(), kv.Bound)
		_, err := kv.storedUsage(ctx, ns)
		cancel()
		kv.mu.Lock()
		if err == nil || kv.closed {
			kv.unmark()
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
