package handles

import (
	"context"
	"encoding/json"
	"errors"
	"sync"
	"sync/atomic"
	"time"

	"github.com/retainer-gw/retainer/fault"
	"github.com/retainer-gw/retainer/store"
)

// The registry's writes through the API (a deploy's record, a route's
// bind or unbind, a handle's end, a domain's claim, activation or delete)
// wait for the store at most Options.WriteBound in a cluster, whose etcd
// may stall (docs/cluster.md, "Failures"). The caller is then answered 503
// OVERLOADED, retryable, and the write itself is never cut short:
//
//   - a write runs in a goroutine of its own; one its caller gave up on
//     before it reached the store (waiting for routeMu behind a stalled
//     commit, say) sends nothing, ever, so it cannot land after a newer
//     write of the same name;
//   - one already sent goes on to its end: etcd may apply a transaction
//     whose sender stopped waiting, so the writer keeps waiting for the
//     answer, holding routeMu as any route writer does, and applies what
//     was committed to memory, which stays what etcd holds. The next
//     route write starts only once that answer came: no transaction given
//     up on lands after a later one;
//   - a deploy given up on after it was sent is taken back once its
//     record is committed (its record and body deleted, its isolate
//     closed): a deploy answered 503 never appears later. The moment it is
//     given up on, it is marked in the store (tableTakeBacks, unfenced,
//     sent behind its record), so any gateway that loads the space skips
//     the record and takes it back; a take-back the store refuses (this
//     gateway lost its lease meanwhile and is rejoining: its fence went
//     with it) is tried again until it lands, claiming the space again
//     for it (takeBackUntilLanded); and every gateway finishes the
//     take-backs its marks name in the spaces it owns or nobody does, as
//     it starts and every TakeBackMarksEvery (FinishTakeBacks), so a
//     gateway killed before its take-back landed leaves nothing behind;
//   - while a write has waited for the store longer than the bound, new
//     writes are refused at once rather than piling up behind it (any
//     registry commit counts, the flusher's of invocation counts too: a
//     bind waits for its lock);
//   - a commit whose answer was lost (etcd died with it in flight) may
//     have been applied: its space is loaded again from the store before
//     it is served next (unsure).
//
// Every transaction is atomic in the store (its record with its routes,
// a route with its versions), so what a 503 leaves is the whole write or
// none of it. On one machine (no bound) a write waits for its file, as it
// always did.

// The states of one bounded write.
const (
	writeWaiting   int32 = iota // nothing sent to the store yet
	writeSent                   // sent, or about to be: it goes on to its end
	writeDropped                // given up on before it was sent: never sent
	writeAbandoned              // given up on after it was sent: its caller was answered 503
	writeSettled                // its caller has its answer
)

type boundedWrite struct{ state atomic.Int32 }

type boundedWriteKey struct{}

// errWriteDropped ends a write its caller gave up on before it was sent;
// nobody reads it.
var errWriteDropped = errors.New("handles: the write was given up on before it was sent")

// errWriteAbandoned is the cause of a write given up on after it was sent.
var errWriteAbandoned = errors.New("handles: the write was given up on after it was sent")

// sending marks the write ctx carries as sent, answering false when its
// caller gave up on it first: then nothing of it may reach the store or
// memory. Work that no caller waits for (sweeps, one machine) carries none
// and always sends.
func sending(ctx context.Context) bool {
	w, _ := ctx.Value(boundedWriteKey{}).(*boundedWrite)
	if w == nil || w.state.CompareAndSwap(writeWaiting, writeSent) {
		return true
	}
	return w.state.Load() != writeDropped
}

// settle hands the write's outcome to its caller, answering false when
// the caller gave up on it after it was sent (and was answered 503).
func settle(ctx context.Context) bool {
	w, _ := ctx.Value(boundedWriteKey{}).(*boundedWrite)
	return w == nil || w.state.CompareAndSwap(writeSent, writeSettled) || w.state.CompareAndSwap(writeWaiting, writeSettled)
}

// wanted answers whether the caller of the write ctx carries still waits
// for it (work no caller waits for: always). A write that let go of
// routeMu to read the store (bindRoute) sends nothing more once its
// caller was answered: a new commit of it could land after a later write
// of the same name.
func wanted(ctx context.Context) bool {
	w, _ := ctx.Value(boundedWriteKey{}).(*boundedWrite)
	if w == nil {
		return true
	}
	st := w.state.Load()
	return st == writeWaiting || st == writeSent
}

