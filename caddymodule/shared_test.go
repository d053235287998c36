package caddymodule

import (
	"fmt"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/caddyserver/caddy/v2/caddytest"
)

// `isolation shared` under many deploys (docs/architecture.md, "The pool's
// queues"): bob's counter, served steadily, while 200 tenants deploy
// retained handles all at once on two workers with room for 64 isolates.
// Nothing the deploys do is charged to bob: every one of his requests
// answers 200 and his counter counts on (a deploy parks an earlier
// deploy's isolate that served nothing, never his, and waits for a slot
// while the others' runs hold them); each deploy answers 200 or, when the
// machine has no room, OVERLOADED (retryable).
func TestSharedWorkersServeABystanderWhileManyDeploy(t *testing.T) {
	store := filepath.Join(t.TempDir(), "registry.db")
	caddytest.NewTester(t).InitServer(gatewayConfig(store, "isolation shared"), "caddyfile")
	bob := newBystander(t)

	const tenants = 200
	toks := make([]string, tenants)
	for i := range toks {
		toks[i] = token(t, fmt.Sprintf("tenant-%03d", i), allScopes)
	}

	stop := make(chan struct{})
	var bobFailures []string
	bobDone := make(chan struct{})
	go func() {
		defer close(bobDone)
		for {
			select {
			case <-stop:
				return
			default:
			}
			a := do(t, "GET", site(bob.route+".apps.localhost", "/"), "", nil)
			if a.status != 200 {
				bobFailures = append(bobFailures, fmt.Sprintf("%d %s", a.status, a.body))
			} else {
				bob.count++
				var m struct{ Served int }
				if err := jsonUnmarshal(a.body, &m); err != nil || m.Served != bob.count {
					bobFailures = append(bobFailures, fmt.Sprintf("counter %s, want %d: his state was lost", a.body, bob.count))
					bob.count = m.Served
				}
			}
			time.Sleep(2 * time.Millisecond)
		}
	}()

	answers := make([]answer, tenants)
	var wg sync.WaitGroup
	for i := range tenants {
		wg.Add(1)
		go func() {
			defer wg.Done()
			answers[i] = execute(t, toks[i], map[string]any{"code": counter, "retainHandles": true, "timeoutMs": 5000})
		}()
	}
	wg.Wait()
	close(stop)
	<-bobDone

	deployed, overloaded := 0, 0
	for i, a := range answers {
		switch {
		case a.status == 200:
			deployed++
		case a.status == 503 && a.code() == "OVERLOADED":
			overloaded++
		default:
			t.Errorf("tenant %d's deploy: %d %s", i, a.status, a.body)
		}
	}
	t.Logf("%d deploys answered 200, %d OVERLOADED; bob served %d times, %d not as he should be", deployed, overloaded, bob.count, len(bobFailures))
	for i, f := range bobFailures {
		if i == 10 {
			t.Errorf("... and %d more", len(bobFailures)-10)
			break
		}
		t.Errorf("bob's request while tenants deployed: %s", f)
	}
	bob.pid = 0 // shared workers: bob's isolate stays, his worker may host others
	bob.check("200 tenants' deploys")
}
