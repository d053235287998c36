package handles

import (
	"context"
	"encoding/json"
	"fmt"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/retainer-gw/retainer/fault"
	"github.com/retainer-gw/retainer/internal/etcdtest"
	"github.com/retainer-gw/retainer/internal/waitfor"
	"github.com/retainer-gw/retainer/program"
	persist "github.com/retainer-gw/retainer/store"
	"github.com/retainer-gw/retainer/workers"
)

// scheduledProgram counts its firings in a closure and shows them through
// fetch; a tick whose cron starts with "0 " throws until its third try,
// one starting with "1 " calls noRetry() and throws.
const scheduledProgram = `async () => { const seen = []; let tries = 0; return {
	async fetch() { return Response.json({seen, tries}) },
	async scheduled(c, env, ctx) {
		tries++;
		if (c.cron.startsWith('0 ') && tries < 3) throw new Error('try ' + tries);
		if (c.cron.startsWith('1 ')) { c.noRetry(); throw new Error('no retry') }
		seen.push(c.cron + '@' + c.scheduledTime);
	} } }`

type firedState struct {
	Seen  []string `json:"seen"`
	Tries int      `json:"tries"`
}

func startScheduling(t *testing.T, path string, clock *fakeClock) *gateway {
	return startOn(t, func() (persist.Store, error) { return persist.OpenBolt(path, 0) }, clock, &eventLog{}, workers.Config{Workers: 1}, func(o *Options) {
		o.ScheduleEvery = 20 * time.Millisecond
		o.ScheduleRetries = []time.Duration{50 * time.Millisecond, 50 * time.Millisecond, 50 * time.Millisecond}
	})
}

func deploySchedules(t *testing.T, reg *Registry, tenant string, schedules ...string) string {
	t.Helper()
	res, err := reg.Execute(context.Background(), tenant, ExecRequest{Program: program.Program{Code: scheduledProgram}, RetainHandles: true, Timeout: time.Second, Schedules: schedules})
	if err != nil {
		t.Fatal(err)
	}
	return res.ExecutionID
}

func fired(t *testing.T, reg *Registry, tenant, id string) firedState {
	t.Helper()
	body, err := call(reg, tenant, id, "/")
	if err != nil {
		t.Fatal(err)
	}
	var st firedState
	if err := json.Unmarshal([]byte(body), &st); err != nil {
		t.Fatal(body, err)
	}
	return st
}

// eventually waits for cond for up to 10 s.
func eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	waitfor.Until(t, 10*time.Second, what, cond)
}

// firingsAt counts the handle's listed firings of each scheduled time.
func firingsAt(t *testing.T, reg *Registry, tenant, id string) map[int64]int {
	t.Helper()
	info, err := reg.Schedules(tenant, id)
	if err != nil {
		t.Fatal(err)
	}
	out := map[int64]int{}
	for _, f := range info.Firings {
		if !f.Now {
			out[f.ScheduledTime]++
		}
	}
	return out
}

var t0 = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

func ms(t time.Time) int64 { return t.UnixMilli() }

