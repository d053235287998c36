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
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/retainer-gw/retainer/internal/freeport"
	"golang.org/x/sys/unix"
)

// A second gateway's public and admin ports, beside the first's (testPort,
// adminPort).
var (
	secondPort  = freeport.For("second public")
	secondAdmin = freeport.For("second admin")
)

// secondConfig is the Caddyfile at config with its store, and its public
// and admin ports when port and admin are not 0, replaced: another
// gateway's.
func secondConfig(t *testing.T, config, store string, port, admin int) string {
	data, err := os.ReadFile(config)
	if err != nil {
		t.Fatal(err)
	}
	s := string(data)
	i := strings.Index(s, "\t\tstore ")
	j := i + strings.IndexByte(s[i:], '\n')
	s = s[:i] + "\t\tstore " + store + s[j:]
	if port != 0 {
		s = strings.ReplaceAll(s, fmt.Sprintf(":%d ", testPort), fmt.Sprintf(":%d ", port))
	}
	if admin != 0 {
		s = strings.Replace(s, fmt.Sprintf("localhost:%d", adminPort), fmt.Sprintf("localhost:%d", admin), 1)
	}
	path := filepath.Join(t.TempDir(), "second.Caddyfile")
	if err := os.WriteFile(path, []byte(s), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

// deployBystander deploys, as alice, a handle that counts its visits in
// its isolate, and answers its URL.
func deployBystander(t *testing.T, gw *gateway) string {
	t.Helper()
	status, body := call(t, "POST", gw.api+"/executions", gw.token, fmt.Sprintf(`{"retainHandles": true, "code": %q}`, counterHandler))
	var dep struct{ ExecutionID string }
	json.Unmarshal([]byte(body), &dep)
	if status != 200 || dep.ExecutionID == "" {
		t.Fatalf("deploy: %d %s", status, body)
	}
	return fmt.Sprintf("http://%s.apps.localhost:%d/", dep.ExecutionID, testPort)
}

// visitor visits url on a new connection each time (so that a connection
// a reload or a second listener dropped shows), and checks that each
// answer is the next count: a visit another gateway answered, or one
// answered 503, breaks the run. A connection that fails is kept apart,
// with its time.
type visitor struct {
	url     string
	client  *http.Client
	next    int
	errs    []string
	dropped []time.Time
}

func newVisitor(url string, next int) *visitor {
	tr := client.Transport.(*http.Transport).Clone()
	tr.DisableKeepAlives = true
	return &visitor{url: url, next: next, client: &http.Client{Timeout: 20 * time.Second, Transport: tr}}
}

func (v *visitor) visit() {
	res, err := v.client.Get(v.url)
	if err != nil {
		v.dropped = append(v.dropped, time.Now())
		v.errs = append(v.errs, fmt.Sprintf("visit %d: %v", v.next, err))
		return
	}
	body, _ := io.ReadAll(res.Body)
	res.Body.Close()
	if res.StatusCode != 200 || string(body) != fmt.Sprint(v.next) {
		v.errs = append(v.errs, fmt.Sprintf("visit %d: %d %q", v.next, res.StatusCode, body))
	}
	v.next++
}

// runUntil visits until stop closes, and answers how many visits it made.
func (v *visitor) runUntil(stop <-chan struct{}) int {
	first := v.next
	for {
		select {
		case <-stop:
			return v.next - first
		default:
		}
		v.visit()
	}
}

// refusedStart runs a gateway on config, which must exit with an error
// within 20 s; meanwhile a client polls port (unless it is 0) with
// requests. It answers the gateway's output and how many connections the
// port took (a request that arrives before the app starts waits for it:
// App.awaitStart).
func refusedStart(t *testing.T, ctx context.Context, config string, port int) (string, int) {
	t.Helper()
	ctx, cancel := context.WithTimeout(ctx, 20*time.Second)
	defer cancel()
	var out bytes.Buffer
	cmd := binary(ctx, "run", "--config", config)
	cmd.Stdout, cmd.Stderr = &out, &out
	var taken atomic.Int32
	stop := make(chan struct{})
	var wg sync.WaitGroup
	if port != 0 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			req := []byte("GET / HTTP/1.1\r\nHost: api.localhost\r\nConnection: close\r\n\r\n")
			for {
				select {
				case <-stop:
					return
				default:
				}
				c, err := net.DialTimeout("tcp", fmt.Sprintf("127.0.0.1:%d", port), time.Second)
				if err != nil {
					time.Sleep(time.Millisecond)
					continue
				}
				taken.Add(1)
				c.SetDeadline(time.Now().Add(100 * time.Millisecond))
				c.Write(req)
				c.Read(make([]byte, 64))
				c.Close()
			}
		}()
	}
	start := time.Now()
	err := cmd.Run()
	close(stop)
	wg.Wait()
	if err == nil || ctx.Err() != nil {
		t.Fatalf("the second gateway was not refused (%v, after %v):\n%s", err, time.Since(start), out.String())
	}
	if _, ok := err.(*exec.ExitError); !ok {
		t.Fatalf("the second gateway: %v", err)
	}
	t.Logf("the second gateway refused after %v", time.Since(start).Round(time.Millisecond))
	return out.String(), int(taken.Load())
}

