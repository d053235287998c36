package main

import (
	"context"
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/retainer-gw/retainer/internal/etcdtest"
	"github.com/retainer-gw/retainer/internal/pgtest"
	"github.com/retainer-gw/retainer/internal/waitfor"
)

// A deploy answered 503 while etcd was paused, whose gateway was killed
// (kill -9) before its take-back landed, is still taken back: etcd applied
// its record and its mark (table takebacks) once it resumed, the gateway
// that remembered the give-up is gone, and the restarted one, or the
// other, finishes the take-back the mark names before any request for the
// tenant comes (docs/cluster.md, "Failures"; before, the record and its
// mark stayed in etcd until some load of the space skipped it). The
// deploy is never served or listed, through either gateway; a deploy of
// the same tenant answered 200 still is, and a bystander tenant's route
// on the other gateway keeps its closure's count throughout.
func TestClusterTakeBackOfADeadGatewayIsFinished(t *testing.T) {
	p := etcdtest.StartProcess(t)
	pg := pgtest.Start(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	a := memberWithLease(t, ctx, 1, p.Endpoint, pg.DSN, "5s")
	b := memberWithLease(t, ctx, 2, p.Endpoint, pg.DSN, "5s")
	cli, err := clientv3.New(clientv3.Config{Endpoints: []string{p.Endpoint}, DialTimeout: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer cli.Close()
	counter := fmt.Sprintf(`{"retainHandles": true, "code": %q}`, counterHandler)

	// The bystander: alice's counter on gw-2, bound to shop.
	bindThrough(t, b, "shop", deployThrough(t, b, counter))
	last := 0
	bystander := func(when string, gws ...int) {
		t.Helper()
		for _, gw := range gws {
			status, body := visit(t, gw, "/")
			n, _ := strconv.Atoi(body)
			if status != 200 || n != last+1 {
				t.Fatalf("the bystander through gw-%d %s: %d %q, want 200 %d (its closure kept)", gw, when, status, body, last+1)
			}
			last = n
		}
	}
	bystander("before", 1, 2)

	// tb's space is gw-1's.
	tb := &gateway{api: a.api, token: tokenFor(t, ctx, "tb")}
	kept := deployThrough(t, tb, counter)

	p.Pause()
	status, body := clusterCall(t, "POST", a.api+"/executions", tb.token, counter)
	if status != 503 || !strings.Contains(body, "may still be applied") {
		p.Resume()
		t.Fatalf("a deploy while etcd is paused: %d %s, want 503 given up on after it was sent", status, body)
	}
	// gw-1 can no longer take it back; etcd, resumed within the lease,
	// applies the record and its mark. (The mark leaves gw-1 before its
	// answer, handed to etcd's client; its connection's writer is given
	// a moment on a loaded machine before gw-1 stops.)
	time.Sleep(300 * time.Millisecond)
	pauseMember(t, a)
	p.Resume()
	given := ""
	waitfor.Until(t, 10*time.Second, "etcd holding the deploy given up on and its mark", func() bool {
		handles := etcdTable(t, cli, "handles")
		for id := range etcdTable(t, cli, "takebacks") {
			if _, ok := handles[id]; ok {
				given = id
				return true
			}
		}
		return false
	})
	a.cmd.Process.Kill()
	a.cmd.Wait()
	bystander("with gw-1 killed", 2)

	// Nothing asks for tb: the cluster finishes the take-back on its own.
	a = memberWithLease(t, ctx, 1, p.Endpoint, pg.DSN, "5s")
	tb.api = a.api
	if !waitfor.Within(15*time.Second, func() bool {
		_, rec := etcdTable(t, cli, "handles")[given]
		_, mark := etcdTable(t, cli, "takebacks")[given]
		body := false
		for k := range etcdTable(t, cli, "bodies") {
			body = body || strings.HasPrefix(k, given+"\x00")
		}
		return !rec && !mark && !body
	}) {
		t.Fatalf("15 s after gw-1 restarted, etcd still holds the deploy answered 503 (%s): record %v, mark %v", given,
			etcdTable(t, cli, "handles")[given] != "", etcdTable(t, cli, "takebacks")[given] != "")
	}

	for _, gw := range []int{1, 2} {
		status, body := clusterCall(t, "GET", fmt.Sprintf("http://api.localhost:%d/handles", memberPort(gw)), tb.token, "")
		var list struct {
			Handles []struct{ ExecutionID string }
		}
		json.Unmarshal([]byte(body), &list)
		if status != 200 || len(list.Handles) != 1 || list.Handles[0].ExecutionID != kept {
			t.Errorf("tb's handles through gw-%d: %d %s, want %s alone", gw, status, body, kept)
		}
		if status, body := visitKey(t, gw, given); status != 404 {
			t.Errorf("the deploy answered 503 through gw-%d: %d %s, want 404", gw, status, body)
		}
		if status, body := visitKey(t, gw, kept); status != 200 {
			t.Errorf("tb's deploy answered 200 through gw-%d: %d %s", gw, status, body)
		}
	}
	bystander("after", 1, 2)
}
