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
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/retainer-gw/retainer/internal/etcdtest"
	"github.com/retainer-gw/retainer/internal/pgtest"
)

const clusterSecret = "cluster-test-secret-cluster-test-secret"

// clusterConfig is Caddyfile.example for member i of a cluster on etcd
// and PostgreSQL: its own admin, public and cluster ports.
func clusterConfig(t *testing.T, i int, etcd, dsn string) string {
	data, err := os.ReadFile("../../Caddyfile.example")
	if err != nil {
		t.Fatal(err)
	}
	s := string(data)
	s = strings.Replace(s, "admin localhost:2019", fmt.Sprintf("admin localhost:%d", 3980+i), 1)
	s = strings.ReplaceAll(s, ":8080", fmt.Sprintf(":%d", 9280+i))
	s = strings.Replace(s, "retainer {", fmt.Sprintf(`retainer {
		workers 2
		store etcd {
			endpoints %s
			prefix /retainer/test
		}
		receipts postgres {
			dsn %s
		}
		cluster {
			name gw-%d
			listen 127.0.0.1:%d
			secret {env.RETAINER_CLUSTER_SECRET}
			lease 2s
		}`, etcd, dsn, i, 7940+i), 1)
	s = strings.Replace(s, "workers auto", "", 1)
	path := filepath.Join(t.TempDir(), "Caddyfile")
	if err := os.WriteFile(path, []byte(s), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

// clusterClient reaches *.localhost on loopback.
var clusterClient = &http.Client{Timeout: 20 * time.Second, Transport: &http.Transport{DialContext: func(ctx context.Context, network, addr string) (net.Conn, error) {
	if host, port, err := net.SplitHostPort(addr); err == nil && strings.HasSuffix(host, "localhost") {
		addr = "127.0.0.1:" + port
	}
	return (&net.Dialer{}).DialContext(ctx, network, addr)
}}}

func clusterCall(t *testing.T, method, url, token, body string) (int, string) {
	t.Helper()
	req, _ := http.NewRequest(method, url, strings.NewReader(body))
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	res, err := clusterClient.Do(req)
	if err != nil {
		return 0, err.Error()
	}
	defer res.Body.Close()
	data, _ := io.ReadAll(res.Body)
	return res.StatusCode, string(data)
}

// startMember starts member i and waits for its API.
func startMember(t *testing.T, ctx context.Context, i int, etcd, dsn string) *gateway {
	t.Helper()
	gw := &gateway{t: t, cmd: binary(ctx, "run", "--config", clusterConfig(t, i, etcd, dsn)), log: &bytes.Buffer{}, api: fmt.Sprintf("http://api.localhost:%d", 9280+i)}
	gw.cmd.Env = append(gw.cmd.Env, "RETAINER_CLUSTER_SECRET="+clusterSecret)
	gw.cmd.Stdout, gw.cmd.Stderr = gw.log, gw.log
	if err := gw.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(gw.stop)
	out, err := binary(ctx, "retainer-token", "--sub", "alice").Output()
	if err != nil {
		t.Fatalf("retainer-token: %v", err)
	}
	gw.token = strings.TrimSpace(string(out))
	deadline := time.Now().Add(60 * time.Second)
	for {
		if status, _ := clusterCall(t, "GET", gw.api+"/health", gw.token, ""); status == 200 {
			return gw
		}
		if time.Now().After(deadline) || gw.cmd.ProcessState != nil {
			t.Fatalf("member %d did not come up:\n%s", i, gw.log.String())
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// Two gateways on one etcd and one PostgreSQL (docs/cluster.md): a tenant's
// handle is served by one owner whichever gateway a visitor reaches (one
// counter sequence, the API's answers the owner's), receipts are read
// through either, the cluster listener refuses unsigned requests, and
// when the owner is killed the other serves within the lease, with every
// acknowledged kv write kept.
func TestClusterOfTwoGateways(t *testing.T) {
	srv := etcdtest.Start(t)
	pg := pgtest.Start(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	a := startMember(t, ctx, 1, srv.Endpoint, pg.DSN)
	b := startMember(t, ctx, 2, srv.Endpoint, pg.DSN)

	status, body := clusterCall(t, "POST", a.api+"/executions", a.token, `{"retainHandles": true, "capabilities": ["kvRead", "kvWrite"],
		"code": "let served = 0; export default { async fetch(req, env) { const n = Number(await env.kv.get('c') || 0) + 1; await env.kv.put('c', String(n)); served++; return new Response(n + ' ' + served) } }"}`)
	var dep struct{ ExecutionID string }
	json.Unmarshal([]byte(body), &dep)
	if status != 200 || dep.ExecutionID == "" {
		t.Fatalf("deploy through gw-1: %d %s", status, body)
	}
	if status, body := clusterCall(t, "PUT", b.api+"/routes/shop", b.token, fmt.Sprintf(`{"executionId": %q}`, dep.ExecutionID)); status != 200 {
		t.Fatalf("a route bound through gw-2: %d %s", status, body)
	}
	// Visitors alternate between the gateways: one isolate serves them all
	// (its closure count goes on with the kv count).
	for i := 1; i <= 10; i++ {
		gw := []int{9281, 9282}[i%2]
		status, body := clusterCall(t, "GET", fmt.Sprintf("http://shop.apps.localhost:%d/", gw), "", "")
		if want := fmt.Sprintf("%d %d", i, i); status != 200 || body != want {
			t.Fatalf("request %d through port %d: %d %q, want %q", i, gw, status, body, want)
		}
	}
	// The API through the other gateway answers the owner's view.
	status, body = clusterCall(t, "GET", b.api+"/handles/"+dep.ExecutionID, b.token, "")
	t.Logf("GET /handles/{id} through gw-2: %s", body)
	if status != 200 || !strings.Contains(body, `"invocations":10`) || !strings.Contains(body, `"shop"`) {
		t.Fatalf("the handle through gw-2: %d %s", status, body)
	}
	// A computation's receipt is read through either gateway.
	status, body = clusterCall(t, "POST", b.api+"/executions", b.token, `{"code": "async () => 6 * 7"}`)
	var run struct{ ResultID string }
	json.Unmarshal([]byte(body), &run)
	if status != 200 || !strings.Contains(body, `"result":42`) || run.ResultID == "" {
		t.Fatalf("a computation through gw-2: %d %s", status, body)
	}
	deadline := time.Now().Add(10 * time.Second)
	for {
		s1, _ := clusterCall(t, "GET", a.api+"/results/"+run.ResultID, a.token, "")
		s2, _ := clusterCall(t, "GET", b.api+"/results/"+run.ResultID, b.token, "")
		if s1 == 200 && s2 == 200 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the receipt: gw-1 %d, gw-2 %d", s1, s2)
		}
		time.Sleep(50 * time.Millisecond)
	}
	// The cluster listener serves signed requests only.
	if status, body := clusterCall(t, "GET", "http://127.0.0.1:7941/", "", ""); status != 403 || !strings.Contains(body, "FORBIDDEN") {
		t.Fatalf("an unsigned request to the cluster listener: %d %s", status, body)
	}
	req, _ := http.NewRequest("GET", "http://127.0.0.1:7941/", nil)
	req.Header.Set("Retainer-Forwarded", "kind=data&registry=apps&key=shop&resolve=3&at=0&sig="+strings.Repeat("0", 64))
	if res, err := clusterClient.Do(req); err != nil || res.StatusCode != 403 {
		t.Fatalf("a forged forward: %v %v", res, err)
	}
	// Both members are listed, gw-1 owning alice's space.
	_, members := clusterCall(t, "GET", "http://localhost:3982/retainer/cluster", "", "")
	if !strings.Contains(members, `"self":"gw-2"`) || !strings.Contains(members, `"name":"gw-1"`) || !strings.Contains(members, `"tenant":"alice"`) {
		t.Fatalf("GET /retainer/cluster: %s", members)
	}

	// gw-2 forwarded what it did not own: the five visitors', the route's
	// bind, the handle's read and the computation.
	_, metrics := clusterCall(t, "GET", "http://localhost:3982/metrics", "", "")
	if line := grepLine(metrics, "retainer_cluster_forwards_total "); line == "" || line < "retainer_cluster_forwards_total 8" && len(line) <= len("retainer_cluster_forwards_total 8") {
		t.Fatalf("gw-2's forwards: %q", line)
	}

	// kill -9 of the owner: gw-2 serves within the lease (+5 s), the
	// closure restarts and the kv count goes on.
	a.cmd.Process.Kill()
	a.cmd.Wait()
	killed := time.Now()
	for {
		status, body := clusterCall(t, "GET", "http://shop.apps.localhost:9282/", "", "")
		if status == 200 {
			if body != "11 1" {
				t.Fatalf("after failover: %q, want \"11 1\" (kv kept, closure restarted)", body)
			}
			break
		}
		if status != 503 {
			t.Fatalf("during failover: %d %s", status, body)
		}
		if time.Since(killed) > 2*time.Second+5*time.Second {
			t.Fatalf("gw-2 did not take over in %v: %d %s", time.Since(killed), status, body)
		}
		time.Sleep(100 * time.Millisecond)
	}
	t.Logf("failover: gw-2 served %v after kill -9 of gw-1 (lease 2s)", time.Since(killed).Round(time.Millisecond))
}
