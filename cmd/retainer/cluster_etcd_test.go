package main

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/retainer-gw/retainer/internal/etcdtest"
	"github.com/retainer-gw/retainer/internal/pgtest"
)

// counterHandler counts in its closure only: it needs no etcd to answer.
const counterHandler = `let n = 0; export default { fetch() { return new Response(String(++n)) } }`

// etcd stalled (every connection held, as a SIGSTOPped etcd holds them)
// for 60% of the lease, three times, while two visitors go on through
// the owner and through another gateway: every visit is answered 200 and
// the closure's count never repeats or goes back (before, a stall of 60%
// could cost the owner its lease: every closure reset).
func TestClusterEtcdStallShorterThanTheLease(t *testing.T) {
	stall := stallableShop(t)

	var mu sync.Mutex
	began := time.Now()
	seen := map[int]int{} // count: gateway that answered it
	var failures []string
	done := make(chan struct{})
	var wg sync.WaitGroup
	for _, gw := range []int{1, 2} {
		wg.Add(1)
		go func() {
			defer wg.Done()
			c := &http.Client{Timeout: 10 * time.Second, Transport: clusterClient.Transport}
			for {
				select {
				case <-done:
					return
				default:
				}
				sent := time.Since(began)
				res, err := c.Get(fmt.Sprintf("http://shop.apps.localhost:%d/", memberPort(gw)))
				mu.Lock()
				if err != nil {
					failures = append(failures, fmt.Sprintf("gw-%d at %v: %v", gw, sent.Round(time.Millisecond), err))
				} else {
					body, _ := io.ReadAll(io.LimitReader(res.Body, 512))
					res.Body.Close()
					v, _ := strconv.Atoi(string(body))
					if res.StatusCode != 200 {
						failures = append(failures, fmt.Sprintf("gw-%d at %v: %d %q", gw, sent.Round(time.Millisecond), res.StatusCode, body))
					} else if prev, twice := seen[v]; twice || v < 2 {
						failures = append(failures, fmt.Sprintf("count %d answered by gw-%d and gw-%d (a closure reset)", v, prev, gw))
					} else {
						seen[v] = gw
					}
				}
				mu.Unlock()
				time.Sleep(20 * time.Millisecond)
			}
		}()
	}
	var stalls []string
	for range 3 {
		time.Sleep(700 * time.Millisecond)
		stall.Stall()
		from := time.Since(began)
		time.Sleep(1200 * time.Millisecond) // 60% of the 2 s lease
		stall.Resume()
		stalls = append(stalls, fmt.Sprintf("%v..%v", from.Round(time.Millisecond), time.Since(began).Round(time.Millisecond)))
	}
	t.Logf("etcd stalled %v", stalls)
	time.Sleep(700 * time.Millisecond)
	close(done)
	wg.Wait()
	if len(failures) > 0 {
		t.Fatalf("%d of %d visits failed with etcd stalled for 60%% of the lease: %v", len(failures), len(failures)+len(seen), failures)
	}
	if len(seen) < 20 {
		t.Fatalf("only %d visits answered", len(seen))
	}
	t.Logf("%d visits, every count once", len(seen))
}

// etcd stalled for 5 s, past the 2 s lease: every visit, through the owner
// and through another gateway, is answered (200 while the owner's lease
// lasts by its own clock, then 503 OVERLOADED with Retry-After), none
// waits for etcd to come back; once it is back, both serve again.
func TestClusterEtcdUnreachableAnswersEveryRequest(t *testing.T) {
	stall := stallableShop(t)
	stall.Stall()
	stalled := time.Now()
	resumed := false
	defer func() {
		if !resumed {
			stall.Resume()
		}
	}()
	c := &http.Client{Timeout: 4 * time.Second, Transport: clusterClient.Transport}
	counts := map[string]int{}
	var slowest time.Duration
	for time.Since(stalled) < 5*time.Second {
		for _, gw := range []int{1, 2} {
			started := time.Now()
			res, err := c.Get(fmt.Sprintf("http://shop.apps.localhost:%d/", memberPort(gw)))
			took := time.Since(started)
			slowest = max(slowest, took)
			if err != nil {
				t.Fatalf("a visit through gw-%d %v after etcd stalled: %v (after %v)", gw, time.Since(stalled), err, took)
			}
			res.Body.Close()
			if res.StatusCode != 200 && (res.StatusCode != 503 || res.Header.Get("Retry-After") == "") {
				t.Fatalf("a visit through gw-%d %v after etcd stalled: %d", gw, time.Since(stalled), res.StatusCode)
			}
			counts[fmt.Sprintf("gw-%d %d", gw, res.StatusCode)]++
		}
		time.Sleep(50 * time.Millisecond)
	}
	stall.Resume()
	resumed = true
	t.Logf("with etcd stalled 5 s: %v, the slowest answer %v", counts, slowest)
	back := time.Now()
	for _, gw := range []int{1, 2} {
		visitUntilServed(t, gw, "/", back)
	}
	t.Logf("both served again %v after etcd came back", time.Since(back))
}

