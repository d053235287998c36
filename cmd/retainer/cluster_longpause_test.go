package main

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/retainer-gw/retainer/internal/etcdtest"
	"github.com/retainer-gw/retainer/internal/pgtest"
)

// Registry writes while etcd is paused for about its whole lease (1.0 and
// 1.2 of the 2 s lease), long enough for a gateway to lose its lease by
// its own clock and, at etcd, to rejoin: four tenants loop deploy, bind
// through the other gateway, delete the previous handle; a bystander is
// visited at both. No answer is 500 (a claim etcd refused for a lease it
// let expire was 500 INTERNAL); no deploy answered otherwise than 200
// appears afterwards (one answered 503 "it may still be applied" was
// applied as etcd resumed, its take-back refused by the fence its gateway
// had lost, and the rejoin's reload served it); no deploy answered 200 is
// lost; a delete answered 204 stays deleted; each route points at its
// last bind answered 200 or at a later one answered 503 that may have
// been applied (docs/cluster.md, "Failures"). The red team's
// reproduction, shortened.
func TestClusterWritesAcrossLeaseLongEtcdPauses(t *testing.T) {
	p := etcdtest.StartProcess(t)
	pg := pgtest.Start(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	gws := []*gateway{startMember(t, ctx, 1, p.Endpoint, pg.DSN), startMember(t, ctx, 2, p.Endpoint, pg.DSN)}
	id := deployThrough(t, gws[0], fmt.Sprintf(`{"retainHandles": true, "code": %q}`, counterHandler))
	bindThrough(t, gws[0], "shop", id)
	const tenants = 4
	toks := make([]string, tenants)
	for i := range toks {
		out, err := binary(ctx, "retainer-token", "--sub", fmt.Sprintf("lp%d", i)).Output()
		if err != nil {
			t.Fatal(err)
		}
		toks[i] = strings.TrimSpace(string(out))
	}

	type op struct {
		tenant, gw int
		kind, tag  string
		id         string
		status     int
		body       string
	}
	var mu sync.Mutex
	var ops []op
	record := func(o op) {
		if len(o.body) > 200 {
			o.body = o.body[:200]
		}
		mu.Lock()
		ops = append(ops, o)
		mu.Unlock()
	}
	visits := map[int]int{}
	done := make(chan struct{})
	var wg sync.WaitGroup
	for i := range tenants {
		wg.Add(1)
		go func() {
			defer wg.Done()
			prev := ""
			for n := 0; ; n++ {
				select {
				case <-done:
					return
				default:
				}
				g := (i + n) % 2
				tag := fmt.Sprintf("lp%d-%d", i, n)
				code := fmt.Sprintf("export default { async fetch(){ return new Response(%q) } }", tag)
				body, _ := json.Marshal(map[string]any{"retainHandles": true, "code": code})
				st, ans := clusterCall(t, "POST", gws[g].api+"/executions", toks[i], string(body))
				var dep struct{ ExecutionID string }
				json.Unmarshal([]byte(ans), &dep)
				record(op{i, g, "deploy", tag, dep.ExecutionID, st, ans})
				if st != 200 {
					time.Sleep(20 * time.Millisecond)
					continue
				}
				g2 := 1 - g
				st, ans = clusterCall(t, "PUT", gws[g2].api+"/routes/"+fmt.Sprintf("r%d", i), toks[i], fmt.Sprintf(`{"executionId": %q}`, dep.ExecutionID))
				record(op{i, g2, "bind", tag, dep.ExecutionID, st, ans})
				if st != 200 {
					time.Sleep(20 * time.Millisecond)
					continue
				}
				if prev != "" {
					st, ans = clusterCall(t, "DELETE", gws[g].api+"/handles/"+prev, toks[i], "")
					record(op{i, g, "delete", "", prev, st, ans})
				}
				prev = dep.ExecutionID
			}
		}()
	}
	wg.Add(1)
	go func() {
		defer wg.Done()
		for n := 0; ; n++ {
			select {
			case <-done:
				return
			default:
			}
			st, _ := visit(t, 1+n%2, "/")
			mu.Lock()
			visits[st]++
			mu.Unlock()
			time.Sleep(20 * time.Millisecond)
		}
	}()
	for _, frac := range []float64{1.0, 1.2} {
		time.Sleep(1500 * time.Millisecond)
		p.Pause()
		time.Sleep(time.Duration(frac * float64(2*time.Second)))
		p.Resume()
	}
	time.Sleep(3 * time.Second)
	close(done)
	wg.Wait()

	mu.Lock()
	defer mu.Unlock()
	counts := map[string]int{}
	for _, o := range ops {
		counts[fmt.Sprintf("%s %d", o.kind, o.status)]++
		if o.status == 503 && strings.Contains(o.body, "may still be applied") {
			counts[o.kind+" 503 sent, given up on"]++
		}
		if o.status == 500 || o.status == 0 {
			t.Errorf("%s of lp%d through gw-%d answered %d: %s", o.kind, o.tenant, o.gw+1, o.status, o.body)
		}
	}
	t.Logf("answers %v; bystander visits %v", counts, visits)
	if visits[200] == 0 {
		t.Errorf("the bystander was never served: %v", visits)
	}

	// What each tenant holds, as both gateways list it, once the take-backs
	// have had time to land.
	for i := range tenants {
		okIDs, deleted, tagOf := map[string]bool{}, map[string]int{}, map[string]string{}
		last200, mayLand := "", map[string]bool{}
		for _, o := range ops {
			if o.tenant != i {
				continue
			}
			switch {
			case o.kind == "deploy" && o.status == 200:
				okIDs[o.id] = true
				tagOf[o.id] = o.tag
			case o.kind == "delete":
				deleted[o.id] = o.status
			case o.kind == "bind" && o.status == 200:
				last200, mayLand = o.id, map[string]bool{}
			case o.kind == "bind" && strings.Contains(o.body, "may still be applied"):
				mayLand[o.id] = true
			}
		}
		for g, gw := range gws {
			var have map[string]bool
			deadline := time.Now().Add(5 * time.Second)
			for {
				st, body := clusterCall(t, "GET", gw.api+"/handles", toks[i], "")
				var l struct {
					Handles []struct{ ExecutionID string }
				}
				json.Unmarshal([]byte(body), &l)
				have = map[string]bool{}
				extra := false
				for _, h := range l.Handles {
					have[h.ExecutionID] = true
					extra = extra || !okIDs[h.ExecutionID]
				}
				if st == 200 && !extra || time.Now().After(deadline) {
					if st != 200 {
						t.Fatalf("listing lp%d at gw-%d: %d %s", i, g+1, st, body)
					}
					break
				}
				time.Sleep(100 * time.Millisecond)
			}
			for id := range okIDs {
				st, ok := deleted[id]
				switch {
				case !ok && !have[id]:
					t.Errorf("LOST: lp%d's deploy %s (%s) answered 200, never deleted, not listed at gw-%d", i, id, tagOf[id], g+1)
				case ok && st == 204 && have[id]:
					t.Errorf("RESURRECTED: lp%d's %s deleted with 204, listed at gw-%d", i, id, g+1)
				}
			}
			for id := range have {
				if okIDs[id] {
					continue
				}
				_, served := clusterCall(t, "POST", gw.api+"/handles/"+id+"/fetch", toks[i], `{"method":"GET","url":"http://x/","headers":[],"body":null}`)
				var w struct{ Body []byte }
				json.Unmarshal([]byte(served), &w)
				var its []op
				for _, o := range ops {
					if o.kind == "deploy" && o.tag == string(w.Body) {
						its = append(its, o)
					}
				}
				t.Errorf("APPEARED: %s listed at gw-%d for lp%d, its deploy never answered 200: %+v (invoked: %.200s)", id, g+1, i, its, served)
			}
			st, body := clusterCall(t, "GET", gw.api+"/routes", toks[i], "")
			var rl struct {
				Routes []struct{ Name, ExecutionID string }
			}
			json.Unmarshal([]byte(body), &rl)
			cur := ""
			for _, r := range rl.Routes {
				if r.Name == fmt.Sprintf("r%d", i) {
					cur = r.ExecutionID
				}
			}
			if st != 200 || cur != last200 && !mayLand[cur] {
				t.Errorf("route r%d at gw-%d: %d, points at %q; the last bind answered 200 was %q, later ones that may land %v", i, g+1, st, cur, last200, mayLand)
			}
		}
	}
}
