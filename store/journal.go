package store

import (
	"context"
	"crypto/rand"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
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
//   - the journal is its bbolt file's: each OpenBolt names a random run
//     in the meta bucket, entries carry theirs, and replay takes only
//     the run bbolt names, and only a chain that continues bbolt's last
//     entry; after a replay and after a clean Close the journal is
//     zeroed. A reset file or a restored copy takes none of a stale
//     journal's entries; nor does a copy taken while the store ran,
//     restored after a crash of that same run: the journal's trailer
//     names the last entry bbolt held before any plain commit written
//     after it was answered (markApplied), and a file holding fewer is
//     older than its journal;
//   - each entry carries the last entry synced when it was appended: a
//     damaged entry with a valid one after it naming it synced was
//     answered, and OpenBolt refuses the store (ErrJournalDamaged)
//     rather than lose it and those after it silently;
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
	journalMax  = 64 << 10 // the largest entry's fences and ops
	runLen      = 16
	// magic, length, checksum, then (checksummed) number, run, synced
	entryHead  = 4 + 4 + 4 + 8 + runLen + 8
	entryMagic = 0x524a4e32 // "RJN2"
	// The file's last bytes: magic, checksum, then run and the last
	// entry bbolt holds (markApplied).
	trailerLen   = 4 + 4 + runLen + 8
	trailerMagic = 0x524a5457 // "RJTW"
	entriesEnd   = journalSize - trailerLen
)

var (
	journalKey = []byte("journal")     // the number of the last entry in bbolt
	runKey     = []byte("journal-run") // the run whose entries bbolt takes
)

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

// journal is the open file. mu orders the appends (off, high, next,
// synced, unsynced, broken); syncMu the fdatasyncs, each of which queues
// for bbolt every write appended before it, in order; tmu the trailer's
// writes (marked, trailed).
type journal struct {
	f        *os.File
	run      [runLen]byte // this start's, carried by its entries
	mu       sync.Mutex
	off      int64
	high     int64  // the end of the furthest entry written
	next     uint64 // the next entry's sequence number
	synced   uint64 // the last entry whose fdatasync ended
	unsynced []*boltWrite
	broken   bool
	syncMu   sync.Mutex
	tmu      sync.Mutex
	marked   uint64 // the number the trailer holds
	trailed  bool   // the trailer holds bytes
}

// errJournalOff answers an append the journal cannot take (ended, full,
// or too large an entry): the caller commits plainly.
var errJournalOff = errors.New("store: not journalled")

// Replay is what OpenBolt found in the journal, for its caller to log.
type Replay struct {
	// Entries were written into bbolt, numbers From to To.
	Entries  int
	From, To uint64
	// Notes says what was found and not replayed, and why.
	Notes []string
}

