package handles

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/retainer-gw/retainer/fault"
	"github.com/retainer-gw/retainer/store"
)

// parkOne disposes the isolate of the least recently used idle handle; its
// record stays and it is rebuilt on its next request.
//
// The tenant's own handles go first; ownOnly (tenant cordons, the
// tenant's own workers full: workers.ErrTenantFull) parks only them, since
// another tenant's isolate lives in a worker this tenant cannot use: one
// tenant's retaining runs that find no room must never reset another
// tenant's state for nothing.
//
// Then the least recently used, where a handle whose isolate has served
// nothing since it was built (deployed or rebuilt) counts as used least:
// its rebuild makes again all anyone could have seen of it. Another
// tenant's handle that has served is parked only when served is set: no
// other deploy's run is under way, or the run has waited half its bound
// for room (runWithCapacity), since the slots held by deploys under way
// become handles that served nothing, or free, within it
// (docs/architecture.md, "The pool's queues"). Two
// hundred tenants deploying at once on `isolation shared` parked a
// bystander served every few ms, the one idle handle held while their
// runs held every other slot: its state started over and its rebuild
// answered OVERLOADED (TestSharedWorkersServeABystanderWhileManyDeploy).
func (s *Store) parkOne(except, tenant string, ownOnly, served bool) bool {
	s.mu.Lock()
	var victim *Record
	for id, rec := range s.records {
		own := rec.Tenant == tenant
		if id == except || !s.opts.Executor.Holds(id) || ownOnly && !own || !own && rec.served && !served {
			continue
		}
		if ls := s.live[id]; ls != nil && !ls.idle() {
			continue
		}
		if victim == nil || parkBefore(rec, victim, tenant) {
			victim = rec
		}
	}
	s.mu.Unlock()
	if victim == nil {
		return false
	}
	s.opts.Executor.Close(victim.ID)
	if reg := s.registryOf(victim.ID); reg != nil {
		reg.systemLog(victim.ID, "Parked: every isolate slot was needed; the handle is rebuilt on its next request.")
	}
	return true
}

// parkBefore reports whether a is parked before b for tenant's run: the
// tenant's own first, then one that has served nothing since it was built,
// then the least recently used. s.mu is held.
func parkBefore(a, b *Record, tenant string) bool {
	if (a.Tenant == tenant) != (b.Tenant == tenant) {
		return a.Tenant == tenant
	}
	if a.served != b.served {
		return !a.served
	}
	return a.LastInvokedAt.Before(b.LastInvokedAt)
}

// rebuildOnce waits for the handle's one rebuild, starting it if none is
// under way. The rebuild runs detached from the request that started it
// (docs/architecture.md): a visitor who goes away ends nothing; the rebuild goes on under
// the handle's own bounds and the next request finds the isolate back.
func (r *Registry) rebuildOnce(ctx context.Context, rec *Record, ls *liveState) error {
	s := r.store
	ls.mu.Lock()
	f := ls.rebuilding
	if f == nil {
		if s.opts.Executor.Holds(rec.ID) {
			ls.mu.Unlock()
			return nil
		}
		f = &rebuildFlight{done: make(chan struct{})}
		ls.rebuilding = f
		s.rebuilds.Add(1)
		go func() {
			defer s.rebuilds.Done()
			err := r.detachedRebuild(rec)
			ls.mu.Lock()
			f.err = err
			ls.rebuilding = nil
			ls.mu.Unlock()
			close(f.done)
		}()
	}
	ls.mu.Unlock()
	select {
	case <-f.done:
		return f.err
	case <-ctx.Done():
		return ctx.Err()
	}
}

// rebuildGrace is what a detached rebuild may take beyond the handle's run
// bound (parking an idle handle, a worker starting).
const rebuildGrace = 10 * time.Second

func (r *Registry) detachedRebuild(rec *Record) (err error) {
	defer func() {
		if p := recover(); p != nil {
			err = fault.New(fault.Overloaded, "The rebuild failed inside the gateway; try again.")
		}
	}()
	if !r.store.exists(rec.ID) {
		return fault.Closed(rec.ID)
	}
	bound := time.Duration(rec.TimeoutMs) * time.Millisecond
	if bound <= 0 {
		bound = 30 * time.Second
	}
	ctx, cancel := context.WithTimeout(context.Background(), bound+rebuildGrace)
	defer cancel()
	return r.rebuild(ctx, rec)
}

