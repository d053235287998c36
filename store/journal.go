package store

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"os"
	"path/filepath"
	"sync"

	bolt "go.etcd.io/bbolt"
)

// The bbolt backend's journal (docs/decisions.md, "A deploy's record is
// journalled"). A bbolt commit costs two fdatasyncs and waits for the one
// writer of the file, behind whatever the request log, receipts and usage
// are writing: under 200 tenants' load a deploy's 520-byte record waited
// up to 270 ms for the file and held it 1-400 ms more, 70% of a traced
// deploy's time. A commit whose ctx is Journalled is instead appended to
// a file of its own beside the store (the store's path + "-journal"), one
// fdatasync, answered, and written into bbolt after, in the order of the
// commits, by the group commit (group.go):
//
//   - it is durable once answered: a process killed after the answer
//     writes it into bbolt at its next OpenBolt (replay);
//   - the journal's writes are queued for bbolt before their callers are
//     answered, so whatever a caller commits next lands after them, and
//     a reader of their tables waits until they are in bbolt: reads see
//     every commit answered;
//   - bbolt holds the sequence number of the last entry written into it
//     (the meta bucket's journalKey), in the same transaction; replay
//     writes only the entries past it, so an entry already in bbolt, and
//     changed or deleted since, never comes back;
//   - an entry failed in bbolt (the disk) is tried again first, and every
//     commit behind it fails meanwhile, so none lands before it;
//   - once every entry is in bbolt the next one is written at the file's
//     start: the journal stays a few pages long. Entries carry consecutive
//     sequence numbers and a checksum, and replay reads from the start
//     while both hold, so a torn entry (a write the crash cut, never
//     answered) or an older one left past the newest ends it;
//   - a failed journal write or fdatasync ends the journal for the
//     process: what it may have put on disk is marked written in bbolt
//     (skipped by replay) before its caller falls back to a plain commit,
//     as every Journalled commit does from then on.
//
// Only a commit without conditions, of at most journalMax bytes, is
// journalled (a deploy's record under its tenant's fence); its fences are
// checked when it is appended, against the epochs claimed then.

const (
	journalSize = 1 << 20  // the file, written with zeros at creation
	journalMax  = 64 << 10 // the largest entry
	entryHead   = 4 + 4 + 4 + 8
	entryMagic  = 0x524a4e31 // "RJN1"
)

var journalKey = []byte("journal")

type journalledKey struct{}

// Journalled marks ctx's commits to a bbolt store as journalled (above):
// answered after one fdatasync of the journal rather than once in bbolt.
// Other backends commit as always.
func Journalled(ctx context.Context) context.Context {
	return context.WithValue(ctx, journalledKey{}, true)
}

func journalled(ctx context.Context) bool {
	v, _ := ctx.Value(journalledKey{}).(bool)
	return v
}

// journal is the open file. mu orders the appends (off, next,
// unsynced, broken); syncMu the fdatasyncs, each of which queues for
// bbolt every write appended before it, in order.
type journal struct {
	f        *os.File
	mu       sync.Mutex
	off      int64
	next     uint64 // the next entry's sequence number
	unsynced []*boltWrite
	broken   bool
	syncMu   sync.Mutex
}

// errJournalOff answers an append the journal cannot take (ended, full,
// or too large an entry): the caller commits plainly.
var errJournalOff = errors.New("store: not journalled")

// openJournal opens (or creates) the journal beside path and writes into
// db the entries past the last db holds; answers the journal, ready to
// append after them.
func openJournal(path string, db *bolt.DB) (*journal, uint64, error) {
	f, err := os.OpenFile(path+"-journal", os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		return nil, 0, err
	}
	j := &journal{f: f}
	fail := func(err error) (*journal, uint64, error) {
		f.Close()
		return nil, 0, fmt.Errorf("the store's journal %s: %w", f.Name(), err)
	}
	st, err := f.Stat()
	if err != nil {
		return fail(err)
	}
	if st.Size() < journalSize {
		// Written, not only allocated: an fdatasync of an entry then
		// writes its pages and no metadata of the file.
		if _, err := f.WriteAt(make([]byte, journalSize-st.Size()), st.Size()); err != nil {
			return fail(err)
		}
		if err := f.Sync(); err != nil {
			return fail(err)
		}
		if d, err := os.Open(filepath.Dir(path)); err == nil {
			d.Sync()
			d.Close()
		}
	}
	buf := make([]byte, journalSize)
	if _, err := io.ReadFull(io.NewSectionReader(f, 0, journalSize), buf); err != nil {
		return fail(err)
	}
	entries := readEntries(buf)
	var last uint64
	err = db.Update(func(tx *bolt.Tx) error {
		if v := tx.Bucket(bucketMeta).Get(journalKey); len(v) == 8 {
			last = binary.BigEndian.Uint64(v)
		}
		for _, e := range entries {
			if e.seq > last {
				if err := applyEntry(tx, &e.txn, e.seq); err != nil {
					return err
				}
				last = e.seq
			}
		}
		return nil
	})
	if err != nil {
		return fail(err)
	}
	if n := len(entries); n > 0 {
		last = max(last, entries[n-1].seq)
	}
	j.next = last + 1
	return j, last, nil
}

