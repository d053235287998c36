package handles

import (
	"context"
	"encoding/json"
	"errors"
	"sort"
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
	s.addFiring(rec, f)
	return f
}

// storedFirings is a handle's list of firings as the store holds it:
// its bytes (nil: none stored), which the next write of the list is
// conditioned on, and the list they say.
type storedFirings struct {
	raw  []byte
	list []Firing
}

// addFiring lists f: it waits in memory for the next flush, which
// appends it to the stored list. It reads nothing from the store, so a
// stalled etcd holds up nothing that takes sched.mu (the loop's claims,
// a fire-now, a handle's end, which holds routeMu).
func (s *Store) addFiring(rec *Record, f Firing) {
	if !s.exists(rec.ID) {
		return // ended meanwhile: its list went with it
	}
	s.sched.mu.Lock()
	s.sched.pending[rec.ID] = lastFirings(append(s.sched.pending[rec.ID], f))
	s.sched.dirty[rec.ID] = rec
	s.sched.mu.Unlock()
}

// lastFirings is list without what a handle's list does not keep.
func lastFirings(list []Firing) []Firing {
	if len(list) > keptFirings {
		return append([]Firing(nil), list[len(list)-keptFirings:]...)
	}
	return list
}

// mergeFirings is a stored list with the firings added to it, in the
// order they started (the listing's newest first reads it backwards),
// the last keptFirings kept. The added ones are not always the newest: a
// gateway keeps the firings of a space it lost waiting while the space's
// new owner lists later ones, and appends its own once it owns the space
// again.
func mergeFirings(stored, added []Firing) []Firing {
	list := append(append([]Firing(nil), stored...), added...)
	sort.SliceStable(list, func(i, j int) bool { return list[i].StartedAt.Before(list[j].StartedAt) })
	return lastFirings(list)
}

// readFirings reads a handle's stored list, with no lock held.
func (s *Store) readFirings(ctx context.Context, registry, id string) (storedFirings, error) {
	v, err := s.w.Get(ctx, tableFirings, key(registry, id))
	if err != nil {
		return storedFirings{}, err
	}
	st := storedFirings{raw: v}
	if v != nil {
		_ = json.Unmarshal(v, &st.list)
	}
	return st, nil
}

// firingsWrite is one handle's list as a flush writes it.
type firingsWrite struct {
	rec   *Record
	added []Firing      // the firings it appends
	known bool          // was is memory's: the store is not read first
	was   storedFirings // the stored list it replaces
	next  storedFirings
}

// size is about what w adds to a transaction.
func (w *firingsWrite) size() int { return len(w.was.raw) + len(w.next.raw) + 256 }

// ops are the conditions and the write of w: the stored list unchanged
// (another flush, or a gateway that owned the space meanwhile, did not
// write it since it was read), the handle still stored (its end deletes
// the list).
func (w *firingsWrite) ops() ([]store.Cond, store.Op) {
	k := key(w.rec.Registry, w.rec.ID)
	cond := store.Absent(tableFirings, k)
	if w.was.raw != nil {
		cond = store.Holds(tableFirings, k, w.was.raw)
	}
	return []store.Cond{cond, store.Exists(tableHandles, key(w.rec.Registry, w.rec.ID))}, store.Put(tableFirings, k, w.next.raw)
}

// flushFirings appends the firings listed since the last flush to each
// handle's stored list (the last keptFirings kept): one transaction a
// space where the store's limits allow, each list written on the
// condition that it is still the one read (storedFirings), so a list read
// before another gateway owned the space and wrote it, or a flush that
// ran beside this one, loses nothing: a write refused puts its firings
// back to wait for the next flush, which reads the list again. A space
// this gateway does not serve now keeps its firings waiting (another
// gateway may write its lists meanwhile). The loop calls it at every look
// for due ticks, and Close at the end: a crash loses at most that much
// of the lists, never a claim. No lock is held while the store is read or
// written.
func (s *Store) flushFirings() {
	served := s.servedFilter()
	s.sched.mu.Lock()
	bySpace := map[[2]string][]*firingsWrite{}
	for id, rec := range s.sched.dirty {
		if !served(rec.Registry, rec.Tenant) {
			continue // stays pending
		}
		w := &firingsWrite{rec: rec, added: s.sched.pending[id]}
		w.was, w.known = s.sched.firings[id]
		sp := [2]string{rec.Registry, rec.Tenant}
		delete(s.sched.pending, id)
		delete(s.sched.dirty, id)
		bySpace[sp] = append(bySpace[sp], w)
	}
	s.sched.mu.Unlock()
	ctx := context.Background()
	for sp, ws := range bySpace {
		var live []*firingsWrite
		for _, w := range ws {
			if !s.exists(w.rec.ID) {
				s.forgetFirings(w.rec.ID) // ended while a firing was listed
				continue
			}
			if !w.known {
				st, err := s.readFirings(ctx, w.rec.Registry, w.rec.ID)
				if err != nil {
					s.requeueFirings(w)
					continue
				}
				w.was = st
			}
			w.next.list = mergeFirings(w.was.list, w.added)
			w.next.raw, _ = json.Marshal(w.next.list)
			live = append(live, w)
		}
		s.writeFirings(sp[0], sp[1], live)
	}
}

