package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/retainer-gw/retainer/internal/etcdtest"
	"github.com/retainer-gw/retainer/internal/pgtest"
)

// The control plane's registry writes while etcd does not answer
// (docs/cluster.md, "Failures"): each is answered within the write bound,
// 503 OVERLOADED with Retry-After, and what etcd applies once it is back
// is what the owner's memory holds: whole, in order, a deploy answered 503
// never kept.

// apiWrite is one control-plane write and what it was answered.
type apiWrite struct {
	what       string
	gw         int
	token      string
	method     string
	path, body string
	sent, took time.Duration
	status     int
	retryAfter bool
	answer     string
}

func (w *apiWrite) do(zero time.Time) {
	w.sent = time.Since(zero)
	req, _ := http.NewRequest(w.method, fmt.Sprintf("http://api.localhost:%d%s", memberPort(w.gw), w.path), strings.NewReader(w.body))
	req.Header.Set("Authorization", "Bearer "+w.token)
	c := &http.Client{Timeout: 15 * time.Second, Transport: clusterClient.Transport}
	res, err := c.Do(req)
	w.took = time.Since(zero) - w.sent
	if err != nil {
		w.answer = err.Error()
		return
	}
	data, _ := io.ReadAll(res.Body)
	res.Body.Close()
	w.status, w.answer, w.retryAfter = res.StatusCode, string(data), res.Header.Get("Retry-After") != ""
}

// registryMember starts member i with a 5 s lease and secrets.
func registryMember(t *testing.T, ctx context.Context, i int, etcd, dsn string) *gateway {
	t.Helper()
	path := clusterConfig(t, i, etcd, dsn)
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	s := strings.Replace(string(data), "lease 2s", "lease 5s", 1)
	s = strings.Replace(s, "\t\tworkers 2\n", "\t\tworkers 2\n\t\tsecrets_key registry-test-secrets-key-registry-test\n", 1)
	if err := os.WriteFile(path, []byte(s), 0o600); err != nil {
		t.Fatal(err)
	}
	return startMemberAt(t, ctx, i, path)
}

// tokenFor is a deploy token for tenant.
func tokenFor(t *testing.T, ctx context.Context, tenant string) string {
	t.Helper()
	out, err := binary(ctx, "retainer-token", "--sub", tenant).Output()
	if err != nil {
		t.Fatalf("retainer-token: %v", err)
	}
	return strings.TrimSpace(string(out))
}

// etcdTable answers the keys of a store table under the test's prefix
// (registry apps), with their values, as etcd holds them now.
func etcdTable(t *testing.T, cli *clientv3.Client, table string) map[string]string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	base := "/retainer/test/t/" + table + "/apps\x00"
	r, err := cli.Get(ctx, base, clientv3.WithPrefix())
	if err != nil {
		t.Fatalf("reading etcd: %v", err)
	}
	out := map[string]string{}
	for _, kv := range r.Kvs {
		out[strings.TrimPrefix(string(kv.Key), base)] = string(kv.Value)
	}
	return out
}

// aliceHandles answers alice's handle ids as gateway gw's API lists them.
func aliceHandles(t *testing.T, gw int, token string) []string {
	t.Helper()
	status, body := clusterCall(t, "GET", fmt.Sprintf("http://api.localhost:%d/handles", memberPort(gw)), token, "")
	var list struct {
		Handles []struct{ ExecutionID string }
	}
	if status != 200 || json.Unmarshal([]byte(body), &list) != nil {
		t.Fatalf("GET /handles through gw-%d: %d %s", gw, status, body)
	}
	var ids []string
	for _, h := range list.Handles {
		ids = append(ids, h.ExecutionID)
	}
	sort.Strings(ids)
	return ids
}

