package caddymodule

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"time"

	"github.com/caddyserver/caddy/v2/caddyconfig/caddyfile"
	"go.uber.org/zap"

	"github.com/retainer-gw/retainer/fault"
	"github.com/retainer-gw/retainer/logstore"
	"github.com/retainer-gw/retainer/store"
)

// Plans are the daily caps of the global `plans` block (docs/usage.md): a
// tenant whose token's PlanClaim names a plan is held to it, any other to
// the plan "default" when there is one.
type Plans struct {
	// Claim names the token claim that names a tenant's plan. Default
	// "plan".
	Claim string `json:"plan_claim,omitempty"`
	// Plans by name.
	Plans map[string]*Plan `json:"plans,omitempty"`
}

// Plan is one plan's caps a UTC day; 0 is no cap.
type Plan struct {
	CPUMsPerDay       int64 `json:"cpu_ms_per_day,omitempty"`
	RequestsPerDay    int64 `json:"requests_per_day,omitempty"`
	AITokensPerDay    int64 `json:"ai_tokens_per_day,omitempty"`
	EgressBytesPerDay int64 `json:"egress_bytes_per_day,omitempty"`
}

// defaultPlan is the plan of a tenant whose token names none.
const defaultPlan = "default"

func (p *Plans) claim() string {
	if p == nil || p.Claim == "" {
		return "plan"
	}
	return p.Claim
}

// of answers the plan a tenant recorded as on plan name is held to (nil:
// none). A name no plan has is the default plan: a token naming a plan
// the operator removed (or misspelled) is no way out of the caps.
func (p *Plans) of(name string) *Plan {
	if p == nil || len(p.Plans) == 0 {
		return nil
	}
	if pl := p.Plans[name]; pl != nil && name != "" {
		return pl
	}
	return p.Plans[defaultPlan]
}

// over answers the limit of plan that used has reached ("" for none).
func (pl *Plan) over(used usageCounts) string {
	switch {
	case pl.RequestsPerDay > 0 && used.Requests >= pl.RequestsPerDay:
		return fmt.Sprintf("requests_per_day %d", pl.RequestsPerDay)
	case pl.CPUMsPerDay > 0 && used.CPUMs >= float64(pl.CPUMsPerDay):
		return fmt.Sprintf("cpu_ms_per_day %d", pl.CPUMsPerDay)
	case pl.AITokensPerDay > 0 && used.AITokens >= pl.AITokensPerDay:
		return fmt.Sprintf("ai_tokens_per_day %d", pl.AITokensPerDay)
	case pl.EgressBytesPerDay > 0 && used.EgressBytes >= pl.EgressBytesPerDay:
		return fmt.Sprintf("egress_bytes_per_day %d", pl.EgressBytesPerDay)
	}
	return ""
}

// parsePlans reads the `plans` block of the global `retainer` option:
//
//	plans {
//		plan_claim <claim>
//		<name> {
//			cpu_ms_per_day <n>
//			requests_per_day <n>
//			ai_tokens_per_day <n>
//			egress_bytes_per_day <n>
//		}
//	}
func parsePlans(d *caddyfile.Dispenser) (*Plans, error) {
	p := &Plans{Plans: map[string]*Plan{}}
	for nesting := d.Nesting(); d.NextBlock(nesting); {
		name := d.Val()
		if name == "plan_claim" {
			if !d.NextArg() {
				return nil, d.ArgErr()
			}
			p.Claim = d.Val()
			if d.NextArg() {
				return nil, d.ArgErr()
			}
			continue
		}
		if d.NextArg() {
			return nil, d.Errf("plans: %s takes a block, not %q", name, d.Val())
		}
		if p.Plans[name] != nil {
			return nil, d.Errf("plans: %s is defined twice", name)
		}
		pl := &Plan{}
		for inner := d.Nesting(); d.NextBlock(inner); {
			limit := d.Val()
			if !d.NextArg() {
				return nil, d.ArgErr()
			}
			n, err := strconv.ParseInt(d.Val(), 10, 64)
			if err != nil || n < 0 {
				return nil, d.Errf("plans: %s %s: %q is not a whole number", name, limit, d.Val())
			}
			if d.NextArg() {
				return nil, d.ArgErr()
			}
			switch limit {
			case "cpu_ms_per_day":
				pl.CPUMsPerDay = n
			case "requests_per_day":
				pl.RequestsPerDay = n
			case "ai_tokens_per_day":
				pl.AITokensPerDay = n
			case "egress_bytes_per_day":
				pl.EgressBytesPerDay = n
			default:
				return nil, d.Errf("plans: %s: unknown limit %q", name, limit)
			}
		}
		p.Plans[name] = pl
	}
	return p, nil
}