// Each tick fires once, with the controller's fields; the next one fires
// at its minute; a daily schedule and a bystander tenant stay untouched.
func TestSchedulesFireEachTickOnce(t *testing.T) {
	clock := &fakeClock{now: t0.Add(30 * time.Second)}
	g := startScheduling(t, filepath.Join(t.TempDir(), "r.db"), clock)
	reg := g.store.Registry("apps", RegistryConfig{IdleBound: time.Hour})
	id := deploySchedules(t, reg, "alice", "* * * * *")
	daily := deploySchedules(t, reg, "bob", "30 4 * * *")
	bystander := deploy(t, reg, "bob")
	mustCall(t, reg, "bob", bystander, `{"served":1}`)
	if info, err := reg.Get("alice", id); err != nil || fmt.Sprint(info.Handles) != "[fetch scheduled]" {
		t.Fatalf("handles: %+v %v", info, err)
	}
	time.Sleep(200 * time.Millisecond)
	if st := fired(t, reg, "alice", id); st.Tries != 0 {
		t.Fatalf("fired before its tick: %+v", st)
	}
	clock.Add(31 * time.Second) // 00:01:01
	eventually(t, "the first tick", func() bool { return fired(t, reg, "alice", id).Tries == 1 })
	time.Sleep(200 * time.Millisecond)
	st := fired(t, reg, "alice", id)
	if st.Tries != 1 || fmt.Sprint(st.Seen) != fmt.Sprintf("[* * * * *@%d]", ms(t0.Add(time.Minute))) {
		t.Fatalf("after the first tick: %+v", st)
	}
	clock.Add(time.Minute) // 00:02:01
	eventually(t, "the second tick", func() bool { return fired(t, reg, "alice", id).Tries == 2 })
	// The firing is listed after its handler returned: wait for the list.
	eventually(t, "the second tick listed", func() bool {
		info, err := reg.Schedules("alice", id)
		return err == nil && len(info.Firings) == 2
	})
	info, err := reg.Schedules("alice", id)
	if err != nil || len(info.Schedules) != 1 || !info.Schedules[0].Next.Equal(t0.Add(3*time.Minute)) {
		t.Fatalf("schedules: %+v %v", info, err)
	}
	if len(info.Firings) != 2 || info.Firings[0].Outcome != "ok" || info.Firings[0].ScheduledTime != ms(t0.Add(2*time.Minute)) || info.Firings[1].ScheduledTime != ms(t0.Add(time.Minute)) {
		t.Fatalf("firings: %+v", info.Firings)
	}
	if st := fired(t, reg, "bob", daily); st.Tries != 0 {
		t.Fatalf("a daily schedule fired at 00:02: %+v", st)
	}
	mustCall(t, reg, "bob", bystander, `{"served":2}`)
	if _, err := reg.Schedules("bob", id); fault.CodeOf(err) != fault.HandlesClosed {
		t.Fatalf("another tenant read the schedules: %v", err)
	}
}

// A tick's firing that throws is tried again until it settles (three
// tries here); one that called noRetry() is not. A fire-now is one try,
// answered, and never tried again (docs/schedules.md).
func TestScheduledRetriesAndNoRetry(t *testing.T) {
	clock := &fakeClock{now: t0.Add(30 * time.Minute)}
	g := startScheduling(t, filepath.Join(t.TempDir(), "r.db"), clock)
	reg := g.store.Registry("apps", RegistryConfig{IdleBound: time.Hour})
	retried := deploySchedules(t, reg, "alice", "0 * * * *")
	stopped := deploySchedules(t, reg, "alice", "1 * * * *")
	now := deploySchedules(t, reg, "alice", "0 0 1 1 *") // not due in this test
	f, err := reg.FireNow(context.Background(), "alice", now, "")
	if err != nil || f.Outcome != "error" || f.Error != "try 1" || f.Attempt != 1 || f.NoRetry || !f.Now {
		t.Fatalf("fire now: %+v %v", f, err)
	}
	clock.Add(31 * time.Minute) // 01:01: both ticks are due
	// The try is listed after the handler returns: wait for the listing.
	eventually(t, "the third try", func() bool { info, _ := reg.Schedules("alice", retried); return len(info.Firings) == 3 })
	info, _ := reg.Schedules("alice", retried)
	var outcomes []string
	for _, f := range info.Firings {
		outcomes = append(outcomes, fmt.Sprintf("%d %s", f.Attempt, f.Outcome))
	}
	if fmt.Sprint(outcomes) != "[3 ok 2 error 1 error]" || fired(t, reg, "alice", retried).Tries != 3 {
		t.Fatalf("tries: %v", outcomes)
	}
	eventually(t, "the noRetry tick", func() bool { return fired(t, reg, "alice", stopped).Tries == 1 })
	// Well past the retry delays (50 ms here): neither was tried again.
	time.Sleep(300 * time.Millisecond)
	if st := fired(t, reg, "alice", stopped); st.Tries != 1 {
		t.Fatalf("noRetry was tried again: %+v", st)
	}
	if st := fired(t, reg, "alice", now); st.Tries != 1 {
		t.Fatalf("a fire-now was tried again: %+v", st)
	}
	if info, _ := reg.Schedules("alice", now); len(info.Firings) != 1 {
		t.Fatalf("a fire-now's firings: %+v", info.Firings)
	}
	f, err = reg.FireNow(context.Background(), "alice", stopped, "1 * * * *")
	if err != nil || f.Outcome != "error" || !f.NoRetry {
		t.Fatalf("fire now with noRetry: %+v %v", f, err)
	}
	if _, err := reg.FireNow(context.Background(), "alice", stopped, "2 * * * *"); fault.CodeOf(err) != fault.BadRequest {
		t.Fatalf("fire now of a schedule it does not have: %v", err)
	}
}

