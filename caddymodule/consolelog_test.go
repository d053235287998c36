package caddymodule

import (
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest/observer"

	"github.com/retainer-gw/retainer/budgets"
	"github.com/retainer-gw/retainer/internal/waitfor"
)

// The limiter alone: one tenant's flood takes its own burst, never
// another's lines; the tenants kept are bounded, the idle ones forgotten
// first; a long line is cut with a note.
func TestConsoleLimiter(t *testing.T) {
	t.Parallel()
	c := newConsoleLimiter()
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	in := 0
	for i := 0; i < 1000; i++ {
		if ok, _ := c.allow("mallory", now); ok {
			in++
		}
	}
	if in != budgets.ConsoleBurstPerTenant {
		t.Fatalf("mallory's flood: %d lines in, want her burst of %d", in, budgets.ConsoleBurstPerTenant)
	}
	if ok, dropped := c.allow("mallory", now.Add(time.Second)); !ok || dropped != 1000-budgets.ConsoleBurstPerTenant {
		t.Fatalf("mallory's next line: %v, %d left out before it", ok, dropped)
	}
	now = now.Add(time.Second)
	for i := 0; i < 20; i++ {
		now = now.Add(300 * time.Millisecond)
		for j := 0; j < 50; j++ {
			c.allow("mallory", now)
		}
		if ok, _ := c.allow("bob", now); !ok {
			t.Fatalf("bob's line %d was left out beside mallory's flood", i)
		}
	}
	// Bounded: past budgets.ConsoleTenants a new tenant waits until the others
	// are idle.
	for i := len(c.tenants); i < budgets.ConsoleTenants; i++ {
		c.allow(fmt.Sprintf("t%d", i), now)
	}
	if ok, _ := c.allow("newcomer", now.Add(2*time.Second)); ok || len(c.tenants) != budgets.ConsoleTenants {
		t.Fatalf("a tenant past %d kept: %d", budgets.ConsoleTenants, len(c.tenants))
	}
	if ok, _ := c.allow("newcomer", now.Add(time.Minute)); !ok || len(c.tenants) != 1 {
		t.Fatalf("the idle tenants were not forgotten: %v, %d kept", ok, len(c.tenants))
	}
	if got := consoleLine("short"); got != "short" {
		t.Fatalf("a short line: %q", got)
	}
	long := strings.Repeat("é", 10000) // 20,000 bytes
	got := consoleLine(long)
	if !strings.HasPrefix(got, strings.Repeat("é", budgets.ConsoleLineBytes/2)) || !strings.Contains(got, "15904 bytes cut") || len(got) > budgets.ConsoleLineBytes+200 {
		t.Fatalf("a long line: %d bytes, %.80q…%q", len(got), got, got[len(got)-120:])
	}
}

// Through a gateway: mallory floods her console (a 20 KB line and 60 short
// ones a call) while bob's
// handle logs one line a visit; all 20 of bob's lines reach Caddy's log,
// and mallory's lines there are cut to budgets.ConsoleLineBytes. (One
// gateway-wide bucket once let 2 of bob's 20 lines through.)
func TestConsoleLinesPerTenant(t *testing.T) {
	b, mallory := attacked(t, "")
	core, logs := observer.New(zapcore.InfoLevel)
	runtimes.Range(func(_, v any) bool {
		v.(*runtime).logger.Store(zap.New(core))
		return true
	})
	id := deploy(t, mallory, `export default { async fetch() {
		console.log('M'.repeat(20000));
		for (let i = 0; i < 60; i++) console.log('m');
		return new Response('flooded');
	} }`, nil)
	var stop atomic.Bool
	var wg sync.WaitGroup
	calls := make([]int, 2)
	for k := range calls {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for !stop.Load() {
				if a := do(t, "GET", site(id+".apps.localhost", "/"), "", nil); a.status != 200 {
					t.Errorf("mallory's flood: %d %.200s", a.status, a.body)
					return
				}
				calls[k]++
			}
		}()
	}
	// Her flood has begun before bob's visits.
	waitfor.Within(10*time.Second, func() bool {
		return logs.FilterField(zap.String("tenant", "mallory")).Len() >= budgets.ConsoleBurstPerTenant
	})
	for i := 0; i < 20; i++ {
		b.check(fmt.Sprintf("mallory's flood, visit %d", i+1))
	}
	stop.Store(true)
	wg.Wait()
	bobs := func() int {
		return logs.FilterField(zap.String("tenant", "bob")).FilterMessage("handler console").Len()
	}
	waitfor.Within(10*time.Second, func() bool { return bobs() >= 20 })
	m := logs.FilterField(zap.String("tenant", "mallory")).All()
	t.Logf("mallory: %d calls of 61 lines, %d lines in the log; bob: %d lines in the log", calls[0]+calls[1], len(m), bobs())
	if n := bobs(); n < 20 {
		t.Fatalf("%d of bob's 20 console lines reached the log beside mallory's flood", n)
	}
	cut := 0
	for _, e := range m {
		msg := e.ContextMap()["message"].(string)
		if len(msg) > budgets.ConsoleLineBytes+200 {
			t.Fatalf("mallory's line in the log: %d bytes, %.100q", len(msg), msg)
		}
		if strings.Contains(msg, "15904 bytes cut") {
			cut++
		}
	}
	if cut == 0 {
		t.Fatal("none of mallory's 20,000-byte lines in the log carries the cut note")
	}
	b.check("mallory's console flood")
}