// A gateway started on the store a running gateway holds is refused while
// it provisions, at once, naming the store and that another process (its
// pid) holds it: its port never takes a connection (it answered 503 "starting" for
// the 5 s bbolt waited for the lock, then failed). The running gateway's handle
// keeps its isolate and count. `validate` of that config beside it
// passes, and after the running gateway is killed (-9) the store starts
// again at once: bbolt's lock ended with the process.
func TestASecondGatewayOnAHeldStoreIsRefused(t *testing.T) {
	dir := t.TempDir()
	store := filepath.Join(dir, "registry.db")
	config := exampleConfig(t, store)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	gw := startGateway(t, ctx, config)
	defer gw.stop()
	handle := deployBystander(t, gw)
	v := newVisitor(handle, 1)
	v.visit()

	// The same store spelt through a linked folder, on other ports.
	link := filepath.Join(t.TempDir(), "linked")
	if err := os.Symlink(dir, link); err != nil {
		t.Fatal(err)
	}
	second := secondConfig(t, config, filepath.Join(link, "registry.db"), secondPort, secondAdmin)
	for i := range 3 {
		out, taken := refusedStart(t, ctx, second, secondPort)
		if taken > 0 {
			t.Fatalf("attempt %d: the refused gateway's port took %d connections", i, taken)
		}
		if !strings.Contains(out, fmt.Sprintf("registry.db: another process holds its lock (pid %d)", gw.cmd.Process.Pid)) || !strings.Contains(out, "another gateway runs on this store") {
			t.Fatalf("attempt %d: the second gateway's error does not say the store is held:\n%s", i, out)
		}
		v.visit()
	}
	if out, err := binary(ctx, "validate", "--config", second).CombinedOutput(); err != nil {
		t.Fatalf("validate beside the gateway that holds the store: %v\n%s", err, out)
	}
	v.visit()
	if len(v.errs) > 0 {
		t.Fatalf("the bystander: %v", v.errs)
	}

	gw.cmd.Process.Kill()
	gw.cmd.Wait()
	start := time.Now()
	gw = startGateway(t, ctx, config)
	defer gw.stop()
	t.Logf("started again %v after kill -9", time.Since(start).Round(time.Millisecond))
	if status, body := call(t, "GET", handle, "", ""); status != 200 || body != "1" {
		t.Fatalf("the bystander's handle after kill -9 and a start: %d %q", status, body)
	}
}

