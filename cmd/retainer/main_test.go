package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	caddycmd "github.com/caddyserver/caddy/v2/cmd"

	"github.com/retainer-gw/retainer/internal/etcdtest"
	"github.com/retainer-gw/retainer/internal/freeport"
	"github.com/retainer-gw/retainer/internal/waitfor"
	"github.com/retainer-gw/retainer/workers"
)

// The test binary is the product's binary: run as `retainer ...` (the env
// var) or as a worker (the gateway starts /proc/self/exe retainer-worker,
// with an empty environment), it is caddycmd.Main with the same modules.
func TestMain(m *testing.M) {
	etcdtest.ServeIfAsked() // an etcd of a test's own process (etcdtest.StartProcess)
	if os.Getenv("RETAINER_TEST_AS_BINARY") == "1" || len(os.Args) > 1 && os.Args[1] == workers.Subcommand {
		caddycmd.Main()
		return
	}
	os.Exit(m.Run())
}

const secret = "operator-test-secret-operator-test-secret"

// The one-machine gateway's public and admin ports, free ones picked once
// per test process (internal/freeport), so a second run of these tests at
// the same time picks its own.
var (
	testPort  = freeport.For("public")
	adminPort = freeport.For("admin")
)

// binary runs this test binary as the retainer binary.
func binary(ctx context.Context, args ...string) *exec.Cmd {
	cmd := exec.CommandContext(ctx, os.Args[0], args...)
	cmd.Env = append(os.Environ(), "RETAINER_TEST_AS_BINARY=1", "RETAINER_JWT_SECRET="+secret)
	return cmd
}

