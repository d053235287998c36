package main

import (
	"context"
	"fmt"
	"os"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/retainer-gw/retainer/internal/etcdtest"
	"github.com/retainer-gw/retainer/internal/pgtest"
)

// etcd as an operator's fault meets it: a process of its own, paused
// (SIGSTOP) or killed and started again, while visitors go on through
// every gateway (docs/cluster.md, "Failures").

// instanceHandler counts in its closure only, and says which isolate
// answered: two isolates answering for one space at once would be two
// owners.
const instanceHandler = `const me = String(Math.random()).slice(2, 10); let n = 0;
export default { fetch() { return new Response(me + ' ' + (++n)) } }`

// kvCounterHandler counts in kv: each answer n stands for the write c=n,
// acknowledged (the answer waits for the commit). Its listing reads the
// store on every visit (a worker's cache answers gets it holds).
const kvCounterHandler = `export default { async fetch(req, env) {
	if (new URL(req.url).pathname === '/get') return new Response(String(await env.kv.get('c')));
	await env.kv.list({prefix: 'c'});
	const n = Number(await env.kv.get('c') || 0) + 1; await env.kv.put('c', String(n)); return new Response(String(n)) } }`

// memberWithLease starts member i with a lease other than the tests' 2 s.
func memberWithLease(t *testing.T, ctx context.Context, i int, etcd, dsn, lease string) *gateway {
	t.Helper()
	path := clusterConfig(t, i, etcd, dsn)
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, []byte(strings.Replace(string(data), "lease 2s", "lease "+lease, 1)), 0o600); err != nil {
		t.Fatal(err)
	}
	return startMemberAt(t, ctx, i, path)
}

// visitAnswer is one visit's outcome: through which gateway, to which
// route, when it was sent and answered (since the test's zero), what came.
type visitAnswer struct {
	gw         int
	route      string
	sent, took time.Duration
	status     int
	retryAfter bool
	body       string
	err        error
}

// visitors visits each route through each gateway in a loop of its own,
// 20 ms apart, until stop; every answer goes to the list answers returns.
type visitors struct {
	zero time.Time
	stop chan struct{}
	wg   sync.WaitGroup
	mu   sync.Mutex
	list []visitAnswer
}

func startVisitors(gws []int, routes ...string) *visitors {
	return visitEvery(20*time.Millisecond, gws, routes...)
}

// at is the test's clock, as the answers' times read.
func (v *visitors) at() time.Duration { return time.Since(v.zero) }

// end stops the visitors and answers every visit, in the order answered.
func (v *visitors) end() []visitAnswer {
	close(v.stop)
	v.wg.Wait()
	sort.Slice(v.list, func(i, j int) bool { return v.list[i].sent+v.list[i].took < v.list[j].sent+v.list[j].took })
	return v.list
}

// checkAnswers fails the test for a visit not answered, answered past
// bound, or answered other than 200 or 503 with Retry-After; it answers
// the counts by gateway, route and status, and the slowest answer.
func checkAnswers(t *testing.T, answers []visitAnswer, bound time.Duration) (map[string]int, time.Duration) {
	t.Helper()
	counts := map[string]int{}
	var slowest time.Duration
	bad := 0
	for _, a := range answers {
		slowest = max(slowest, a.took)
		key := fmt.Sprintf("%s@gw-%d %d", a.route, a.gw, a.status)
		if a.status == 503 && a.retryAfter {
			key += "+RA"
		}
		counts[key]++
		switch {
		case a.err != nil:
			t.Errorf("%s through gw-%d sent at %v: %v after %v", a.route, a.gw, a.sent, a.err, a.took)
		case a.took > bound:
			t.Errorf("%s through gw-%d sent at %v answered %d after %v (bound %v)", a.route, a.gw, a.sent, a.status, a.took, bound)
		case a.status != 200 && !(a.status == 503 && a.retryAfter):
			t.Errorf("%s through gw-%d sent at %v: %d %q", a.route, a.gw, a.sent, a.status, a.body)
		default:
			continue
		}
		if bad++; bad > 10 {
			t.FailNow()
		}
	}
	return counts, slowest
}

// checkOneOwner fails the test when an isolate answered after another
// had started answering for the same handle (two owners at once), or one
// isolate's count repeated (a closure reset while it served); it answers the isolates in the order they first answered.
func checkOneOwner(t *testing.T, answers []visitAnswer, route string) []string {
	t.Helper()
	var order []string
	last := map[string]int{}
	counts := map[string]map[int]bool{}
	for _, a := range answers {
		if a.route != route || a.status != 200 {
			continue
		}
		me, n, _ := strings.Cut(a.body, " ")
		count, _ := strconv.Atoi(n)
		if _, seen := last[me]; !seen {
			order = append(order, me)
		} else if me != order[len(order)-1] {
			t.Errorf("isolate %s answered %q through gw-%d at %v after isolate %s had taken over: two owners", me, a.body, a.gw, a.sent+a.took, order[len(order)-1])
		}
		if counts[me] == nil {
			counts[me] = map[int]bool{}
		}
		if counts[me][count] {
			t.Errorf("isolate %s answered count %d twice (through gw-%d at %v)", me, count, a.gw, a.sent+a.took)
		}
		counts[me][count] = true
		last[me] = count
	}
	return order
}