// plansTable holds the plan each tenant is held to (docs/usage.md): key
// logTenant, value a planRecord in JSON (a row written before the record
// had an iat is the plan's bare name, issued at 0). The data plane sees no
// token, so it reads the tenant's plan here; a tenant with no row is on
// the default plan.
const plansTable = "plans.v1"

// planRecord is the plan a tenant is held to and the iat (Unix seconds) of
// the token that named it: only a token issued later changes it.
type planRecord struct {
	Plan   string `json:"plan"`
	Issued int64  `json:"iat"`
}

func decodePlanRecord(v []byte) planRecord {
	var r planRecord
	if len(v) > 0 && v[0] == '{' && json.Unmarshal(v, &r) == nil {
		return r
	}
	return planRecord{Plan: string(v)}
}

// replacedBy answers whether a token issued at issued (0: it has no iat)
// naming plan changes the record r (ok false: there is none). A token
// naming no plan never does; a token without an iat only where nothing
// is recorded; any other only if issued later than r's (docs/usage.md).
func (r planRecord) replacedBy(ok bool, plan string, issued int64) bool {
	return plan != "" && (!ok || issued > r.Issued)
}

// tenantPlans is plansTable in memory: read at start and every minute (a
// cluster's other gateways write it too), written when a token issued
// later than the recorded one names a plan.
type tenantPlans struct {
	st store.Store
	mu sync.RWMutex
	of map[string]planRecord
	// rmu guards recording: each tenant whose records are being written
	// (record), so a tenant's records run one at a time and no tenant's
	// waits for another's.
	rmu       sync.Mutex
	recording map[string]*planWriter
	// behind counts the records written and the cuts told in the
	// background (record, tellCut), so a stop waits for them (stop).
	// smu guards stopped and each behind.Add: nothing is added once a
	// stop began, so no Add races its Wait (a WebSocket's admit runs
	// while the runtime stops).
	behind  sync.WaitGroup
	smu     sync.Mutex
	stopped bool
	stopBy  time.Time
	drained chan struct{} // closed when behind is done, once stopped
	// tmu guards silenced: once a stop gave up waiting (stop), no cut is
	// told any more (the log store closes next), so no row says a handle
	// was told of a cut its log never got.
	tmu      sync.RWMutex
	silenced bool
}

// planWriter writes one tenant's records in the background, one at a
// time: next is the latest token waiting (rmu held), done is closed when
// the writer has written every token it was given and stops.
type planWriter struct {
	next    planRecord
	waiting bool
	done    chan struct{}
}

func openTenantPlans(st store.Store) *tenantPlans {
	t := &tenantPlans{st: st, of: map[string]planRecord{}, recording: map[string]*planWriter{}}
	t.load()
	return t
}

func (t *tenantPlans) load() {
	of := map[string]planRecord{}
	if t.st.Scan(context.Background(), plansTable, store.Range{}, func(k, v []byte) bool {
		of[string(k)] = decodePlanRecord(v)
		return true
	}) != nil {
		return
	}
	t.mu.Lock()
	// A record written here since the scan read the table stays: records
	// only ever move to a later token.
	for k, r := range t.of {
		if was, ok := of[k]; !ok || r.Issued > was.Issued {
			of[k] = r
		}
	}
	t.of = of
	t.mu.Unlock()
}