// exampleConfig is Caddyfile.example with the test's ports and store.
func exampleConfig(t *testing.T, store string) string {
	data, err := os.ReadFile("../../Caddyfile.example")
	if err != nil {
		t.Fatal(err)
	}
	s := string(data)
	s = strings.Replace(s, "admin localhost:2019", fmt.Sprintf("admin localhost:%d", adminPort), 1)
	s = strings.ReplaceAll(s, ":8080", fmt.Sprintf(":%d", testPort))
	s = strings.Replace(s, "retainer {", "retainer {\n\t\tstore "+store, 1)
	path := filepath.Join(t.TempDir(), "Caddyfile")
	if err := os.WriteFile(path, []byte(s), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

var client = &http.Client{Timeout: 20 * time.Second, Transport: &http.Transport{DialContext: func(ctx context.Context, network, addr string) (net.Conn, error) {
	if strings.HasSuffix(addr, fmt.Sprintf(":%d", testPort)) {
		addr = fmt.Sprintf("127.0.0.1:%d", testPort)
	}
	return (&net.Dialer{}).DialContext(ctx, network, addr)
}}}

func call(t *testing.T, method, url, token string, body string) (int, string) {
	t.Helper()
	req, _ := http.NewRequest(method, url, strings.NewReader(body))
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	res, err := client.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	data, _ := io.ReadAll(res.Body)
	return res.StatusCode, string(data)
}

// strayWorkers counts the worker processes of this test binary (their
// executable, read through /proc) that the running gateway gw did not
// start: what a `caddy validate` beside it left behind. Such a worker is
// an orphan once validate exits (its parent the machine's init), so it is
// found by what it runs, not by whose child it is; other packages' tests
// run gateways of other binaries at the same time.
func strayWorkers(t *testing.T, gw *gateway) int {
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	entries, _ := os.ReadDir("/proc")
	parent := map[int]int{}
	var found []int
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		stat, err := os.ReadFile(filepath.Join("/proc", e.Name(), "stat"))
		if err != nil {
			continue
		}
		// pid (comm) state ppid ...: comm may hold spaces, not ")".
		if f := strings.Fields(string(stat[bytes.LastIndexByte(stat, ')')+1:])); len(f) > 1 {
			parent[pid], _ = strconv.Atoi(f[1])
		}
		cmdline, err := os.ReadFile(filepath.Join("/proc", e.Name(), "cmdline"))
		if err != nil || !bytes.Contains(cmdline, []byte("\x00"+workers.Subcommand)) {
			continue
		}
		if exe, err := os.Readlink(filepath.Join("/proc", e.Name(), "exe")); err == nil && exe == self {
			found = append(found, pid)
		}
	}
	n := 0
	for _, w := range found {
		p := parent[w]
		for p > 1 && p != gw.cmd.Process.Pid {
			p = parent[p]
		}
		if p != gw.cmd.Process.Pid {
			n++
		}
	}
	return n
}

// gateway is the binary serving a config, and a token for alice.
type gateway struct {
	t     *testing.T
	cmd   *exec.Cmd
	log   *bytes.Buffer
	api   string
	token string
}

func startGateway(t *testing.T, ctx context.Context, config string, env ...string) *gateway {
	t.Helper()
	gw := &gateway{t: t, cmd: binary(ctx, "run", "--config", config), log: &bytes.Buffer{}, api: fmt.Sprintf("http://api.localhost:%d", testPort)}
	gw.cmd.Env = append(gw.cmd.Env, env...)
	gw.cmd.Stdout, gw.cmd.Stderr = gw.log, gw.log
	if err := gw.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	out, err := binary(ctx, "retainer-token", "--sub", "alice").Output()
	if err != nil {
		t.Fatalf("retainer-token: %v", err)
	}
	gw.token = strings.TrimSpace(string(out))
	healthy := func() bool {
		req, _ := http.NewRequest("GET", gw.api+"/health", nil)
		req.Header.Set("Authorization", "Bearer "+gw.token)
		res, err := client.Do(req)
		if err != nil {
			return false
		}
		res.Body.Close()
		return res.StatusCode == 200
	}
	if !waitfor.Within(60*time.Second, healthy) {
		gw.stop()
		t.Fatal("the gateway did not come up")
	}
	return gw
}

// stop ends the gateway as an operator would (SIGINT) and waits for it.
func (gw *gateway) stop() {
	if gw.cmd.ProcessState != nil {
		return
	}
	gw.cmd.Process.Signal(os.Interrupt)
	gw.cmd.Wait()
	if gw.t.Failed() {
		gw.t.Logf("gateway log:\n%s", gw.log.String())
	}
}

// The gateway collects at its own GOGC default unless the operator set
// GOGC, and its workers follow (workers tests the hand-over).
func TestGatewayGCTarget(t *testing.T) {
	for _, c := range []struct {
		env  []string
		want string
	}{{[]string{"GOGC="}, "400"}, {[]string{"GOGC=150"}, "150"}} {
		ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
		gw := startGateway(t, ctx, exampleConfig(t, filepath.Join(t.TempDir(), "registry.db")), c.env...)
		_, metrics := call(t, "GET", fmt.Sprintf("http://localhost:%d/metrics", adminPort), "", "")
		gw.stop()
		cancel()
		if !strings.Contains(metrics, "\ngo_gc_gogc_percent "+c.want+"\n") {
			t.Errorf("%v: the gateway's metrics say %q, want go_gc_gogc_percent %s", c.env, grepLine(metrics, "go_gc_gogc_percent "), c.want)
		}
	}
}

// grepLine is the first line of s that starts with prefix.
func grepLine(s, prefix string) string {
	for _, l := range strings.Split(s, "\n") {
		if strings.HasPrefix(l, prefix) {
			return l
		}
	}
	return ""
}

// A response acknowledged to a visitor means its kv writes survive kill -9
// of the gateway right after (docs/threat-model.md, the output gate).
func TestAcknowledgedWritesSurviveKill9(t *testing.T) {
	config := exampleConfig(t, filepath.Join(t.TempDir(), "registry.db"))
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	gw := startGateway(t, ctx, config)
	status, body := call(t, "POST", gw.api+"/executions", gw.token, `{"retainHandles": true, "capabilities": ["kvRead", "kvWrite"],
		"code": "export default { async fetch(req, env) { const n = Number(await env.kv.get('c') || 0) + 1; await env.kv.put('c', String(n)); return new Response(String(n)) } }"}`)
	var dep struct{ ExecutionID string }
	json.Unmarshal([]byte(body), &dep)
	if status != 200 {
		t.Fatalf("deploy: %d %s", status, body)
	}
	handle := fmt.Sprintf("http://%s.apps.localhost:%d/", dep.ExecutionID, testPort)
	const n = 40
	for i := 1; i <= n; i++ {
		if status, body := call(t, "GET", handle, "", ""); status != 200 || body != fmt.Sprint(i) {
			t.Fatalf("increment %d: %d %s", i, status, body)
		}
	}
	gw.cmd.Process.Kill() // kill -9, right after the last acknowledged response
	gw.cmd.Wait()
	gw = startGateway(t, ctx, config)
	defer gw.stop()
	status, body = call(t, "POST", gw.api+"/executions", gw.token, `{"capabilities": ["kvRead"], "code": "async () => kv.get('c')"}`)
	if status != 200 || !strings.Contains(body, fmt.Sprintf(`"result":"%d"`, n)) {
		t.Fatalf("after kill -9: %d %s", status, body)
	}
}

// The operator's day with the real binary on Caddyfile.example: start,
// mint a token with the subcommand, deploy, validate the live config beside
// the running gateway (no lock, no process left, the handle keeps its
// state), validate a bad config, read the admin endpoints.
func TestOperatorCommands(t *testing.T) {
	dir := t.TempDir()
	store := filepath.Join(dir, "registry.db")
	config := exampleConfig(t, store)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	gw := startGateway(t, ctx, config)
	defer gw.stop()
	api := gw.api
	token := gw.token
	status, body := call(t, "POST", api+"/executions", token, `{"retainHandles": true, "code": "let n = 0; export default { fetch() { return Response.json({served: ++n}) } }"}`)
	var dep struct{ ExecutionID string }
	json.Unmarshal([]byte(body), &dep)
	if status != 200 || dep.ExecutionID == "" {
		t.Fatalf("deploy with the subcommand's token: %d %s", status, body)
	}
	handle := fmt.Sprintf("http://%s.apps.localhost:%d/", dep.ExecutionID, testPort)
	if _, body := call(t, "GET", handle, "", ""); body != `{"served":1}` {
		t.Fatalf("first visit: %s", body)
	}

	// Validate beside the running gateway: it starts no worker, and
	// leaves none (a worker it had started would outlive it only until
	// its connection closed, so the count is given that long).
	// An earlier test's killed gateway's workers end as their connections
	// close: the count starts once they have.
	waitfor.Until(t, 10*time.Second, "no worker but the running gateway's before validate", func() bool { return strayWorkers(t, gw) == 0 })
	start := time.Now()
	val := binary(ctx, "validate", "--config", config)
	if out, err := val.CombinedOutput(); err != nil {
		t.Fatalf("validate beside the gateway: %v\n%s", err, out)
	}
	t.Logf("validate beside a running gateway took %v", time.Since(start))
	waitfor.Until(t, 10*time.Second, "no worker left by validate", func() bool { return strayWorkers(t, gw) == 0 })
	if _, body := call(t, "GET", handle, "", ""); body != `{"served":2}` {
		t.Fatalf("the handle after validate: %s", body)
	}
	bad := filepath.Join(dir, "bad.Caddyfile")
	data, _ := os.ReadFile(config)
	os.WriteFile(bad, bytes.Replace(data, []byte("retainer {"), []byte("retainer {\n\t\tisolation everyone"), 1), 0o600)
	if out, err := binary(ctx, "validate", "--config", bad).CombinedOutput(); err == nil || !strings.Contains(string(out), "isolation") {
		t.Fatalf("a bad config validated: %v\n%s", err, out)
	}

	// The admin endpoints, on the admin listener only.
	admin := fmt.Sprintf("http://localhost:%d", adminPort)
	status, body = call(t, "GET", admin+"/retainer/workers", "", "")
	var workers struct {
		Workers []struct {
			PID      int
			State    string
			Tenant   string
			Isolates int
			RSSBytes int64
		}
	}
	json.Unmarshal([]byte(body), &workers)
	alices := 0
	for _, w := range workers.Workers {
		if w.Tenant == "alice" && w.PID > 0 && w.Isolates >= 1 && w.RSSBytes > 0 {
			alices++
		}
	}
	if status != 200 || alices != 1 {
		t.Fatalf("/retainer/workers: %d %s", status, body)
	}
	status, body = call(t, "GET", admin+"/retainer/handles?tenant=alice", "", "")
	if status != 200 || !strings.Contains(body, `"tenant":"alice","handles":1,"live":1`) {
		t.Fatalf("/retainer/handles: %d %s", status, body)
	}
	if status, body := call(t, "GET", api+"/retainer/workers", token, ""); status != 404 || strings.Contains(body, "pid") {
		t.Fatalf("a site serves the admin endpoint: %d %s", status, body)
	}
}
