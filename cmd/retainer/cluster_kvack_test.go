package main

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/retainer-gw/retainer/internal/etcdtest"
	"github.com/retainer-gw/retainer/internal/pgtest"
)

// readModifyWrite counts in kv with a get then a put and nothing between
// (no listing that would wait for the store): the get is answered by the
// worker's cache, from the handle's own last write, acknowledged or not
// yet. Each answer "<isolate> <closure count> <kv count>" stands for the
// write c=kv count, acknowledged only once etcd committed it
// (docs/cluster.md, "Failures").
const readModifyWrite = `const me = String(Math.random()).slice(2, 10); let n = 0;
export default { async fetch(req, env) {
	if (new URL(req.url).pathname === '/get') return new Response(String(await env.kv.get('KEY')));
	const c = Number(await env.kv.get('KEY') || 0) + 1; await env.kv.put('KEY', String(c));
	return new Response(me + ' ' + (++n) + ' ' + c) } }`

// etcd SIGSTOPped twice for 3 s, 60% of a 5 s lease, while visitors go on
// through three gateways (the owner and two that forward) to five
// read-modify-write kv counters and two closure-only bystanders: no
// answer that stands for a write leaves before etcd committed it, so
// every kv count answered 200 is answered once, none is above what etcd
// holds after SIGCONT, and the closures are not reset. Before, the worker
// answered a handler whose write the gateway refused 200 when an earlier
// answer of the same handle had taken the refusal (kv/cache's numbered
// refusals): "kv20" answered 0.5 s into the pause, then 19 and 20 again
// once etcd was back, 18 stored (issue 56's red team, 4 of 4 runs).
func TestClusterAcknowledgedKVWritesSurviveEtcdPauses(t *testing.T) {
	etcd := etcdtest.StartProcess(t)
	pg := pgtest.Start(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	defer etcd.Resume()
	gws := map[int]*gateway{}
	for i := 1; i <= 3; i++ {
		// Workers shared by tenants: one worker's batch of writes holds
		// several tenants' (the red team's set-up).
		path := clusterConfig(t, i, etcd.Endpoint, pg.DSN)
		data, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		s := strings.Replace(string(data), "lease 2s", "lease 5s", 1)
		s = strings.Replace(s, "isolation tenant", "isolation shared", 1)
		if err := os.WriteFile(path, []byte(s), 0o600); err != nil {
			t.Fatal(err)
		}
		gws[i] = startMemberAt(t, ctx, i, path)
	}
	// Ten tenants, each with a kv counter deployed through (owned by) one
	// of the three gateways, and two bystanders counting in their closures.
	var kvRoutes []string
	for k := 0; k < 10; k++ {
		gw := gws[1+k%3]
		out, err := binary(ctx, "retainer-token", "--sub", fmt.Sprintf("kvack%d", k)).Output()
		if err != nil {
			t.Fatalf("retainer-token: %v", err)
		}
		tenant := &gateway{api: gw.api, token: strings.TrimSpace(string(out))}
		route := fmt.Sprintf("rmw%d", k)
		bindThrough(t, tenant, route, deployThrough(t, tenant, fmt.Sprintf(`{"retainHandles": true, "capabilities": ["kvRead", "kvWrite"], "code": %q}`, strings.ReplaceAll(readModifyWrite, "KEY", "c"))))
		kvRoutes = append(kvRoutes, route)
	}
	bystanders := []string{"still0", "still1"}
	for _, route := range bystanders {
		bindThrough(t, gws[1], route, deployThrough(t, gws[1], fmt.Sprintf(`{"retainHandles": true, "code": %q}`, instanceHandler)))
	}
	routes := append(append([]string{}, kvRoutes...), bystanders...)
	for _, route := range routes {
		for gw := 1; gw <= 3; gw++ {
			if status, body := clusterCall(t, "GET", fmt.Sprintf("http://%s.apps.localhost:%d/", route, memberPort(gw)), "", ""); status != 200 {
				t.Fatalf("%s through gw-%d before the pauses: %d %s", route, gw, status, body)
			}
		}
	}

	v := visitEvery(60*time.Millisecond, []int{1, 2, 3}, routes...)
	var pauses [][2]time.Duration
	for range 2 {
		time.Sleep(1500 * time.Millisecond)
		etcd.Pause()
		from := v.at()
		time.Sleep(3 * time.Second)
		etcd.Resume()
		pauses = append(pauses, [2]time.Duration{from, v.at()})
	}
	time.Sleep(2 * time.Second)
	answers := v.end()

	// Every visit answered within 3 s: 200 or 503 with Retry-After; never
	// a 200 for a write not committed, and never 504 TIMEOUT (which
	// disposes the isolate: a reset). Before, a kv handler whose write sat
	// behind other runs' writes in its worker's batch, each waiting for
	// etcd in turn, passed its 500 ms bound: 4-8 answers 504 a run.
	counts := map[string]int{}
	var slowest time.Duration
	for _, a := range answers {
		slowest = max(slowest, a.took)
		key := fmt.Sprintf("%s %d", a.route[:len(a.route)-1], a.status)
		if a.status == 503 && a.retryAfter {
			key += "+RA"
		}
		counts[key]++
		switch {
		case a.err != nil:
			t.Errorf("%s through gw-%d sent at %v: %v after %v", a.route, a.gw, a.sent, a.err, a.took)
		case a.took > 3*time.Second:
			t.Errorf("%s through gw-%d sent at %v answered %d after %v", a.route, a.gw, a.sent, a.status, a.took)
		case a.status == 200 || a.status == 503 && a.retryAfter:
		default:
			t.Errorf("%s through gw-%d sent at %v: %d %q", a.route, a.gw, a.sent, a.status, a.body)
		}
	}
	for _, route := range bystanders {
		if isolates := checkOneOwner(t, answers, route); len(isolates) != 1 {
			t.Errorf("%s answered by %d isolates %v: a pause shorter than the lease reset its closure", route, len(isolates), isolates)
		}
	}
	acked, during := 0, 0
	for _, route := range kvRoutes {
		seen := map[int]visitAnswer{}
		highest := 0
		// The kv handlers' closures are not reset either: one isolate
		// answers each, its closure count never repeated.
		isolates := map[string]bool{}
		closure := map[int]bool{}
		for _, a := range answers {
			if a.route != route || a.status != 200 {
				continue
			}
			f := strings.Fields(a.body)
			n, err := 0, fmt.Errorf("no kv count")
			if len(f) == 3 {
				n, err = strconv.Atoi(f[2])
			}
			if err != nil {
				t.Errorf("%s through gw-%d: %q", route, a.gw, a.body)
				continue
			}
			isolates[f[0]] = true
			if c, _ := strconv.Atoi(f[1]); closure[c] {
				t.Errorf("%s: closure count %d answered twice (%q through gw-%d): its closure was reset", route, c, a.body, a.gw)
			} else {
				closure[c] = true
			}
			if prev, twice := seen[n]; twice {
				t.Errorf("%s: kv count %d acknowledged twice (%q through gw-%d answered at %v, %q through gw-%d answered at %v): a write acknowledged and lost; pauses %v",
					route, n, prev.body, prev.gw, prev.sent+prev.took, a.body, a.gw, a.sent+a.took, pauses)
			}
			seen[n] = a
			highest = max(highest, n)
			for _, p := range pauses {
				if a.sent+a.took > p[0]+200*time.Millisecond && a.sent+a.took < p[1] {
					during++
					t.Logf("%s through gw-%d sent at %v answered %q at %v, etcd stopped at %v", route, a.gw, a.sent, a.body, a.sent+a.took, p[0])
				}
			}
		}
		if len(isolates) != 1 {
			t.Errorf("%s answered by %d isolates %v: a pause shorter than the lease reset its closure", route, len(isolates), isolates)
		}
		acked += len(seen)
		status, body := clusterCall(t, "GET", fmt.Sprintf("http://%s.apps.localhost:%d/get", route, memberPort(1)), "", "")
		stored, _ := strconv.Atoi(body)
		if status != 200 || stored < highest {
			t.Errorf("%s: etcd holds %d %q after the pauses; %d was acknowledged", route, status, body, highest)
		}
	}
	// A 200 answered well into a pause is noted, not failed: a commit etcd
	// answered just before SIGSTOP may reach a loaded machine's visitor
	// late; what it stands for is checked above.
	t.Logf("etcd paused %v (lease 5 s): %v; slowest %v; %d kv writes acknowledged, each once and kept; %d answered 200 more than 200 ms into a pause",
		pauses, counts, slowest.Round(time.Millisecond), acked, during)
}

// visitEvery is startVisitors with visits every apart (a counter visited
// every 20 ms always has a write waiting in the gateway, so its writes
// never wait for a read of etcd).
func visitEvery(every time.Duration, gws []int, routes ...string) *visitors {
	v := &visitors{zero: time.Now(), stop: make(chan struct{})}
	c := &http.Client{Timeout: 8 * time.Second, Transport: clusterClient.Transport}
	for _, gw := range gws {
		for _, route := range routes {
			v.wg.Add(1)
			go func() {
				defer v.wg.Done()
				for {
					select {
					case <-v.stop:
						return
					case <-time.After(every):
					}
					a := visitAnswer{gw: gw, route: route, sent: time.Since(v.zero)}
					res, err := c.Get(fmt.Sprintf("http://%s.apps.localhost:%d/", route, memberPort(gw)))
					if err == nil {
						body, _ := io.ReadAll(res.Body)
						res.Body.Close()
						a.status, a.body, a.retryAfter = res.StatusCode, string(body), res.Header.Get("Retry-After") != ""
					}
					a.err = err
					a.took = time.Since(v.zero) - a.sent
					v.mu.Lock()
					v.list = append(v.list, a)
					v.mu.Unlock()
				}
			}()
		}
	}
	return v
}
