package caddymodule

import (
	"fmt"
	"io"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/retainer-gw/retainer/budgets"
)

// What the gateway holds of bodies it reads whole is charged to the tenant
// whose handler they are for as well as to the visitor's address
// (docs/architecture.md, Budgets): seventeen addresses, each within its
// own 16 MiB, sending sixteen slow 1 MiB bodies each to mallory's handler
// (272 MiB, more than the gateway's 256) fill her 64 MiB share, and the
// bodies past it answer 503 at once; meanwhile a visitor posting 100 KB
// to bob's handler is served. Slow bodies to a host with no handler
// answer 404 before a byte is read, so they are charged nothing: one
// address sends seventeen of them (more than its 16 MiB would hold).
func TestHeldBodiesAreBoundedPerTenant(t *testing.T) {
	bob, mallory := attacked(t, "request_body_idle 5s\nrequest_body_timeout 10s\nmax_request_body 4MiB")
	id := deploy(t, mallory, bodyReader, map[string]any{"timeoutMs": 500})
	host := id + ".apps.localhost"
	part := strings.Repeat("x", 600<<10) // past 512 KiB: each body holds 1 MiB
	stall := func(began chan<- struct{}) func(io.Writer, <-chan struct{}) {
		return func(w io.Writer, stop <-chan struct{}) {
			io.WriteString(w, part)
			began <- struct{}{}
			<-stop
		}
	}
	const addrs, each = 17, 16
	var wg sync.WaitGroup
	answers := make([]rawAnswer, addrs*each)
	began := make(chan struct{}, len(answers))
	for i := range answers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			answers[i] = rawPostFrom(fmt.Sprintf("127.0.6.%d", 1+i/each), host, "/upload?n="+fmt.Sprint(i), "Content-Length: 1048576", stall(began))
		}()
	}
	for range answers {
		<-began
	}
	time.Sleep(300 * time.Millisecond) // the gateway has read what they sent

	// Mallory's visitors hold her share (until request_body_idle answers
	// them 408); bob's are served.
	bobs := strings.Repeat("b", 100_000)
	if a := do(t, "POST", site(bob.route+".apps.localhost", "/echo"), "", []byte(bobs)); a.status != 200 || string(a.body) != bobs {
		t.Errorf("bob's visitor posting 100 KB while mallory's share is held: %d %.200s", a.status, a.body)
	}
	bob.check("mallory's share of held bodies is full")

	// Bodies to a host with no handler: 404 at once, nothing charged.
	nobody := make([]rawAnswer, 17)
	nobodyBegan := make(chan struct{}, len(nobody))
	var nwg sync.WaitGroup
	for i := range nobody {
		nwg.Add(1)
		go func() {
			defer nwg.Done()
			nobody[i] = rawPostFrom("127.0.6.100", "nohandler.apps.localhost", "/upload", "Content-Length: 1048576", stall(nobodyBegan))
		}()
	}
	nwg.Wait()
	for i, a := range nobody {
		if a.status != 404 || !strings.Contains(a.body, "NOT_FOUND") {
			t.Errorf("slow body %d to a host with no handler: %v", i, a)
		}
	}

	wg.Wait()
	held, refused := 0, 0
	for i, a := range answers {
		switch {
		case a.status == 408:
			held++
		case a.status == 503 && strings.Contains(a.body, "OVERLOADED") && strings.Contains(a.body, "this tenant's handlers") && strings.Contains(a.body, `"retryable":true`):
			refused++
		default:
			t.Errorf("slow body %d to mallory's handler: %v", i, a)
		}
	}
	t.Logf("of %d slow 1 MiB bodies to mallory's handler: %d held, %d refused", len(answers), held, refused)
	if share := int(budgets.RequestBodiesHeldPerTenant >> 20); held == 0 || held > share || refused < len(answers)-share {
		t.Errorf("of %d slow 1 MiB bodies to one tenant's handler, %d were held and %d refused past its %d MiB share", len(answers), held, refused, share)
	}
	if a := do(t, "POST", site(host, "/upload"), "", []byte(part)); a.status != 200 || !strings.Contains(string(a.body), fmt.Sprintf(`"length":%d`, len(part))) {
		t.Fatalf("a body to mallory's handler after the stalls: %d %.200s", a.status, a.body)
	}
	bob.check("bodies past a tenant's share")
}
