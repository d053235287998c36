package worker

import (
	"context"
	"sync"

	"github.com/retainer-gw/retainer/fault"
)

// gate admits a handle's invocations to its worker in arrival order, at
// most slots at a time. It is why the kill clock is fair (SPEC §4, Blame):
// a call is sent only when its isolate can start it, so the clock that
// starts at the send measures the call's own run time (and, at worst, its
// own handle's timer or waitUntil work ahead of it), never time spent
// queued behind earlier invocations.
type gate struct {
	mu      sync.Mutex // guards busy, waiters
	slots   int
	busy    int
	waiters []chan struct{}
}

func newGate(slots int) *gate {
	if slots < 1 {
		slots = 1
	}
	return &gate{slots: slots}
}

// enter waits for a slot; past max waiters it fails at once with
// OVERLOADED.
func (g *gate) enter(ctx context.Context, max int) error {
	g.mu.Lock()
	if g.busy < g.slots && len(g.waiters) == 0 {
		g.busy++
		g.mu.Unlock()
		return nil
	}
	if len(g.waiters) >= max {
		g.mu.Unlock()
		return fault.Overload()
	}
	ch := make(chan struct{})
	g.waiters = append(g.waiters, ch)
	g.mu.Unlock()
	select {
	case <-ch:
		return nil
	case <-ctx.Done():
		g.mu.Lock()
		for i, w := range g.waiters {
			if w == ch {
				g.waiters = append(g.waiters[:i], g.waiters[i+1:]...)
				g.mu.Unlock()
				return ctx.Err()
			}
		}
		g.mu.Unlock()
		g.leave() // handed a slot while giving up: pass it on
		return ctx.Err()
	}
}

func (g *gate) leave() {
	g.mu.Lock()
	defer g.mu.Unlock()
	if len(g.waiters) > 0 {
		ch := g.waiters[0]
		g.waiters = g.waiters[1:]
		close(ch) // the slot passes to the first waiter
		return
	}
	g.busy--
}

// idle reports that no call holds or waits for the gate.
func (g *gate) idle() bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.busy == 0 && len(g.waiters) == 0
}