// A handle has one fire-now in progress at most: the others asked
// meanwhile answer QUOTA_EXCEEDED and run nothing.
func TestFireNowOneAtATime(t *testing.T) {
	clock := &fakeClock{now: t0}
	g := startScheduling(t, filepath.Join(t.TempDir(), "r.db"), clock)
	reg := g.store.Registry("apps", RegistryConfig{IdleBound: time.Hour})
	res, err := reg.Execute(context.Background(), "alice", ExecRequest{Program: program.Program{Code: `async () => { let tries = 0; return {
		fetch() { return Response.json({tries}) },
		async scheduled() { tries++; await new Promise(r => setTimeout(r, 1000)); throw new Error('slow') } } }`}, RetainHandles: true, Timeout: 5 * time.Second, Schedules: []string{"0 0 1 1 *"}})
	if err != nil {
		t.Fatal(err)
	}
	id := res.ExecutionID
	bystander := deploy(t, reg, "bob")
	const n = 8
	errs := make(chan error, n)
	for i := 0; i < n; i++ {
		go func() {
			f, err := reg.FireNow(context.Background(), "alice", id, "")
			if err == nil && f.Outcome != "error" {
				err = fmt.Errorf("outcome %+v", f)
			}
			errs <- err
		}()
	}
	ran, refused := 0, 0
	for i := 0; i < n; i++ {
		switch err := <-errs; fault.CodeOf(err) {
		case fault.QuotaExceeded:
			refused++
		default:
			if err != nil {
				t.Fatal(err)
			}
			ran++
		}
	}
	if ran != 1 || refused != n-1 {
		t.Fatalf("%d concurrent fire-nows: %d ran, %d refused", n, ran, refused)
	}
	if body, err := call(reg, "alice", id, "/"); err != nil || body != `{"tries":1}` {
		t.Fatalf("tries: %s %v", body, err)
	}
	// Once it has answered, the next one runs.
	if f, err := reg.FireNow(context.Background(), "alice", id, ""); err != nil || f.Attempt != 1 {
		t.Fatalf("the next fire-now: %+v %v", f, err)
	}
	mustCall(t, reg, "bob", bystander, `{"served":1}`)
}

// A handle and expression has at most one tick's retries pending: a new
// tick supersedes the retries of the last.
func TestNewTickSupersedesRetries(t *testing.T) {
	clock := &fakeClock{now: t0.Add(30 * time.Second)}
	g := startOn(t, func() (persist.Store, error) { return persist.OpenBolt(filepath.Join(t.TempDir(), "r.db"), 0) }, clock, &eventLog{}, workers.Config{Workers: 1}, func(o *Options) {
		o.ScheduleEvery = 20 * time.Millisecond
		o.ScheduleRetries = []time.Duration{2 * time.Second, 50 * time.Millisecond, 50 * time.Millisecond}
	})
	reg := g.store.Registry("apps", RegistryConfig{IdleBound: time.Hour})
	res, err := reg.Execute(context.Background(), "alice", ExecRequest{Program: program.Program{Code: `async () => ({
		fetch() { return new Response('ok') }, scheduled() { throw new Error('always') } })`}, RetainHandles: true, Timeout: time.Second, Schedules: []string{"* * * * *"}})
	if err != nil {
		t.Fatal(err)
	}
	id := res.ExecutionID
	clock.Add(31 * time.Second) // 00:01:01
	eventually(t, "the first tick's try", func() bool { return len(firingsAt(t, reg, "alice", id)) == 1 })
	clock.Add(time.Minute) // 00:02:01, within the first tick's 2 s wait
	eventually(t, "the second tick's four tries", func() bool { return firingsAt(t, reg, "alice", id)[ms(t0.Add(2*time.Minute))] == 4 })
	time.Sleep(500 * time.Millisecond)
	if got := firingsAt(t, reg, "alice", id); got[ms(t0.Add(time.Minute))] != 1 || len(got) != 2 {
		t.Fatalf("the superseded tick was retried: %v", got)
	}
}

