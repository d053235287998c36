// Package s3test starts a real S3-compatible server inside a test:
// SeaweedFS's `weed server -s3` (master, volume server, filer and S3
// gateway in one process) on loopback ports of its own and a temporary
// directory, with one identity's keys, stopped when the test ends. The
// binary is built from the Go module proxy at the version in weed.version,
// once, into the user's cache (.ci/run does it in CI; see
// docs/objects-s3.md). Imported by tests only.
package s3test

import (
	_ "embed"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/retainer-gw/retainer/internal/freeport"
)

//go:embed weed.version
var version string

// Version is the SeaweedFS module version the tests run.
var Version = strings.TrimSpace(version)

// Server is a SeaweedFS started by a test.
type Server struct {
	// Endpoint is the S3 URL, http://127.0.0.1:<port>.
	Endpoint  string
	Region    string
	AccessKey string
	SecretKey string

	dir     string
	sockets []string // weed's gRPC sockets, which it puts in /tmp
	cmd     *exec.Cmd
	done    chan struct{} // closed when the process has ended
}

// Binary is where the weed binary is looked for: $RETAINER_WEED, else
// the user's cache directory's retainer/weed-<version>.
func Binary() string {
	if p := os.Getenv("RETAINER_WEED"); p != "" {
		return p
	}
	dir, err := os.UserCacheDir()
	if err != nil {
		dir = os.TempDir()
	}
	return filepath.Join(dir, "retainer", "weed-"+Version)
}

// BuildHint says how to build the binary where Binary looks.
func BuildHint() string {
	return fmt.Sprintf("cd $(go mod download -json github.com/seaweedfs/seaweedfs@%s | sed -n 's/.*\"Dir\": \"\\(.*\\)\".*/\\1/p') && CGO_ENABLED=0 go build -o %s ./weed   (about 5 minutes; .ci/run does it)", Version, Binary())
}

// Start starts a server for t and stops it when t ends. A missing binary
// fails the test, saying how to build it: the S3 backend is never left
// untested quietly.
func Start(t testing.TB) *Server {
	t.Helper()
	s, err := New()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.Close)
	return s
}

// New starts a server a TestMain shares among a package's tests; Close
// stops it.
func New() (*Server, error) {
	bin := Binary()
	if _, err := os.Stat(bin); err != nil {
		return nil, fmt.Errorf("SeaweedFS is missing (%v); build it: %s", err, BuildHint())
	}
	dir, err := os.MkdirTemp("", "retainer-s3-")
	if err != nil {
		return nil, err
	}
	s := &Server{Region: "us-east-1", AccessKey: "retainer-test", SecretKey: "retainer-test-secret-key", dir: dir, done: make(chan struct{})}
	fail := func(err error) (*Server, error) {
		if s.cmd != nil {
			s.Close()
		} else {
			os.RemoveAll(dir)
		}
		return nil, err
	}
	conf := fmt.Sprintf(`{"identities": [{"name": "retainer", "credentials": [{"accessKey": %q, "secretKey": %q}], "actions": ["Admin", "Read", "List", "Tagging", "Write"]}]}`, s.AccessKey, s.SecretKey)
	confPath := filepath.Join(dir, "s3.json")
	if err := os.WriteFile(confPath, []byte(conf), 0o600); err != nil {
		return fail(err)
	}
	data := filepath.Join(dir, "data")
	if err := os.Mkdir(data, 0o700); err != nil {
		return fail(err)
	}
	p, err := freePorts(8)
	if err != nil {
		return fail(err)
	}
	port := func(i int) string { return strconv.Itoa(p[i]) }
	for i, name := range []string{1: "master", 3: "volume", 5: "filer", 7: "s3"} {
		if name != "" {
			s.sockets = append(s.sockets, fmt.Sprintf("/tmp/seaweedfs-%s-grpc-%d.sock", name, p[i]))
		}
	}
	args := []string{"server",
		"-dir=" + data, "-ip=127.0.0.1", "-ip.bind=127.0.0.1",
		"-master.port=" + port(0), "-master.port.grpc=" + port(1),
		"-master.telemetry=false", "-master.volumeSizeLimitMB=256",
		"-volume.port=" + port(2), "-volume.port.grpc=" + port(3),
		"-volume.preStopSeconds=0", "-volume.max=0",
		"-filer", "-filer.port=" + port(4), "-filer.port.grpc=" + port(5),
		"-filer.localSocket=" + filepath.Join(dir, "filer.sock"),
		"-s3", "-s3.port=" + port(6), "-s3.port.grpc=" + port(7),
		"-s3.port.iceberg=0", "-s3.port.lance=0",
		"-s3.config=" + confPath,
		"-s3.localSocket=" + filepath.Join(dir, "s3.sock"),
	}
	log, err := os.Create(filepath.Join(dir, "weed.log"))
	if err != nil {
		return fail(err)
	}
	cmd := exec.Command(bin, args...)
	cmd.Dir = dir
	// SeaweedFS keeps objects as a filer's files: a key's segment between
	// slashes may be at most 255 bytes unless raised (docs/objects-s3.md);
	// the tests take keys of 1,024 bytes.
	cmd.Env = append(os.Environ(), "WEED_FILER_OPTIONS_MAX_FILE_NAME_LENGTH=1024")
	cmd.Stdout, cmd.Stderr = log, log
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		log.Close()
		return fail(fmt.Errorf("starting %s: %v", bin, err))
	}
	s.cmd = cmd
	go func() { cmd.Wait(); log.Close(); close(s.done) }()
	s.Endpoint = "http://127.0.0.1:" + port(6)
	if err := s.wait("http://127.0.0.1:"+port(0), "http://127.0.0.1:"+port(4)); err != nil {
		out, _ := os.ReadFile(filepath.Join(dir, "weed.log"))
		if len(out) > 8000 {
			out = out[len(out)-8000:]
		}
		return fail(fmt.Errorf("SeaweedFS did not become ready: %v\n%s", err, out))
	}
	return s, nil
}