type entry struct {
	seq uint64
	txn Txn
}

// readEntries reads the chain at the start of buf: entries whose
// checksums hold and whose sequence numbers follow each other.
func readEntries(buf []byte) []entry {
	var out []entry
	for off := 0; off+entryHead <= len(buf); {
		h := buf[off:]
		if binary.BigEndian.Uint32(h) != entryMagic {
			break
		}
		n := int(binary.BigEndian.Uint32(h[4:]))
		if n > journalMax || off+entryHead+n > len(buf) {
			break
		}
		body := h[12 : entryHead+n]
		if crc32.Checksum(body, crcTable) != binary.BigEndian.Uint32(h[8:]) {
			break
		}
		seq := binary.BigEndian.Uint64(body)
		if len(out) > 0 && seq != out[len(out)-1].seq+1 {
			break
		}
		txn, ok := decodeTxn(body[8:])
		if !ok {
			break
		}
		out = append(out, entry{seq, txn})
		off += entryHead + n
	}
	return out
}

var crcTable = crc32.MakeTable(crc32.Castagnoli)

// encodeEntry is the entry's bytes: magic, length, checksum, sequence
// number, then the fences and ops.
func encodeEntry(seq uint64, txn *Txn) []byte {
	b := make([]byte, entryHead, entryHead+64)
	b = binary.AppendUvarint(b, uint64(len(txn.Fences)))
	for _, f := range txn.Fences {
		b = appendBytes(b, []byte(f.Space))
		b = binary.BigEndian.AppendUint64(b, f.Epoch)
	}
	b = binary.AppendUvarint(b, uint64(len(txn.Then)))
	for _, o := range txn.Then {
		del := byte(0)
		if o.Delete {
			del = 1
		}
		b = append(b, del)
		b = appendBytes(b, []byte(o.Table))
		b = appendBytes(b, o.Key)
		b = appendBytes(b, o.Value)
	}
	binary.BigEndian.PutUint32(b, entryMagic)
	binary.BigEndian.PutUint32(b[4:], uint32(len(b)-entryHead))
	binary.BigEndian.PutUint64(b[12:], seq)
	binary.BigEndian.PutUint32(b[8:], crc32.Checksum(b[12:], crcTable))
	return b
}

func appendBytes(b, v []byte) []byte {
	return append(binary.AppendUvarint(b, uint64(len(v))), v...)
}

// decodeTxn reads encodeEntry's fences and ops.
func decodeTxn(b []byte) (Txn, bool) {
	var txn Txn
	bad := false
	uv := func() uint64 {
		v, n := binary.Uvarint(b)
		if n <= 0 {
			bad = true
			return 0
		}
		b = b[n:]
		return v
	}
	bytesOf := func() []byte {
		n := uv()
		if bad || n > uint64(len(b)) {
			bad = true
			return nil
		}
		v := append([]byte{}, b[:n]...)
		b = b[n:]
		return v
	}
	nf := uv()
	for i := uint64(0); i < nf && !bad; i++ {
		space := bytesOf()
		if bad || len(b) < 8 {
			return txn, false
		}
		txn.Fences = append(txn.Fences, Fence{Space: string(space), Epoch: binary.BigEndian.Uint64(b)})
		b = b[8:]
	}
	no := uv()
	for i := uint64(0); i < no && !bad; i++ {
		if len(b) < 1 {
			return txn, false
		}
		del := b[0] == 1
		b = b[1:]
		table, key, value := bytesOf(), bytesOf(), bytesOf()
		o := Op{Table: string(table), Key: key, Value: value, Delete: del}
		if !del && o.Value == nil {
			o.Value = []byte{}
		}
		txn.Then = append(txn.Then, o)
	}
	return txn, !bad && len(b) == 0
}

// applyEntry writes a journalled commit (nil txn: none, only its number)
// in tx: its fences were checked when it was appended, so they are not
// checked again; their epochs are raised to theirs (a claim not yet on
// disk when the process died). The meta bucket keeps seq.
func applyEntry(tx *bolt.Tx, txn *Txn, seq uint64) error {
	if txn != nil {
		owners := tx.Bucket(bucketOwners)
		for _, f := range txn.Fences {
			if epochOf(tx, f.Space) < f.Epoch {
				if err := owners.Put([]byte(f.Space), binary.BigEndian.AppendUint64(nil, f.Epoch)); err != nil {
					return err
				}
			}
		}
		if err := apply(tx, &Txn{Then: txn.Then}); err != nil {
			return err
		}
	}
	return tx.Bucket(bucketMeta).Put(journalKey, binary.BigEndian.AppendUint64(nil, seq))
}

