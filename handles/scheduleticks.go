package handles

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/retainer-gw/retainer/store"
)

// The schedules' loop (schedules.go): the ticks due on the current
// handles of the spaces this gateway serves, each claimed in table
// "schedules" by a compare and swap under the space's fence before it
// fires, so that a tick fires once across restarts and gateways.

// scheduleLoop looks for due ticks every ScheduleEvery. At the default
// second it wakes just after each whole second of the real clock, when
// ticks fall (a tick is a whole minute), so a firing waits for no part of
// a second beyond the claim's commit.
func (s *Store) scheduleLoop() {
	defer close(s.sched.done)
	t := time.NewTimer(s.opts.ScheduleEvery)
	defer t.Stop()
	for {
		select {
		case <-s.stop:
			return
		case <-t.C:
			func() {
				defer func() { recover() }()
				s.FireDue()
			}()
		}
		wait := s.opts.ScheduleEvery
		if wait == time.Second {
			now := time.Now()
			wait = now.Truncate(time.Second).Add(time.Second + time.Millisecond).Sub(now)
		}
		t.Reset(wait)
	}
}

// dueTick is one tick to fire.
type dueTick struct {
	reg  *Registry
	rec  *Record
	spec string
}

// FireDue fires every tick due now on the current handles of the spaces
// this gateway serves, each claimed first (the loop calls it; tests too).
func (s *Store) FireDue() {
	served := s.servedFilter()
	now := s.opts.Now()
	s.mu.Lock()
	var cands []dueTick
	current := map[string]map[string]bool{}
	for _, rec := range s.records {
		if len(rec.Schedules) == 0 || !served(rec.Registry, rec.Tenant) {
			continue
		}
		reg := s.registries[rec.Registry]
		if reg == nil {
			continue
		}
		cur := current[rec.Registry]
		if cur == nil {
			cur = s.currentLocked(rec.Registry, now, reg.config().VersionRetention)
			current[rec.Registry] = cur
		}
		if !cur[rec.ID] {
			continue
		}
		for _, spec := range rec.Schedules {
			cands = append(cands, dueTick{reg, rec, spec})
		}
	}
	s.mu.Unlock()
	// Every space's due ticks are claimed in one transaction where they
	// fit: 1,000 handles on the same minute in 20 spaces are 20 commits,
	// not 1,000 (docs/history/performance-log.md).
	bySpace := map[[2]string][]*claim{}
	var order [][2]string
	for _, c := range cands {
		if cl := s.dueClaim(c, now); cl != nil {
			sp := [2]string{c.rec.Registry, c.rec.Tenant}
			if bySpace[sp] == nil {
				order = append(order, sp)
			}
			bySpace[sp] = append(bySpace[sp], cl)
		}
	}
	for _, sp := range order {
		for _, cl := range s.claimAll(sp[0], sp[1], bySpace[sp]) {
			s.fireClaimed(cl, now)
		}
	}
	s.flushFirings()
}

// currentLocked answers, for registry, whether each scheduled handle is
// current: not a route's kept version only. s.mu is held.
func (s *Store) currentLocked(registry string, now time.Time, retention time.Duration) map[string]bool {
	pointed := map[string]bool{}
	for _, id := range s.routes[registry] {
		pointed[id] = true
	}
	for _, h := range s.history[registry] {
		if len(h.Versions) > 0 {
			for _, id := range h.Versions[0].ids() {
				pointed[id] = true
			}
		}
	}
	for _, claims := range s.domains[registry] {
		if d := claims.active(); d != nil && d.ExecutionID != "" {
			pointed[d.ExecutionID] = true
		}
	}
	kept := s.keptLocked(registry, now, retention)
	out := map[string]bool{}
	for id, rec := range s.records {
		if rec.Registry == registry && len(rec.Schedules) > 0 {
			out[id] = pointed[id] || !kept[id]
		}
	}
	return out
}

// isCurrentLocked answers whether the handle id of registry may fire:
// not a route's kept version only (as currentLocked). s.mu is held.
func (s *Store) isCurrentLocked(registry, id string, now time.Time, retention time.Duration) bool {
	for _, rid := range s.routes[registry] {
		if rid == id {
			return true
		}
	}
	for _, h := range s.history[registry] {
		if len(h.Versions) > 0 && contains(h.Versions[0].ids(), id) {
			return true
		}
	}
	for _, claims := range s.domains[registry] {
		if d := claims.active(); d != nil && d.ExecutionID == id {
			return true
		}
	}
	return !s.keptLocked(registry, now, retention)[id]
}

// claim is one tick about to be claimed: the stored claim it replaces
// (nil for none) and the new one.
type claim struct {
	dueTick
	tick     time.Time
	skipped  int
	old, new []byte
}