// openJournal opens (or creates) the journal beside path, writes into db
// the entries past the last db holds, of the run db names, names a new
// run in db and clears the journal; answers it, ready to append.
func openJournal(path string, db *bolt.DB) (*journal, uint64, Replay, error) {
	var rep Replay
	f, err := os.OpenFile(path+"-journal", os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		return nil, 0, rep, err
	}
	j := &journal{f: f}
	fail := func(err error) (*journal, uint64, Replay, error) {
		f.Close()
		return nil, 0, rep, fmt.Errorf("the store's journal %s: %w", f.Name(), err)
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
	if _, err := rand.Read(j.run[:]); err != nil {
		return fail(err)
	}
	var last uint64
	err = db.Update(func(tx *bolt.Tx) error {
		meta := tx.Bucket(bucketMeta)
		var run [runLen]byte
		last, run = journalMark(meta)
		apply, notes, err := planReplay(buf, run, last)
		if err != nil {
			return err
		}
		rep.Notes = notes
		for _, e := range apply {
			if e.seq <= last {
				continue // in bbolt already
			}
			if err := applyEntry(tx, &e.txn, e.seq); err != nil {
				return err
			}
			if rep.Entries++; rep.From == 0 {
				rep.From = e.seq
			}
			rep.To, last = e.seq, e.seq
		}
		// What this start appends is of a run of its own: no entry
		// written before it is replayed after it.
		return meta.Put(runKey, j.run[:])
	})
	if err != nil {
		return fail(err)
	}
	// Every entry is in bbolt, or of no run bbolt takes: the journal is
	// cleared, so that a copy of the store and its journal holds none.
	for n := entriesEnd - 1; n >= 0; n-- {
		if buf[n] != 0 {
			j.high = int64(n) + 1
			break
		}
	}
	j.trailed = slices.ContainsFunc(buf[entriesEnd:], func(c byte) bool { return c != 0 })
	if err := j.clear(); err != nil {
		return fail(err)
	}
	j.next = last + 1
	return j, last, rep, nil
}

// journalMark is what bbolt's meta says of the journal: the number of
// the last entry it holds and the run that wrote it, planReplay's
// arguments (openJournal and checkJournal read them alike).
func journalMark(meta *bolt.Bucket) (last uint64, run [runLen]byte) {
	if v := meta.Get(journalKey); len(v) == 8 {
		last = binary.BigEndian.Uint64(v)
	}
	copy(run[:], meta.Get(runKey))
	return last, run
}

// checkJournal is CheckBolt's part: the error openJournal would answer,
// read from the journal beside path for db, changing nothing.
func checkJournal(path string, db *bolt.DB) error {
	buf, err := os.ReadFile(path + "-journal")
	if err != nil || !slices.ContainsFunc(buf, func(c byte) bool { return c != 0 }) {
		return nil
	}
	var last uint64
	var run [runLen]byte
	db.View(func(tx *bolt.Tx) error {
		if meta := tx.Bucket(bucketMeta); meta != nil {
			last, run = journalMark(meta)
		}
		return nil
	})
	if _, _, err := planReplay(buf[:min(len(buf), journalSize)], run, last); err != nil {
		return fmt.Errorf("the store's journal %s: %w", path+"-journal", err)
	}
	return nil
}

// clear zeroes what the journal's entries and its trailer were written
// over.
func (j *journal) clear() error {
	j.tmu.Lock()
	defer j.tmu.Unlock()
	if j.high == 0 && !j.trailed {
		return nil
	}
	if _, err := j.f.WriteAt(make([]byte, min(j.high, entriesEnd)), 0); err != nil {
		return err
	}
	if _, err := j.f.WriteAt(make([]byte, trailerLen), entriesEnd); err != nil {
		return err
	}
	j.high, j.trailed = 0, false
	return fdatasync(j.f)
}

// markApplied writes seq, the last entry bbolt holds, into the journal's
// trailer, once bbolt has it on disk and before the plain commits
// written with it are answered (settleJournal). bbolt's file of this run
// then holds at least that entry, whatever the crash: one that holds
// fewer is older than its journal, a copy taken while the gateway ran and
// restored, and planReplay replays none of it (its entries would bring
// back records that commits after the copy deleted). The write is not
// synced: a kill -9 keeps it, a power cut may lose it (and with it only
// the telling, docs/decisions.md).
func (j *journal) markApplied(seq uint64) {
	j.tmu.Lock()
	defer j.tmu.Unlock()
	if seq <= j.marked {
		return
	}
	if _, err := j.f.WriteAt(encodeTrailer(j.run, seq), entriesEnd); err == nil {
		j.marked, j.trailed = seq, true
	}
}

// encodeTrailer is the trailer's bytes: magic, checksum, run, seq.
func encodeTrailer(run [runLen]byte, seq uint64) []byte {
	t := make([]byte, trailerLen)
	binary.BigEndian.PutUint32(t, trailerMagic)
	copy(t[8:], run[:])
	binary.BigEndian.PutUint64(t[8+runLen:], seq)
	binary.BigEndian.PutUint32(t[4:], crc32.Checksum(t[8:], crcTable))
	return t
}

// trailerOf reads the trailer markApplied wrote: its run and number.
func trailerOf(t []byte) (run [runLen]byte, seq uint64, ok bool) {
	if len(t) != trailerLen || binary.BigEndian.Uint32(t) != trailerMagic || crc32.Checksum(t[8:], crcTable) != binary.BigEndian.Uint32(t[4:]) {
		return run, 0, false
	}
	copy(run[:], t[8:])
	return run, binary.BigEndian.Uint64(t[8+runLen:]), true
}

type entry struct {
	seq    uint64
	run    [runLen]byte
	synced uint64 // the last entry synced when it was appended
	txn    Txn
}

// planReplay reads the journal's bytes for a bbolt file written by run
// through entry last: the chain at the start, entries of run whose
// checksums hold and whose numbers follow each other, is replayed when
// it continues bbolt (its first entry at most last+1). Past a damaged
// entry bbolt already holds it resumes at entry last+1. A damaged entry
// answered (one appended after it names it synced) ends the chain before
// entries answered after it: that is an error, not a torn tail. A bbolt
// file that holds fewer entries than the journal's trailer says it held
// (markApplied) is a copy restored, and takes nothing.
func planReplay(buf []byte, run [runLen]byte, last uint64) ([]entry, []string, error) {
	var notes []string
	if len(buf) >= journalSize {
		// (A journal of a build before the trailer has none, and its
		// entries may end past entriesEnd.)
		if trun, seq, ok := trailerOf(buf[entriesEnd:journalSize]); ok {
			if trun == run && seq > last {
				return nil, []string{fmt.Sprintf("the store ends at entry %d, but the journal saw entries through %d written into it: "+
					"the file is older than its journal (a copy taken while the gateway ran, restored?), so the journal is not replayed", last, seq)}, nil
			}
			buf = buf[:entriesEnd]
		}
	}
	chain, off := follow(buf, 0, run, 0)
	if len(chain) == 0 {
		if e, _, ok := parseEntry(buf); ok && e.run != run {
			notes = append(notes, "the journal's entries are of another store file, or of another start of it than the one that last wrote it (the file was reset or restored): not replayed")
		}
	}
	// An entry the store already holds may be damaged (the disk) without
	// loss: the chain resumes at the entry that continues the store, when
	// one of this run is whole further on. Only that number is looked
	// for: an entry is written once a run, so it is the one appended.
	if len(chain) == 0 || chain[len(chain)-1].seq < last {
		wholeAfter(buf, off+1, func(o int, e entry) bool {
			if e.run != run || e.seq != last+1 {
				return true
			}
			notes = append(notes, fmt.Sprintf("the journal's entries the store holds (through %d) are damaged at byte %d: skipped, the replay resumes at entry %d", last, off, last+1))
			var more []entry
			more, off = follow(buf, o, run, last+1)
			chain = append(chain, more...)
			return false
		})
	}
	if len(chain) > 0 && chain[0].seq > last+1 {
		return nil, append(notes, fmt.Sprintf("the journal's entries %d-%d do not continue the store, which ends at entry %d (a copy of it restored?): not replayed",
			chain[0].seq, chain[len(chain)-1].seq, last)), nil
	}
	top := last
	if len(chain) > 0 {
		top = max(top, chain[len(chain)-1].seq)
	}
	// Entries answered after the chain's end, lost with it? And the whole
	// ones appended after it, never answered, dropped with it.
	lost := uint64(0)
	var whole []uint64
	wholeAfter(buf, off, func(_ int, e entry) bool {
		if e.run == run && e.synced > top {
			lost = max(lost, e.synced)
		}
		if e.run == run && e.seq > top && !slices.Contains(whole, e.seq) {
			whole = append(whole, e.seq)
		}
		return true
	})
	if lost > 0 {
		return nil, nil, fmt.Errorf("%w: entry %d is damaged and entries answered after it follow (through %d at least); "+
			"the store is not opened, so as not to lose them silently. Starting without the journal "+
			"(move it aside) loses the deploys answered from entry %d on", ErrJournalDamaged, top+1, lost, top+1)
	}
	torn := false
	if off+entryHead <= len(buf) && binary.BigEndian.Uint32(buf[off:]) == entryMagic {
		_, _, ok := parseEntry(buf[off:])
		torn = !ok
	}
	if torn || len(whole) > 0 {
		notes = append(notes, droppedNote(top, whole))
	}
	return chain, notes, nil
}

// droppedNote says which entries past the chain's end (top) are dropped:
// every number from top+1 to the last whole one found (each was appended,
// none answered), the whole ones among them and the others, torn or
// never on disk (the crash cut their writes).
func droppedNote(top uint64, whole []uint64) string {
	slices.Sort(whole)
	to := top + 1
	if len(whole) > 0 {
		to = max(to, whole[len(whole)-1])
	}
	var cut []uint64
	for n := top + 1; n <= to; n++ {
		if !slices.Contains(whole, n) {
			cut = append(cut, n)
		}
	}
	s := fmt.Sprintf("the journal's entry %d, appended last and never answered, is dropped", to)
	if to > top+1 {
		s = fmt.Sprintf("the journal's entries %s after %d (%d of them), appended last and never answered, are dropped", span(top+1, to), top, to-top)
	}
	if len(cut) > 0 {
		s += fmt.Sprintf(": torn or not on disk (writes the crash cut) %s", spans(cut))
	}
	if len(whole) > 0 {
		sep := ": "
		if len(cut) > 0 {
			sep = "; "
		}
		s += fmt.Sprintf("%swhole, appended while an entry before them was not yet synced, %s", sep, spans(whole))
	}
	return s
}

// spans writes sorted numbers as "3", "3-5" or "3-5, 8".
func spans(nums []uint64) string {
	var parts []string
	for i := 0; i < len(nums); {
		j := i
		for j+1 < len(nums) && nums[j+1] == nums[j]+1 {
			j++
		}
		parts = append(parts, span(nums[i], nums[j]))
		i = j + 1
	}
	return strings.Join(parts, ", ")
}

func span(from, to uint64) string {
	if from == to {
		return fmt.Sprint(from)
	}
	return fmt.Sprintf("%d-%d", from, to)
}

// follow reads the chain at buf[off:]: whole entries of run, numbered one
// after another from want (from the first's number when want is 0);
// answers them and the offset past them.
func follow(buf []byte, off int, run [runLen]byte, want uint64) ([]entry, int) {
	var chain []entry
	for {
		e, n, ok := parseEntry(buf[off:])
		if !ok || e.run != run || want != 0 && e.seq != want {
			return chain, off
		}
		chain = append(chain, e)
		off += n
		want = e.seq + 1
	}
}

// wholeAfter calls fn with each whole entry found from buf[from:] on, at
// any byte (past damage, entries are not where a chain would put them),
// while fn answers true.
func wholeAfter(buf []byte, from int, fn func(off int, e entry) bool) {
	for o := from; o+entryHead <= len(buf); o++ {
		if binary.BigEndian.Uint32(buf[o:]) != entryMagic {
			continue
		}
		if e, _, ok := parseEntry(buf[o:]); ok && !fn(o, e) {
			return
		}
	}
}

// ErrJournalDamaged refuses to open a store whose journal lost entries
// answered to their callers (planReplay).
var ErrJournalDamaged = errors.New("the journal is damaged")

// parseEntry reads the entry at b's start: ok when its magic and checksum
// hold and its ops decode; n is its length.
func parseEntry(b []byte) (e entry, n int, ok bool) {
	if len(b) < entryHead || binary.BigEndian.Uint32(b) != entryMagic {
		return e, 0, false
	}
	l := int(binary.BigEndian.Uint32(b[4:]))
	if l > journalMax || entryHead+l > len(b) {
		return e, 0, false
	}
	body := b[12 : entryHead+l]
	if crc32.Checksum(body, crcTable) != binary.BigEndian.Uint32(b[8:]) {
		return e, 0, false
	}
	e.seq = binary.BigEndian.Uint64(body)
	copy(e.run[:], body[8:])
	e.synced = binary.BigEndian.Uint64(body[8+runLen:])
	if e.txn, ok = decodeTxn(body[16+runLen:]); !ok {
		return entry{}, 0, false
	}
	return e, entryHead + l, true
}

var crcTable = crc32.MakeTable(crc32.Castagnoli)

// encodeEntry is the entry's bytes: magic, length, checksum, sequence
// number, run, the last entry synced, then the fences and ops.
func encodeEntry(seq uint64, run [runLen]byte, synced uint64, txn *Txn) []byte {
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
	copy(b[20:], run[:])
	binary.BigEndian.PutUint64(b[20+runLen:], synced)
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
	e := encodeEntry(w.seq, j.run, j.synced, txn)
	if j.off+int64(len(e)) > entriesEnd {
		j.mu.Unlock()
		return errJournalOff
	}
	// What bbolt is given is what the journal holds, and none of the
	// caller's slices.
	t, _ := decodeTxn(e[entryHead:])
	j.high = max(j.high, j.off+int64(len(e)))
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
	j.mu.Lock()
	if n := len(batch); n > 0 && !batch[n-1].void {
		j.synced = max(j.synced, batch[n-1].seq)
	}
	j.mu.Unlock()
	for _, x := range batch {
		x.synced = true
	}
	b.enqueue(batch)
}

// fencesHold checks fences against the epochs claimed now.
func (b *Bolt) fencesHold(fences []Fence) error {
	for _, f := range fences {
		b.cmu.Lock()
		epoch, err := b.epochNow(f.Space)
		b.cmu.Unlock()
		if err != nil {
			return err
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
// in bbolt (Close), and ends the journal: cleared when every entry is in
// bbolt; one that failed there stays, replayed at the next start.
func (b *Bolt) drainJournal() error {
	b.gmu.Lock()
	for b.jqueued > 0 {
		b.jcond.Wait()
	}
	stuck := len(b.stuck)
	b.gmu.Unlock()
	j := b.j
	j.mu.Lock()
	defer j.mu.Unlock()
	wasBroken := j.broken
	j.broken = true
	if wasBroken || stuck > 0 || len(j.unsynced) > 0 || b.applied.Load() != j.next-1 {
		return nil
	}
	return j.clear()
}
