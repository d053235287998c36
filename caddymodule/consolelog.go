package caddymodule

import (
	"fmt"
	"sync"
	"time"
	"unicode/utf8"

	"github.com/retainer-gw/retainer/budgets"
	"golang.org/x/time/rate"
)

// Handlers' console lines copied into Caddy's log (docs/architecture.md,
// "Budgets"): each tenant has its own rate, under a gateway-wide ceiling,
// so that one tenant's flood never drops another's lines (it once took
// the one gateway-wide bucket, and 2 of a bystander's 20 lines reached the
// log); each line is cut to budgets.ConsoleLineBytes (a tenant's own
// handle log keeps it whole). The rates, bursts and the tenants kept are
// budgets' Console* rows.

// consoleLimiter decides which console lines reach Caddy's log.
type consoleLimiter struct {
	mu      sync.Mutex
	all     *rate.Limiter
	tenants map[string]*tenantConsole
	swept   time.Time
}

type tenantConsole struct {
	lim  *rate.Limiter
	last time.Time
	// dropped counts the lines left out since the tenant's last one in.
	dropped int
}

func newConsoleLimiter() *consoleLimiter {
	return &consoleLimiter{all: rate.NewLimiter(budgets.ConsoleLinesPerSecond, budgets.ConsoleBurst), tenants: map[string]*tenantConsole{}}
}

// allow reports whether the tenant's line goes into the log at now, and
// how many of its lines were left out before it.
func (c *consoleLimiter) allow(tenant string, now time.Time) (bool, int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	t := c.tenants[tenant]
	if t == nil {
		if len(c.tenants) >= budgets.ConsoleTenants {
			c.sweep(now)
		}
		if len(c.tenants) >= budgets.ConsoleTenants {
			return false, 0 // as many tenants as kept spoke within seconds
		}
		t = &tenantConsole{lim: rate.NewLimiter(budgets.ConsoleLinesPerSecondPerTenant, budgets.ConsoleBurstPerTenant)}
		c.tenants[tenant] = t
	}
	t.last = now
	if !t.lim.AllowN(now, 1) || !c.all.AllowN(now, 1) {
		t.dropped++
		return false, 0
	}
	dropped := t.dropped
	t.dropped = 0
	return true, dropped
}

// sweep forgets the tenants idle long enough to have their whole burst
// again (forgetting one changes nothing), at most once a second. c.mu is
// held.
func (c *consoleLimiter) sweep(now time.Time) {
	if now.Sub(c.swept) < time.Second {
		return
	}
	c.swept = now
	idle := time.Duration(budgets.ConsoleBurstPerTenant/budgets.ConsoleLinesPerSecondPerTenant) * time.Second
	for name, t := range c.tenants {
		if now.Sub(t.last) >= idle {
			delete(c.tenants, name)
		}
	}
}

// consoleLine is msg cut to budgets.ConsoleLineBytes (at a character's start) with
// a note saying how much was left out.
func consoleLine(msg string) string {
	if len(msg) <= budgets.ConsoleLineBytes {
		return msg
	}
	n := budgets.ConsoleLineBytes
	for n > 0 && !utf8.RuneStart(msg[n]) {
		n--
	}
	return fmt.Sprintf("%s… [%d bytes cut: a console line in the gateway's log holds at most %d bytes; the handle's log has it whole]", msg[:n], len(msg)-n, budgets.ConsoleLineBytes)
}