// readBound is the context of a store read a registry write makes with
// no lock held: within the write bound in a cluster (past it the caller
// was answered anyway), unbounded on one machine.
func (s *Store) readBound() (context.Context, context.CancelFunc) {
	if s.opts.WriteBound <= 0 {
		return context.WithCancel(context.Background())
	}
	return context.WithTimeout(context.Background(), s.opts.WriteBound)
}

// bounded runs write, waiting for it at most the store's write bound (no
// bound: until it ends), and answers its answer, or OVERLOADED past the
// bound. write's ctx carries the state sending and settle read; it is
// never cancelled.
func bounded[T any](s *Store, write func(ctx context.Context) (T, error)) (T, error) {
	var none T
	bound := s.opts.WriteBound
	if bound <= 0 {
		return write(context.Background())
	}
	if err := s.writesOverdue(); err != nil {
		return none, err
	}
	w := &boundedWrite{}
	ctx := context.WithValue(context.Background(), boundedWriteKey{}, w)
	type answer struct {
		v   T
		err error
	}
	done := make(chan answer, 1)
	go func() {
		v, err := write(ctx)
		settle(ctx)
		done <- answer{v, err}
	}()
	t := time.NewTimer(bound)
	defer t.Stop()
	select {
	case a := <-done:
		return a.v, a.err
	case <-t.C:
	}
	if w.state.CompareAndSwap(writeWaiting, writeDropped) {
		return none, fault.New(fault.Overloaded, "The registry's store did not take the write within %v; nothing was written. Retry shortly.", bound)
	}
	if w.state.CompareAndSwap(writeSent, writeAbandoned) {
		return none, fault.Wrap(fault.Overloaded, errWriteAbandoned, "The registry's store has not answered the write within %v; it may still be applied, whole or not at all. Retry shortly.", bound)
	}
	a := <-done // it ended as the bound passed
	return a.v, a.err
}

// commits under way, for writesOverdue.
type commitsUnderWay struct {
	mu   sync.Mutex
	next uint64
	at   map[uint64]time.Time
}

// began records a commit's start; the answer ends it.
func (c *commitsUnderWay) began() func() {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.at == nil {
		c.at = map[uint64]time.Time{}
	}
	c.next++
	n := c.next
	c.at[n] = time.Now()
	return func() {
		c.mu.Lock()
		delete(c.at, n)
		c.mu.Unlock()
	}
}

// oldest is how long the oldest commit under way has waited (0: none).
func (c *commitsUnderWay) oldest() time.Duration {
	c.mu.Lock()
	defer c.mu.Unlock()
	var most time.Duration
	for _, at := range c.at {
		most = max(most, time.Since(at))
	}
	return most
}

// errOverdue is the cause of a write refused before it ran.
var errOverdue = errors.New("handles: a registry commit has waited for the store past the write bound")

// writesOverdue refuses a write while a registry commit has waited for the
// store longer than the bound (etcd stalled or unreachable); the write is
// not run at all.
func (s *Store) writesOverdue() error {
	if waited := s.commits.oldest(); s.opts.WriteBound > 0 && waited > s.opts.WriteBound {
		return fault.Wrap(fault.Overloaded, errOverdue, "The registry's store has not answered for %v; nothing was written. Retry shortly.", waited.Round(100*time.Millisecond))
	}
	return nil
}

// unsure reconciles a space after a commit whose outcome is unknown: the
// store failed otherwise than by refusing it (a condition, its limits, a
// fence: nothing was applied; a lost fence is the lease's to handle),
// e.g. etcd died with the transaction in flight, which it may have
// applied. What memory holds of the space may then differ from the store
// (the write's changes to memory were not made, or were made first), so
// in a cluster the space is loaded again from the store before it is
// served next (own reloads it; its isolates start again, as after a
// failover). One machine's bbolt answers every commit.
func (s *Store) unsure(registry, tenant string, err error) {
	if err == nil || s.opts.Own == nil || errors.Is(err, store.ErrConflict) || errors.Is(err, store.ErrTooLarge) || errors.Is(err, store.ErrFenced) {
		return
	}
	s.ownMu.Lock()
	delete(s.owned, store.Space(registry, tenant))
	s.ownGen++ // a reload under way may have read it before
	s.ownMu.Unlock()
}

// storeFault is the answer to a registry write the store failed: the
// store unreachable, slow or this gateway's claim on the space lost is
// retryable (503 OVERLOADED: the write may or may not have been applied,
// as with any answer lost); a write past the store's limits is not.
func storeFault(err error, message string) error {
	var f *fault.Fault
	if errors.As(err, &f) {
		return err
	}
	if errors.Is(err, store.ErrTooLarge) {
		return fault.Wrap(fault.Internal, err, "%s", message)
	}
	return fault.Wrap(fault.Overloaded, err, "%s The registry's store did not take it; retry shortly.", message)
}

