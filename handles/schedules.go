package handles

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/robfig/cron/v3"

	"github.com/retainer-gw/retainer/budgets"
	"github.com/retainer-gw/retainer/fault"
	"github.com/retainer-gw/retainer/program"
	"github.com/retainer-gw/retainer/store"
)

// Schedules (docs/schedules.md): a deploy may name 1–5 cron expressions
// (five fields, UTC); at each tick the gateway calls the handler's
// scheduled(controller, env, ctx) as an invocation named
// program.ScheduledEvent, through invoke like a fetch (the handle's order,
// concurrency and bounds; a parked deployment is rebuilt first). A firing
// that throws or hits a bound is tried again after each of retryDelays
// unless it called controller.noRetry(); a bound hit is a strike as
// invoke counts it. A handle and expression has at most one tick's retries
// pending: a new tick supersedes them. A fire-now is one try, answered to
// its caller and never retried, and a handle has at most one in progress
// (a second is QUOTA_EXCEEDED), so callers cannot pile up work.
//
// Each tick fires once: before a tick fires, the gateway claims it in
// table "schedules" (key(registry, id+"\x00"+cron), the last tick claimed)
// with a compare and swap in the tenant's space, under its fence. A
// restart reads the claims back, so it neither doubles a tick nor skips
// one: the newest tick missed while no gateway ran fires once if it is
// less than lateLimit late; older ones are skipped, and the handle's log
// says how many. A firing cut short by the gateway's own crash is not
// fired again (the claim came first). In a cluster only the space's owner
// fires (servedFilter), and the claim's fence refuses a gateway that lost
// the space. Only current handles fire: a route's target, a split's
// member, a domain's, or a handle nothing points at; a route's kept
// version is silent (current).

const (
	tableSchedules = "schedules"
	tableFirings   = "firings"
	// keptFirings is how many firings a handle's list keeps.
	keptFirings = 100
	// lateLimit is how late a missed tick may be and still fire.
	lateLimit = time.Hour
)

// retryDelays are the waits before a failed firing is tried again.
var retryDelays = []time.Duration{time.Second, 10 * time.Second, time.Minute}

var cronParser = cron.NewParser(cron.Minute | cron.Hour | cron.Dom | cron.Month | cron.Dow)

// parseCron parses one five-field expression.
func parseCron(spec string) (cron.Schedule, error) {
	if n := len(strings.Fields(spec)); n != 5 {
		return nil, fault.New(fault.BadRequest, "The schedule %q is not a cron expression of five fields (minute hour day-of-month month day-of-week, UTC); it has %d.", spec, n)
	}
	sched, err := cronParser.Parse(spec)
	if err != nil {
		return nil, fault.New(fault.BadRequest, "The schedule %q is not a valid cron expression: %v.", spec, err)
	}
	return sched, nil
}

// CheckSchedules validates a deploy's schedules (none is valid).
func CheckSchedules(specs []string) error {
	if len(specs) > budgets.SchedulesPerHandle {
		return fault.New(fault.BadRequest, "A handle may have at most %d schedules; %d were given.", budgets.SchedulesPerHandle, len(specs))
	}
	seen := map[string]bool{}
	for _, spec := range specs {
		if _, err := parseCron(spec); err != nil {
			return err
		}
		if seen[spec] {
			return fault.New(fault.BadRequest, "The schedule %q is given twice.", spec)
		}
		seen[spec] = true
	}
	return nil
}

// parsed caches the expressions of the handles this gateway holds (the
// loop asks each one's next tick every second).
var parsed sync.Map // spec → cron.Schedule

// parsedCron is parseCron, cached.
func parsedCron(spec string) (cron.Schedule, error) {
	if v, ok := parsed.Load(spec); ok {
		return v.(cron.Schedule), nil
	}
	sched, err := parseCron(spec)
	if err == nil {
		parsed.Store(spec, sched)
	}
	return sched, err
}

// nextTick is the first tick of spec after t (UTC), or zero.
func nextTick(spec string, t time.Time) time.Time {
	sched, err := parsedCron(spec)
	if err != nil {
		return time.Time{}
	}
	return sched.Next(t.UTC())
}

// Firing is one firing of a schedule, as GET /handles/{id}/schedules
// lists it.
type Firing struct {
	Cron          string    `json:"cron"`
	ScheduledTime int64     `json:"scheduledTime"`
	StartedAt     time.Time `json:"startedAt"`
	// Outcome is "ok", "error" (it threw), "bound" (it hit a bound),
	// "failed" (the gateway could not run it: overload, a crash) or
	// "missing" (the handler has no scheduled method).
	Outcome    string `json:"outcome"`
	Error      string `json:"error,omitempty"`
	DurationMs int64  `json:"durationMs"`
	// Attempt is 1 for a tick's first try, up to 4.
	Attempt  int    `json:"attempt"`
	NoRetry  bool   `json:"noRetry,omitempty"`
	Now      bool   `json:"now,omitempty"`
	ResultID string `json:"resultId,omitempty"`
}