// A bound hit in scheduled() is a strike and is retried; at bound_strikes
// the handle ends.
func TestScheduledBoundHitsStrike(t *testing.T) {
	clock := &fakeClock{now: t0}
	g := startScheduling(t, filepath.Join(t.TempDir(), "r.db"), clock)
	reg := g.store.Registry("apps", RegistryConfig{IdleBound: time.Hour, BoundStrikes: 3})
	res, err := reg.Execute(context.Background(), "alice", ExecRequest{Program: program.Program{Code: `async () => ({
		fetch() { return new Response('ok') }, scheduled() { for (;;) {} } })`}, RetainHandles: true, Timeout: 100 * time.Millisecond, Schedules: []string{"* * * * *"}})
	if err != nil {
		t.Fatal(err)
	}
	f, err := reg.FireNow(context.Background(), "alice", res.ExecutionID, "")
	if err != nil || f.Outcome != "bound" {
		t.Fatalf("a spinning firing: %+v %v", f, err)
	}
	// Fired again, it strikes out (a loaded machine may charge a timeout
	// no strike: docs/architecture.md, Blame; then it fires once more).
	eventually(t, "the handle's end", func() bool {
		_, err := reg.Get("alice", res.ExecutionID)
		if fault.CodeOf(err) == fault.HandlesClosed {
			return true
		}
		reg.FireNow(context.Background(), "alice", res.ExecutionID, "")
		return false
	})
	// The end is published after the record goes.
	eventually(t, "the end's event", func() bool { return len(g.ends.reasons(res.ExecutionID)) > 0 })
	if logs := fmt.Sprint(g.ends.reasons(res.ExecutionID)); logs != "["+ReasonBoundStrikes+"]" {
		t.Fatalf("end events %s", logs)
	}
}

// A restart between ticks neither doubles nor skips one; a tick missed
// while no gateway ran fires once when one is back, if under an hour late;
// older ones are skipped.
func TestSchedulesAcrossRestart(t *testing.T) {
	path := filepath.Join(t.TempDir(), "r.db")
	clock := &fakeClock{now: t0.Add(30 * time.Second)}
	g := startScheduling(t, path, clock)
	reg := g.store.Registry("apps", RegistryConfig{IdleBound: 24 * time.Hour})
	id := deploySchedules(t, reg, "alice", "* * * * *")
	daily := deploySchedules(t, reg, "alice", "0 1 * * *")
	clock.Add(31 * time.Second) // 00:01:01
	eventually(t, "the first tick", func() bool { return fired(t, reg, "alice", id).Tries == 1 })
	g.stop()

	// Back before the next tick: 00:01 is not fired again.
	clock.Add(20 * time.Second) // 00:01:21
	g = startScheduling(t, path, clock)
	reg = g.store.Registry("apps", RegistryConfig{IdleBound: 24 * time.Hour})
	time.Sleep(300 * time.Millisecond)
	if n := firingsAt(t, reg, "alice", id); len(n) != 1 || n[ms(t0.Add(time.Minute))] != 1 {
		t.Fatalf("firings after a restart between ticks: %v", n)
	}
	g.stop()

	// Down across 00:02 and 00:03: back at 00:03:30, 00:03 fires once
	// (00:02 is skipped, the log says so).
	clock.Add(2*time.Minute + 9*time.Second) // 00:03:30
	g = startScheduling(t, path, clock)
	reg = g.store.Registry("apps", RegistryConfig{IdleBound: 24 * time.Hour})
	eventually(t, "the missed tick", func() bool { return firingsAt(t, reg, "alice", id)[ms(t0.Add(3*time.Minute))] == 1 })
	time.Sleep(300 * time.Millisecond)
	if n := firingsAt(t, reg, "alice", id); len(n) != 2 || n[ms(t0.Add(3*time.Minute))] != 1 {
		t.Fatalf("firings after a restart across ticks: %v", n)
	}
	logs, _ := reg.Logs("alice", id)
	if !strings.Contains(fmt.Sprint(logs), "1 ticks missed") {
		t.Fatalf("no note of the skipped tick: %v", logs)
	}
	g.stop()

	// Down for two hours: the daily tick of 01:00, over an hour late, is
	// skipped; the every-minute one fires its newest tick (02:03) once.
	clock.Add(2 * time.Hour) // 02:03:30
	g = startScheduling(t, path, clock)
	reg = g.store.Registry("apps", RegistryConfig{IdleBound: 24 * time.Hour})
	eventually(t, "the newest missed tick", func() bool { return firingsAt(t, reg, "alice", id)[ms(t0.Add(2*time.Hour+3*time.Minute))] == 1 })
	time.Sleep(300 * time.Millisecond)
	if n := firingsAt(t, reg, "alice", id); len(n) != 3 {
		t.Fatalf("firings after two hours down: %v", n)
	}
	if n := firingsAt(t, reg, "alice", daily); len(n) != 0 {
		t.Fatalf("a tick over an hour late fired: %v", n)
	}
	logs, _ = reg.Logs("alice", daily)
	if !strings.Contains(fmt.Sprint(logs), "more than an hour") {
		t.Fatalf("no note of the late tick: %v", logs)
	}
	info, _ := reg.Schedules("alice", daily)
	if !info.Schedules[0].Next.Equal(t0.Add(25 * time.Hour)) {
		t.Fatalf("the daily schedule's next tick: %+v", info.Schedules)
	}
	clock.Add(time.Minute) // 02:04:30
	eventually(t, "the next tick", func() bool { return firingsAt(t, reg, "alice", id)[ms(t0.Add(2*time.Hour+4*time.Minute))] == 1 })
}