// stallableShop starts two gateways on an etcd reached through a stall
// (etcdtest.StartStall), deploys the counter through the first, binds it
// as the route shop and visits it once; the caller stalls etcd. The
// gateways stop with t.
func stallableShop(t *testing.T) *etcdtest.Stall {
	t.Helper()
	srv := etcdtest.Start(t)
	stall := etcdtest.StartStall(t, srv)
	pg := pgtest.Start(t)
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	a := startMember(t, ctx, 1, stall.Endpoint, pg.DSN)
	startMember(t, ctx, 2, stall.Endpoint, pg.DSN)
	id := deployThrough(t, a, fmt.Sprintf(`{"retainHandles": true, "code": %q}`, counterHandler))
	bindThrough(t, a, "shop", id)
	if status, body := visit(t, 1, "/"); status != 200 || body != "1" {
		t.Fatalf("the first visit: %d %q", status, body)
	}
	return stall
}

// A forwarder's memory of the owner lasts while the owner answers: with
// etcd stalled for 60% of a 10 s lease, visits through a gateway that
// does not own the space, which found its owner 2 s before the stall
// (the memory of that look ended 3 s into the stall), are all answered
// 200 by the owner's one isolate. Before, the memory ended 5 s after the
// look whatever the traffic, and the next visit waited for etcd and was
// answered 503 OVERLOADED 1.5 s later, with the owner serving throughout.
func TestClusterForwarderRemembersThroughAStall(t *testing.T) {
	srv := etcdtest.Start(t)
	stall := etcdtest.StartStall(t, srv)
	pg := pgtest.Start(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	member := func(i int) *gateway {
		path := clusterConfig(t, i, stall.Endpoint, pg.DSN)
		data, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, []byte(strings.Replace(string(data), "lease 2s", "lease 10s", 1)), 0o600); err != nil {
			t.Fatal(err)
		}
		return startMemberAt(t, ctx, i, path)
	}
	a := member(1)
	member(2)
	id := deployThrough(t, a, fmt.Sprintf(`{"retainHandles": true, "code": %q}`, counterHandler))
	bindThrough(t, a, "shop", id)
	if status, body := visit(t, 1, "/"); status != 200 || body != "1" {
		t.Fatalf("the first visit: %d %q", status, body)
	}

	began := time.Now()
	var mu sync.Mutex
	var answers []string
	last, failed := 1, 0
	done := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			select {
			case <-done:
				return
			default:
			}
			sent := time.Since(began)
			status, body := visit(t, 2, "/")
			mu.Lock()
			n, _ := strconv.Atoi(body)
			if status != 200 || n <= last {
				failed++
				answers = append(answers, fmt.Sprintf("at %v: %d %.120s", sent.Round(time.Millisecond), status, body))
			} else {
				last = n
			}
			mu.Unlock()
			time.Sleep(20 * time.Millisecond)
		}
	}()
	time.Sleep(2 * time.Second)
	stall.Stall()
	from := time.Since(began)
	time.Sleep(6 * time.Second) // 60% of the 10 s lease
	stall.Resume()
	to := time.Since(began)
	time.Sleep(300 * time.Millisecond)
	close(done)
	wg.Wait()
	mu.Lock()
	defer mu.Unlock()
	if failed > 0 {
		t.Fatalf("etcd stalled %v..%v: %d visits through the non-owner failed (answers must be 200 with a count that grows): %v", from.Round(time.Millisecond), to.Round(time.Millisecond), failed, answers)
	}
	if last < 50 {
		t.Fatalf("only %d visits answered", last)
	}
	t.Logf("etcd stalled %v..%v: %d visits through the non-owner, all 200 from one isolate", from.Round(time.Millisecond), to.Round(time.Millisecond), last-1)
}