// takeBacks are the deploys answered 503 (or failed) whose record the
// store may hold and whose take-back has not landed yet: a reload of their
// space skips them (reloadSpace), so neither the unsure path nor a rejoin
// brings back a deploy answered 503.
type takeBacks struct {
	mu      sync.Mutex
	pending map[string]*Record
}

// add notes that r waits for its take-back.
func (t *takeBacks) add(r *Record) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.pending == nil {
		t.pending = map[string]*Record{}
	}
	t.pending[r.ID] = r
}

// has is whether the record id waits for its take-back.
func (t *takeBacks) has(id string) bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.pending[id] != nil
}

// tableTakeBacks holds, by registry and record id, the deploys given up on
// after their record was sent (value: takeBackMark): any gateway that
// loads the space skips the record and takes it back, and every gateway
// finishes the take-backs of the marks in the spaces it owns or nobody
// does (FinishTakeBacks). The mark is sent the moment the deploy is given
// up on, so with etcd paused etcd holds it before it can let the
// gateway's lease expire and another gateway claim the space and load
// it; a mark delayed past that load (the gateway's connection to etcd
// cut right after the record arrived) is found by that gateway's next
// FinishTakeBacks, which takes back what it served meanwhile
// (docs/cluster.md, "Failures").
const tableTakeBacks = "takebacks"

// takeBackMark is a take-back's mark in tableTakeBacks.
type takeBackMark struct {
	Tenant     string `json:"tenant"`
	BodyChunks int    `json:"bodyChunks"`
}

// markTakeBack records, in memory and in the store (unfenced: the mark
// must land even once this gateway's fence is gone), that r's deploy was
// given up on after its record was sent. Cluster only. The deploy is
// answered 503 once the mark is answered or markHandOff passed, so the
// mark has left for etcd (behind the record, on the same connection)
// before the answer does: a gateway killed right after its 503 has sent
// it (a mark sent in a goroutine alone could still be in the process).
func (s *Store) markTakeBack(r *Record) {
	s.takeBacks.add(r)
	sent := make(chan struct{})
	go func() {
		s.sendMark(context.Background(), r)
		close(sent)
	}()
	select {
	case <-sent:
	case <-time.After(markHandOff):
	}
}

// markHandOff is how long a deploy given up on waits for its mark before
// it is answered (markTakeBack).
const markHandOff = 50 * time.Millisecond

// sendMark writes r's mark in tableTakeBacks, unfenced.
func (s *Store) sendMark(ctx context.Context, r *Record) {
	v, err := json.Marshal(takeBackMark{Tenant: r.Tenant, BodyChunks: r.BodyChunks})
	if err != nil {
		return
	}
	s.w.Store.Commit(ctx, store.Txn{Then: []store.Op{store.Put(tableTakeBacks, key(r.Registry, r.ID), v)}})
}

// marksOf answers the records of a tenant's space marked for a take-back
// by any gateway (reloadSpace skips and takes them back).
func (s *Store) marksOf(ctx context.Context, registry, tenant string) (map[string]*Record, error) {
	out := map[string]*Record{}
	err := s.w.Scan(ctx, tableTakeBacks, store.Range{Prefix: []byte(registry + "\x00")}, func(k, v []byte) bool {
		var m takeBackMark
		_, id, ok := splitKey(k)
		if ok && json.Unmarshal(v, &m) == nil && m.Tenant == tenant {
			out[id] = &Record{ID: id, Registry: registry, Tenant: tenant, BodyChunks: m.BodyChunks}
		}
		return true
	})
	return out, err
}

// takeBackRetry is the longest wait between two tries of a take-back.
const takeBackRetry = time.Second

// takeBackUntilLanded takes r back (records.go, takeBack), and when the
// store refuses (etcd stalled, this gateway's lease lost by its clock or
// at etcd and its fence with it, the gateway rejoining) keeps trying in
// the background until it lands: each try claims the space for this
// gateway first (own, which reloads it without r), so a take-back is not
// lost with the lease it was sent under. It ends once the store holds no
// record of r, whoever deleted it (another gateway that claimed the space
// first skips and takes back a marked record: markTakeBack), or when the
// store closes (docs/cluster.md, "Failures").
func (s *Store) takeBackUntilLanded(r *Record) {
	s.takeBacks.add(r)
	if s.takeBack(r) == nil {
		s.tookBack(r)
		return
	}
	go func() {
		wait := 50 * time.Millisecond
		for {
			select {
			case <-s.stop:
				return
			case <-time.After(wait):
			}
			wait = min(2*wait, takeBackRetry)
			if s.tryTakeBack(r) {
				s.tookBack(r)
				return
			}
		}
	}()
}

