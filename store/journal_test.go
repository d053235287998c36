package store

import (
	"bufio"
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	bolt "go.etcd.io/bbolt"
)

var jctx = Journalled(context.Background())

// journalChild is the process TestAJournalledCommitSurvivesAKill kills:
// it does what JOURNAL_CHILD names on the store at JOURNAL_STORE, prints
// "answered" once its commits were answered, and waits to be killed.
func journalChild() {
	t := childT{}
	path := os.Getenv("JOURNAL_STORE")
	b, err := OpenBolt(path, 0)
	if err != nil {
		t.Fatal(err)
	}
	f, err := b.Claim(context.Background(), "reg/newcomer")
	if err != nil {
		t.Fatal(err)
	}
	put := func(ctx context.Context, table, key, value string) {
		if err := b.Commit(ctx, Txn{Fences: []Fence{f}, Then: []Op{Put(table, []byte(key), []byte(value))}}); err != nil {
			t.Fatal(err)
		}
	}
	switch os.Getenv("JOURNAL_CHILD") {
	case "held":
		// bbolt's writer is held: what is answered is in the journal
		// only.
		holdWriter(nil, b)
		if err := b.Commit(jctx, Txn{Fences: []Fence{f}, Then: []Op{
			Put("bodies", []byte("a/0"), []byte("program a")),
			Put("handles", []byte("a"), []byte("record a")),
		}}); err != nil {
			t.Fatal(err)
		}
		put(jctx, "handles", "b", "record b")
	case "chain":
		// bbolt's writer is held: 22 entries answered one after
		// another, each naming the one before it synced.
		holdWriter(nil, b)
		for i := range 22 {
			put(jctx, "handles", fmt.Sprintf("k%02d", i+1), "v")
		}
	case "copied":
		// A copy of the file taken while it is open (between commits,
		// as a backup tool would), then x journalled, written into
		// bbolt, and deleted by a plain commit.
		data, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path+".copy", data, 0o600); err != nil {
			t.Fatal(err)
		}
		put(jctx, "handles", "x", "record x")
		if v, _ := b.Get(context.Background(), "handles", []byte("x")); string(v) != "record x" {
			t.Fatalf("x read back as %q", v)
		}
		if err := b.Commit(context.Background(), Txn{Fences: []Fence{f}, Then: []Op{Delete("handles", []byte("x"))}}); err != nil {
			t.Fatal(err)
		}
	case "trailed":
		// a is written into bbolt (the journal's trailer names it), then
		// b is answered while bbolt's writer is held: only the journal
		// has it.
		put(jctx, "handles", "a", "record a")
		if v, _ := b.Get(context.Background(), "handles", []byte("a")); string(v) != "record a" {
			t.Fatalf("a read back as %q", v)
		}
		holdWriter(nil, b)
		put(jctx, "handles", "b", "record b")
	case "ended":
		// x is written into bbolt, then deleted by a plain commit: the
		// journal still holds it (nothing was appended after it), and
		// must not bring it back.
		put(jctx, "handles", "x", "record x")
		if v, _ := b.Get(context.Background(), "handles", []byte("x")); string(v) != "record x" {
			t.Fatalf("x read back as %q", v)
		}
		if err := b.Commit(context.Background(), Txn{Fences: []Fence{f}, Then: []Op{Delete("handles", []byte("x"))}}); err != nil {
			t.Fatal(err)
		}
	}
	fmt.Println("answered")
	time.Sleep(time.Minute)
}

// childT fails the child process.
type childT struct{}

func (childT) Fatal(v ...any)                 { fmt.Fprintln(os.Stderr, v...); os.Exit(2) }
func (childT) Fatalf(format string, v ...any) { fmt.Fprintf(os.Stderr, format+"\n", v...); os.Exit(2) }

func TestMain(m *testing.M) {
	if os.Getenv("JOURNAL_CHILD") != "" {
		journalChild()
		os.Exit(0)
	}
	os.Exit(m.Run())
}

// killedAfterAnswers runs journalChild in a process of its own and kills
// it (SIGKILL) once its commits were answered.
func killedAfterAnswers(t *testing.T, path, what string) {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), "JOURNAL_CHILD="+what, "JOURNAL_STORE="+path)
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	line, _ := bufio.NewReader(out).ReadString('\n')
	cmd.Process.Kill()
	cmd.Wait()
	if strings.TrimSpace(line) != "answered" {
		t.Fatalf("the child did not answer its commits: %q", line)
	}
}