// checkKVKept fails the test when an acknowledged kv count was answered
// twice (a write lost under a later one) or the stored count is below one
// acknowledged; it answers how many were acknowledged.
func checkKVKept(t *testing.T, answers []visitAnswer, route string, gw int) int {
	t.Helper()
	acked := map[int]int{}
	highest := 0
	for _, a := range answers {
		if a.route != route || a.status != 200 {
			continue
		}
		n, err := strconv.Atoi(a.body)
		if err != nil {
			t.Errorf("%s through gw-%d: %q", route, a.gw, a.body)
			continue
		}
		if prev, twice := acked[n]; twice {
			t.Errorf("kv count %d acknowledged through gw-%d and gw-%d: a write lost", n, prev, a.gw)
		}
		acked[n] = a.gw
		highest = max(highest, n)
	}
	status, body := clusterCall(t, "GET", fmt.Sprintf("http://%s.apps.localhost:%d/get", route, memberPort(gw)), "", "")
	stored, _ := strconv.Atoi(body)
	if status != 200 || stored < highest {
		t.Errorf("the stored kv count is %d %q; %d was acknowledged", status, body, highest)
	}
	return len(acked)
}

// firstServedAfter answers, per gateway, how long after since each
// route was first answered 200 by it.
func firstServedAfter(answers []visitAnswer, since time.Duration) map[string]time.Duration {
	out := map[string]time.Duration{}
	for _, a := range answers {
		k := fmt.Sprintf("%s@gw-%d", a.route, a.gw)
		if _, ok := out[k]; !ok && a.status == 200 && a.sent >= since {
			out[k] = a.sent + a.took - since
		}
	}
	return out
}