// tookBack ends r's wait for its take-back.
func (s *Store) tookBack(r *Record) {
	s.takeBacks.mu.Lock()
	delete(s.takeBacks.pending, r.ID)
	s.takeBacks.mu.Unlock()
}

// tryTakeBack is one try of a take-back the store refused before,
// answering whether the store now holds no record of r.
func (s *Store) tryTakeBack(r *Record) bool {
	ctx, cancel := context.WithTimeout(context.Background(), max(s.opts.WriteBound, takeBackRetry))
	defer cancel()
	if s.opts.Own != nil {
		if err := s.own(ctx, r.Registry, r.Tenant); err != nil {
			// Not this gateway's to write (yet): nothing to do if the
			// record is not stored. While it is, its mark is sent again
			// (the first may have been lost with its connection), so
			// that the space's owner finishes it (FinishTakeBacks).
			v, err := s.w.Get(ctx, tableHandles, key(r.Registry, r.ID))
			if err == nil && v != nil {
				s.sendMark(ctx, r)
			}
			return err == nil && v == nil
		}
	}
	return s.takeBack(r) == nil
}

// TakeBackMarksEvery is how often a cluster's gateway finishes the
// take-backs the store's marks name (FinishTakeBacks); the Caddy module
// also finishes them as the gateway starts.
const TakeBackMarksEvery = 2 * time.Second

// FinishTakeBacks finishes the take-backs the store's marks name, so that
// a mark always ends with its record gone and the mark cleared, whoever
// sent it (docs/cluster.md, "Failures"): a gateway killed or restarted
// before its take-back landed forgets it, and nobody else would take the
// record back before some load of its space skipped it. For each mark:
//
//   - one whose take-back this gateway tries already is left to it;
//   - in a space this gateway owns, the record is dropped from memory
//     (its isolate closed) and taken back: it was loaded before the mark
//     landed (the case of another gateway's deploy given up on whose
//     mark etcd applied after this gateway's load);
//   - in a space nobody owns, the space is owned here, which loads it
//     skipping the record and takes it back (reloadSpace);
//   - in a space another gateway owns, it is that gateway's to finish.
//
// hasOwner answers whether a live gateway owns a space. Cluster only; the
// Caddy module calls it at the gateway's start and every
// TakeBackMarksEvery.
func (s *Store) FinishTakeBacks(ctx context.Context, hasOwner func(ctx context.Context, space string) (bool, error)) error {
	if s.opts.Own == nil {
		return nil
	}
	var marked []*Record
	err := s.w.Scan(ctx, tableTakeBacks, store.Range{}, func(k, v []byte) bool {
		var m takeBackMark
		registry, id, ok := splitKey(k)
		if ok && json.Unmarshal(v, &m) == nil && m.Tenant != "" {
			marked = append(marked, &Record{ID: id, Registry: registry, Tenant: m.Tenant, BodyChunks: m.BodyChunks})
		}
		return true
	})
	if err != nil {
		return err
	}
	for _, r := range marked {
		if s.takeBacks.has(r.ID) {
			continue
		}
		if s.owns(r.Registry, r.Tenant) {
			s.dropMarked(r)
			s.takeBackUntilLanded(r)
			continue
		}
		owned, err := hasOwner(ctx, store.Space(r.Registry, r.Tenant))
		if err != nil {
			return err
		}
		if !owned {
			_ = s.own(ctx, r.Registry, r.Tenant) // an error: claimed meanwhile, its owner's to finish
		}
	}
	return nil
}

// dropMarked forgets a marked record this gateway loaded (with the route
// names memory points at it) and closes its isolate; its take-back
// deletes it from the store.
func (s *Store) dropMarked(r *Record) {
	s.mu.Lock()
	rec := s.records[r.ID]
	if rec == nil || rec.Registry != r.Registry {
		s.mu.Unlock()
		return
	}
	delete(s.records, r.ID)
	delete(s.dirty, r.ID)
	delete(s.live, r.ID)
	for name, id := range s.routes[r.Registry] {
		if id == r.ID {
			delete(s.routes[r.Registry], name)
		}
	}
	s.mu.Unlock()
	s.opts.Executor.Close(r.ID)
}
