package handles

import (
	"context"
	"strings"
	"sync"
	"time"

	"github.com/robfig/cron/v3"

	"github.com/retainer-gw/retainer/budgets"
	"github.com/retainer-gw/retainer/fault"
	"github.com/retainer-gw/retainer/program"
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
	mu   sync.Mutex
	last map[string]int64 // id\x00cron → last tick claimed (ms)
	// firings holds a handle's list as the store holds it, once this
	// gateway read or wrote it since it last loaded the handle's space;
	// pending the firings listed since, which the next flush appends to
	// the stored list (schedulefirings.go). Nothing that holds mu waits
	// for the store.
	firings map[string]storedFirings // id → the stored list
	pending map[string][]Firing      // id → newest last
	dirty   map[string]*Record       // ids with pending firings
	done    chan struct{}            // closed when the loop has stopped
	wg      sync.WaitGroup           // firings in progress
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
	firings, err := s.firingsOf(r.name, id)
	if err != nil {
		return ScheduleInfo{}, err
	}
	out.Firings = append(out.Firings, firings...)
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
