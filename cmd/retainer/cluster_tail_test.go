package main

import (
	"bufio"
	"context"
	"encoding/json"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/retainer-gw/retainer/internal/etcdtest"
	"github.com/retainer-gw/retainer/internal/pgtest"
)

// A tail through the gateway that does not own the handle's space
// (docs/logs.md, "Tail"): opened on gw-2 for a handle gw-1 owns, it sees
// the console lines of visits sent through both gateways, live, as the
// owner's entries are appended; another tenant's tail of it is 404 there.
func TestClusterTailThroughAnyGateway(t *testing.T) {
	srv := etcdtest.Start(t)
	pg := pgtest.Start(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	gws := map[int]*gateway{}
	for i := 1; i <= 2; i++ {
		gws[i] = startMemberAt(t, ctx, i, clusterConfig(t, i, srv.Endpoint, pg.DSN))
	}
	tokenFor := func(sub string) string {
		out, err := binary(ctx, "retainer-token", "--sub", sub).Output()
		if err != nil {
			t.Fatalf("retainer-token: %v", err)
		}
		return strings.TrimSpace(string(out))
	}
	carol, mallory := tokenFor("carol"), tokenFor("mallory")
	code := `{"retainHandles": true, "code": "let n = 0; export default { fetch(request) { n++; console.log('visit ' + n + ' ' + new URL(request.url).searchParams.get('via')); return new Response('ok') } }"}`
	status, answer := clusterCall(t, "POST", gws[1].api+"/executions", carol, code)
	var dep struct{ ExecutionID string }
	json.Unmarshal([]byte(answer), &dep)
	if status != 200 || dep.ExecutionID == "" {
		t.Fatalf("deploy: %d %s", status, answer)
	}
	id := dep.ExecutionID
	if status, body := visitKey(t, 1, id); status != 200 || body != "ok" {
		t.Fatalf("first visit: %d %s", status, body)
	}

	if status, body := clusterCall(t, "GET", gws[2].api+"/handles/"+id+"/tail", mallory, ""); status != 404 {
		t.Fatalf("another tenant's tail: %d %s", status, body)
	}

	tctx, tcancel := context.WithTimeout(ctx, 30*time.Second)
	defer tcancel()
	req, _ := http.NewRequestWithContext(tctx, "GET", gws[2].api+"/handles/"+id+"/tail", nil)
	req.Header.Set("Authorization", "Bearer "+carol)
	// The cluster client without its 20 s timeout: the tail is read for as
	// long as the test needs (its context ends it).
	tail := &http.Client{Transport: clusterClient.Transport}
	res, err := tail.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	if res.StatusCode != 200 || !strings.HasPrefix(res.Header.Get("Content-Type"), "text/event-stream") {
		t.Fatalf("the tail through gw-2: %d %s", res.StatusCode, res.Header.Get("Content-Type"))
	}
	lines := make(chan string, 64)
	go func() {
		defer close(lines)
		sc := bufio.NewScanner(res.Body)
		for sc.Scan() {
			lines <- sc.Text()
		}
	}()
	visit := func(gw int, via string) {
		t.Helper()
		status, body := clusterCall(t, "GET", strings.Replace(gws[gw].api, "api.localhost", id+".apps.localhost", 1)+"/?via="+via, "", "")
		if status != 200 || body != "ok" {
			t.Fatalf("visit %s through gw-%d: %d %s", via, gw, status, body)
		}
	}
	// seen waits for a data line naming via.
	seen := func(via string, within time.Duration) bool {
		deadline := time.After(within)
		for {
			select {
			case line, ok := <-lines:
				if !ok {
					t.Fatalf("the tail ended waiting for %s", via)
				}
				if strings.HasPrefix(line, "data:") && strings.Contains(line, " "+via+`"`) {
					return true
				}
			case <-deadline:
				return false
			}
		}
	}
	// The tail is registered at the owner through the link: probe until a
	// visit is seen, then every visit after it must be.
	ready := false
	for i := 0; i < 20 && !ready; i++ {
		visit(1, "probe")
		ready = seen("probe", 500*time.Millisecond)
	}
	if !ready {
		t.Fatal("the tail through gw-2 saw no visit in 10 s")
	}
	for _, v := range []struct {
		gw  int
		via string
	}{{1, "a"}, {2, "b"}, {1, "c"}} {
		visit(v.gw, v.via)
		if !seen(v.via, 10*time.Second) {
			t.Fatalf("the tail through gw-2 did not see the visit through gw-%d (%s) in 10 s", v.gw, v.via)
		}
	}
}
