package workers

import (
	"context"
	"fmt"
	"sort"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/retainer-gw/retainer/budgets"
	"github.com/retainer-gw/retainer/program"
	"github.com/retainer-gw/retainer/workers/wire"
)

// takeTickets takes n of id's tickets, in order.
func takeTickets(ts *turns, id string, n int) []ticket {
	tickets := make([]ticket, n)
	for i := range tickets {
		tickets[i] = ts.take(id)
	}
	return tickets
}

// Steps run in ticket order whatever order their goroutines start in, and
// a ticket whose holder never comes holds the others only turnWait.
func TestTurnsKeepTicketOrder(t *testing.T) {
	ts := newTurns()
	const n = 50
	tickets := takeTickets(ts, "h", n)
	var mu sync.Mutex
	var order []uint64
	var wg sync.WaitGroup
	for i := n - 1; i >= 0; i-- { // started in reverse
		wg.Add(1)
		go func(tk ticket) {
			defer wg.Done()
			ts.wait("h", tk)
			mu.Lock()
			order = append(order, tk.n)
			mu.Unlock()
			ts.done("h", tk)
		}(tickets[i])
	}
	wg.Wait()
	for i, tk := range order {
		if tk != uint64(i) {
			t.Fatalf("steps ran in order %v", order)
		}
	}

	lost := ts.take("g") // never arrives
	next := ts.take("g")
	start := time.Now()
	ts.wait("g", next)
	if waited := time.Since(start); waited < turnWait/2 {
		t.Fatalf("a later ticket did not wait for the one before (%v)", waited)
	}
	ts.done("g", next)
	_ = lost
}

// Invocations of one handle run in the order the pool took them in, though
// each is sent from its own goroutine and served on another in the worker.
func TestInvocationsRunInArrivalOrder(t *testing.T) {
	pool := startPool(t, Config{Workers: 1, IsolatesPerWorker: 8, Queue: 1024, Engine: wire.EngineConfig{Limits: budgets.Limits{HandleQueue: 512}}})
	var mu sync.Mutex
	ticketOf := map[string]uint64{}
	epochOf := map[string]uint64{}
	pool.onTicket = func(req program.WireRequest, tk ticket) {
		mu.Lock()
		ticketOf[req.URL] = tk.n
		epochOf[req.URL] = tk.epoch
		mu.Unlock()
	}
	deploy(t, pool, "ordered", `async () => { let n = 0; return { fetch() { return new Response(String(n++)); } } }`)
	const calls = 200
	served := make(map[string]int, calls)
	var wg sync.WaitGroup
	for i := 0; i < calls; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			url := fmt.Sprintf("https://x/%d", i)
			res, err := get(pool, "ordered", url)
			if err != nil {
				t.Error(err)
				return
			}
			n, _ := strconv.Atoi(string(res.BodyBytes()))
			mu.Lock()
			served[url] = n
			mu.Unlock()
		}()
	}
	wg.Wait()
	// Tickets restart when the handle has nothing in flight: within a run
	// of tickets, served order must follow ticket order.
	type pair struct {
		epoch     uint64
		ticket, n int
	}
	var pairs []pair
	for url, n := range served {
		pairs = append(pairs, pair{epochOf[url], int(ticketOf[url]), n})
	}
	sort.Slice(pairs, func(i, j int) bool { return pairs[i].n < pairs[j].n })
	out := 0
	for i := 1; i < len(pairs); i++ {
		// Served in order: the next ticket of the same epoch, or the
		// first of a later one.
		a, b := pairs[i-1], pairs[i]
		if !(b.epoch == a.epoch && b.ticket == a.ticket+1 || b.epoch > a.epoch && b.ticket == 0) {
			out++
		}
	}
	if out > 0 {
		t.Fatalf("%d of %d invocations ran out of their arrival order", out, calls)
	}
}

// Frames written one after another by an ordered line arrive in that order,
// and the turn passes once a frame's place is taken.
func TestOrderedWritesArriveInOrder(t *testing.T) {
	a, b := connPair(t)
	var mu sync.Mutex
	var got []string
	peer := wire.NewConn(b, 1<<20, 1<<20, func(_ context.Context, path string, _ []byte) ([]byte, error) {
		return []byte("ok"), nil
	}, nil)
	peer.Take = func(_ uint64, path string, _ []byte) bool {
		mu.Lock()
		got = append(got, path)
		mu.Unlock()
		return false // served on its own goroutine as usual
	}
	peer.Start()
	caller := wire.NewConn(a, 1<<20, 1<<20, nil, nil).Start()
	defer caller.Close()
	defer peer.Close()
	ts := newTurns()
	const n = 200
	tickets := takeTickets(ts, "h", n)
	var wg sync.WaitGroup
	for i := n - 1; i >= 0; i-- {
		wg.Add(1)
		go func(i int) {
			defer wg.Done()
			tk := tickets[i]
			if _, err := caller.CallOrdered(context.Background(), fmt.Sprint(i), nil,
				func() { ts.wait("h", tk) }, func() { ts.done("h", tk) }, false); err != nil {
				t.Error(err)
			}
		}(i)
	}
	wg.Wait()
	mu.Lock()
	defer mu.Unlock()
	for i, p := range got {
		if p != fmt.Sprint(i) {
			t.Fatalf("frame %d arrived as %s-th: %v", i, p, got)
		}
	}
	if len(got) != n {
		t.Fatalf("%d frames arrived, want %d", len(got), n)
	}
}

// connPair is the two ends of a link, as a pool and its worker hold them.
func connPair(t *testing.T) (gateway, worker *wire.Link) {
	gateway, worker, err := wire.LinkPair()
	if err != nil {
		t.Fatal(err)
	}
	return gateway, worker
}
