package handles

import (
	"context"
	"encoding/json"
	"time"

	"github.com/retainer-gw/retainer/fault"
	"github.com/retainer-gw/retainer/program"
	"github.com/retainer-gw/retainer/store"
)

// A tick's firing (schedules.go): its tries through invoke and their
// retries until a newer tick supersedes them, and each handle's list of
// recent firings, kept in table "firings".

// fire runs one tick of spec on rec: its first try, then its retries,
// until a newer tick of the same handle and expression supersedes them.
func (r *Registry) fire(rec *Record, spec string, tick int64) {
	s := r.store
	mk := rec.ID + "\x00" + spec
	mine := make(chan struct{})
	s.sched.mu.Lock()
	if prev := s.sched.chains[mk]; prev != nil {
		close(prev)
	}
	s.sched.chains[mk] = mine
	s.sched.mu.Unlock()
	defer func() {
		s.sched.mu.Lock()
		if s.sched.chains[mk] == mine {
			delete(s.sched.chains, mk)
		}
		s.sched.mu.Unlock()
	}()
	for attempt := 1; ; attempt++ {
		f := r.fireOnce(rec, spec, tick, attempt, false)
		if f.Outcome == "ok" || f.Outcome == "missing" || f.NoRetry || attempt > len(s.retryDelays()) || !s.exists(rec.ID) {
			return
		}
		t := time.NewTimer(s.retryDelays()[attempt-1])
		select {
		case <-t.C:
		case <-mine:
			t.Stop()
			return
		case <-s.stop:
			t.Stop()
			return
		}
	}
}

func (s *Store) retryDelays() []time.Duration {
	if s.opts.ScheduleRetries != nil {
		return s.opts.ScheduleRetries
	}
	return retryDelays
}

// fireOnce is one try of a tick: an invocation through invoke, its
// firing listed and its receipt written.
func (r *Registry) fireOnce(rec *Record, spec string, tick int64, attempt int, now bool) Firing {
	s := r.store
	started, startedAt := time.Now(), s.opts.Now()
	bound := time.Duration(rec.TimeoutMs) * time.Millisecond
	if bound <= 0 {
		bound = 30 * time.Second
	}
	ctx, cancel := context.WithTimeout(context.Background(), bound+rebuildGrace)
	defer cancel()
	res, err := r.invoke(ctx, rec, program.ScheduledEvent, program.ScheduledRequest(spec, tick))
	f := Firing{Cron: spec, ScheduledTime: tick, StartedAt: startedAt, Attempt: attempt, Now: now}
	switch {
	case err != nil:
		f.Outcome, f.Error = "failed", errText(err)
		switch fault.CodeOf(err) {
		case fault.Timeout, fault.Memory:
			f.Outcome = "bound"
		case fault.HandlerError, fault.BadResponse:
			f.Outcome = "error"
		}
	case res.Status == 204:
		f.Outcome = "ok"
	case res.Status == 404:
		f.Outcome, f.Error = "missing", "The handler has no scheduled method."
	default:
		f.Outcome, f.Error = "error", string(res.Body)
	}
	f.NoRetry = err == nil && res.NoRetry()
	f.DurationMs = time.Since(started).Milliseconds()
	if on := s.opts.OnFiring; on != nil {
		f.ResultID = on(FiringReceipt{Registry: r.name, Tenant: rec.Tenant, ID: rec.ID, Firing: f})
	}
	s.addFiring(r.name, rec, f)
	return f
}

// addFiring lists f, the last keptFirings kept, and stores the list.
func (s *Store) addFiring(registry string, rec *Record, f Firing) {
	if !s.exists(rec.ID) {
		return // ended meanwhile: its list went with it
	}
	s.sched.mu.Lock()
	list, ok := s.sched.firings[rec.ID]
	if !ok {
		// The stored list, after a restart (or from the space's owner
		// before this gateway).
		if v, err := s.w.Get(context.Background(), tableFirings, key(registry, rec.ID)); err == nil && v != nil {
			_ = json.Unmarshal(v, &list)
		}
	}
	list = append(list, f)
	if len(list) > keptFirings {
		list = append([]Firing(nil), list[len(list)-keptFirings:]...)
	}
	s.sched.firings[rec.ID] = list
	s.sched.dirty[rec.ID] = rec
	s.sched.mu.Unlock()
}

// flushFirings stores the firings lists changed since the last flush, a
// transaction a space (chunked), each only while its handle is stored.
// The loop calls it at every look for due ticks, and Close at the end: a
// crash loses at most that much of the lists, never a claim.
func (s *Store) flushFirings() {
	s.sched.mu.Lock()
	bySpace := map[[2]string][]store.Op{}
	for id, rec := range s.sched.dirty {
		data, _ := json.Marshal(s.sched.firings[id])
		sp := [2]string{rec.Registry, rec.Tenant}
		bySpace[sp] = append(bySpace[sp], store.Put(tableFirings, key(rec.Registry, id), data))
	}
	s.sched.dirty = map[string]*Record{}
	s.sched.mu.Unlock()
	for sp, ops := range bySpace {
		live := ops[:0]
		for _, op := range ops {
			_, id, _ := splitKey(op.Key)
			if s.exists(id) {
				live = append(live, op)
				continue
			}
			s.sched.mu.Lock()
			delete(s.sched.firings, id) // ended while a firing was listed
			s.sched.mu.Unlock()
		}
		if len(live) > 0 {
			_ = s.commitChunked(context.Background(), sp[0], sp[1], live)
		}
	}
}

// firingsOf answers the handle's firings, newest first.
func (s *Store) firingsOf(registry, id string) []Firing {
	s.sched.mu.Lock()
	list, ok := s.sched.firings[id]
	s.sched.mu.Unlock()
	if !ok {
		if v, err := s.w.Get(context.Background(), tableFirings, key(registry, id)); err == nil && v != nil {
			_ = json.Unmarshal(v, &list)
		}
	}
	out := make([]Firing, len(list))
	for i, f := range list {
		out[len(list)-1-i] = f
	}
	return out
}

// dropSchedules answers the writes that delete a handle's claims and
// firings (its end).
func (s *Store) dropSchedules(rec *Record) []store.Op {
	s.sched.mu.Lock()
	delete(s.sched.firings, rec.ID)
	delete(s.sched.dirty, rec.ID)
	for _, spec := range rec.Schedules {
		delete(s.sched.last, rec.ID+"\x00"+spec)
	}
	s.sched.mu.Unlock()
	if len(rec.Schedules) == 0 {
		return nil
	}
	ops := []store.Op{store.Delete(tableFirings, key(rec.Registry, rec.ID))}
	for _, spec := range rec.Schedules {
		ops = append(ops, store.Delete(tableSchedules, schedKey(rec.Registry, rec.ID, spec)))
	}
	return ops
}
