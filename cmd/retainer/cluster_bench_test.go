package main

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/retainer-gw/retainer/internal/etcdtest"
	"github.com/retainer-gw/retainer/internal/pgtest"
	"github.com/retainer-gw/retainer/internal/waitfor"
)

// TestClusterCosts measures what a cluster costs against one gateway
// (docs/cluster.md): a request served by the owner against one forwarded
// to it (req/s, latency, CPU of each gateway and its workers), and
// failover time over ten kills. Run it with RETAINER_CLUSTER_BENCH=1
// (`go test ./cmd/retainer -run TestClusterCosts -v`); it asserts no
// timing. RETAINER_CLUSTER_BENCH=hop measures the hop alone, shorter (two
// rounds of 3 s, no failover), with a third anchor: Caddy's own
// `reverse_proxy` in front of the owner.
func TestClusterCosts(t *testing.T) {
	if os.Getenv("RETAINER_CLUSTER_BENCH") == "" {
		t.Skip("a measurement: RETAINER_CLUSTER_BENCH=1 runs it")
	}
	srv := etcdtest.Start(t)
	pg := pgtest.Start(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	gws := map[int]*gateway{1: startMember(t, ctx, 1, srv.Endpoint, pg.DSN), 2: startMember(t, ctx, 2, srv.Endpoint, pg.DSN)}
	deploy := func(route, code string) {
		bindThrough(t, gws[1], route, deployThrough(t, gws[1],
			fmt.Sprintf(`{"retainHandles": true, "concurrency": 64, "capabilities": ["kvRead", "kvWrite"], "code": %q}`, code)))
	}
	deploy("hello", `export default { fetch() { return new Response('ok') } }`)
	deploy("counter", `export default { async fetch(req, env) { const n = Number(await env.kv.get('c') || 0) + 1; await env.kv.put('c', String(n)); return new Response(String(n)) } }`)

	hop := os.Getenv("RETAINER_CLUSTER_BENCH") == "hop"
	rounds, each, vias := 3, 5*time.Second, []int{1, 2}
	var front *exec.Cmd
	if hop {
		rounds, each, vias = 2, 3*time.Second, []int{1, 2, 9}
		front = startFront(t, ctx)
	}
	for _, route := range []string{"hello", "counter"} {
		rps := map[int]float64{}
		for round := 1; round <= rounds; round++ {
			for _, via := range vias {
				cpu := map[int]float64{1: treeCPU(gws[1].cmd.Process.Pid), 2: treeCPU(gws[2].cmd.Process.Pid)}
				if front != nil {
					cpu[9] = treeCPU(front.Process.Pid)
				}
				r := closedLoop(fmt.Sprintf("http://%s.apps.localhost:%d/", route, memberPort(via)), 32, each)
				for i := range cpu {
					pid := 0
					if i == 9 {
						pid = front.Process.Pid
					} else {
						pid = gws[i].cmd.Process.Pid
					}
					cpu[i] = (treeCPU(pid) - cpu[i]) / float64(r.n) * 1e6
				}
				rps[via] += r.rps
				what := map[int]string{1: "owner", 2: "forwarded", 9: "front"}[via]
				t.Logf("%s round %d %-9s %7.0f req/s  p50 %5.2f ms  p99 %5.2f ms  CPU/req: gw-1 %4.0f µs, gw-2 %4.0f µs, front %4.0f µs  (%d errors)",
					route, round, what, r.rps, r.p50, r.p99, cpu[1], cpu[2], cpu[9], r.errors)
			}
		}
		t.Logf("%s: forwarded / owner %.2f, front / owner %.2f", route, rps[2]/rps[1], rps[9]/rps[1])
	}
	if hop {
		return
	}

	// Failover: kill the owner, time the survivor's first 200, start the
	// killed member again; ten times.
	var times []time.Duration
	for k := 0; k < 10; k++ {
		_, members := clusterCall(t, "GET", fmt.Sprintf("http://localhost:%d/retainer/cluster", memberAdmin(1)), "", "")
		owner := 1
		if !strings.Contains(members, fmt.Sprintf(`"name":"gw-1","address":"127.0.0.1:%d","spaces":[{`, memberLink(1))) {
			owner = 2
		}
		survivor := 3 - owner
		gws[owner].cmd.Process.Kill()
		gws[owner].cmd.Wait()
		killed := time.Now()
		for {
			if status, _ := visitRoute(survivor, "counter"); status == 200 {
				break
			}
			if time.Since(killed) > time.Minute {
				t.Fatal("no failover in a minute")
			}
			time.Sleep(10 * time.Millisecond)
		}
		times = append(times, time.Since(killed))
		gws[owner] = startMember(t, ctx, owner, srv.Endpoint, pg.DSN)
	}
	sort.Slice(times, func(i, j int) bool { return times[i] < times[j] })
	t.Logf("failover over %d kills (lease 2s): p50 %v, max %v, all %v", len(times), times[len(times)/2].Round(time.Millisecond),
		times[len(times)-1].Round(time.Millisecond), times)
}

// startFront starts Caddy's own reverse_proxy on memberPort(9) in front of
// member 1 (the owner of the bench's spaces), the anchor a forwarded
// request is measured against.
func startFront(t *testing.T, ctx context.Context) *exec.Cmd {
	path := filepath.Join(t.TempDir(), "Caddyfile")
	config := fmt.Sprintf("{\n\tadmin localhost:%d\n}\nhttp://:%d {\n\treverse_proxy 127.0.0.1:%d\n}\n", memberAdmin(9), memberPort(9), memberPort(1))
	if err := os.WriteFile(path, []byte(config), 0o600); err != nil {
		t.Fatal(err)
	}
	cmd := binary(ctx, "run", "--config", path)
	log := &bytes.Buffer{}
	cmd.Stdout, cmd.Stderr = log, log
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		cmd.Process.Kill()
		cmd.Wait()
	})
	if !waitfor.Within(30*time.Second, func() bool { status, _ := visitRoute(9, "hello"); return status == 200 }) {
		t.Fatalf("the front did not come up:\n%s", log.String())
	}
	return cmd
}

