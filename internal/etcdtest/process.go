package etcdtest

import (
	"bytes"
	"fmt"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"syscall"
	"testing"
	"time"

	"go.etcd.io/etcd/server/v3/embed"
)

// The environment that makes a test binary an etcd server (ServeIfAsked):
// the data directory, then the client and peer URLs.
const (
	envDir    = "RETAINER_ETCDTEST_DIR"
	envClient = "RETAINER_ETCDTEST_CLIENT"
	envPeer   = "RETAINER_ETCDTEST_PEER"
)

// ServeIfAsked runs an etcd server until the process is killed when the
// test binary was started by StartProcess, and answers otherwise. A
// package whose tests call StartProcess calls it first in its TestMain.
func ServeIfAsked() {
	dir := os.Getenv(envDir)
	if dir == "" {
		return
	}
	client, err1 := url.Parse(os.Getenv(envClient))
	peer, err2 := url.Parse(os.Getenv(envPeer))
	if err1 != nil || err2 != nil {
		fmt.Fprintln(os.Stderr, "etcdtest: bad URLs")
		os.Exit(2)
	}
	cfg := embed.NewConfig()
	cfg.Dir = dir
	cfg.LogLevel = "error"
	cfg.Name = "test"
	cfg.ListenClientUrls = []url.URL{*client}
	cfg.AdvertiseClientUrls = []url.URL{*client}
	cfg.ListenPeerUrls = []url.URL{*peer}
	cfg.AdvertisePeerUrls = []url.URL{*peer}
	cfg.InitialCluster = cfg.InitialClusterFromName(cfg.Name)
	e, err := embed.StartEtcd(cfg)
	if err != nil {
		fmt.Fprintln(os.Stderr, "etcdtest:", err)
		os.Exit(2)
	}
	<-e.Err()
	os.Exit(1)
}

// Process is an etcd in a process of its own (the test binary run again,
// ServeIfAsked), so that a test can stop it as an operator's fault would:
// SIGSTOP (Pause), SIGKILL (Kill), and start it again on the same data and
// ports (Restart).
type Process struct {
	// Endpoint is the client URL, http://127.0.0.1:<port>.
	Endpoint string
	dir      string
	client   url.URL
	peer     url.URL
	cmd      *exec.Cmd
}

// StartProcess starts an etcd process for t, killed when t ends. The
// test binary's TestMain must call ServeIfAsked.
func StartProcess(t testing.TB) *Process {
	t.Helper()
	p := &Process{dir: t.TempDir(), client: freeURL(t), peer: freeURL(t)}
	p.Endpoint = p.client.String()
	t.Cleanup(func() {
		if p.cmd != nil {
			p.cmd.Process.Signal(syscall.SIGCONT)
			p.cmd.Process.Kill()
			p.cmd.Wait()
		}
	})
	p.Restart(t)
	return p
}

// Restart starts the etcd again (after Kill) on its data and ports, and
// waits until it answers.
func (p *Process) Restart(t testing.TB) {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), envDir+"="+p.dir, envClient+"="+p.client.String(), envPeer+"="+p.peer.String())
	cmd.Stderr = os.Stderr
	// The etcd dies with the test process, whatever ends it.
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		t.Fatalf("starting etcd: %v", err)
	}
	p.cmd = cmd
	deadline := time.Now().Add(30 * time.Second)
	for {
		res, err := http.Get(p.Endpoint + "/health")
		if err == nil {
			res.Body.Close()
			if res.StatusCode == 200 {
				return
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("etcd did not become ready in 30 s: %v", err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// Pause stops the etcd process (SIGSTOP): its connections stay open and
// nothing is answered until Resume. It returns once the kernel reports
// the process stopped (at most 5 s): kill(2) only marks the signal
// pending, and on a loaded machine etcd went on answering a request sent
// right after Pause.
func (p *Process) Pause() {
	p.cmd.Process.Signal(syscall.SIGSTOP)
	stat := fmt.Sprintf("/proc/%d/stat", p.cmd.Process.Pid)
	for deadline := time.Now().Add(5 * time.Second); time.Now().Before(deadline); time.Sleep(time.Millisecond) {
		data, err := os.ReadFile(stat)
		// The state follows the command's parenthesised name.
		if i := bytes.LastIndexByte(data, ')'); err != nil || i >= 0 && i+2 < len(data) && data[i+2] == 'T' {
			return
		}
	}
}

// Resume continues a paused etcd (SIGCONT).
func (p *Process) Resume() { p.cmd.Process.Signal(syscall.SIGCONT) }

// Kill ends the etcd at once (SIGKILL): connections are reset, its data
// stays for Restart.
func (p *Process) Kill() {
	p.cmd.Process.Kill()
	p.cmd.Wait()
}