// A gateway started on the port a running gateway serves, with a store of
// its own, is refused while it provisions, naming the port and the
// running gateway's pid: Caddy listens with SO_REUSEPORT (for its own
// reloads), and the second gateway took half the port's connections. A
// visitor of the running gateway's handle, on a new connection each time,
// meets nothing else meanwhile and through six reloads of the running
// gateway's config: each visit is answered with the next count (a
// reload's new HTTP server, started before its retainer app, answered
// 503 "starting": App.awaitStart).
func TestASecondGatewayOnAServedPortIsRefused(t *testing.T) {
	config := exampleConfig(t, filepath.Join(t.TempDir(), "registry.db"))
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	gw := startGateway(t, ctx, config)
	defer gw.stop()
	v := newVisitor(deployBystander(t, gw), 1)
	v.visit()
	stop := make(chan struct{})
	done := make(chan struct{})
	var visits int
	go func() {
		defer close(done)
		visits = v.runUntil(stop)
	}()
	halt := func() {
		select {
		case <-stop:
		default:
			close(stop)
			<-done
		}
	}
	defer halt()
	// When each reload ran (its old listener closes before the command
	// returns).
	var reloads [][2]time.Time
	reload := func() {
		t.Helper()
		start := time.Now()
		if out, err := binary(ctx, "reload", "--config", config, "--address", fmt.Sprintf("localhost:%d", adminPort), "--force").CombinedOutput(); err != nil {
			halt()
			t.Fatalf("reload: %v\n%s", err, out)
		}
		reloads = append(reloads, [2]time.Time{start, time.Now()})
	}
	reload()
	reload()
	time.Sleep(time.Second) // past the reloads' window (below)
	second := secondConfig(t, config, filepath.Join(t.TempDir(), "registry.db"), 0, secondAdmin)
	for i := range 3 {
		out, _ := refusedStart(t, ctx, second, 0)
		want := fmt.Sprintf("port %d is served by another Retainer gateway (pid %d)", testPort, gw.cmd.Process.Pid)
		if !strings.Contains(out, want) {
			halt()
			t.Fatalf("attempt %d: the second gateway's error does not say %q:\n%s", i, want, out)
		}
	}
	for _, args := range [][]string{{"validate", "--config", second}, {"adapt", "--config", second, "--validate"}} {
		if out, err := binary(ctx, args...).CombinedOutput(); err != nil {
			halt()
			t.Fatalf("%s beside the gateway that serves the port: %v\n%s", args, err, out)
		}
	}
	for range 4 {
		reload()
	}
	time.Sleep(200 * time.Millisecond)
	halt()
	t.Logf("%d visits through six reloads and three refused starts", visits)
	if visits == 0 {
		t.Fatal("no visit")
	}
	// A connection dropped by a reload is Linux's (docs/decisions.md, "One
	// gateway a store and a port"): allowed, and counted, only while one
	// ran (or within a second after, for a loaded machine's visitor to see
	// it); an answer that is not the next count is never.
	inReload := 0
	for _, at := range v.dropped {
		for _, r := range reloads {
			if !at.Before(r[0]) && at.Before(r[1].Add(time.Second)) {
				inReload++
				break
			}
		}
	}
	if len(v.errs) > len(v.dropped) || inReload < len(v.dropped) {
		if len(v.errs) > 5 {
			v.errs = v.errs[:5]
		}
		t.Fatalf("the bystander's visitor (%d visits, %d connections dropped, %d of them during a reload): %v", visits, len(v.dropped), inReload, v.errs)
	}
	t.Logf("%d connections dropped during the reloads", len(v.dropped))
}

// A gateway started with a port and a store of its own on the admin
// address a running gateway serves is refused while it provisions, naming
// the address and the running gateway's pid: Caddy binds its admin
// endpoint with SO_REUSEPORT, before the apps provision, and both started,
// admin requests (a reload, `/stop`) reaching either. A gateway on a port
// a process that is no gateway listens on with SO_REUSEPORT (a plain
// Caddy) is refused too, naming that process. Neither refused gateway's
// port takes a connection; the running gateway's handle keeps its count,
// and its own reload through the admin address reaches it.
func TestASecondGatewayOnAServedAdminAddressIsRefused(t *testing.T) {
	config := exampleConfig(t, filepath.Join(t.TempDir(), "registry.db"))
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	gw := startGateway(t, ctx, config)
	defer gw.stop()
	v := newVisitor(deployBystander(t, gw), 1)
	v.visit()

	second := secondConfig(t, config, filepath.Join(t.TempDir(), "registry.db"), secondPort, 0)
	for i := range 2 {
		out, taken := refusedStart(t, ctx, second, secondPort)
		want := fmt.Sprintf(":%d is listened on by another process (pid %d)", adminPort, gw.cmd.Process.Pid)
		if !strings.Contains(out, want) || taken > 0 {
			t.Fatalf("attempt %d: %d connections taken; the error does not say %q:\n%s", i, taken, want, out)
		}
		v.visit()
	}

	lc := net.ListenConfig{Control: func(_, _ string, c syscall.RawConn) error {
		var serr error
		c.Control(func(fd uintptr) { serr = syscall.SetsockoptInt(int(fd), syscall.SOL_SOCKET, unix.SO_REUSEPORT, 1) })
		return serr
	}}
	plain, err := lc.Listen(ctx, "tcp", fmt.Sprintf("127.0.0.1:%d", secondPort))
	if err != nil {
		t.Fatal(err)
	}
	defer plain.Close()
	third := secondConfig(t, config, filepath.Join(t.TempDir(), "registry.db"), secondPort, secondAdmin)
	out, _ := refusedStart(t, ctx, third, 0)
	want := fmt.Sprintf(":%d is listened on by another process (pid %d)", secondPort, os.Getpid())
	if !strings.Contains(out, want) {
		t.Fatalf("beside a plain listener: the error does not say %q:\n%s", want, out)
	}
	plain.Close()

	if out, err := binary(ctx, "reload", "--config", config, "--address", fmt.Sprintf("localhost:%d", adminPort), "--force").CombinedOutput(); err != nil {
		t.Fatalf("reload: %v\n%s", err, out)
	}
	v.visit()
	v.visit()
	if len(v.errs) > 0 {
		t.Fatalf("the bystander: %v", v.errs)
	}
}
