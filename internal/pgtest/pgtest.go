// Package pgtest starts a real PostgreSQL server inside a test: Debian's
// postgresql binaries, a fresh cluster made by initdb in a temporary
// directory, listening on a loopback port of its own, stopped when the
// test ends. CI installs postgresql (.ci/run); elsewhere a machine without
// it skips these tests and says how to get it. Imported by tests only.
package pgtest

import (
	"fmt"
	"net"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/retainer-gw/retainer/internal/freeport"
)

// Server is a PostgreSQL started by a test.
type Server struct {
	// DSN reaches the server's postgres database as its superuser.
	DSN string

	pgCtl  func(args ...string) error // pg_ctl on the server's data directory
	opts   string                     // its start options
	pgdata string                     // the data directory
}

// Stop stops the server at once (an outage: "-m immediate"); Restart
// starts it again on the same port and data.
func (s *Server) Stop(t testing.TB) {
	t.Helper()
	if err := s.pgCtl("-m", "immediate", "-w", "-t", "30", "stop"); err != nil {
		t.Fatalf("pg_ctl stop: %v", err)
	}
}

// Restart starts a server Stop stopped.
func (s *Server) Restart(t testing.TB) {
	t.Helper()
	if err := s.pgCtl("-o", s.opts, "-w", "-t", "60", "start"); err != nil {
		t.Fatalf("pg_ctl start: %v", err)
	}
}

// bin finds the newest installed PostgreSQL's binaries.
func bin(t testing.TB) string {
	dirs, _ := filepath.Glob("/usr/lib/postgresql/*/bin")
	sort.Strings(dirs)
	for i := len(dirs) - 1; i >= 0; i-- {
		if _, err := os.Stat(filepath.Join(dirs[i], "initdb")); err == nil {
			return dirs[i]
		}
	}
	if os.Getenv("CI") != "" {
		t.Fatal("postgresql is missing in CI: .ci/run installs it")
	}
	t.Skip("postgresql is not installed (apt-get install postgresql); CI runs this test")
	return ""
}

// Start initializes and starts a server for t. initdb refuses to run as
// root, so as root the cluster belongs to the postgres user.
func Start(t testing.TB) *Server {
	t.Helper()
	return start(t, " -c fsync=off")
}

// StartDurable is Start with fsync on, as a production server runs: for
// measurements of what a commit costs.
func StartDurable(t testing.TB) *Server {
	t.Helper()
	return start(t, "")
}

func start(t testing.TB, extra string) *Server {
	t.Helper()
	dir := bin(t)
	data, err := os.MkdirTemp("", "retainer-pg-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(data) })
	run := func(name string, args ...string) *exec.Cmd {
		return exec.Command(filepath.Join(dir, name), args...)
	}
	asOwner := func(c *exec.Cmd) *exec.Cmd { return c }
	if os.Geteuid() == 0 {
		u, err := user.Lookup("postgres")
		if err != nil {
			t.Fatalf("running as root needs the postgres user: %v", err)
		}
		uid, _ := strconv.Atoi(u.Uid)
		gid, _ := strconv.Atoi(u.Gid)
		if err := os.Chown(data, uid, gid); err != nil {
			t.Fatal(err)
		}
		asOwner = func(c *exec.Cmd) *exec.Cmd {
			return exec.Command("runuser", append([]string{"-u", "postgres", "--", c.Path}, c.Args[1:]...)...)
		}
	}
	pgdata := filepath.Join(data, "data")
	if out, err := asOwner(run("initdb", "-A", "trust", "-U", "postgres", "-E", "UTF8", "--no-sync", "-D", pgdata)).CombinedOutput(); err != nil {
		t.Fatalf("initdb: %v\n%s", err, out)
	}
	port := freeport.Pick()
	opts := fmt.Sprintf("-p %d -k %s -c listen_addresses=127.0.0.1", port, data) + extra
	if out, err := asOwner(run("pg_ctl", "-D", pgdata, "-o", opts, "-l", filepath.Join(data, "log"), "-w", "-t", "60", "start")).CombinedOutput(); err != nil {
		log, _ := os.ReadFile(filepath.Join(data, "log"))
		t.Fatalf("pg_ctl start: %v\n%s\n%s", err, out, log)
	}
	t.Cleanup(func() {
		asOwner(run("pg_ctl", "-D", pgdata, "-m", "immediate", "-w", "-t", "30", "stop")).Run()
	})
	deadline := time.Now().Add(10 * time.Second)
	for {
		c, err := net.Dial("tcp", fmt.Sprintf("127.0.0.1:%d", port))
		if err == nil {
			c.Close()
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("postgres is not listening on %d", port)
		}
		time.Sleep(50 * time.Millisecond)
	}
	pgCtl := func(args ...string) error {
		args = append([]string{"-D", pgdata, "-l", filepath.Join(data, "log")}, args...)
		if out, err := asOwner(run("pg_ctl", args...)).CombinedOutput(); err != nil {
			return fmt.Errorf("%v: %s", err, out)
		}
		return nil
	}
	return &Server{DSN: fmt.Sprintf("postgres://postgres@127.0.0.1:%d/postgres?sslmode=disable", port), pgCtl: pgCtl, opts: opts, pgdata: pgdata}
}

// Pause stops every process of the server (SIGSTOP): the postmaster and
// its children. Connections stay open and nothing is answered, nor any
// new connection accepted, as a server cut off by dropped packets (no
// reset) looks to its clients, until Resume.
func (s *Server) Pause(t testing.TB) { s.signal(t, syscall.SIGSTOP) }

// Resume continues a paused server (SIGCONT).
func (s *Server) Resume(t testing.TB) { s.signal(t, syscall.SIGCONT) }

// signal sends sig to the postmaster (the first line of postmaster.pid)
// and every process whose parent it is.
func (s *Server) signal(t testing.TB, sig syscall.Signal) {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(s.pgdata, "postmaster.pid"))
	if err != nil {
		t.Fatalf("reading postmaster.pid: %v", err)
	}
	first, _, _ := strings.Cut(string(data), "\n")
	pid, err := strconv.Atoi(strings.TrimSpace(first))
	if err != nil {
		t.Fatalf("postmaster.pid: %q", first)
	}
	pids := []int{pid}
	entries, _ := os.ReadDir("/proc")
	for _, e := range entries {
		stat, err := os.ReadFile(filepath.Join("/proc", e.Name(), "stat"))
		if err != nil {
			continue
		}
		// pid (comm) state ppid ...: comm may hold spaces, so read after ')'.
		_, rest, ok := strings.Cut(string(stat), ") ")
		if f := strings.Fields(rest); ok && len(f) > 1 && f[1] == strconv.Itoa(pid) {
			if child, err := strconv.Atoi(e.Name()); err == nil {
				pids = append(pids, child)
			}
		}
	}
	for _, p := range pids {
		syscall.Kill(p, sig)
	}
}