// rebuild runs the handle's program again to get a fresh isolate. Only a
// failure the program caused (it throws, hits a bound, no longer answers a
// handler, or its replayed tool calls do not match) is a strike; any other
// (a crashed worker, overload, the gateway stopping) ends and counts
// nothing, and the caller gets a retryable fault.
func (r *Registry) rebuild(ctx context.Context, rec *Record) error {
	s := r.store
	s.mu.Lock()
	job := rec.job()
	replay := append([]ToolAnswer{}, rec.ToolAnswers...)
	grants := rec.Grants
	s.mu.Unlock()
	start := time.Now()
	rs := &runState{registry: r, tenant: rec.Tenant, grants: grants, replay: replay}
	s.beginRun(job.ID, rs)
	out, err := r.runWithCapacity(ctx, rec.Tenant, job, false)
	s.endRun(job.ID)
	s.mu.Lock()
	mismatch := rs.mismatch
	s.mu.Unlock()
	programFault := func(msg string) error {
		if out.Retained {
			s.opts.Executor.Close(job.ID)
		}
		r.strike(rec.ID, "bound", "Rebuild failed: "+msg)
		return fault.Wrap(fault.HandlerError, errors.New(msg), "The handler could not be started.")
	}
	switch {
	case mismatch:
		return programFault("the program's tool calls no longer match the ones recorded when it was deployed.")
	case err == nil && !out.Retained:
		return programFault("the program no longer answers a request handler.")
	case err == nil:
		s.mu.Lock()
		rec.served = false // a new isolate (parkOne)
		s.mu.Unlock()
		r.systemLog(rec.ID, fmt.Sprintf("Rebuilt in %d ms: the isolate was gone; state kept in closures starts afresh.", time.Since(start).Milliseconds()))
		if f := s.opts.OnRebuild; f != nil {
			f(r.name, rec.ID)
		}
		return nil
	}
	switch fault.CodeOf(err) {
	case fault.Timeout, fault.Memory:
		r.strikeIfCharged(rec.ID, "Rebuild: ", err)
		return err
	case fault.Syntax, fault.Runtime:
		return programFault(errText(err))
	case fault.WorkerCrashed, fault.Overloaded:
		return err
	default:
		// A deadline, a stopping gateway, an internal error: not the
		// program's doing.
		r.systemLog(rec.ID, "Rebuild did not finish ("+err.Error()+"); the next request tries again.")
		return fault.New(fault.Overloaded, "The handle is being started; try again.")
	}
}

// strikeIfCharged counts a bound fault as a strike when the program is to
// blame (docs/architecture.md, Blame): not when it was only in progress while another
// invocation hit the bound (fault.ErrCollateral), nor for a timeout whose
// isolate used less than half the bound in CPU (fault.ErrNotCaused: the
// machine was busy, or it waited for an upstream, a tool or the visitor).
// The handle's log says which.
func (r *Registry) strikeIfCharged(id, prefix string, err error) {
	switch {
	case errors.Is(err, fault.ErrCollateral):
	case errors.Is(err, fault.ErrNotCaused):
		r.systemLog(id, prefix+errText(err)+" (no strike: the program used less than half of its bound in CPU)")
	default:
		r.strike(id, "bound", prefix+errText(err))
	}
}

// strike counts a bound hit (or a crash as a suspect); at bound_strikes the
// handle ends.
func (r *Registry) strike(id, kind, msg string) {
	s := r.store
	cfg := r.config()
	s.mu.Lock()
	rec := s.records[id]
	if rec == nil {
		s.mu.Unlock()
		return
	}
	rec.Strikes++
	n := rec.Strikes
	memory := rec.MemoryMiB
	copyRec := *rec
	s.mu.Unlock()
	r.systemLog(id, fmt.Sprintf("%s (strike %d of %d)", msg, n, cfg.BoundStrikes))
	if n < cfg.BoundStrikes {
		s.updateRecord(&copyRec)
		return
	}
	if kind == "crash" {
		if memory <= 0 {
			memory = cfg.Limits.MemoryMiB // the registry's, as the run had
		}
		r.end(id, ReasonCrashes, fault.OutOfMemory(memory).Message)
		return
	}
	r.end(id, ReasonBoundStrikes, msg)
}

// touch records an invocation; ok resets the strike count.
func (s *Store) touch(id string, ok bool) {
	s.mu.Lock()
	rec := s.records[id]
	if rec == nil {
		s.mu.Unlock()
		return
	}
	rec.LastInvokedAt = s.opts.Now()
	rec.Invocations++
	rec.served = true
	s.dirty[id] = true
	if !ok || rec.Strikes == 0 {
		s.mu.Unlock()
		return
	}
	rec.Strikes = 0
	copyRec := *rec // only a reset is written at once (the copy escapes)
	s.mu.Unlock()
	s.updateRecord(&copyRec)
}