// Only current handles fire: a route's kept version is silent, its new
// target and a handle nothing points at fire.
func TestKeptVersionsDoNotFire(t *testing.T) {
	clock := &fakeClock{now: t0.Add(30 * time.Second)}
	g := startScheduling(t, filepath.Join(t.TempDir(), "r.db"), clock)
	reg := g.store.Registry("apps", RegistryConfig{IdleBound: time.Hour})
	old, cur, loose := deploySchedules(t, reg, "alice", "* * * * *"), deploySchedules(t, reg, "alice", "* * * * *"), deploySchedules(t, reg, "alice", "* * * * *")
	if _, err := reg.BindRoute("alice", "shop", old); err != nil {
		t.Fatal(err)
	}
	if _, err := reg.BindRoute("alice", "shop", cur); err != nil {
		t.Fatal(err)
	}
	clock.Add(31 * time.Second)
	eventually(t, "the current handles' ticks", func() bool {
		return fired(t, reg, "alice", cur).Tries == 1 && fired(t, reg, "alice", loose).Tries == 1
	})
	time.Sleep(200 * time.Millisecond)
	if st := fired(t, reg, "alice", old); st.Tries != 0 {
		t.Fatalf("a kept version fired: %+v", st)
	}
	// Nor does it fire now, and it shows no next tick.
	if _, err := reg.FireNow(context.Background(), "alice", old, ""); fault.CodeOf(err) != fault.Conflict {
		t.Fatalf("fire now of a kept version: %v", err)
	}
	if info, err := reg.Schedules("alice", old); err != nil || len(info.Schedules) != 1 || info.Schedules[0].Next != nil || len(info.Firings) != 0 {
		t.Fatalf("a kept version's schedules: %+v %v", info, err)
	}
	if info, err := reg.Schedules("alice", cur); err != nil || info.Schedules[0].Next == nil {
		t.Fatalf("the current version's schedules: %+v %v", info, err)
	}
	if st := fired(t, reg, "alice", old); st.Tries != 0 {
		t.Fatalf("a kept version fired: %+v", st)
	}
	// Rolled back, the old version is current again and fires.
	if _, err := reg.Rollback("alice", "shop", ""); err != nil {
		t.Fatal(err)
	}
	clock.Add(time.Minute)
	eventually(t, "the rolled back version's tick", func() bool { return fired(t, reg, "alice", old).Tries == 1 })
	time.Sleep(200 * time.Millisecond)
	if st := fired(t, reg, "alice", cur); st.Tries != 1 {
		t.Fatalf("the replaced version fired after the rollback: %+v", st)
	}
}

