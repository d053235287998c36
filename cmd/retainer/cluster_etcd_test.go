package main

import (
	"context"
	"fmt"
	"net/http"
	"strconv"
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
	srv := etcdtest.Start(t)
	stall := etcdtest.StartStall(t, srv)
	pg := pgtest.Start(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	a := startMember(t, ctx, 1, stall.Endpoint, pg.DSN)
	startMember(t, ctx, 2, stall.Endpoint, pg.DSN)
	id := deployThrough(t, a, fmt.Sprintf(`{"retainHandles": true, "code": %q}`, counterHandler))
	bindThrough(t, a, "shop", id)
	if status, body := visit(t, 1, "/"); status != 200 || body != "1" {
		t.Fatalf("the first visit: %d %q", status, body)
	}

	var mu sync.Mutex
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
				res, err := c.Get(fmt.Sprintf("http://shop.apps.localhost:%d/", 9280+gw))
				mu.Lock()
				if err != nil {
					failures = append(failures, fmt.Sprintf("gw-%d: %v", gw, err))
				} else {
					var buf [32]byte
					n, _ := res.Body.Read(buf[:])
					res.Body.Close()
					v, _ := strconv.Atoi(string(buf[:n]))
					if res.StatusCode != 200 {
						failures = append(failures, fmt.Sprintf("gw-%d: %d %q", gw, res.StatusCode, buf[:n]))
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
	for range 3 {
		time.Sleep(700 * time.Millisecond)
		stall.Stall()
		time.Sleep(1200 * time.Millisecond) // 60% of the 2 s lease
		stall.Resume()
	}
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
