package files

import (
	"bufio"
	"context"
	"io"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"testing"

	"github.com/retainer-gw/retainer/objects"
)

// TestCrashHelper is the process TestKill9 kills: it puts "done" whole,
// says so, then starts a put of "k" that never ends.
func TestCrashHelper(t *testing.T) {
	dir := os.Getenv("OBJECTS_CRASH_DIR")
	if dir == "" {
		t.Skip("run by TestKill9")
	}
	f, err := Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.Put(context.Background(), "s", "done", strings.NewReader(strings.Repeat("d", 1<<20)), objects.Info{}); err != nil {
		t.Fatal(err)
	}
	pr, pw := io.Pipe()
	go func() {
		pw.Write(make([]byte, 3<<20))
		os.Stdout.WriteString("putting\n")
		select {} // the rest never comes
	}()
	f.Put(context.Background(), "s", "k", pr, objects.Info{})
}

// TestKill9: a put that returned survives kill -9 of its process; a put
// under way when it is killed leaves the old object, and its temporary
// file is gone once the space is opened again.
func TestKill9(t *testing.T) {
	dir := t.TempDir()
	f, _ := Open(dir)
	put(t, f, "s", "k", "old")
	cmd := exec.Command(os.Args[0], "-test.run=^TestCrashHelper$", "-test.v")
	cmd.Env = append(os.Environ(), "OBJECTS_CRASH_DIR="+dir)
	out, _ := cmd.StdoutPipe()
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	sc := bufio.NewScanner(out)
	for sc.Scan() && sc.Text() != "putting" {
	}
	cmd.Process.Signal(syscall.SIGKILL)
	cmd.Wait()
	if tmps, _ := os.ReadDir(dir + "/s/tmp"); len(tmps) != 1 {
		t.Fatalf("the killed put's temporary file: %d files", len(tmps))
	}
	g, _ := Open(dir)
	if got := read(t, g, "s", "done", nil); got != strings.Repeat("d", 1<<20) {
		t.Fatalf("the put that returned: %d bytes", len(got))
	}
	if got := read(t, g, "s", "k", nil); got != "old" {
		t.Fatalf("the put under way: %d bytes", len(got))
	}
	if tmps, _ := os.ReadDir(dir + "/s/tmp"); len(tmps) != 0 {
		t.Fatalf("temporary files left: %d", len(tmps))
	}
}