// get answers the plan recorded for tenant ("" for none).
func (t *tenantPlans) get(tenant string) string {
	t.mu.RLock()
	defer t.mu.RUnlock()
	return t.of[tenant].Plan
}

func (t *tenantPlans) recorded(tenant string) (planRecord, bool) {
	t.mu.RLock()
	defer t.mu.RUnlock()
	r, ok := t.of[tenant]
	return r, ok
}

// recordWait is the longest an API call waits for its token's plan to be
// recorded (record): a store that answers records it well within it, so
// the call's plan check holds the new plan; past it (PostgreSQL stalled)
// the call goes on with the plan memory holds and the record finishes in
// the background (docs/usage.md). Before, each call waited for its read
// and write, behind every other tenant's record under one lock: the k-th
// call of a stall waited about k × 1.5 s.
const recordWait = 250 * time.Millisecond

// record records that tenant's token issued at issued (Unix seconds, 0
// for none) named plan ("" for none), if that changes what is recorded
// (planRecord.replacedBy), waiting for it at most recordWait. Memory
// answers first: its records are never later than the store's, so a
// token that does not replace them does not replace the store's either.
// A tenant's records are written one at a time by one writer in the
// background; a call that finds one under way gives it its token to
// write next (the latest of those waiting, by iat), so a later token is
// never dropped behind an earlier one's record, and waits for it within
// the same bound. Other tenants' records are not waited for.
func (t *tenantPlans) record(tenant, plan string, issued int64) {
	if r, ok := t.recorded(tenant); !r.replacedBy(ok, plan, issued) {
		return
	}
	mine := planRecord{Plan: plan, Issued: issued}
	t.rmu.Lock()
	w := t.recording[tenant]
	if w == nil {
		w = &planWriter{next: mine, waiting: true, done: make(chan struct{})}
		if !t.start(func() { t.writeAll(tenant, w) }) {
			t.rmu.Unlock()
			return // the gateway stops: recorded at the token's next call
		}
		t.recording[tenant] = w
	} else if !w.waiting || mine.Issued > w.next.Issued {
		w.next, w.waiting = mine, true
	}
	t.rmu.Unlock()
	waitAtMost(w.done, recordWait)
}

// waitAtMost waits until done is closed or d has passed.
func waitAtMost(done <-chan struct{}, d time.Duration) {
	wait := time.NewTimer(d)
	defer wait.Stop()
	select {
	case <-done:
	case <-wait.C:
	}
}

// writeAll writes tenant's records given to w (record) until none waits.
func (t *tenantPlans) writeAll(tenant string, w *planWriter) {
	for {
		t.rmu.Lock()
		if !w.waiting {
			delete(t.recording, tenant)
			t.rmu.Unlock()
			close(w.done)
			return
		}
		next := w.next
		w.waiting = false
		t.rmu.Unlock()
		// A token waiting behind a later one that was just recorded
		// changes nothing.
		if r, ok := t.recorded(tenant); r.replacedBy(ok, next.Plan, next.Issued) {
			t.write(tenant, next.Plan, next.Issued)
		}
	}
}

// start runs fn in the background, counted in behind, unless a stop
// began (then it answers false and fn does not run).
func (t *tenantPlans) start(fn func()) bool {
	t.smu.Lock()
	defer t.smu.Unlock()
	if t.stopped {
		return false
	}
	t.behind.Add(1)
	go func() {
		defer t.behind.Done()
		fn()
	}()
	return true
}

// planStopWait is the longest a stop waits for the records and cut
// entries still being written in the background (stop): a cut's check
// reads plans.cuts.v1 within the store's read bound (1.5 s with
// PostgreSQL) before it tells the handle, so one stopped while
// PostgreSQL stalls briefly still writes its entries (docs/usage.md).
const planStopWait = 2 * time.Second