// dueClaim answers c's newest due tick as a claim to commit, or nil when
// none is due.
func (s *Store) dueClaim(c dueTick, now time.Time) *claim {
	mk := c.rec.ID + "\x00" + c.spec
	s.sched.mu.Lock()
	last, known := s.sched.last[mk]
	s.sched.mu.Unlock()
	if known {
		if n := nextTick(c.spec, time.UnixMilli(last)); n.IsZero() || n.After(now) {
			return nil
		}
	}
	// Due, or not known here yet: the store's claim decides.
	old, err := s.w.Get(context.Background(), tableSchedules, schedKey(c.rec.Registry, c.rec.ID, c.spec))
	if err != nil {
		return nil
	}
	var stored tickClaim
	base := c.rec.CreatedAt
	if old != nil && json.Unmarshal(old, &stored) == nil {
		base = time.UnixMilli(stored.Tick)
	}
	sched, err := parsedCron(c.spec)
	if err != nil {
		return nil
	}
	tick := sched.Next(base.UTC())
	if tick.After(now) {
		s.sched.mu.Lock()
		s.sched.last[mk] = base.UnixMilli()
		s.sched.mu.Unlock()
		return nil
	}
	// The newest tick due; the ones before it are skipped.
	skipped := 0
	for i := 0; i < 1_000_000; i++ {
		n := sched.Next(tick)
		if n.After(now) {
			break
		}
		tick = n
		skipped++
	}
	fresh, _ := json.Marshal(tickClaim{Tick: tick.UnixMilli()})
	return &claim{dueTick: c, tick: tick, skipped: skipped, old: old, new: fresh}
}

// claimOps are the conditions and the write of cl: the stored claim
// unchanged, the handle still stored.
func (cl *claim) ops() ([]store.Cond, store.Op) {
	k := schedKey(cl.rec.Registry, cl.rec.ID, cl.spec)
	cond := store.Absent(tableSchedules, k)
	if cl.old != nil {
		cond = store.Holds(tableSchedules, k, cl.old)
	}
	return []store.Cond{cond, store.Exists(tableHandles, key(cl.rec.Registry, cl.rec.ID))}, store.Put(tableSchedules, k, cl.new)
}

// claimAll commits the claims of one space, as few transactions as the
// store's limits allow; when one fails, its claims are tried one at a
// time. It answers the claims that were committed.
func (s *Store) claimAll(registry, tenant string, cls []*claim) []*claim {
	per := max((s.w.Limits().Ops-1)/3, 1)
	var won []*claim
	for len(cls) > 0 {
		batch := cls[:min(per, len(cls))]
		cls = cls[len(batch):]
		var conds []store.Cond
		var ops []store.Op
		for _, cl := range batch {
			c, op := cl.ops()
			conds, ops = append(conds, c...), append(ops, op)
		}
		err := s.commit(context.Background(), registry, tenant, conds, ops)
		if err == nil {
			won = append(won, batch...)
			continue
		}
		if len(batch) == 1 || !errors.Is(err, store.ErrConflict) && !errors.Is(err, store.ErrTooLarge) {
			s.forgetClaims(batch, err)
			continue
		}
		for _, cl := range batch {
			c, op := cl.ops()
			if err := s.commit(context.Background(), registry, tenant, c, []store.Op{op}); err != nil {
				s.forgetClaims([]*claim{cl}, err)
				continue
			}
			won = append(won, cl)
		}
	}
	return won
}

// forgetClaims drops what memory holds of claims that failed on a
// conflict (another gateway, or a firing now, claimed first): the store is
// read again next time.
func (s *Store) forgetClaims(cls []*claim, err error) {
	if !errors.Is(err, store.ErrConflict) {
		return
	}
	s.sched.mu.Lock()
	for _, cl := range cls {
		delete(s.sched.last, cl.rec.ID+"\x00"+cl.spec)
	}
	s.sched.mu.Unlock()
}

// fireClaimed fires a committed claim's tick (or notes it skipped, more
// than lateLimit late).
func (s *Store) fireClaimed(cl *claim, now time.Time) {
	s.sched.mu.Lock()
	s.sched.last[cl.rec.ID+"\x00"+cl.spec] = cl.tick.UnixMilli()
	s.sched.mu.Unlock()
	if cl.skipped > 0 {
		cl.reg.systemLog(cl.rec.ID, fmt.Sprintf("Schedule %q: %d ticks missed while no gateway fired them were skipped; the newest fires.", cl.spec, cl.skipped))
	}
	if late := now.Sub(cl.tick); late >= lateLimit {
		cl.reg.systemLog(cl.rec.ID, fmt.Sprintf("Schedule %q: the tick of %s was skipped, %s late (more than an hour).", cl.spec, cl.tick.UTC().Format(time.RFC3339), late.Round(time.Second)))
		return
	}
	s.sched.wg.Add(1)
	go func() {
		defer s.sched.wg.Done()
		cl.reg.fire(cl.rec, cl.spec, cl.tick.UnixMilli())
	}()
}