// journalFits answers whether txn may be journalled: no conditions, keys
// and values bbolt takes, at most journalMax bytes.
func journalFits(txn *Txn) bool {
	if len(txn.If) > 0 || len(txn.Then) == 0 {
		return false
	}
	n := 0
	for _, o := range txn.Then {
		if len(o.Key) == 0 || len(o.Key) > bolt.MaxKeySize || o.Table == "" {
			return false
		}
		n += 16 + len(o.Table) + len(o.Key) + len(o.Value)
	}
	for _, f := range txn.Fences {
		n += 16 + len(f.Space)
	}
	return n+entryHead <= journalMax
}

// commitJournalled appends txn to the journal and answers once it is on
// disk and queued for bbolt; errJournalOff when the journal cannot take
// it (the caller commits plainly).
func (b *Bolt) commitJournalled(txn *Txn) error {
	j := b.j
	if err := b.fencesHold(txn.Fences); err != nil {
		return err
	}
	w := &boltWrite{journal: true}
	j.mu.Lock()
	if j.broken {
		j.mu.Unlock()
		return errJournalOff
	}
	if b.applied.Load() == j.next-1 && len(j.unsynced) == 0 {
		j.off = 0 // every entry is in bbolt
	}
	w.seq = j.next
	e := encodeEntry(w.seq, txn)
	if j.off+int64(len(e)) > journalSize {
		j.mu.Unlock()
		return errJournalOff
	}
	// What bbolt is given is what the journal holds, and none of the
	// caller's slices.
	t, _ := decodeTxn(e[entryHead:])
	w.txn = &t
	if _, err := j.f.WriteAt(e, j.off); err != nil {
		// It may be on disk: it is written into bbolt as nothing.
		w.void, j.broken = true, true
	}
	j.off += int64(len(e))
	j.next++
	j.unsynced = append(j.unsynced, w)
	j.mu.Unlock()
	b.syncJournal(w)
	if w.void {
		return errJournalOff
	}
	return nil
}

// syncJournal returns once w is on disk (or failed: void) and queued for
// bbolt: the first caller to find it unsynced syncs every entry appended
// so far and queues them, in order.
func (b *Bolt) syncJournal(w *boltWrite) {
	j := b.j
	j.syncMu.Lock()
	defer j.syncMu.Unlock()
	if w.synced {
		return
	}
	j.mu.Lock()
	batch := j.unsynced
	j.unsynced = nil
	j.mu.Unlock()
	if err := fdatasync(j.f); err != nil {
		// Each may be on disk: written into bbolt as nothing, and the
		// journal ends.
		j.mu.Lock()
		j.broken = true
		j.mu.Unlock()
		for _, x := range batch {
			x.void = true
		}
	}
	for _, x := range batch {
		x.synced = true
	}
	b.enqueue(batch)
}

// fencesHold checks fences against the epochs claimed now.
func (b *Bolt) fencesHold(fences []Fence) error {
	for _, f := range fences {
		b.cmu.Lock()
		epoch, ok := b.claimed[f.Space]
		b.cmu.Unlock()
		if !ok {
			if err := b.db.View(func(tx *bolt.Tx) error {
				epoch = epochOf(tx, f.Space)
				return nil
			}); err != nil {
				return err
			}
		}
		if f.Epoch == 0 || epoch != f.Epoch {
			return ErrFenced
		}
	}
	return nil
}

// pendingReads counts (d 1) or no longer counts (d -1) the journalled
// writes ws, per table, that reads wait for (awaitJournal).
func (b *Bolt) pendingReads(ws []*boltWrite, d int) {
	b.pmu.Lock()
	for _, w := range ws {
		if w.void || w.txn == nil || w.reading == (d > 0) {
			continue
		}
		w.reading = d > 0
		for _, o := range w.txn.Then {
			if b.pend[o.Table] += d; b.pend[o.Table] <= 0 {
				delete(b.pend, o.Table)
			}
		}
	}
	b.pendN.Store(int64(len(b.pend)))
	b.pmu.Unlock()
	if d < 0 {
		b.pcond.Broadcast()
	}
}

// awaitJournal returns once no journalled write of table answered to its
// caller is still to be written into bbolt.
func (b *Bolt) awaitJournal(table string) {
	if b.pendN.Load() == 0 {
		return
	}
	b.pmu.Lock()
	for b.pend[table] > 0 {
		b.pcond.Wait()
	}
	b.pmu.Unlock()
}

// drainJournal returns once every journalled write queued has been tried
// in bbolt (Close); one that failed stays in the journal, replayed at the
// next start.
func (b *Bolt) drainJournal() {
	b.gmu.Lock()
	for b.jqueued > 0 {
		b.jcond.Wait()
	}
	b.gmu.Unlock()
}