func (s *Store) exists(id string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.records[id] != nil
}

// end deletes a handle: record and routes in one transaction, its isolate
// disposed, and one event published. Only the first end of an id does
// anything.
func (r *Registry) end(id, reason, message string) bool {
	ended, _ := r.endIn(context.Background(), id, reason, message)
	return ended
}

// endIn is end for the write ctx carries (writes.go), answering whether
// this end was the first and the store's failure, if its commit failed.
func (r *Registry) endIn(ctx context.Context, id, reason, message string) (bool, error) {
	s := r.store
	s.routeMu.Lock()
	defer s.routeMu.Unlock()
	if !sending(ctx) {
		return false, errWriteDropped
	}
	s.mu.Lock()
	rec := s.records[id]
	if rec == nil {
		s.mu.Unlock()
		return false, nil
	}
	delete(s.records, id)
	delete(s.dirty, id)
	var freed []string
	for _, name := range rec.Routes {
		if s.routes[rec.Registry][name] == id {
			delete(s.routes[rec.Registry], name)
			freed = append(freed, name)
		}
	}
	delete(s.live, id)
	s.mu.Unlock()
	// The record first, then its names: one transaction when they fit
	// the store's limits, else in order, so an end stopped half done
	// leaves names that point at no record (they serve nothing and load
	// drops them), never a record without its names' reservations.
	ops := []store.Op{store.Delete(tableHandles, key(rec.Registry, id))}
	ops = append(ops, bodyDeletes(rec)...)
	for _, name := range freed {
		ops = append(ops, store.Delete(tableRoutes, key(rec.Registry, name)))
	}
	// Freed names stay the tenant's for a day (reserve.go); its domains
	// end with it, their hosts reserved alike (domains.go).
	ops = append(ops, s.reserve(rec, freed)...)
	ops = append(ops, s.dropHistories(rec.Registry, freed)...)
	hostsGone, domainOps := s.endDomains(rec, freed)
	ops = append(ops, domainOps...)
	ops = append(ops, s.dropSchedules(rec)...)
	err := s.commitChunked(ctx, rec.Registry, rec.Tenant, ops)
	s.domainsGone(rec.Registry, hostsGone)
	s.opts.Executor.Close(id)
	if s.opts.OnEnd != nil {
		s.opts.OnEnd(Event{Registry: rec.Registry, ID: id, Tenant: rec.Tenant, Reason: reason, Message: message})
	}
	return true, err
}

// Close ends a tenant's handle through the API, within the store's write
// bound (writes.go).
func (r *Registry) Close(tenant, id string) error {
	if _, err := r.owned(tenant, id); err != nil {
		return err
	}
	_, err := bounded(r.store, func(ctx context.Context) (struct{}, error) {
		ended, err := r.endIn(ctx, id, ReasonClosed, "Closed through the API.")
		if err != nil {
			return struct{}{}, storeFault(err, "The handle's end could not be saved.")
		}
		if !ended {
			return struct{}{}, fault.Closed(id)
		}
		return struct{}{}, nil
	})
	return err
}

// SweepIdle ends every handle idle past its registry's bound. The
// background loop calls it; tests call it with an injected clock.
func (s *Store) SweepIdle() {
	s.sweepReservations()
	s.sweepVersions()
	s.sweepDomains()
	now := s.opts.Now()
	type victim struct {
		reg *Registry
		id  string
	}
	var victims, parks []victim
	served := s.servedFilter()
	// A deployment parks past its idle bound instead (deployments.go).
	kept := map[string]map[string]bool{}
	s.mu.Lock()
	for id, rec := range s.records {
		reg := s.registries[rec.Registry]
		if reg == nil || !served(rec.Registry, rec.Tenant) {
			continue
		}
		if ls := s.live[id]; ls != nil && !ls.idle() {
			continue
		}
		cfg := reg.config()
		if now.Sub(rec.LastInvokedAt) > idleBound(cfg, rec) {
			if kept[rec.Registry] == nil {
				kept[rec.Registry] = s.keptLocked(rec.Registry, now, cfg.VersionRetention)
			}
			if kept[rec.Registry][id] {
				parks = append(parks, victim{reg, id})
				continue
			}
			victims = append(victims, victim{reg, id})
		}
	}
	s.mu.Unlock()
	for _, v := range parks {
		s.parkIdle(v.reg, v.id)
	}
	for _, v := range victims {
		v.reg.end(v.id, ReasonIdle, "Idle past the idle bound.")
	}
}