// etcd paused (SIGSTOP) for 3 s, 60% of a 5 s lease, while a tenant
// deploys, binds, unbinds, deletes and claims a domain through all three
// gateways (its owner and two that forward), and visitors go on through
// all three to the tenant's route and a bystander tenant's: every write
// is answered before etcd resumes, 503 OVERLOADED with Retry-After
// (before: held until etcd came back); once etcd is back, a newer bind
// of the same name wins over the one given up on, every write answered
// 503 is in etcd wholly or not at all and the owner's memory says the
// same at every gateway, no deploy answered 503 is kept, and neither
// tenant's closure was reset (the pause was shorter than the lease).
func TestClusterRegistryWritesWhileEtcdPaused(t *testing.T) {
	etcd := etcdtest.StartProcess(t)
	pg := pgtest.Start(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	a := registryMember(t, ctx, 1, etcd.Endpoint, pg.DSN)
	b := registryMember(t, ctx, 2, etcd.Endpoint, pg.DSN)
	registryMember(t, ctx, 3, etcd.Endpoint, pg.DSN)
	alice := a.token
	bob := tokenFor(t, ctx, "bob")
	cli, err := clientv3.New(clientv3.Config{Endpoints: []string{etcd.Endpoint}, DialTimeout: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer cli.Close()

	deploy := func(code string) string { return fmt.Sprintf(`{"retainHandles": true, "code": %q}`, code) }
	const v3 = `export default { fetch() { return new Response('v3') } }`
	// alice's space is gw-1's, bob's gw-2's.
	keep := deployThrough(t, a, deploy(instanceHandler))
	bindThrough(t, a, "keep", keep)
	bindThrough(t, a, "gone", keep)
	// The kv counter runs with a 1 s bound, not the default 500 ms: at
	// load 16–29 the machine stalled every handler for ~0.5 s at times
	// (closure-only visits at two gateways took 490–645 ms at the same
	// instant), and a kv visit caught in one answered 504 TIMEOUT at its
	// bound (2 of 13 runs), not for anything etcd's pause left behind. Its
	// kv calls then wait 0.5 s for etcd, its writes 1.5 s: a visit is
	// answered within 2 s. The kv bounds at the default are
	// TestClusterKVWhileEtcdPaused's.
	counter := deployThrough(t, a, fmt.Sprintf(`{"retainHandles": true, "timeoutMs": 1000, "capabilities": ["kvRead", "kvWrite"], "code": %q}`, kvCounterHandler))
	bindThrough(t, a, "kvc", counter)
	doomed := deployThrough(t, a, deploy(counterHandler))
	bobGW := &gateway{api: b.api, token: bob}
	bystander := deployThrough(t, bobGW, deploy(instanceHandler))
	bindThrough(t, bobGW, "bystander", bystander)
	if status, body := clusterCall(t, "PUT", a.api+"/secrets/OLD", alice, "old"); status != 200 {
		t.Fatalf("a secret: %d %s", status, body)
	}
	gws := []int{1, 2, 3}
	for _, gw := range gws {
		for _, route := range []string{"keep", "bystander", "kvc"} {
			if status, body := clusterCall(t, "GET", fmt.Sprintf("http://%s.apps.localhost:%d/", route, memberPort(gw)), "", ""); status != 200 {
				t.Fatalf("%s through gw-%d before the pause: %d %s", route, gw, status, body)
			}
		}
		// Each gateway knows the owners of both tenants' API spaces.
		aliceHandles(t, gw, alice)
		clusterCall(t, "GET", fmt.Sprintf("http://api.localhost:%d/handles", memberPort(gw)), bob, "")
	}
	before := aliceHandles(t, 1, alice)

	v := startVisitors(gws, "keep", "bystander", "kvc")
	time.Sleep(500 * time.Millisecond)
	etcd.Pause()
	paused := v.at()
	resumed := false
	defer func() {
		if !resumed {
			etcd.Resume()
		}
	}()
	var writes []*apiWrite
	var wg sync.WaitGroup
	wave := func(round int, at time.Duration) {
		ws := []*apiWrite{
			{what: "bind moved", gw: 3, token: alice, method: "PUT", path: "/routes/moved", body: fmt.Sprintf(`{"executionId": %q}`, keep)},
			{what: "deploy", gw: 1, token: alice, method: "POST", path: "/executions", body: deploy(counterHandler)},
			{what: "deploy", gw: 2, token: alice, method: "POST", path: "/executions", body: deploy(counterHandler)},
			{what: "unbind gone", gw: 1, token: alice, method: "DELETE", path: "/routes/gone"},
			{what: "delete doomed", gw: 2, token: alice, method: "DELETE", path: "/handles/" + doomed},
			{what: "claim domain", gw: 3, token: alice, method: "PUT", path: "/domains/shop.example.com", body: `{"route": "keep"}`},
			{what: "bob binds", gw: 1, token: bob, method: "PUT", path: "/routes/bobs", body: fmt.Sprintf(`{"executionId": %q}`, bystander)},
		}
		if round == 1 {
			// A secret's calls wait for etcd within the same bound (no
			// refusal at once: they are the store's reads and writes).
			ws = append(ws,
				&apiWrite{what: "put secret", gw: 2, token: alice, method: "PUT", path: "/secrets/NEW", body: "new"},
				&apiWrite{what: "delete secret", gw: 3, token: alice, method: "DELETE", path: "/secrets/OLD"})
		}
		if wait := paused + at - v.at(); wait > 0 {
			time.Sleep(wait)
		}
		for i, w := range ws {
			w.what = fmt.Sprintf("%s (wave %d, gw-%d)", w.what, round, w.gw)
			wg.Add(1)
			go func() { defer wg.Done(); w.do(v.zero) }()
			if i == 0 {
				// The bind is sent first, so that its commit is the one
				// etcd holds (the route writes after it wait for it).
				time.Sleep(100 * time.Millisecond)
			}
		}
		writes = append(writes, ws...)
	}
	wave(1, 200*time.Millisecond)
	// By now the first wave's commits have waited past the bound: these
	// are refused at once. (At 1.9 s, on a machine at load 18–20, a
	// forwarded write of the first wave began its commit at its owner up
	// to 0.4 s after it was sent, so the second wave's write there found
	// it under way 1.3 s only, waited, and was answered 200 as etcd
	// resumed: 1 of 13 runs. At 2.3 s each side keeps ~0.5 s.)
	wave(2, 2300*time.Millisecond)
	if wait := paused + 3*time.Second - v.at(); wait > 0 {
		time.Sleep(wait)
	}
	etcd.Resume()
	resumed = true
	back := v.at()
	wg.Wait()

	for _, w := range writes {
		t.Logf("%s: sent %v after the pause, answered %d after %v: %.100s", w.what, (w.sent - paused).Round(time.Millisecond), w.status, w.took.Round(time.Millisecond), w.answer)
		if w.sent+w.took >= back {
			t.Errorf("%s was answered only after etcd resumed (%d after %v)", w.what, w.status, w.took)
		}
		if w.status != 503 || !w.retryAfter || !strings.Contains(w.answer, "OVERLOADED") {
			t.Errorf("%s with etcd paused: %d %q, want 503 OVERLOADED with Retry-After", w.what, w.status, w.answer)
		}
	}

	// A newer bind of the name given up on, once etcd is back: it wins.
	deadline := time.Now().Add(10 * time.Second)
	var newer string
	for newer == "" {
		status, answer := clusterCall(t, "POST", a.api+"/executions", alice, deploy(v3))
		var dep struct{ ExecutionID string }
		json.Unmarshal([]byte(answer), &dep)
		if status == 200 {
			newer = dep.ExecutionID
		} else if time.Now().After(deadline) {
			t.Fatalf("a deploy after etcd resumed: %d %s", status, answer)
		} else {
			time.Sleep(100 * time.Millisecond)
		}
	}
	for {
		status, answer := clusterCall(t, "PUT", a.api+"/routes/moved", alice, fmt.Sprintf(`{"executionId": %q}`, newer))
		if status == 200 {
			break
		} else if time.Now().After(deadline) {
			t.Fatalf("binding moved after etcd resumed: %d %s", status, answer)
		}
		time.Sleep(100 * time.Millisecond)
	}
	time.Sleep(2 * time.Second) // anything late has landed by now
	answers := v.end()

	// The registry as etcd holds it, and as every gateway answers it.
	routes := etcdTable(t, cli, "routes")
	handlesKept := etcdTable(t, cli, "handles")
	if routes["moved"] != newer {
		t.Errorf("route moved in etcd points at %q, want the newer bind's %s (a write given up on landed over it)", routes["moved"], newer)
	}
	want := map[string]bool{newer: true, keep: true, counter: true}
	if _, ok := handlesKept[doomed]; ok {
		want[doomed] = true
	}
	for id := range handlesKept {
		var rec struct{ Tenant string }
		json.Unmarshal([]byte(handlesKept[id]), &rec)
		if rec.Tenant == "alice" && !want[id] {
			t.Errorf("handle %s is in etcd, but no deploy that made it was answered 2xx (one answered 503 was kept)", id)
		}
	}
	for _, gw := range gws {
		for _, route := range []string{"moved", "gone", "bobs"} {
			token := alice
			if route == "bobs" {
				token = bob
			}
			status, body := clusterCall(t, "GET", fmt.Sprintf("http://api.localhost:%d/routes/%s", memberPort(gw), route), token, "")
			var r struct{ ExecutionID string }
			json.Unmarshal([]byte(body), &r)
			if inEtcd, ok := routes[route]; ok != (status == 200) || r.ExecutionID != inEtcd {
				t.Errorf("route %s through gw-%d: %d %s; etcd holds %q", route, gw, status, body, inEtcd)
			}
		}
		if status, body := clusterCall(t, "GET", fmt.Sprintf("http://moved.apps.localhost:%d/", memberPort(gw)), "", ""); status != 200 || body != "v3" {
			t.Errorf("a visit of moved through gw-%d: %d %q, want the newer bind's v3", gw, status, body)
		}
		status, _ := clusterCall(t, "GET", fmt.Sprintf("http://gone.apps.localhost:%d/", memberPort(gw)), "", "")
		if _, ok := routes["gone"]; ok != (status == 200) {
			t.Errorf("a visit of gone through gw-%d: %d, but etcd holds the route: %v", gw, status, ok)
		}
		ids := aliceHandles(t, gw, alice)
		var stored []string
		for id := range want {
			if _, ok := handlesKept[id]; ok {
				stored = append(stored, id)
			}
		}
		sort.Strings(stored)
		if strings.Join(ids, ",") != strings.Join(stored, ",") {
			t.Errorf("alice's handles through gw-%d: %v; etcd holds %v (before the pause: %v)", gw, ids, stored, before)
		}
		status, body := clusterCall(t, "GET", fmt.Sprintf("http://api.localhost:%d/domains/shop.example.com", memberPort(gw)), alice, "")
		claimed := false
		for k := range etcdTable(t, cli, "domains") {
			claimed = claimed || strings.HasPrefix(k, "shop.example.com")
		}
		if claimed != (status == 200) {
			t.Errorf("the domain through gw-%d: %d %s; in etcd: %v", gw, status, body, claimed)
		}
	}

	secrets := map[string]bool{}
	for _, gw := range gws {
		status, body := clusterCall(t, "GET", fmt.Sprintf("http://api.localhost:%d/secrets", memberPort(gw)), alice, "")
		var list struct{ Secrets []struct{ Name string } }
		json.Unmarshal([]byte(body), &list)
		var names []string
		for _, sec := range list.Secrets {
			names = append(names, sec.Name)
		}
		if secrets[strings.Join(names, ",")] = true; status != 200 || len(secrets) != 1 {
			t.Errorf("the secrets through gw-%d: %d %s (other gateways: %v)", gw, status, body, secrets)
		}
	}

	counts, slowest := checkAnswers(t, answers, 3*time.Second)
	for _, route := range []string{"keep", "bystander"} {
		if isolates := checkOneOwner(t, answers, route); len(isolates) != 1 {
			t.Errorf("%s was answered by %d isolates %v: a pause shorter than the lease reset its closure", route, len(isolates), isolates)
		}
	}
	acked := checkKVKept(t, answers, "kvc", 1)
	served := firstServedAfter(answers, back)
	for _, route := range []string{"keep", "bystander", "kvc"} {
		for _, gw := range gws {
			if after, ok := served[fmt.Sprintf("%s@gw-%d", route, gw)]; !ok || after > 5*time.Second {
				t.Errorf("%s through gw-%d was not served within a lease (5 s) of etcd's return (%v)", route, gw, after)
			}
		}
	}
	t.Logf("etcd paused %v..%v: visits %v, slowest %v; %d kv writes acknowledged; served again after SIGCONT %v; in etcd after: routes %v, %d handles (%s kept: %v), secrets %v",
		paused.Round(time.Millisecond), back.Round(time.Millisecond), counts, slowest.Round(time.Millisecond), acked, served, routes, len(handlesKept), doomed, want[doomed], secrets)
}