// etcd paused (SIGSTOP of its process) for 3 s, 60% of a 5 s lease, while
// visitors go on through the owner and another gateway: a handler that
// needs no kv answers 200 throughout from one closure at its owner; a kv
// handler is
// answered 503 OVERLOADED with Retry-After within the kv bound (1.5 s,
// before: held until etcd came back), never hung; after SIGCONT both
// serve again and every acknowledged kv write is in etcd.
func TestClusterKVWhileEtcdPaused(t *testing.T) {
	etcd := etcdtest.StartProcess(t)
	pg := pgtest.Start(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	a := memberWithLease(t, ctx, 1, etcd.Endpoint, pg.DSN, "5s")
	memberWithLease(t, ctx, 2, etcd.Endpoint, pg.DSN, "5s")
	bindThrough(t, a, "loop", deployThrough(t, a, fmt.Sprintf(`{"retainHandles": true, "code": %q}`, instanceHandler)))
	bindThrough(t, a, "kvc", deployThrough(t, a, fmt.Sprintf(`{"retainHandles": true, "capabilities": ["kvRead", "kvWrite"], "code": %q}`, kvCounterHandler)))
	for _, route := range []string{"loop", "kvc"} {
		for _, gw := range []int{1, 2} {
			if status, body := clusterCall(t, "GET", fmt.Sprintf("http://%s.apps.localhost:%d/", route, memberPort(gw)), "", ""); status != 200 {
				t.Fatalf("%s through gw-%d before the pause: %d %s", route, gw, status, body)
			}
		}
	}

	v := startVisitors([]int{1, 2}, "loop", "kvc")
	time.Sleep(time.Second)
	etcd.Pause()
	paused := v.at()
	time.Sleep(3 * time.Second)
	etcd.Resume()
	resumed := v.at()
	time.Sleep(3 * time.Second)
	answers := v.end()

	counts, slowest := checkAnswers(t, answers, 3*time.Second)
	isolates := checkOneOwner(t, answers, "loop")
	if len(isolates) != 1 {
		t.Errorf("the closure was answered by %d isolates %v: a pause shorter than the lease reset it", len(isolates), isolates)
	}
	var loopDuring, kvRefused int
	for _, a := range answers {
		if a.route == "loop" && a.status == 200 && a.sent >= paused && a.sent+a.took <= resumed {
			loopDuring++
		}
		if a.route == "loop" && a.gw == 1 && a.status != 200 {
			// The owner serves what it owns; another gateway that must
			// look its owner up again in etcd may answer 503.
			t.Errorf("the closure-only handler through its owner at %v: %d %q", a.sent, a.status, a.body)
		}
		if a.route == "kvc" && a.status == 503 && a.sent+a.took >= paused && a.sent+a.took <= resumed {
			kvRefused++
		}
	}
	if loopDuring == 0 || kvRefused == 0 {
		t.Errorf("with etcd paused: %d closure visits served, %d kv visits answered 503 (want both)", loopDuring, kvRefused)
	}
	if testing.Verbose() {
		for _, a := range answers {
			if a.sent > paused-200*time.Millisecond && a.sent < resumed+200*time.Millisecond && (a.route == "kvc" || a.status != 200) {
				t.Logf("%s gw-%d sent %v took %v: %d %.80s", a.route, a.gw, a.sent.Round(time.Millisecond), a.took.Round(time.Millisecond), a.status, a.body)
			}
		}
	}
	acked := checkKVKept(t, answers, "kvc", 1)
	t.Logf("etcd paused %v..%v: %v; slowest answer %v; %d kv writes acknowledged; served again after SIGCONT %v",
		paused.Round(time.Millisecond), resumed.Round(time.Millisecond), counts, slowest.Round(time.Millisecond), acked, firstServedAfter(answers, resumed))
}

// etcd killed (SIGKILL) for 10 s and started again, with a 5 s lease,
// while visitors go on through three gateways: every visit is answered,
// 200 or 503 with Retry-After, none held until etcd is back; the owner
// serves the closure handler while its lease lasts by its own clock;
// once etcd is back every gateway serves both handlers again within a
// lease (each gateway, having lost its lease, revokes it and joins
// again at once rather than waiting a lease for its old name), no two
// isolates answer for the handle at once, and no acknowledged kv write
// is lost.
func TestClusterEtcdKilled(t *testing.T) {
	etcd := etcdtest.StartProcess(t)
	pg := pgtest.Start(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	a := memberWithLease(t, ctx, 1, etcd.Endpoint, pg.DSN, "5s")
	for i := 2; i <= 3; i++ {
		memberWithLease(t, ctx, i, etcd.Endpoint, pg.DSN, "5s")
	}
	bindThrough(t, a, "loop", deployThrough(t, a, fmt.Sprintf(`{"retainHandles": true, "code": %q}`, instanceHandler)))
	bindThrough(t, a, "kvc", deployThrough(t, a, fmt.Sprintf(`{"retainHandles": true, "capabilities": ["kvRead", "kvWrite"], "code": %q}`, kvCounterHandler)))
	gws := []int{1, 2, 3}
	for _, route := range []string{"loop", "kvc"} {
		for _, gw := range gws {
			if status, body := clusterCall(t, "GET", fmt.Sprintf("http://%s.apps.localhost:%d/", route, memberPort(gw)), "", ""); status != 200 {
				t.Fatalf("%s through gw-%d before the kill: %d %s", route, gw, status, body)
			}
		}
	}

	v := startVisitors(gws, "loop", "kvc")
	time.Sleep(time.Second)
	etcd.Kill()
	killed := v.at()
	time.Sleep(10 * time.Second)
	etcd.Restart(t)
	back := v.at()
	// Until every gateway served both again, or a lease and 5 s passed.
	for v.at() < back+10*time.Second {
		v.mu.Lock()
		served := firstServedAfter(v.list, back)
		v.mu.Unlock()
		if len(served) == 2*len(gws) {
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	time.Sleep(time.Second)
	answers := v.end()

	counts, slowest := checkAnswers(t, answers, 3*time.Second)
	isolates := checkOneOwner(t, answers, "loop")
	if len(isolates) != 1 {
		// etcd restarted gives every lease a whole TTL: each member
		// renews its own (cluster.Member.Renew) and keeps its spaces and
		// their isolates, since no other could have claimed them.
		t.Errorf("the closure was answered by %d isolates %v: it restarted though etcd kept the owner's lease", len(isolates), isolates)
	}
	acked := checkKVKept(t, answers, "kvc", 1)
	served := firstServedAfter(answers, back)
	for _, route := range []string{"loop", "kvc"} {
		for _, gw := range gws {
			if _, ok := served[fmt.Sprintf("%s@gw-%d", route, gw)]; !ok {
				t.Errorf("%s through gw-%d was not served within 10 s of etcd's return", route, gw)
			}
		}
	}
	var ownerServed int
	var lastOwnerServed time.Duration
	for _, a := range answers {
		if a.route == "loop" && a.gw == 1 && a.status == 200 && a.sent >= killed && a.sent < back {
			ownerServed++
			lastOwnerServed = a.sent + a.took - killed
		}
	}
	if ownerServed == 0 {
		t.Error("the owner served no closure visit while etcd was down and its lease lasted")
	}
	t.Logf("etcd killed at %v, back at %v: %v; slowest answer %v; the owner served the closure until %v after the kill; isolates %v; %d kv writes acknowledged; first served after etcd's return %v",
		killed.Round(time.Millisecond), back.Round(time.Millisecond), counts, slowest.Round(time.Millisecond), lastOwnerServed.Round(time.Millisecond), isolates, acked, served)
}