// Close stops the server and removes its data.
func (s *Server) Close() {
	s.stop()
	os.RemoveAll(s.dir)
	for _, f := range s.sockets {
		os.Remove(f)
	}
}

// wait polls until the master hands out a file id (a volume is
// writable), the filer answers and the S3 gateway answers.
func (s *Server) wait(master, filer string) error {
	deadline := time.Now().Add(60 * time.Second)
	c := &http.Client{Timeout: 5 * time.Second}
	ok := func(u string, want func(*http.Response) bool) bool {
		r, err := c.Get(u)
		if err != nil {
			return false
		}
		defer r.Body.Close()
		return want(r)
	}
	for _, step := range []struct {
		url  string
		want func(*http.Response) bool
	}{
		{master + "/dir/assign", func(r *http.Response) bool {
			var b [512]byte
			n, _ := r.Body.Read(b[:])
			return r.StatusCode == 200 && strings.Contains(string(b[:n]), `"fid"`)
		}},
		{filer + "/", func(r *http.Response) bool { return r.StatusCode < 500 }},
		{s.Endpoint + "/", func(r *http.Response) bool { return r.StatusCode == 403 || r.StatusCode == 200 }},
	} {
		for !ok(step.url, step.want) {
			select {
			case <-s.done:
				return fmt.Errorf("weed exited: %v", s.cmd.ProcessState)
			case <-time.After(100 * time.Millisecond):
			}
			if time.Now().After(deadline) {
				return fmt.Errorf("%s did not answer in 60 s", step.url)
			}
		}
	}
	return nil
}

// stop ends the process group: SIGTERM, then SIGKILL after 2 s (weed
// takes 10 s and more to stop gracefully; its data is thrown away).
func (s *Server) stop() {
	syscall.Kill(-s.cmd.Process.Pid, syscall.SIGTERM)
	select {
	case <-s.done:
	case <-time.After(2 * time.Second):
		syscall.Kill(-s.cmd.Process.Pid, syscall.SIGKILL)
		<-s.done
	}
}

// freePorts are n ports nothing listens on now, no two equal
// (internal/freeport).
func freePorts(n int) ([]int, error) { return freeport.PickN(n), nil }

// Pause stops the server's processes where they are (SIGSTOP): its
// sockets stay open and answer nothing, as a stalled service does.
// Resume lets them go on. A test that pauses resumes before Close.
// It returns once every thread of the server has stopped: a signal is
// delivered when each thread next enters the kernel, and a request sent
// at once could still be answered (TestObjectsS3Stalled got its object
// back once in a fresh-clone CI run).
func (s *Server) Pause() {
	syscall.Kill(-s.cmd.Process.Pid, syscall.SIGSTOP)
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline) && !allStopped(s.cmd.Process.Pid); {
		time.Sleep(time.Millisecond)
	}
}

// allStopped says whether every thread of process pid is stopped (state
// T in /proc/<pid>/task/*/stat, the letter after the command's ")").
func allStopped(pid int) bool {
	tasks, err := os.ReadDir(fmt.Sprintf("/proc/%d/task", pid))
	if err != nil || len(tasks) == 0 {
		return false
	}
	for _, task := range tasks {
		b, err := os.ReadFile(fmt.Sprintf("/proc/%d/task/%s/stat", pid, task.Name()))
		if err != nil {
			continue // a thread that ended
		}
		i := strings.LastIndexByte(string(b), ')')
		if i < 0 || i+2 >= len(b) || (b[i+2] != 'T' && b[i+2] != 't') {
			return false
		}
	}
	return true
}

// Resume undoes Pause.
func (s *Server) Resume() { syscall.Kill(-s.cmd.Process.Pid, syscall.SIGCONT) }

// Kill ends the server at once (SIGKILL), as a crash would; Close still
// removes its data.
func (s *Server) Kill() {
	syscall.Kill(-s.cmd.Process.Pid, syscall.SIGKILL)
	<-s.done
}
