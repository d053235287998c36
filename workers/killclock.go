package workers

import (
	"fmt"
	"sync"
	"time"
)

// The kill clock (docs/architecture.md, Blame): every call to a worker has
// a deadline, its bound (times the calls queued ahead of it) and then the
// grace period, past which the worker is killed. A worker keeps one timer
// for all its calls, set for the earliest deadline among them, instead of
// a timer (and the closures around it) per call: a call that ends before
// its bound, nearly all of them, costs a map entry and a comparison
// (docs/performance.md, "The worker hop's own work"). When the timer
// fires, every call whose deadline has come moves on exactly as its own
// timer would have made it, and the timer is set again for the next.

// callRecord is one call in flight on a worker (process.running); its
// fields past handleID are guarded by the process's mu.
type callRecord struct {
	handleID string // "" for a computation
	id       uint64
	bound    time.Duration // the call's own bound
	allowed  time.Duration // the time it is allowed before its grace period
	due      time.Time     // when the clock next looks at it
	// grace: the bound has passed and the clock now counts the grace
	// period; cpuAtBound is the worker's CPU time at the bound then (-1
	// when it could not be read).
	grace      bool
	cpuAtBound int64
	// seen is the handle's answered calls when the clock was last set,
	// credited the visitor's waits already allowed for.
	seen     uint64
	credited time.Duration
}

// clock is a worker's one kill-clock timer.
type clock struct {
	run   sync.Mutex  // one firing at a time
	timer *time.Timer // nil until the first call (guarded by process.mu)
	at    time.Time   // when it is set for; zero when not set (process.mu)
}

// armClock makes the clock fire by due; with p.mu held.
func (p *process) armClock(due time.Time) {
	c := &p.clock
	if !c.at.IsZero() && !due.Before(c.at) {
		return
	}
	c.at = due
	d := time.Until(due)
	if c.timer == nil {
		c.timer = time.AfterFunc(d, p.clockFired)
	} else {
		c.timer.Reset(d)
	}
}

// stopClock stops the clock for good (the worker has died); with p.mu held.
func (p *process) stopClock() {
	if p.clock.timer != nil {
		p.clock.timer.Stop()
	}
	p.clock.at = time.Time{}
}

// clockFired moves on every call whose deadline has come and sets the
// clock again for the earliest of the rest.
func (p *process) clockFired() {
	p.clock.run.Lock()
	defer p.clock.run.Unlock()
	p.mu.Lock()
	if p.dead {
		p.mu.Unlock()
		return
	}
	p.clock.at = time.Time{}
	now := time.Now()
	var due []*callRecord
	for _, rec := range p.running {
		if !rec.due.After(now) {
			due = append(due, rec)
		}
	}
	p.mu.Unlock()
	cpu := int64(-1)
	for _, rec := range due {
		if !rec.grace && cpu < 0 {
			cpu = p.stat.cpu(p.pid)
		}
		p.expired(rec, cpu)
	}
	p.mu.Lock()
	if !p.dead {
		for _, rec := range p.running {
			p.armClock(rec.due)
		}
	}
	p.mu.Unlock()
}

// expired is what the clock does with a call whose deadline came: at the
// bound it notes the worker's CPU time (blame for a hard kill looks at the
// CPU spent over the grace period, an upper bound of the stuck isolate's)
// and gives the call the grace period; at the end of the grace period it
// kills the worker, unless the call was only waiting.
func (p *process) expired(rec *callRecord, cpu int64) {
	grace := p.pool.cfg.Grace
	p.mu.Lock()
	if p.running[rec.id] != rec {
		p.mu.Unlock()
		return
	}
	if !rec.grace {
		rec.grace, rec.cpuAtBound = true, cpu
		rec.due = time.Now().Add(grace)
		p.mu.Unlock()
		return
	}
	visitor := time.Duration(0)
	if rec.handleID != "" {
		visitor = p.visitorWaited(rec.handleID)
	}
	if visitor > rec.credited {
		// Time the handle waited for a visitor's body is not run time
		// (docs/architecture.md, Blame); the worker moved its bound by as much.
		rec.allowed += visitor - rec.credited
		rec.due = time.Now().Add(visitor - rec.credited)
		rec.credited = visitor
		p.mu.Unlock()
		return
	}
	p.mu.Unlock()
	// Calls of one handle can reach the worker in another order than they
	// were counted (they are sent, and served in the worker, from separate
	// goroutines), so a call may wait behind more than its ahead. While
	// other calls of its handle are in flight and answered since the clock
	// was last set, the clock is set again for one more bound: the call is
	// queued behind work that progresses. A stuck call answers nothing
	// more, and the next firing kills.
	if rec.handleID != "" {
		if n, others := p.pool.progress(rec.handleID); others && n != rec.seen {
			p.mu.Lock()
			rec.seen = n
			rec.allowed += rec.bound
			rec.due = time.Now().Add(rec.bound)
			p.mu.Unlock()
			return
		}
	}
	now := p.stat.cpu(p.pid)
	p.mu.Lock()
	if p.running[rec.id] != rec {
		p.mu.Unlock()
		return
	}
	if p.overrunner == 0 {
		p.overrunner = rec.id
		// Half of what the grace period could show: a bound longer
		// than the grace period would otherwise never be charged.
		p.overrunNotCaused = rec.cpuAtBound >= 0 && now >= 0 && now-rec.cpuAtBound < min(rec.bound, grace).Nanoseconds()/2
	}
	allowed := rec.allowed
	// The worker is going; the clock need not look at the call again
	// while it is reaped.
	rec.due = time.Now().Add(time.Hour)
	p.mu.Unlock()
	p.kill(fmt.Sprintf("a call overran its %v bound (%v with the calls queued ahead of it) by the %v grace period", rec.bound, allowed, grace))
}