// Bad schedules, a program without scheduled(), a computation, and
// schedules without retainHandles are refused, and keep nothing.
func TestBadSchedulesRefused(t *testing.T) {
	g := startScheduling(t, filepath.Join(t.TempDir(), "r.db"), &fakeClock{now: t0})
	reg := g.store.Registry("apps", RegistryConfig{IdleBound: time.Hour})
	exec := func(code string, retain bool, schedules ...string) error {
		_, err := reg.Execute(context.Background(), "alice", ExecRequest{Program: program.Program{Code: code}, RetainHandles: retain, Timeout: time.Second, Schedules: schedules})
		return err
	}
	for _, c := range []struct {
		code      string
		retain    bool
		schedules []string
		want      string
	}{
		{scheduledProgram, true, []string{"61 * * * *"}, "not a valid cron"},
		{scheduledProgram, true, []string{"* * * *"}, "five fields"},
		{scheduledProgram, true, []string{"*/5 * * * * *"}, "five fields"},
		{scheduledProgram, true, []string{"@hourly"}, "five fields"},
		{scheduledProgram, true, []string{"* * * * *", "1 * * * *", "2 * * * *", "3 * * * *", "4 * * * *", "5 * * * *"}, "at most 5"},
		{scheduledProgram, true, []string{"* * * * *", "* * * * *"}, "twice"},
		{scheduledProgram, false, []string{"* * * * *"}, "need retainHandles"},
		{`async () => (req) => new Response('x')`, true, []string{"* * * * *"}, "scheduled(controller, env, ctx)"},
		{`async () => ({ fetch() { return new Response('x') } })`, true, []string{"* * * * *"}, "scheduled(controller, env, ctx)"},
		{`async () => 42`, true, []string{"* * * * *"}, "scheduled(controller, env, ctx)"},
	} {
		err := exec(c.code, c.retain, c.schedules...)
		if fault.CodeOf(err) != fault.BadRequest || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%v: %v, want BAD_REQUEST with %q", c.schedules, err, c.want)
		}
	}
	if n := len(reg.List("alice")); n != 0 {
		t.Fatalf("refused deploys kept %d handles", n)
	}
}

// In a cluster only the space's owner fires, and a gateway that lost the
// space to another (still running, its copy stale) is fenced off: each
// tick fires once, on one gateway. A space whose owner is gone is owned by
// the elected gateway's sweep, so its ticks go on.
func TestSchedulesInACluster(t *testing.T) {
	srv := etcdtest.Start(t)
	open := func() (persist.Store, error) {
		return persist.OpenEtcd(context.Background(), persist.EtcdConfig{Endpoints: []string{srv.Endpoint}, Prefix: "/sched"})
	}
	clock := &fakeClock{now: t0.Add(30 * time.Second)}
	clustered := func(o *Options) {
		o.Own = func(context.Context, string) error { return nil }
		o.ScheduleEvery = 20 * time.Millisecond
		o.ScheduleRetries = []time.Duration{50 * time.Millisecond, 50 * time.Millisecond, 50 * time.Millisecond}
	}
	cfg := RegistryConfig{IdleBound: time.Hour}
	a := startOn(t, open, clock, &eventLog{}, workers.Config{Workers: 1}, clustered)
	regA := a.store.Registry("apps", cfg)
	if err := regA.Own(context.Background(), "alice"); err != nil {
		t.Fatal(err)
	}
	id := deploySchedules(t, regA, "alice", "* * * * *")
	clock.Add(31 * time.Second) // 00:01:01
	eventually(t, "the owner's first tick", func() bool { return fired(t, regA, "alice", id).Tries == 1 })

	b := startOn(t, open, clock, &eventLog{}, workers.Config{Workers: 1}, clustered)
	regB := b.store.Registry("apps", cfg)
	time.Sleep(200 * time.Millisecond)
	// B takes the space (as when A's lease is lost), while A still runs
	// and still believes it owns it.
	if err := b.store.SweepUnowned(context.Background(), func(context.Context, string) (bool, error) { return false, nil }); err != nil {
		t.Fatal(err)
	}
	// The cluster's Own claims the space's fence as it owns it
	// (caddymodule/runtime.go); this test's Own is a stand-in, so B claims
	// it here, which fences A off.
	if _, err := b.store.w.Fence(context.Background(), persist.Space("apps", "alice")); err != nil {
		t.Fatal(err)
	}
	clock.Add(time.Minute) // 00:02:01
	eventually(t, "the new owner's tick", func() bool { return fired(t, regB, "alice", id).Tries == 1 })
	time.Sleep(300 * time.Millisecond)
	if st := fired(t, regA, "alice", id); st.Tries != 1 {
		t.Fatalf("the old owner fired again: %+v", st)
	}
	if st := fired(t, regB, "alice", id); st.Tries != 1 || fmt.Sprint(st.Seen) != fmt.Sprintf("[* * * * *@%d]", ms(t0.Add(2*time.Minute))) {
		t.Fatalf("the new owner fired: %+v", st)
	}
}