// stop waits at most planStopWait (from its first call) for the records
// and cuts in the background, starts no more, and from then on tells no
// cut: the caller closes the log store next. A record or a cut's row
// still being written finishes or fails with the store.
func (t *tenantPlans) stop() {
	t.smu.Lock()
	if !t.stopped {
		t.stopped, t.stopBy, t.drained = true, time.Now().Add(planStopWait), make(chan struct{})
		go func() {
			t.behind.Wait() // no Add follows: stopped is set under smu
			close(t.drained)
		}()
	}
	by, drained := t.stopBy, t.drained
	t.smu.Unlock()
	waitAtMost(drained, time.Until(by))
	t.tmu.Lock()
	t.silenced = true
	t.tmu.Unlock()
}

// write reads tenant's row and writes plan, issued to it if they replace
// it. The write is conditional on the row the store holds, so two
// gateways recording at once keep the later token's.
func (t *tenantPlans) write(tenant, plan string, issued int64) {
	ctx := context.Background()
	key := []byte(tenant)
	for try := 0; try < 3; try++ {
		v, err := t.st.Get(ctx, plansTable, key)
		if err != nil {
			return // recorded at its next request
		}
		cond := store.Absent(plansTable, key)
		r := planRecord{}
		if v != nil {
			cond, r = store.Holds(plansTable, key, store.Copy(v)), decodePlanRecord(v)
		}
		if !r.replacedBy(v != nil, plan, issued) {
			t.remember(tenant, r)
			return
		}
		next := planRecord{Plan: plan, Issued: issued}
		b, _ := json.Marshal(next)
		err = t.st.Commit(ctx, store.Txn{If: []store.Cond{cond}, Then: []store.Op{store.Put(plansTable, key, b)}})
		if err == nil {
			t.remember(tenant, next)
			return
		}
		if !errors.Is(err, store.ErrConflict) {
			return // recorded at its next request
		}
	}
}

// remember puts r in memory unless it holds a later one.
func (t *tenantPlans) remember(tenant string, r planRecord) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if was, ok := t.of[tenant]; !ok || r.Issued >= was.Issued {
		t.of[tenant] = r
	}
}

// cutsTable records which handles' logs were told of a tenant's cut a day
// (key day, logTenant, NUL, id, NUL, limit), so a restart does not tell
// them again.
const cutsTable = "plans.cuts.v1"

// cutTellWait is the longest a refusal waits for its cut to be told
// (tellCut): the refusal itself is decided from memory, and the telling,
// which reads and writes cutsTable, finishes in the background past it
// (docs/usage.md). A store that answers tells within it, so the entry is
// in the log when the refusal is answered; a stalled PostgreSQL held the
// first refusal of each handle a day for its read and write bounds, 6.5 s.
const cutTellWait = 100 * time.Millisecond

// tellCut tells handle id ("" the API) of tenant of its cut by limit
// today (tell) unless a gateway already did (cutTold), waiting for that
// at most cutTellWait; the rest goes on in the background. The row that
// says the handle was told is written only after tell ran, and tell runs
// only until a stop gave up waiting (stop): a stop never leaves a row
// saying an entry was written that the closed log store dropped.
func (t *tenantPlans) tellCut(tenant, day, id, limit string, tell func()) {
	done := make(chan struct{})
	key := []byte(day + tenant + "\x00" + id + "\x00" + limit)
	if !t.start(func() {
		defer close(done)
		told, answered := t.cutTold(key)
		if told {
			return
		}
		t.tmu.RLock()
		if t.silenced {
			t.tmu.RUnlock()
			return // the log store closes: told after the restart
		}
		tell()
		t.tmu.RUnlock()
		if answered {
			t.st.Commit(context.Background(), store.Txn{Then: []store.Op{store.Put(cutsTable, key, []byte{1})}})
		}
	}) {
		return
	}
	waitAtMost(done, cutTellWait)
}

