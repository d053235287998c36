package store

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"
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
// does an older one left past the newest.
func TestReplayStopsAtATornOrOlderEntry(t *testing.T) {
	txn := func(k string) *Txn { return &Txn{Then: []Op{Put("t", []byte(k), []byte("v"))}} }
	torn := encodeEntry(2, txn("b"))
	torn[len(torn)-1] ^= 0xff
	buf := append(append(append(encodeEntry(1, txn("a")), torn...), encodeEntry(3, txn("c"))...), make([]byte, 64)...)
	if got := readEntries(buf); len(got) != 1 || got[0].seq != 1 {
		t.Fatalf("past a torn entry: %+v", got)
	}
	buf = append(append(encodeEntry(7, txn("new")), encodeEntry(5, txn("old"))...), make([]byte, 64)...)
	if got := readEntries(buf); len(got) != 1 || got[0].seq != 7 || string(got[0].txn.Then[0].Key) != "new" {
		t.Fatalf("past an older entry: %+v", got)
	}
	if got := readEntries(make([]byte, 128)); len(got) != 0 {
		t.Fatalf("a new journal: %+v", got)
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
	if n := int64(len(encodeEntry(1, &Txn{Then: []Op{Put("handles", []byte("k49"), []byte("v"))}}))); off != n {
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
