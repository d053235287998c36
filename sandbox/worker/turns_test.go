package worker

import (
	"fmt"
	"sort"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/retainer-gw/retainer/sandbox"
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
	pool := startPool(t, Config{Workers: 1, IsolatesPerWorker: 8, Queue: 1024, Engine: EngineConfig{HandleQueue: 512}})
	var mu sync.Mutex
	ticketOf := map[string]uint64{}
	epochOf := map[string]uint64{}
	pool.onTicket = func(req sandbox.WireRequest, tk ticket) {
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
