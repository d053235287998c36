package freeport

import (
	"bufio"
	"encoding/binary"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"golang.org/x/sys/unix"
)

// child is a TestPickerChild that has picked its ports and holds them
// until it is stopped.
type child struct {
	ports []int
	cmd   *exec.Cmd
	stdin interface{ Close() error }
}

// startChild starts TestPickerChild picking n ports with env added to
// this process's, and answers once it has picked them. The child's lock
// file is in dir (TMPDIR): one of the test's own, so that processes of
// other test runs on the machine neither take its ports nor move its
// cursor.
func startChild(t *testing.T, n int, dir string) *child {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^TestPickerChild$", "-test.count=1")
	cmd.Env = append(os.Environ(), childEnv+"="+strconv.Itoa(n), "TMPDIR="+dir)
	cmd.Stderr = os.Stderr
	in, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	c := &child{cmd: cmd, stdin: in}
	t.Cleanup(c.stop)
	s := bufio.NewScanner(out)
	for s.Scan() && s.Text() != "done" {
		if p, ok := strings.CutPrefix(s.Text(), "port "); ok {
			port, err := strconv.Atoi(p)
			if err != nil {
				t.Fatalf("the child printed %q", s.Text())
			}
			c.ports = append(c.ports, port)
		}
	}
	if len(c.ports) < n {
		t.Fatalf("the child printed %d ports, want %d", len(c.ports), n)
	}
	return c
}

// stop lets the child end and waits for it.
func (c *child) stop() {
	c.stdin.Close()
	c.cmd.Wait()
}

// lockFile opens the lock file the children of dir share.
func lockFile(t *testing.T, dir string) *os.File {
	f, err := os.OpenFile(filepath.Join(dir, "retainer-freeport.lock"), os.O_RDWR, 0)
	if err != nil {
		t.Fatalf("the children's lock file: %v", err)
	}
	t.Cleanup(func() { f.Close() })
	return f
}

// A port a live process of this package holds is not taken by another,
// and is taken once that process has ended, however it ended: the lock
// is the kernel's, dropped with the process.
func TestAPortIsLockedForItsHoldersLife(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	c := startChild(t, 20, dir)
	f := lockFile(t, dir)
	try := func(p int) bool {
		mu.Lock() // ofd
		defer mu.Unlock()
		ok, err := lockIn(f, p)
		if err != nil {
			t.Skipf("no locks on this file system: %v", err)
		}
		return ok
	}
	for _, p := range c.ports {
		if try(p) {
			t.Fatalf("port %d, held by a live process, was locked by another", p)
		}
	}
	c.cmd.Process.Kill() // no cleanup of its own: the kernel's
	c.cmd.Wait()
	for _, p := range c.ports {
		if !try(p) {
			t.Errorf("port %d stayed locked after its holder was killed", p)
		}
	}
}

// A search that comes round to ports a live process holds (the cursor
// wrapped round the range) skips them: the cursor is set back to the
// first port a live child holds, and the next child takes none of its.
func TestAHeldPortIsSkipped(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	holder := startChild(t, 50, dir)
	f := lockFile(t, dir)
	mu.Lock()
	if !lockCursor(f) {
		mu.Unlock()
		t.Fatal("the cursor's lock was not had in 2 s")
	}
	var b [cursorLen]byte
	binary.LittleEndian.PutUint32(b[:], uint32(holder.ports[0]))
	_, err := f.WriteAt(b[:], cursorAt)
	setLock(f, unix.F_UNLCK, cursorAt, cursorLen)
	mu.Unlock()
	if err != nil {
		t.Fatalf("setting the cursor back: %v", err)
	}
	held := map[int]bool{}
	for _, p := range holder.ports {
		held[p] = true
	}
	next := startChild(t, 50, dir)
	for _, p := range next.ports {
		if held[p] {
			t.Errorf("port %d, held by a live process, was handed out by another", p)
		}
	}
}

// A port released comes back only after the rest of the range: the
// next process goes on where the last one ended (past ports something
// listens on), not from the bottom of the range, where it would take
// them all again, nor from anywhere, so that what is left of a killed
// test run does not meet the next run's servers.
func TestPortsComeRoundTheRange(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	first := startChild(t, 50, dir)
	first.stop()
	second := startChild(t, 50, dir)
	was := map[int]bool{}
	for _, p := range first.ports {
		was[p] = true
	}
	for _, p := range second.ports {
		if was[p] {
			t.Errorf("port %d handed out again by the next process", p)
		}
	}
	lo, hi := poolFor(ephemeral(t))
	last, next := first.ports[len(first.ports)-1], second.ports[0]
	if d := (next - last + hi - lo) % (hi - lo); d == 0 || d > 1000 {
		t.Errorf("the next process began at port %d, the last ended at %d", next, last)
	}
}

// A process that holds the cursor and does not let it go (stopped by a
// test that paused its process group while it searched) keeps no other
// from picking: the search waits a while (once), then starts at its
// own.
func TestAStuckCursorDoesNotStopTheSearch(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	f, err := os.OpenFile(filepath.Join(dir, "retainer-freeport.lock"), os.O_RDWR|os.O_CREATE, 0o666)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	mu.Lock()
	held := lockCursor(f)
	mu.Unlock()
	if !held {
		t.Fatal("the cursor's lock was not had")
	}
	c := startChild(t, 10, dir) // fails unless it printed its ports
	c.stop()
}