// writeFirings commits ws, lists of one space, in as few transactions as
// the store's limits allow; a transaction refused is tried one list at a
// time. A list written is what the store holds now; one refused (changed
// meanwhile, or the space's fence lost) puts its firings back to wait; a
// failure whose outcome is unknown (etcd died with it) leaves the list to
// be read again (its firings may be stored: not written twice), and so
// does one past the store's limits (its firings are dropped, as before).
func (s *Store) writeFirings(registry, tenant string, ws []*firingsWrite) {
	l := s.w.Limits()
	ctx := context.Background()
	for len(ws) > 0 {
		n, bytes := 0, 0
		for n < len(ws) && (n == 0 || 3*(n+1)+1 <= l.Ops && bytes+ws[n].size() <= l.Bytes) {
			bytes += ws[n].size()
			n++
		}
		batch := ws[:n]
		ws = ws[n:]
		var conds []store.Cond
		var ops []store.Op
		for _, w := range batch {
			c, op := w.ops()
			conds, ops = append(conds, c...), append(ops, op)
		}
		err := s.commit(ctx, registry, tenant, conds, ops)
		if err != nil && len(batch) > 1 && (errors.Is(err, store.ErrConflict) || errors.Is(err, store.ErrTooLarge)) {
			for _, w := range batch {
				c, op := w.ops()
				s.firingsWritten(w, s.commit(ctx, registry, tenant, c, []store.Op{op}))
			}
			continue
		}
		for _, w := range batch {
			s.firingsWritten(w, err)
		}
	}
}

// firingsWritten records the outcome of w's write.
func (s *Store) firingsWritten(w *firingsWrite, err error) {
	id := w.rec.ID
	stored := s.exists(id) // else ended meanwhile: its end deletes the list
	s.sched.mu.Lock()
	defer s.sched.mu.Unlock()
	switch {
	case err == nil:
		if stored {
			s.sched.firings[id] = w.next
		}
	case errors.Is(err, store.ErrConflict) || errors.Is(err, store.ErrFenced):
		// Nothing was written: its firings wait for the next flush,
		// before any listed since.
		delete(s.sched.firings, id)
		if stored {
			s.sched.pending[id] = lastFirings(append(append([]Firing(nil), w.added...), s.sched.pending[id]...))
			s.sched.dirty[id] = w.rec
		}
	default:
		delete(s.sched.firings, id)
	}
}

// requeueFirings puts w's firings back to wait for the next flush.
func (s *Store) requeueFirings(w *firingsWrite) {
	s.sched.mu.Lock()
	s.sched.pending[w.rec.ID] = lastFirings(append(append([]Firing(nil), w.added...), s.sched.pending[w.rec.ID]...))
	s.sched.dirty[w.rec.ID] = w.rec
	s.sched.mu.Unlock()
}

// forgetFirings drops what memory holds of the stored lists of ids
// (reloadSpace: another gateway may have written them since); their
// pending firings stay, to be appended to the lists read again.
func (s *Store) forgetFirings(ids ...string) {
	s.sched.mu.Lock()
	for _, id := range ids {
		delete(s.sched.firings, id)
	}
	s.sched.mu.Unlock()
}

// firingsOf answers the handle's firings, newest first: the stored list
// (read with no lock held when memory does not hold it, within the write
// bound in a cluster: past it, OVERLOADED), then the ones waiting for a
// flush.
func (s *Store) firingsOf(registry, id string) ([]Firing, error) {
	s.sched.mu.Lock()
	_, known := s.sched.firings[id]
	s.sched.mu.Unlock()
	var stored storedFirings
	if !known {
		ctx, cancel := s.readBound()
		var err error
		stored, err = s.readFirings(ctx, registry, id)
		cancel()
		if err != nil {
			return nil, storeFault(err, "The handle's firings could not be read.")
		}
	}
	s.sched.mu.Lock()
	if st, ok := s.sched.firings[id]; ok {
		stored = st
	}
	list := lastFirings(append(append([]Firing(nil), stored.list...), s.sched.pending[id]...))
	s.sched.mu.Unlock()
	out := make([]Firing, len(list))
	for i, f := range list {
		out[len(list)-1-i] = f
	}
	return out, nil
}

// dropSchedules answers the writes that delete a handle's claims and
// firings (its end).
func (s *Store) dropSchedules(rec *Record) []store.Op {
	s.sched.mu.Lock()
	delete(s.sched.firings, rec.ID)
	delete(s.sched.pending, rec.ID)
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
