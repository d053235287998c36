package kv

import (
	"context"
	"encoding/binary"
	"fmt"
	"time"

	"github.com/retainer-gw/retainer/fault"
	"github.com/retainer-gw/retainer/store"
)

// commitLoop commits the pending writes, one transaction per batch,
// starting the next batch as soon as one ends.
func (kv *KV) commitLoop() {
	defer close(kv.done)
	for range kv.wake {
		for kv.commitOnce() {
		}
	}
	for kv.commitOnce() { // Close: what is still pending
	}
}

// commitOnce commits what is pending now; false when nothing was.
func (kv *KV) commitOnce() bool {
	kv.mu.Lock()
	if len(kv.pending) == 0 {
		kv.mu.Unlock()
		return false
	}
	batch := make(map[string]pendingWrite, len(kv.pending))
	for k, p := range kv.pending {
		batch[k] = p
	}
	// Only the usage of the spaces this batch wrote is written: kv.usage
	// holds every space touched since the gateway started.
	usage := make(map[string]spaceUsage, len(kv.touched))
	for ns, fenceSpace := range kv.touched {
		if u, ok := kv.usage[ns]; ok {
			usage[ns] = spaceUsage{bytes: u, space: fenceSpace}
		}
	}
	kv.touched = map[string]string{}
	upTo, from := kv.seq, kv.committed+1
	kv.commitStarted = time.Now()
	kv.mu.Unlock()

	err := kv.commit(batch, usage)

	kv.mu.Lock()
	defer kv.mu.Unlock()
	for k, p := range batch {
		if cur, ok := kv.pending[k]; ok && cur.seq == p.seq {
			delete(kv.pending, k) // not overwritten meanwhile
		}
	}
	if f := kv.OnCommitFailed; err != nil && f != nil {
		// The workers' caches drop what they hold before anyone waiting
		// for these writes learns they failed, and before they count as
		// ended: a value that was never committed is not served after
		// its write failed (a run that read it meanwhile still waits
		// for it, and fails with it). The gateway's reads no longer see
		// the lost writes (deleted above).
		kv.mu.Unlock()
		f()
		kv.mu.Lock()
	}
	kv.commitStarted = time.Time{}
	kv.commits++
	if err == nil {
		kv.unmark() // the store answers again
	}
	if err != nil {
		// The writes are lost: reads no longer see them, usage is read
		// again from the file, and whoever waits for them fails.
		kv.usage = map[string]int64{}
		kv.failed = append(kv.failed, failedBatch{from: from, to: upTo,
			err: fault.New(fault.Overloaded, "A write could not be saved (%v); nothing that depended on it was sent.", err)})
		if len(kv.failed) > 64 { // waiters read a failure at once; old ones go
			kv.failed = kv.failed[len(kv.failed)-64:]
		}
	}
	kv.committed = upTo
	for ns, s := range kv.spaces {
		if s <= upTo {
			delete(kv.spaces, ns)
		}
	}
	kv.endWaits()
	return true
}

// spaceUsage is a space's bytes in use and the store space it is in.
type spaceUsage struct {
	bytes int64
	space string
}

// commit writes one batch: one transaction under the fences of the spaces
// it writes, or as few as the store's limits allow (store.CommitSpaces);
// a failure in any fails the batch. A panic (a closed file) is an error
// like any other, so that no waiter is left waiting.
func (kv *KV) commit(batch map[string]pendingWrite, usage map[string]spaceUsage) (err error) {
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("commit failed: %v", r)
		}
	}()
	if kv.beforeCommit != nil {
		if err := kv.beforeCommit(); err != nil {
			return err
		}
	}
	bySpace := map[string][]store.Op{}
	for k, p := range batch {
		if p.value != nil {
			bySpace[p.space] = append(bySpace[p.space], store.Put(tableKV, []byte(k), []byte(*p.value)))
		} else {
			bySpace[p.space] = append(bySpace[p.space], store.Delete(tableKV, []byte(k)))
		}
	}
	for ns, u := range usage {
		bySpace[u.space] = append(bySpace[u.space], store.Put(tableUsage, []byte(ns), binary.BigEndian.AppendUint64(nil, uint64(u.bytes))))
	}
	return kv.w.CommitSpaces(context.Background(), bySpace)
}