// A parked deployment is rebuilt for its tick, and the tick fires on the
// fresh isolate.
func TestParkedDeploymentRebuiltForItsTick(t *testing.T) {
	clock := &fakeClock{now: t0.Add(30 * time.Second)}
	g := startScheduling(t, filepath.Join(t.TempDir(), "r.db"), clock)
	reg := g.store.Registry("apps", RegistryConfig{IdleBound: 2 * time.Minute})
	id := deploySchedules(t, reg, "alice", "59 * * * *")
	if _, err := reg.BindRoute("alice", "shop", id); err != nil {
		t.Fatal(err)
	}
	clock.Add(50 * time.Minute) // 00:50:30, idle past its bound
	g.store.SweepIdle()
	if g.pool.Holds(id) {
		t.Fatal("the idle deployment was not parked")
	}
	clock.Add(9 * time.Minute) // 00:59:30
	eventually(t, "the parked deployment's tick", func() bool { return len(firingsAt(t, reg, "alice", id)) == 1 })
	info, _ := reg.Schedules("alice", id)
	if f := info.Firings[0]; f.Outcome != "ok" || f.ScheduledTime != ms(t0.Add(59*time.Minute)) {
		t.Fatalf("the firing: %+v", f)
	}
	logs, _ := reg.Logs("alice", id)
	if !strings.Contains(fmt.Sprint(logs), "Rebuilt") {
		t.Fatalf("no rebuild in the log: %v", logs)
	}
	if st := fired(t, reg, "alice", id); st.Tries != 1 {
		t.Fatalf("after the tick: %+v", st)
	}
}

// A gateway that lost a space keeps its firings waiting while the new
// owner lists later ones; once it owns the space again, its flush adds
// them where they started, not after the newer ones, so the listing's
// newest first still holds, and the oldest go past keptFirings.
func TestWaitingFiringsAreMergedInTheOrderTheyStarted(t *testing.T) {
	at := func(s int) Firing {
		return Firing{Cron: "* * * * *", StartedAt: time.Unix(1_800_000_000+int64(s), 0).UTC(), Outcome: "ok", Attempt: 1}
	}
	stored := []Firing{at(1), at(5), at(6)} // the new owner's, at 5 and 6
	waiting := []Firing{at(2), at(3)}       // this gateway's, while it had lost the space
	got := mergeFirings(stored, waiting)
	for i, want := range []int{1, 2, 3, 5, 6} {
		if !got[i].StartedAt.Equal(at(want).StartedAt) {
			t.Fatalf("merged list %v, want started at 1, 2, 3, 5, 6", got)
		}
	}
	var full []Firing
	for i := range keptFirings {
		full = append(full, at(10+i))
	}
	got = mergeFirings(full, []Firing{at(2), at(10 + keptFirings)})
	if len(got) != keptFirings || !got[0].StartedAt.Equal(at(11).StartedAt) || !got[len(got)-1].StartedAt.Equal(at(10+keptFirings).StartedAt) {
		t.Fatalf("a full list merged: %d kept, from %v to %v", len(got), got[0].StartedAt, got[len(got)-1].StartedAt)
	}
}
