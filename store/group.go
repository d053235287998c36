package store

import (
	"errors"

	bolt "go.etcd.io/bbolt"
)

// The bbolt backend's group commit. bbolt writes one transaction at a
// time, and each costs two fdatasyncs whatever its size; the gateway's
// writers (a deploy's record and its tenant's claim, the request log's
// batches, kv's group commits, receipts) each committed their own. Under
// 200 tenants' load, with the request log committing beside them, eight
// new tenants' first deploys at once waited 15-40 ms each for the file
// before their claim and again before their record, one transaction after
// another (docs/decisions.md, "bbolt commits are written in groups").
//
// So a commit that arrives while another is being written waits for it,
// and then every commit that waited is written in one transaction, each
// applied in arrival order as if alone (its fences and conditions checked
// against what those before it wrote). A commit that arrives with none
// under way is written at once, alone: nothing waits for company. Each
// caller is answered once its group is on disk, so what was acknowledged
// is as durable as before; one that failed its fences or conditions wrote
// nothing and is answered so, the others are written. A write that fails
// half done (bbolt refused a key or a value) fails the group, which
// nothing of is written, and its commits are then written one by one.

// Bounds of one group: past them, the rest waits for the next.
const (
	groupWrites = 256
	groupBytes  = 32 << 20
)

// boltWrite is one commit waiting to be written; err is its answer once
// done is closed.
type boltWrite struct {
	txn  *Txn
	err  error
	done chan struct{}
	// inTx, when set (tests), is applied instead of txn.
	inTx func(*bolt.Tx) error
	// A journalled commit (journal.go), answered before it is written
	// here: its entry's number; void when its entry failed (only the
	// number is written); synced once its entry's fdatasync ended.
	journal, void, synced, reading bool
	seq                            uint64
}

// errHalfDone fails a group whose write failed half applied.
var errHalfDone = errors.New("store: a write of the group failed half applied")

// in applies the write in tx.
func (w *boltWrite) in(tx *bolt.Tx) error {
	if w.inTx != nil {
		return w.inTx(tx)
	}
	if w.journal {
		if w.void {
			return applyEntry(tx, nil, w.seq)
		}
		return applyEntry(tx, w.txn, w.seq)
	}
	return apply(tx, w.txn)
}

// size is the bytes the write puts, for groupBytes.
func (w *boltWrite) size() int {
	if w.txn == nil || w.void {
		return 0
	}
	_, n := w.txn.size()
	return n
}

// enqueue queues journalled writes (journal.go), in order, for the next
// group; nobody waits for them.
func (b *Bolt) enqueue(ws []*boltWrite) {
	b.pendingReads(ws, 1)
	b.gmu.Lock()
	b.waiting = append(b.waiting, ws...)
	b.jqueued += len(ws)
	lead := !b.busy
	b.busy = true
	b.gmu.Unlock()
	if lead {
		go b.lead()
	}
}

// settleJournal notes the journalled writes of a group written: in bbolt,
// or failed and kept to go first in the next group.
func (b *Bolt) settleJournal(group []*boltWrite) {
	var settled []*boltWrite
	b.gmu.Lock()
	for _, w := range group {
		if !w.journal {
			continue
		}
		b.jqueued--
		settled = append(settled, w)
		if w.err != nil {
			b.stuck = append(b.stuck, w)
		} else if w.seq > b.applied.Load() {
			b.applied.Store(w.seq)
		}
	}
	applied := b.applied.Load()
	b.gmu.Unlock()
	if len(settled) > 0 {
		b.jcond.Broadcast()
		// Reads wait no longer, written or not (a failed one is written
		// by a later group, or replayed at the next start).
		b.pendingReads(settled, -1)
		// Before the plain commits of the group are answered: the
		// journal's trailer names the last entry in bbolt (journal.go).
		b.j.markApplied(applied)
	}
}

// write queues w and answers once it is written: at once, by this
// goroutine, when nothing is being written; else in the next group.
func (b *Bolt) write(w *boltWrite) error {
	w.done = make(chan struct{})
	b.gmu.Lock()
	b.waiting = append(b.waiting, w)
	if b.busy {
		b.gmu.Unlock()
		<-w.done
		return w.err
	}
	b.busy = true
	b.gmu.Unlock()
	b.lead()
	<-w.done
	return w.err
}

// lead writes the writes waiting as one group, then hands the next group
// (those that came meanwhile) to a goroutine of its own, so that its
// caller is answered with its own group's.
func (b *Bolt) lead() {
	b.gmu.Lock()
	n, bytes := 0, 0
	for n < len(b.waiting) && n < groupWrites {
		bytes += b.waiting[n].size()
		if n > 0 && bytes > groupBytes {
			break
		}
		n++
	}
	// Journalled writes that failed go first, again (journal.go).
	group := append(b.stuck[:len(b.stuck):len(b.stuck)], b.waiting[:n]...)
	b.jqueued += len(b.stuck)
	b.stuck = nil
	b.waiting = b.waiting[n:]
	b.gmu.Unlock()
	// Deferred, so that a panic in bbolt (which a caller may recover)
	// leaves the file writable by the next commit.
	defer func() {
		b.gmu.Lock()
		if len(b.waiting) > 0 {
			go b.lead()
		} else {
			b.busy = false
			b.waiting = nil
		}
		b.gmu.Unlock()
	}()
	b.writeGroup(group)
}

// errPanicked answers the writes of a group whose transaction panicked.
var errPanicked = errors.New("store: the transaction panicked; nothing of it was written")

// writeGroup writes group in one transaction, or, when a write of it
// fails half done, one by one; and answers each.
func (b *Bolt) writeGroup(group []*boltWrite) {
	answered := 0 // the writes whose answer is final
	defer func() {
		for i, w := range group {
			if i >= answered {
				w.err = errPanicked // bbolt rolled its transaction back
			}
		}
		b.settleJournal(group)
		for _, w := range group {
			if !w.journal { // its caller was answered already
				close(w.done)
			}
		}
	}()
	if len(group) > 1 {
		err := b.update(func(tx *bolt.Tx) error {
			for _, w := range group {
				w.err = w.in(tx)
				if w.err != nil && !errors.Is(w.err, ErrFenced) && !errors.Is(w.err, ErrConflict) {
					return errHalfDone
				}
			}
			return nil
		})
		if err == nil {
			answered = len(group)
			return
		}
	}
	// A lone write, or a group of which nothing was written: one by one.
	// Once a journalled write fails, those behind it fail with it: none
	// may land before it (journal.go).
	var stop error
	for _, w := range group {
		if stop != nil {
			w.err = stop
		} else if w.err = b.update(w.in); w.err != nil && w.journal {
			stop = w.err
		}
		answered++
	}
}