// Schedule is one of a handle's cron expressions and its next tick.
type Schedule struct {
	Cron string `json:"cron"`
	// Next is nil while the handle is silent (a route's kept version).
	Next *time.Time `json:"next"`
}

// ScheduleInfo is what GET /handles/{id}/schedules answers.
type ScheduleInfo struct {
	Schedules []Schedule `json:"schedules"`
	Firings   []Firing   `json:"firings"`
}

// FiringReceipt is what Options.OnFiring is told of a firing, to write
// its receipt.
type FiringReceipt struct {
	Registry, Tenant, ID string
	Firing               Firing
}

// scheduleState is the in-memory side of the schedules: each (id, cron)'s
// last claimed tick, each handle's recent firings.
type scheduleState struct {
	mu      sync.Mutex
	last    map[string]int64    // id\x00cron → last tick claimed (ms)
	firings map[string][]Firing // id → newest last
	dirty   map[string]*Record  // ids whose firings await a flush
	done    chan struct{}       // closed when the loop has stopped
	wg      sync.WaitGroup      // firings in progress
	// chains holds, for each id\x00cron with a tick's tries under way,
	// the channel a newer tick closes to end its pending retries.
	chains map[string]chan struct{}
	// firingNow holds the handles with a fire-now in progress.
	firingNow map[string]bool
}

// tickClaim is a claim as stored.
type tickClaim struct {
	Tick int64 `json:"tick"`
}

func schedKey(registry, id, spec string) []byte { return key(registry, id+"\x00"+spec) }

// Schedules answers the handle's schedules and its recent firings.
func (r *Registry) Schedules(tenant, id string) (ScheduleInfo, error) {
	rec, err := r.owned(tenant, id)
	if err != nil {
		return ScheduleInfo{}, err
	}
	s := r.store
	now := s.opts.Now()
	s.mu.Lock()
	specs := append([]string(nil), rec.Schedules...)
	current := s.isCurrentLocked(r.name, id, now, r.config().VersionRetention)
	s.mu.Unlock()
	out := ScheduleInfo{Schedules: []Schedule{}, Firings: []Firing{}}
	for _, spec := range specs {
		sc := Schedule{Cron: spec}
		if next := nextTick(spec, now); current && !next.IsZero() {
			sc.Next = &next
		}
		out.Schedules = append(out.Schedules, sc)
	}
	out.Firings = append(out.Firings, s.firingsOf(r.name, id)...)
	return out, nil
}

// FireNow fires the handle's schedule spec (its first when empty) now,
// once, and answers that try: it is not retried (the caller sees the
// outcome and may call again). A handle has one fire-now in progress at
// most; another answers QUOTA_EXCEEDED. A route's kept version, silent,
// answers CONFLICT.
func (r *Registry) FireNow(ctx context.Context, tenant, id, spec string) (Firing, error) {
	rec, err := r.owned(tenant, id)
	if err != nil {
		return Firing{}, err
	}
	s := r.store
	s.mu.Lock()
	specs := append([]string(nil), rec.Schedules...)
	current := len(specs) == 0 || s.isCurrentLocked(r.name, id, s.opts.Now(), r.config().VersionRetention)
	s.mu.Unlock()
	if len(specs) == 0 {
		// As the API's invoke of any name a handle does not have.
		return Firing{}, fault.UnknownHandle(id, program.ScheduledEvent)
	}
	if spec == "" {
		spec = specs[0]
	} else if !contains(specs, spec) {
		return Firing{}, fault.New(fault.BadRequest, "The handle has no schedule %q.", spec)
	}
	if !current {
		return Firing{}, fault.New(fault.Conflict, "The handle is a route's kept version, which is silent: its schedules do not fire until a rollback makes it current again.")
	}
	s.sched.mu.Lock()
	busy := s.sched.firingNow[id]
	if !busy {
		s.sched.firingNow[id] = true
	}
	s.sched.mu.Unlock()
	if busy {
		return Firing{}, fault.New(fault.QuotaExceeded, "A firing of this handle asked for now is still in progress; ask again once it has answered.")
	}
	// The try runs on if the caller goes (it was asked for; it is ended by
	// its bound), and the handle's fire-now stays taken until it ends.
	first := make(chan Firing, 1)
	s.sched.wg.Add(1)
	go func() {
		defer s.sched.wg.Done()
		f := r.fireOnce(rec, spec, s.opts.Now().UnixMilli(), 1, true)
		// Free before the answer, so the caller may ask again at once.
		s.sched.mu.Lock()
		delete(s.sched.firingNow, id)
		s.sched.mu.Unlock()
		first <- f
	}()
	select {
	case f := <-first:
		return f, nil
	case <-ctx.Done():
		return Firing{}, ctx.Err()
	}
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}

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
			_ = s.commitChunked(sp[0], sp[1], live)
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
		err := s.commit(registry, tenant, conds, ops)
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
			if err := s.commit(registry, tenant, c, []store.Op{op}); err != nil {
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