// cutTold answers whether the cut key (cutsTable) was told already, and
// whether the store answered. A read that fails counts as none: the cut
// is told (maybe twice after a restart) and its row not written, since a
// store that does not answer would take the row's write and apply it once
// it resumes, when the entry, waiting in the log store, may be lost with
// a stop (docs/usage.md). It runs behind the refusal (tellCut).
func (t *tenantPlans) cutTold(key []byte) (told, answered bool) {
	v, err := t.st.Get(context.Background(), cutsTable, key)
	return err == nil && v != nil, err == nil
}

// sweepCuts deletes the records of days before today.
func (t *tenantPlans) sweepCuts() {
	today := time.Now().UTC().Format(time.DateOnly)
	var ops []store.Op
	t.st.Scan(context.Background(), cutsTable, store.Range{KeysOnly: true}, func(k, _ []byte) bool {
		if len(k) >= 10 && string(k[:10]) < today {
			ops = append(ops, store.Delete(cutsTable, store.Copy(k)))
		}
		return true
	})
	store.CommitChunked(context.Background(), t.st, nil, ops)
}

// planCut is a tenant's limit that refused it today, and the handles whose
// logs say so.
type planCut struct {
	limit  string
	logged map[string]bool // handle ids ("" for the API)
}

// quotaCut is the cause of a plan's QUOTA_EXCEEDED: writeFault answers
// Retry-After until it ends.
type quotaCut struct{ until time.Time }

func (q *quotaCut) Error() string { return "a plan's daily limit" }

// retryAfter answers the Retry-After of err, if it is a plan's cut.
func retryAfter(err error) (string, bool) {
	var q *quotaCut
	if !errors.As(err, &q) {
		return "", false
	}
	return strconv.Itoa(max(int(time.Until(q.until).Seconds()+0.999), 1)), true
}

// admit refuses tenant (a registry's) past its plan's daily limit, with
// QUOTA_EXCEEDED until the UTC day ends; id is the handle it called ("" on
// the API). The first refusal of the day, and of each handle, writes a
// `system` entry in that handle's log (on the API, a line in Caddy's log).
func (rt *runtime) admit(registry, id, tenant string) error {
	a := rt.app.Load()
	if a == nil || a.Plans == nil || len(a.Plans.Plans) == 0 {
		return nil
	}
	m := rt.usage.Load()
	if m == nil {
		return nil
	}
	key := logTenant(registry, tenant)
	pl := a.Plans.of(m.plans.get(key))
	if pl == nil {
		return nil
	}
	limit := pl.over(m.today(key))
	if limit == "" {
		return nil
	}
	now := time.Now().UTC()
	until := now.Truncate(24 * time.Hour).Add(24 * time.Hour)
	m.mu.Lock()
	c := m.cut[key]
	if c == nil || c.limit != limit {
		// The first cut of the day, or a cut by another limit after the
		// tenant's plan moved: each handle is told again, of this limit.
		c = &planCut{limit: limit, logged: map[string]bool{}}
		m.cut[key] = c
	}
	first := !c.logged[id]
	c.logged[id] = true
	m.mu.Unlock()
	msg := fmt.Sprintf("The tenant's plan allows %s; it is refused until the UTC day ends (%s).", limit, until.Format(time.RFC3339))
	if first {
		// Memory decided the refusal; whether a gateway told this handle
		// already is PostgreSQL's word in a cluster, which a visitor does
		// not wait for past cutTellWait.
		m.plans.tellCut(key, now.Format(time.DateOnly), id, limit, func() {
			if id == "" {
				rt.logger.Load().Info("a tenant reached its plan's daily limit",
					zap.String("registry", registry), zap.String("tenant", tenant), zap.String("limit", limit))
			} else if l := rt.logs.Load(); l != nil {
				l.Append(key, id, logstore.Entry{Time: now, Level: "system", Message: msg})
			}
		})
	}
	return &fault.Fault{Code: fault.QuotaExceeded, Message: msg, Cause: &quotaCut{until: until}}
}