// A journalled commit answered while bbolt's writer was held (so only the
// journal has it) survives kill -9: the next OpenBolt writes it into bbolt,
// under its fence, whose epoch is raised with it.
func TestAJournalledCommitSurvivesAKill(t *testing.T) {
	path := filepath.Join(t.TempDir(), "registry.db")
	killedAfterAnswers(t, path, "held")
	b, err := OpenBolt(path, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	for k, want := range map[string]string{"a": "record a", "b": "record b"} {
		if v, _ := b.Get(context.Background(), "handles", []byte(k)); string(v) != want {
			t.Fatalf("handles/%s after the kill: %q", k, v)
		}
	}
	if v, _ := b.Get(context.Background(), "bodies", []byte("a/0")); string(v) != "program a" {
		t.Fatalf("a's body after the kill: %q", v)
	}
	// The child's claim was never written by a bbolt commit; the entry
	// brought its epoch, and the next claim goes past it.
	f, err := b.Claim(context.Background(), "reg/newcomer")
	if err != nil || f.Epoch < 2 {
		t.Fatalf("a claim after the kill: %+v, %v", f, err)
	}
}

// A journalled commit already written into bbolt and deleted since by a
// plain commit is not brought back by the replay after kill -9, though
// the journal still holds it.
func TestAJournalledCommitEndedSinceStaysEnded(t *testing.T) {
	path := filepath.Join(t.TempDir(), "registry.db")
	killedAfterAnswers(t, path, "ended")
	b, err := OpenBolt(path, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	if v, _ := b.Get(context.Background(), "handles", []byte("x")); v != nil {
		t.Fatalf("an ended record came back: %q", v)
	}
}

// Replay reads the entries at the journal's start while their checksums
// hold and their numbers follow each other: a torn entry ends it, and so
// does an older one left past the newest; a chain that does not continue
// bbolt's last entry is not replayed.
func TestReplayStopsAtATornOrOlderEntry(t *testing.T) {
	run := [runLen]byte{1}
	txn := func(k string) *Txn { return &Txn{Then: []Op{Put("t", []byte(k), []byte("v"))}} }
	torn := encodeEntry(2, run, 1, txn("b"))
	torn[len(torn)-1] ^= 0xff
	// entry 3 was appended before 2 was synced: 2 was never answered.
	buf := append(append(append(encodeEntry(1, run, 0, txn("a")), torn...), encodeEntry(3, run, 1, txn("c"))...), make([]byte, 64)...)
	if got, notes, err := planReplay(buf, run, 0); err != nil || len(got) != 1 || got[0].seq != 1 || len(notes) != 1 {
		t.Fatalf("past a torn entry: %+v %q %v", got, notes, err)
	}
	buf = append(append(encodeEntry(7, run, 6, txn("new")), encodeEntry(5, run, 4, txn("old"))...), make([]byte, 64)...)
	if got, _, err := planReplay(buf, run, 6); err != nil || len(got) != 1 || got[0].seq != 7 || string(got[0].txn.Then[0].Key) != "new" {
		t.Fatalf("past an older entry: %+v %v", got, err)
	}
	if got, notes, err := planReplay(buf, run, 4); err != nil || len(got) != 0 || len(notes) != 1 || !strings.Contains(notes[0], "do not continue") {
		t.Fatalf("a chain past a gap: %+v %q %v", got, notes, err)
	}
	if got, notes, err := planReplay(buf, [runLen]byte{2}, 6); err != nil || len(got) != 0 || len(notes) != 1 {
		t.Fatalf("another run's chain: %+v %q %v", got, notes, err)
	}
	if got, notes, err := planReplay(make([]byte, 128), run, 0); len(got) != 0 || len(notes) != 0 || err != nil {
		t.Fatalf("a new journal: %+v %q %v", got, notes, err)
	}
}

// The note of a torn tail says exactly what is dropped (red team L2: it
// named the torn entry only): every number from the torn one to the last
// whole one appended after it, how many, and which were whole; whole
// entries past a head the crash left unwritten (zeros) are named too.
func TestATornTailNoteCountsEveryEntryDropped(t *testing.T) {
	run := [runLen]byte{1}
	txn := func(k string) *Txn { return &Txn{Then: []Op{Put("t", []byte(k), []byte("v"))}} }
	torn := func(e []byte) []byte { e[len(e)-1] ^= 0xff; return e }
	// 1 and 2 answered; 3 torn; 4 and 6 whole, 5 torn, all appended
	// while 3 was not yet synced (they name 2 synced).
	buf := slices.Concat(encodeEntry(1, run, 0, txn("a")), encodeEntry(2, run, 1, txn("b")), torn(encodeEntry(3, run, 2, txn("c"))),
		encodeEntry(4, run, 2, txn("d")), torn(encodeEntry(5, run, 2, txn("e"))), encodeEntry(6, run, 2, txn("f")), make([]byte, 64))
	got, notes, err := planReplay(buf, run, 0)
	if err != nil || len(got) != 2 || got[1].seq != 2 || len(notes) != 1 {
		t.Fatalf("replayed %+v, notes %q, %v; want 1-2 and one note", got, notes, err)
	}
	for _, want := range []string{"entries 3-6 after 2 (4 of them)", "torn or not on disk (writes the crash cut) 3, 5", "whole, appended while an entry before them was not yet synced, 4, 6"} {
		if !strings.Contains(notes[0], want) {
			t.Fatalf("the note %q does not say %q", notes[0], want)
		}
	}
	// 3's write never reached the disk (zeros where its head goes): 4-5
	// whole after it are still dropped, and said so.
	e3 := encodeEntry(3, run, 2, txn("c"))
	buf = slices.Concat(encodeEntry(1, run, 0, txn("a")), encodeEntry(2, run, 1, txn("b")), make([]byte, len(e3)),
		encodeEntry(4, run, 2, txn("d")), encodeEntry(5, run, 2, txn("e")), make([]byte, 64))
	got, notes, err = planReplay(buf, run, 0)
	if err != nil || len(got) != 2 || len(notes) != 1 || !strings.Contains(notes[0], "entries 3-5 after 2 (3 of them)") ||
		!strings.Contains(notes[0], "not on disk (writes the crash cut) 3;") || !strings.Contains(notes[0], "synced, 4-5") {
		t.Fatalf("past an unwritten head: %+v %q %v", got, notes, err)
	}
	// The last entry alone torn: that one.
	buf = slices.Concat(encodeEntry(1, run, 0, txn("a")), torn(encodeEntry(2, run, 1, txn("b"))), make([]byte, 64))
	if _, notes, _ = planReplay(buf, run, 0); len(notes) != 1 || !strings.Contains(notes[0], "entry 2, appended last and never answered, is dropped: torn") {
		t.Fatalf("a torn last entry: %q", notes)
	}
	// Older entries of the run left past the newest (the journal started
	// again at its start) are in bbolt: nothing is dropped, nothing said.
	buf = slices.Concat(encodeEntry(7, run, 6, txn("new")), encodeEntry(5, run, 4, txn("old")), make([]byte, 64))
	if _, notes, _ = planReplay(buf, run, 6); len(notes) != 0 {
		t.Fatalf("older entries past the newest: %q", notes)
	}
}

// journalEmpty fails t unless the journal beside path is all zeros.
func journalEmpty(t *testing.T, path, when string) {
	t.Helper()
	buf, err := os.ReadFile(path + "-journal")
	if err != nil {
		t.Fatal(err)
	}
	for i, c := range buf {
		if c != 0 {
			t.Fatalf("%s the journal holds bytes (the first at %d)", when, i)
		}
	}
}

// A clean Close leaves an empty journal, and so does a replay at open:
// a copy of the store taken while it is closed holds no entry.
func TestACleanCloseLeavesAnEmptyJournal(t *testing.T) {
	path := filepath.Join(t.TempDir(), "registry.db")
	b, err := OpenBolt(path, 0)
	if err != nil {
		t.Fatal(err)
	}
	hold := holdWriter(t, b)
	for i := range 5 {
		if err := b.Commit(jctx, Txn{Then: []Op{Put("handles", fmt.Appendf(nil, "k%d", i), []byte("v"))}}); err != nil {
			t.Fatal(err)
		}
	}
	hold()
	if err := b.Close(); err != nil {
		t.Fatal(err)
	}
	journalEmpty(t, path, "after a clean close")

	killedAfterAnswers(t, path, "held")
	if b, err = OpenBolt(path, 0); err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	journalEmpty(t, path, "after a replay at open")
	if r := b.Replayed(); r.Entries != 2 {
		t.Fatalf("replayed %+v, want the child's 2 entries", r)
	}
}

// A fresh bbolt file beside an old journal (the store reset: registry.db
// removed) replays nothing of it, after a clean stop or a kill -9.
func TestAResetStoreReplaysNoOldJournal(t *testing.T) {
	path := filepath.Join(t.TempDir(), "registry.db")
	// A deleted record, stopped cleanly.
	b, err := OpenBolt(path, 0)
	if err != nil {
		t.Fatal(err)
	}
	if err := b.Commit(jctx, Txn{Then: []Op{Put("handles", []byte("x"), []byte("record x"))}}); err != nil {
		t.Fatal(err)
	}
	if err := b.Commit(context.Background(), Txn{Then: []Op{Delete("handles", []byte("x"))}}); err != nil {
		t.Fatal(err)
	}
	b.Close()
	os.Remove(path)
	if b, err = OpenBolt(path, 0); err != nil {
		t.Fatal(err)
	}
	if v, _ := b.Get(context.Background(), "handles", []byte("x")); v != nil {
		t.Fatalf("a deleted record came back into a reset store: %q", v)
	}
	b.Close()
	// Records only in the journal, killed, then reset.
	killedAfterAnswers(t, path, "held")
	os.Remove(path)
	if b, err = OpenBolt(path, 0); err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	for _, k := range []string{"a", "b"} {
		if v, _ := b.Get(context.Background(), "handles", []byte(k)); v != nil {
			t.Fatalf("handles/%s of the old store came into a reset one: %q", k, v)
		}
	}
	if r := b.Replayed(); r.Entries != 0 || len(r.Notes) != 1 {
		t.Fatalf("replayed %+v, want nothing and a note", r)
	}
}

// A copy of the store taken while it was stopped, restored over it after
// the store went on (a record deployed and deleted since, then a kill -9),
// replays nothing past the copy: the deleted record stays deleted.
func TestARestoredCopyReplaysNothingPastIt(t *testing.T) {
	dir := t.TempDir()
	path, backup := filepath.Join(dir, "registry.db"), filepath.Join(dir, "backup.db")
	b, err := OpenBolt(path, 0)
	if err != nil {
		t.Fatal(err)
	}
	if err := b.Commit(jctx, Txn{Then: []Op{Put("handles", []byte("x1"), []byte("record x1"))}}); err != nil {
		t.Fatal(err)
	}
	b.Close()
	copyFile(t, path, backup)
	// Stopped cleanly after x2 was deleted.
	if b, err = OpenBolt(path, 0); err != nil {
		t.Fatal(err)
	}
	if err := b.Commit(jctx, Txn{Then: []Op{Put("handles", []byte("x2"), []byte("record x2"))}}); err != nil {
		t.Fatal(err)
	}
	if err := b.Commit(context.Background(), Txn{Then: []Op{Delete("handles", []byte("x2"))}}); err != nil {
		t.Fatal(err)
	}
	b.Close()
	copyFile(t, backup, path)
	if b, err = OpenBolt(path, 0); err != nil {
		t.Fatal(err)
	}
	if v, _ := b.Get(context.Background(), "handles", []byte("x2")); v != nil {
		t.Fatalf("a record deleted after the copy came back: %q", v)
	}
	b.Close()
	// Killed after x was deleted (the journal still holds it).
	copyFile(t, backup, path)
	killedAfterAnswers(t, path, "ended")
	copyFile(t, backup, path)
	if b, err = OpenBolt(path, 0); err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	if v, _ := b.Get(context.Background(), "handles", []byte("x")); v != nil {
		t.Fatalf("a record deleted after the copy came back after a kill: %q", v)
	}
	if v, _ := b.Get(context.Background(), "handles", []byte("x1")); string(v) != "record x1" {
		t.Fatalf("the copy's own record: %q", v)
	}
}

func copyFile(t *testing.T, from, to string) {
	t.Helper()
	b, err := os.ReadFile(from)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(to, b, 0o600); err != nil {
		t.Fatal(err)
	}
}

// chainOffsets are where the journal's first entries start, in order.
func chainOffsets(t *testing.T, buf []byte) []int {
	var offs []int
	for off := 0; ; {
		_, n, ok := parseEntry(buf[off:])
		if !ok {
			return offs
		}
		offs = append(offs, off)
		off += n
	}
}

// killedChain is the store at path once journalChild answered its chain's
// 22 journalled commits and was killed: its journal and where each of the
// 22 entries starts.
func killedChain(t *testing.T, path string) (journal []byte, offs []int) {
	t.Helper()
	killedAfterAnswers(t, path, "chain")
	journal, err := os.ReadFile(path + "-journal")
	if err != nil {
		t.Fatal(err)
	}
	if offs = chainOffsets(t, journal); len(offs) != 22 {
		t.Fatalf("the journal holds %d entries, want 22", len(offs))
	}
	return journal, offs
}

// writeFlipped writes path's journal as journal with one byte flipped
// inside the entry that starts at off, and answers what it wrote.
func writeFlipped(t *testing.T, path string, journal []byte, off int) []byte {
	t.Helper()
	j := slices.Clone(journal)
	j[off+entryHead+3] ^= 0x10
	if err := os.WriteFile(path+"-journal", j, 0o600); err != nil {
		t.Fatal(err)
	}
	return j
}

// A byte flipped inside entry 5 of 22 answered one after another, with
// 6-22 intact after it, is damage, not a torn tail: OpenBolt refuses the
// store with an error naming the journal, the entry and what to do,
// rather than losing 18 answered commits silently.
func TestADamagedEntryMidChainRefusesToOpen(t *testing.T) {
	path := filepath.Join(t.TempDir(), "registry.db")
	buf, offs := killedChain(t, path)
	writeFlipped(t, path, buf, offs[4])
	b, err := OpenBolt(path, 0)
	if err == nil {
		b.Close()
		t.Fatal("a store whose journal lost answered entries opened")
	}
	if !errors.Is(err, ErrJournalDamaged) || !strings.Contains(err.Error(), path+"-journal") ||
		!strings.Contains(err.Error(), "entry 5 ") || !strings.Contains(err.Error(), "move it aside") {
		t.Fatalf("the error: %v", err)
	}
	// Moved aside, the store opens without them.
	if err := os.Rename(path+"-journal", path+"-journal.damaged"); err != nil {
		t.Fatal(err)
	}
	if b, err = OpenBolt(path, 0); err != nil {
		t.Fatal(err)
	}
	b.Close()
}

// Damage to an entry bbolt already holds loses nothing: the replay
// resumes at the entry that continues bbolt (red team L1: entry 99 damaged
// in bbolt's hands, 100 and 101 whole, were dropped as if never answered).
// Here bbolt is made to hold entries through 5 and entry 3 is damaged:
// 6-22 are replayed, with a note.
func TestADamagedEntryTheStoreHoldsIsSkipped(t *testing.T) {
	path := filepath.Join(t.TempDir(), "registry.db")
	buf, offs := killedChain(t, path)
	writeFlipped(t, path, buf, offs[2])
	db, err := bolt.Open(path, 0o600, nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := db.Update(func(tx *bolt.Tx) error {
		return tx.Bucket(bucketMeta).Put(journalKey, binary.BigEndian.AppendUint64(nil, 5))
	}); err != nil {
		t.Fatal(err)
	}
	db.Close()
	b, err := OpenBolt(path, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	if r := b.Replayed(); r.Entries != 17 || r.From != 6 || r.To != 22 || len(r.Notes) != 1 || !strings.Contains(r.Notes[0], "damaged") {
		t.Fatalf("replayed %+v, want entries 6-22 and a note of the damaged one", r)
	}
	for i := 5; i < 22; i++ {
		if v, _ := b.Get(context.Background(), "handles", fmt.Appendf(nil, "k%02d", i+1)); string(v) != "v" {
			t.Fatalf("k%02d after the replay: %q", i+1, v)
		}
	}
}

// The last entry torn (a write the crash cut, never answered) is dropped:
// the store opens and replays the 21 before it, and says so.
func TestATornLastEntryIsDroppedAndTheRestReplayed(t *testing.T) {
	path := filepath.Join(t.TempDir(), "registry.db")
	buf, offs := killedChain(t, path)
	writeFlipped(t, path, buf, offs[21])
	b, err := OpenBolt(path, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	if r := b.Replayed(); r.Entries != 21 || r.From != 1 || r.To != 21 || len(r.Notes) != 1 || !strings.Contains(r.Notes[0], "torn") {
		t.Fatalf("replayed %+v, want entries 1-21 and a note of the torn one", r)
	}
	for i := range 22 {
		v, _ := b.Get(context.Background(), "handles", fmt.Appendf(nil, "k%02d", i+1))
		if (i < 21) != (string(v) == "v") {
			t.Fatalf("k%02d after the replay: %q", i+1, v)
		}
	}
}

// A journalled commit under a superseded fence is refused when it is
// appended, and nothing of it is written, then or after a reopen.
func TestAJournalledCommitUnderAStaleFenceWritesNothing(t *testing.T) {
	path := filepath.Join(t.TempDir(), "registry.db")
	b, err := OpenBolt(path, 0)
	if err != nil {
		t.Fatal(err)
	}
	old, _ := b.Claim(context.Background(), "reg/t")
	if _, err := b.Claim(context.Background(), "reg/t"); err != nil {
		t.Fatal(err)
	}
	if err := b.Commit(jctx, Txn{Fences: []Fence{old}, Then: []Op{Put("handles", []byte("k"), []byte("v"))}}); !errors.Is(err, ErrFenced) {
		t.Fatalf("under a stale fence: %v", err)
	}
	b.Close()
	if b, err = OpenBolt(path, 0); err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	if v, _ := b.Get(context.Background(), "handles", []byte("k")); v != nil {
		t.Fatalf("a refused commit was written: %q", v)
	}
}

// A journalled commit is answered while bbolt's writer is held; a read of
// its table waits until it is in bbolt (so reads see what was answered),
// a read of another table does not.
func TestAReadWaitsForTheJournalledWritesOfItsTable(t *testing.T) {
	b, err := OpenBolt(filepath.Join(t.TempDir(), "registry.db"), 0)
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	hold := holdWriter(t, b)
	var once sync.Once
	release := func() { once.Do(hold) }
	defer release() // before Close, which waits for the write
	if err := b.Commit(jctx, Txn{Then: []Op{Put("handles", []byte("k"), []byte("v"))}}); err != nil {
		t.Fatal(err)
	}
	if _, err := b.Get(context.Background(), "other", []byte("k")); err != nil {
		t.Fatal(err)
	}
	read := make(chan []byte)
	go func() {
		v, _ := b.Get(context.Background(), "handles", []byte("k"))
		read <- v
	}()
	select {
	case v := <-read:
		t.Fatalf("the read did not wait for the journalled write: %q", v)
	case <-time.After(100 * time.Millisecond):
	}
	release()
	if v := <-read; string(v) != "v" {
		t.Fatalf("read after the write: %q", v)
	}
}

// Once every entry is in bbolt the next is written at the journal's
// start: the journal stays one entry long for commits one after another.
func TestTheJournalStartsAgainOnceWritten(t *testing.T) {
	b, err := OpenBolt(filepath.Join(t.TempDir(), "registry.db"), 0)
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	for i := range 50 {
		k := []byte(fmt.Sprint("k", i))
		if err := b.Commit(jctx, Txn{Then: []Op{Put("handles", k, []byte("v"))}}); err != nil {
			t.Fatal(err)
		}
		if v, _ := b.Get(context.Background(), "handles", k); string(v) != "v" {
			t.Fatalf("%s: %q", k, v)
		}
	}
	b.j.mu.Lock()
	off := b.j.off
	b.j.mu.Unlock()
	if n := int64(len(encodeEntry(1, b.j.run, 0, &Txn{Then: []Op{Put("handles", []byte("k49"), []byte("v"))}}))); off != n {
		t.Fatalf("the journal holds %d bytes after 50 commits each written; one entry is %d", off, n)
	}
}

// Three hundred journalled commits at once, 4 KiB each, while bbolt's
// writer is held: those the journal holds (1 MiB) are answered at once,
// the others fall back to bbolt and wait for it; once it is free every
// one is answered and on disk, after a reopen too.
func TestAFullJournalFallsBackToBbolt(t *testing.T) {
	path := filepath.Join(t.TempDir(), "registry.db")
	b, err := OpenBolt(path, 0)
	if err != nil {
		t.Fatal(err)
	}
	hold := holdWriter(t, b)
	var once sync.Once
	release := func() { once.Do(hold) }
	defer release()
	const n = 300
	value := make([]byte, 4<<10)
	answered := make(chan error, n)
	for i := range n {
		go func() {
			answered <- b.Commit(jctx, Txn{Then: []Op{Put("handles", fmt.Appendf(nil, "k%03d", i), value)}})
		}()
	}
	early := 0
	for early < n {
		select {
		case err := <-answered:
			if err != nil {
				t.Fatal(err)
			}
			early++
			continue
		case <-time.After(time.Second):
		}
		break
	}
	if early == 0 || early == n {
		t.Fatalf("%d of %d answered while bbolt was held: the journal should hold some, not all", early, n)
	}
	release()
	for range n - early {
		if err := <-answered; err != nil {
			t.Fatal(err)
		}
	}
	b.Close()
	if b, err = OpenBolt(path, 0); err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	for i := range n {
		if v, _ := b.Get(context.Background(), "handles", fmt.Appendf(nil, "k%03d", i)); len(v) != len(value) {
			t.Fatalf("k%03d after a reopen: %d bytes", i, len(v))
		}
	}
}

// CheckBolt, which the gateway calls before any listener serves
// (caddymodule/app.go), answers what OpenBolt would for a damaged
// journal, and nothing for one OpenBolt opens; it writes nothing, and
// does not wait for a store another holder has open (ErrLocked at once).
func TestCheckBoltAnswersWhatOpenBoltWould(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "registry.db")
	if err := CheckBolt(path); err != nil {
		t.Fatalf("no store yet: %v", err)
	}
	buf, offs := killedChain(t, path)
	damaged := writeFlipped(t, path, buf, offs[4])
	db, _ := os.ReadFile(path)
	checked := CheckBolt(path)
	if !errors.Is(checked, ErrJournalDamaged) {
		t.Fatalf("a damaged journal checked: %v", checked)
	}
	if after, _ := os.ReadFile(path); !bytes.Equal(after, db) {
		t.Fatal("the check wrote into the store")
	}
	if after, _ := os.ReadFile(path + "-journal"); !bytes.Equal(after, damaged) {
		t.Fatal("the check wrote into the journal")
	}
	if _, err := OpenBolt(path, 0); err == nil || err.Error() != checked.Error() {
		t.Fatalf("OpenBolt answered %v; the check %v", err, checked)
	}
	// The last entry torn: the check passes, and the store opens.
	writeFlipped(t, path, buf, offs[21])
	if err := CheckBolt(path); err != nil {
		t.Fatalf("a torn last entry checked: %v", err)
	}
	// Held open (here by this process, as by a running gateway): the
	// check answers ErrLocked at once, where OpenBolt waits.
	b, err := OpenBolt(path, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	if err := os.WriteFile(path+"-journal", damaged, 0o600); err != nil {
		t.Fatal(err)
	}
	done := make(chan error)
	go func() { done <- CheckBolt(path) }()
	select {
	case err := <-done:
		if !errors.Is(err, ErrLocked) || !strings.Contains(err.Error(), path) || !strings.Contains(err.Error(), fmt.Sprintf("(pid %d)", os.Getpid())) {
			t.Fatalf("a store held open checked: %v", err)
		}
	case <-time.After(3 * time.Second):
		t.Fatal("the check waits for the store's lock")
	}
}

// CheckBolt refuses what OpenBolt refuses before the journal, with its
// words: a file that is not bbolt, a bbolt file of another application,
// a store of another schema; and lets a new file pass.
func TestCheckBoltRefusesWhatOpenBoltRefuses(t *testing.T) {
	dir := t.TempDir()
	for _, c := range []struct {
		name string
		make func(path string) error
	}{
		{"not bbolt", func(path string) error {
			return os.WriteFile(path, bytes.Repeat([]byte("not a database "), 1000), 0o600)
		}},
		{"another application's", func(path string) error {
			db, err := bolt.Open(path, 0o600, nil)
			if err != nil {
				return err
			}
			defer db.Close()
			return db.Update(func(tx *bolt.Tx) error { _, err := tx.CreateBucket([]byte("theirs")); return err })
		}},
		{"another schema", func(path string) error {
			b, err := OpenBolt(path, 0)
			if err != nil {
				return err
			}
			b.Close()
			db, err := bolt.Open(path, 0o600, nil)
			if err != nil {
				return err
			}
			defer db.Close()
			return db.Update(func(tx *bolt.Tx) error { return tx.Bucket(bucketMeta).Put(keySchema, []byte("0")) })
		}},
	} {
		path := filepath.Join(dir, strings.ReplaceAll(c.name, " ", "-")+".db")
		if err := c.make(path); err != nil {
			t.Fatal(err)
		}
		checked := CheckBolt(path)
		if checked == nil {
			t.Errorf("%s: checked nil", c.name)
			continue
		}
		if b, err := OpenBolt(path, 0); err == nil {
			b.Close()
			t.Errorf("%s: OpenBolt opened it", c.name)
		} else if err.Error() != checked.Error() {
			t.Errorf("%s: OpenBolt answered %q; the check %q", c.name, err, checked)
		}
	}
	path := filepath.Join(dir, "new.db")
	os.WriteFile(path, nil, 0o600)
	if err := CheckBolt(path); err != nil {
		t.Fatalf("an empty file: %v", err)
	}
}

// The journal cut at every byte of its last entry (the rest zeros, as a
// crash leaves the preallocated file, or the file itself ends there): the
// store opens every time, the check passes, the 21 answered entries are
// replayed, and the 22nd only when whole, else named dropped.
func TestAJournalCutAtEveryByteOfItsLastEntryOpens(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "registry.db")
	buf, offs := killedChain(t, path)
	db, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	_, n, _ := parseEntry(buf[offs[21]:])
	end := offs[21] + n
	for cut := offs[21]; cut <= end; cut++ {
		for _, shortFile := range []bool{false, true} {
			j := slices.Clone(buf[:cut])
			if !shortFile {
				j = append(j, make([]byte, len(buf)-cut)...)
			}
			if err := os.WriteFile(path, db, 0o600); err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(path+"-journal", j, 0o600); err != nil {
				t.Fatal(err)
			}
			if err := CheckBolt(path); err != nil {
				t.Fatalf("cut at %d (entry 22 is %d-%d): checked %v", cut, offs[21], end, err)
			}
			b, err := OpenBolt(path, 0)
			if err != nil {
				t.Fatalf("cut at %d (entry 22 is %d-%d): %v", cut, offs[21], end, err)
			}
			r := b.Replayed()
			want := uint64(21)
			if cut == end {
				want = 22
			}
			v, _ := b.Get(context.Background(), "handles", []byte("k22"))
			b.Close()
			if r.From != 1 || r.To != want || (string(v) == "v") != (want == 22) {
				t.Fatalf("cut at %d (entry 22 is %d-%d): replayed %+v, k22 %q", cut, offs[21], end, r, v)
			}
			// Once its magic is on disk, the torn entry is named.
			if cut >= offs[21]+4 && cut < end && (len(r.Notes) != 1 || !strings.Contains(r.Notes[0], "entry 22,")) {
				t.Fatalf("cut at %d: the notes %q do not name entry 22", cut, r.Notes)
			}
		}
	}
}

// A copy of the store taken while the gateway ran, restored after a kill
// -9 of that same start, whose journal continues the copy: a record
// journalled after the copy and deleted since (a plain commit the copy
// lacks) stays deleted, because the journal's trailer says bbolt held
// that entry, which the copy does not; the note says why nothing was
// replayed. The real file after the same kill, and a trailer naming an
// entry bbolt holds with one answered after it, replay as before.
func TestACopyTakenWhileRunningReplaysNothingOnceRestored(t *testing.T) {
	path := filepath.Join(t.TempDir(), "registry.db")
	killedAfterAnswers(t, path, "copied")
	journal, err := os.ReadFile(path + "-journal")
	if err != nil {
		t.Fatal(err)
	}
	b, err := OpenBolt(path, 0)
	if err != nil {
		t.Fatal(err)
	}
	if v, _ := b.Get(context.Background(), "handles", []byte("x")); v != nil {
		t.Fatalf("the store itself after the kill: x is %q", v)
	}
	b.Close()
	copyFile(t, path+".copy", path)
	if err := os.WriteFile(path+"-journal", journal, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := CheckBolt(path); err != nil {
		t.Fatalf("the restored copy checked: %v", err)
	}
	if b, err = OpenBolt(path, 0); err != nil {
		t.Fatal(err)
	}
	v, _ := b.Get(context.Background(), "handles", []byte("x"))
	r := b.Replayed()
	b.Close()
	if v != nil {
		t.Fatalf("a record deleted after the copy came back once it was restored: %q (replayed %+v)", v, r)
	}
	if r.Entries != 0 || len(r.Notes) != 1 || !strings.Contains(r.Notes[0], "older than its journal") {
		t.Fatalf("replayed %+v, want nothing and a note of the copy", r)
	}

	path = filepath.Join(t.TempDir(), "registry.db")
	killedAfterAnswers(t, path, "trailed")
	if b, err = OpenBolt(path, 0); err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	if r := b.Replayed(); r.Entries != 1 || r.From != 2 || len(r.Notes) != 0 {
		t.Fatalf("replayed %+v, want entry 2 alone", r)
	}
	for _, k := range []string{"a", "b"} {
		if v, _ := b.Get(context.Background(), "handles", []byte(k)); string(v) != "record "+k {
			t.Fatalf("%s after the replay: %q", k, v)
		}
	}
}

// The trailer is read only when whole and of the run bbolt names, and
// stops the replay only when it names an entry past bbolt's last; a
// journal without one (a build before it) is read to its very end.
func TestTheTrailerStopsOnlyAnOlderFile(t *testing.T) {
	run := [runLen]byte{1}
	txn := &Txn{Then: []Op{Put("t", []byte("k"), []byte("v"))}}
	journal := func(trailer []byte) []byte {
		buf := make([]byte, journalSize)
		copy(buf, slices.Concat(encodeEntry(4, run, 3, txn), encodeEntry(5, run, 4, txn)))
		copy(buf[entriesEnd:], trailer)
		return buf
	}
	torn := encodeTrailer(run, 9)
	torn[len(torn)-1] ^= 1
	for _, c := range []struct {
		name     string
		buf      []byte
		replayed int
	}{
		{"naming bbolt's last", journal(encodeTrailer(run, 3)), 2},
		{"naming an entry before bbolt's last", journal(encodeTrailer(run, 2)), 2},
		{"naming an entry past bbolt's last", journal(encodeTrailer(run, 4)), 0},
		{"of another run", journal(encodeTrailer([runLen]byte{2}, 9)), 2},
		{"torn", journal(torn), 2},
	} {
		got, notes, err := planReplay(c.buf, run, 3)
		if err != nil || len(got) != c.replayed || (c.replayed == 0) != (len(notes) == 1) {
			t.Errorf("a trailer %s: replayed %d entries, notes %q, %v; want %d", c.name, len(got), notes, err, c.replayed)
		}
	}
	// Without a trailer, entries to the file's last byte are read.
	exact := func(seq uint64, size int) []byte { // an entry of size bytes
		for n := size - entryHead; ; n-- {
			if e := encodeEntry(seq, run, seq-1, &Txn{Then: []Op{Put("t", []byte("k"), make([]byte, n))}}); len(e) == size {
				return e
			}
		}
	}
	var chain []byte
	seq := uint64(1)
	for ; journalSize-len(chain) >= 100<<10; seq++ {
		chain = append(chain, exact(seq, 50<<10)...)
	}
	left := journalSize - len(chain) // 50-100 KiB: two entries
	chain = slices.Concat(chain, exact(seq, left/2), exact(seq+1, left-left/2))
	if got, _, err := planReplay(chain, run, 0); err != nil || len(chain) != journalSize || len(got) != int(seq+1) {
		t.Fatalf("a journal without a trailer, full to its end: replayed %d of %d entries, %v", len(got), seq+1, err)
	}
}

// The first entry of a lap (every entry before it in bbolt, so it is
// written at the journal's start, over the last lap's) cut at every byte,
// the last lap's bytes behind the cut: the store opens every time, takes
// the entry only when whole, and none of the last lap's entries again.
func TestALapsFirstEntryCutAtEveryByteOpens(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "registry.db")
	killedAfterAnswers(t, path, "chain")
	old, err := os.ReadFile(path + "-journal")
	if err != nil {
		t.Fatal(err)
	}
	// bbolt holds the 22 entries, as once they were written.
	db, err := bolt.Open(path, 0o600, nil)
	if err != nil {
		t.Fatal(err)
	}
	var run [runLen]byte
	if err := db.Update(func(tx *bolt.Tx) error {
		copy(run[:], tx.Bucket(bucketMeta).Get(runKey))
		for i := range 22 {
			if err := applyEntry(tx, &Txn{Then: []Op{Put("handles", fmt.Appendf(nil, "k%02d", i+1), []byte("v"))}}, uint64(i+1)); err != nil {
				return err
			}
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	db.Close()
	store, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	e := encodeEntry(23, run, 22, &Txn{Then: []Op{Put("handles", []byte("new"), []byte("v"))}})
	for cut := 0; cut <= len(e); cut++ {
		j := slices.Clone(old)
		copy(j, e[:cut])
		if err := os.WriteFile(path, store, 0o600); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path+"-journal", j, 0o600); err != nil {
			t.Fatal(err)
		}
		if err := CheckBolt(path); err != nil {
			t.Fatalf("cut at %d of %d: checked %v", cut, len(e), err)
		}
		b, err := OpenBolt(path, 0)
		if err != nil {
			t.Fatalf("cut at %d of %d: %v", cut, len(e), err)
		}
		r := b.Replayed()
		v, _ := b.Get(context.Background(), "handles", []byte("new"))
		b.Close()
		whole := cut == len(e)
		if (string(v) == "v") != whole || whole && (r.Entries != 1 || r.From != 23) || !whole && r.Entries != 0 {
			t.Fatalf("cut at %d of %d: replayed %+v, new %q", cut, len(e), r, v)
		}
		// Once the cut entry no longer reads as the last lap's first
		// (whose first bytes it shares), it is named.
		if _, _, ok := parseEntry(j); !ok && (len(r.Notes) != 1 || !strings.Contains(r.Notes[0], "entry 23,")) {
			t.Fatalf("cut at %d of %d: the notes %q do not name entry 23", cut, len(e), r.Notes)
		}
	}
}

// A store not made yet under a regular file: CheckBolt answers what
// OpenBolt would (its directory cannot be made), so the gateway refuses
// the config while it provisions instead of failing its app's Start (a
// reload's listeners took connections meanwhile, docs/decisions.md, "One
// gateway a store and a port"). A store in a folder not made yet passes.
func TestCheckBoltRefusesAStoreUnderAFile(t *testing.T) {
	dir := t.TempDir()
	file := filepath.Join(dir, "file")
	if err := os.WriteFile(file, []byte("x"), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, path := range []string{filepath.Join(file, "registry.db"), filepath.Join(file, "deeper", "registry.db")} {
		checked := CheckBolt(path)
		if checked == nil {
			t.Errorf("%s: checked nil", path)
			continue
		}
		if b, err := OpenBolt(path, 0); err == nil {
			b.Close()
			t.Errorf("%s: OpenBolt opened it", path)
		} else if err.Error() != checked.Error() {
			t.Errorf("%s: OpenBolt answered %q; the check %q", path, err, checked)
		}
	}
	if err := CheckBolt(filepath.Join(dir, "new", "folder", "registry.db")); err != nil {
		t.Fatalf("a store in a folder not made yet: %v", err)
	}
}