func visitRoute(i int, route string) (int, string) {
	res, err := clusterClient.Get(fmt.Sprintf("http://%s.apps.localhost:%d/", route, memberPort(i)))
	if err != nil {
		return 0, err.Error()
	}
	defer res.Body.Close()
	data, _ := io.ReadAll(res.Body)
	return res.StatusCode, string(data)
}

type loopResult struct {
	n, errors     int
	rps, p50, p99 float64
}

// closedLoop sends GETs to url from conns connections for d.
func closedLoop(url string, conns int, d time.Duration) loopResult {
	tr := &http.Transport{MaxIdleConnsPerHost: conns, DialContext: func(ctx context.Context, network, addr string) (net.Conn, error) {
		_, port, _ := net.SplitHostPort(addr)
		return (&net.Dialer{}).DialContext(ctx, network, "127.0.0.1:"+port)
	}}
	defer tr.CloseIdleConnections()
	client := &http.Client{Transport: tr, Timeout: 10 * time.Second}
	var mu sync.Mutex
	var lat []float64
	errors := 0
	start := time.Now()
	var wg sync.WaitGroup
	for c := 0; c < conns; c++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			var mine []float64
			bad := 0
			for time.Since(start) < d {
				t0 := time.Now()
				res, err := client.Get(url)
				if err == nil {
					io.Copy(io.Discard, res.Body)
					res.Body.Close()
				}
				if err != nil || res.StatusCode != 200 {
					bad++
					continue
				}
				mine = append(mine, float64(time.Since(t0).Microseconds())/1000)
			}
			mu.Lock()
			lat = append(lat, mine...)
			errors += bad
			mu.Unlock()
		}()
	}
	wg.Wait()
	el := time.Since(start).Seconds()
	sort.Float64s(lat)
	r := loopResult{n: max(len(lat), 1), errors: errors, rps: float64(len(lat)) / el}
	if len(lat) > 0 {
		r.p50, r.p99 = lat[len(lat)/2], lat[len(lat)*99/100]
	}
	return r
}

// treeCPU answers the CPU seconds of pid and its live children (the
// gateway and its workers).
func treeCPU(pid int) float64 {
	total := procCPU(pid)
	dirs, _ := filepath.Glob("/proc/[0-9]*/stat")
	for _, d := range dirs {
		data, err := os.ReadFile(d)
		if err != nil {
			continue
		}
		f := strings.Fields(string(data[strings.LastIndexByte(string(data), ')')+1:]))
		if len(f) > 1 && f[1] == strconv.Itoa(pid) {
			child, _ := strconv.Atoi(filepath.Base(filepath.Dir(d)))
			total += procCPU(child)
		}
	}
	return total
}

// procCPU answers a process's user and system CPU seconds.
func procCPU(pid int) float64 {
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0
	}
	f := strings.Fields(string(data[strings.LastIndexByte(string(data), ')')+1:]))
	// After the name: state(0) ppid(1) ... utime(11) stime(12).
	ut, _ := strconv.ParseFloat(f[11], 64)
	st, _ := strconv.ParseFloat(f[12], 64)
	return (ut + st) / 100 // clock ticks (USER_HZ 100)
}
