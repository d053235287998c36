package main

import (
	"context"
	"encoding/json"
	"fmt"
	"testing"
	"time"

	"github.com/retainer-gw/retainer/internal/etcdtest"
	"github.com/retainer-gw/retainer/internal/pgtest"
)

// firingHandler counts its firings and, like instanceHandler, its visits
// in its closure, saying which isolate answered.
const firingHandler = `const me = String(Math.random()).slice(2, 10); let n = 0, fired = 0;
export default {
	fetch(req) { return new Response(new URL(req.url).pathname === '/fired' ? String(fired) : me + ' ' + (++n)) },
	scheduled() { fired++ } }`

// A fire-now while etcd is paused (SIGSTOP, 3 s of a 5 s lease) at the
// gateway that owns two tenants' spaces: each is answered, ok, while etcd
// is still paused (a firing's list waits in memory for the loop's flush,
// docs/schedules.md; before, the first firing of a handle read the
// stored list under the schedules' lock until etcd answered, and every
// other fire-now, tick and handle's end of the gateway waited behind
// it), a bystander's route is served from one closure through both
// gateways throughout, and once etcd is back the firing is listed through
// both gateways.
func TestClusterFireNowWhileEtcdPaused(t *testing.T) {
	etcd := etcdtest.StartProcess(t)
	pg := pgtest.Start(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	a := registryMember(t, ctx, 1, etcd.Endpoint, pg.DSN)
	registryMember(t, ctx, 2, etcd.Endpoint, pg.DSN)
	bob := &gateway{api: a.api, token: tokenFor(t, ctx, "bob")}
	body := fmt.Sprintf(`{"retainHandles": true, "schedules": ["0 0 1 1 *"], "code": %q}`, firingHandler)
	// Both spaces are gw-1's.
	alice := deployThrough(t, a, body)
	bobs := deployThrough(t, bob, body)
	bindThrough(t, bob, "bobs", bobs)
	for _, gw := range []int{1, 2} {
		if status, body := clusterCall(t, "GET", fmt.Sprintf("http://bobs.apps.localhost:%d/", memberPort(gw)), "", ""); status != 200 {
			t.Fatalf("bobs through gw-%d before the pause: %d %s", gw, status, body)
		}
	}

	v := startVisitors([]int{1, 2}, "bobs")
	time.Sleep(300 * time.Millisecond)
	etcd.Pause()
	paused := v.at()
	resumed := false
	defer func() {
		if !resumed {
			etcd.Resume()
		}
	}()
	type fired struct {
		status   int
		answer   string
		sent, at time.Duration
	}
	fire := func(gw *gateway, id string) chan fired {
		out := make(chan fired, 1)
		go func() {
			sent := v.at()
			status, answer := clusterCall(t, "POST", gw.api+"/handles/"+id+"/scheduled", gw.token, "")
			out <- fired{status, answer, sent, v.at()}
		}()
		return out
	}
	time.Sleep(200 * time.Millisecond)
	fires := map[string]chan fired{"alice": fire(a, alice), "bob": fire(bob, bobs)}
	time.Sleep(paused + 3*time.Second - v.at())
	etcd.Resume()
	resumed = true
	back := v.at()
	for who, ch := range fires {
		var f fired
		select {
		case f = <-ch:
		case <-time.After(10 * time.Second):
			t.Fatalf("%s's fire-now: no answer within 10 s of etcd's return", who)
		}
		var got struct{ Outcome string }
		json.Unmarshal([]byte(f.answer), &got)
		t.Logf("%s's fire-now: sent %v into the pause, answered %d after %v: %s", who, (f.sent - paused).Round(time.Millisecond), f.status, (f.at - f.sent).Round(time.Millisecond), f.answer)
		if f.status != 200 || got.Outcome != "ok" {
			t.Errorf("%s's fire-now while etcd is paused: %d %s, want 200 ok", who, f.status, f.answer)
		}
		if f.at >= back {
			t.Errorf("%s's fire-now was answered only after etcd resumed (%v after it was sent)", who, f.at-f.sent)
		}
	}

	// The firing is listed through both gateways once the loop flushed it.
	deadline := time.Now().Add(10 * time.Second)
	for _, gw := range []int{1, 2} {
		for {
			status, answer := clusterCall(t, "GET", fmt.Sprintf("http://api.localhost:%d/handles/%s/schedules", memberPort(gw), alice), a.token, "")
			var info struct{ Firings []struct{ Outcome string } }
			json.Unmarshal([]byte(answer), &info)
			if status == 200 && len(info.Firings) == 1 && info.Firings[0].Outcome == "ok" {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("alice's firings through gw-%d: %d %s, want the one fired while etcd was paused", gw, status, answer)
			}
			time.Sleep(100 * time.Millisecond)
		}
		if status, answer := clusterCall(t, "GET", fmt.Sprintf("http://bobs.apps.localhost:%d/fired", memberPort(gw)), "", ""); status != 200 || answer != "1" {
			t.Errorf("bob's firings in his closure through gw-%d: %d %q, want 1", gw, status, answer)
		}
	}
	answers := v.end()
	counts, slowest := checkAnswers(t, answers, 3*time.Second)
	if isolates := checkOneOwner(t, answers, "bobs"); len(isolates) != 1 {
		t.Errorf("bobs was answered by %d isolates %v: a pause shorter than the lease reset its closure", len(isolates), isolates)
	}
	t.Logf("etcd paused %v..%v: visits %v, slowest %v", paused.Round(time.Millisecond), back.Round(time.Millisecond), counts, slowest.Round(time.Millisecond))
}
