package handles

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/retainer-gw/retainer/fault"
	"github.com/retainer-gw/retainer/internal/etcdtest"
	"github.com/retainer-gw/retainer/internal/waitfor"
	"github.com/retainer-gw/retainer/program"
	persist "github.com/retainer-gw/retainer/store"
	"github.com/retainer-gw/retainer/workers"
)

// lostAnswers applies a commit and then, while lose is set, answers an
// error, as an etcd that died with the transaction applied does (its
// answer lost).
type lostAnswers struct {
	persist.Store
	lose atomic.Bool
}

func (l *lostAnswers) Commit(ctx context.Context, txn persist.Txn) error {
	err := l.Store.Commit(ctx, txn)
	if err == nil && l.lose.Load() {
		return errors.New("the connection to etcd was lost")
	}
	return err
}

// A registry write whose answer was lost (etcd died with it in flight,
// having applied it) is answered 503 OVERLOADED, retryable, and the
// space is loaded again from the store before it is served next: the
// gateway then serves what etcd holds (the route bound, the other
// unbound), not what its memory held before the write.
func TestLostAnswerReloadsTheSpace(t *testing.T) {
	srv := etcdtest.Start(t)
	var lost *lostAnswers
	open := func() (persist.Store, error) {
		e, err := persist.OpenEtcd(context.Background(), persist.EtcdConfig{Endpoints: []string{srv.Endpoint}, Prefix: "/lost"})
		lost = &lostAnswers{Store: e}
		return lost, err
	}
	clock := &fakeClock{now: time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)}
	clustered := func(o *Options) {
		o.Own = func(context.Context, string) error { return nil }
		o.WriteBound = 2 * time.Second
	}
	g := startOn(t, open, clock, &eventLog{}, workers.Config{Workers: 1}, clustered)
	reg := g.store.Registry("apps", RegistryConfig{IdleBound: time.Hour})
	ctx := context.Background()
	if err := reg.Own(ctx, "alice"); err != nil {
		t.Fatal(err)
	}
	res, err := reg.Execute(ctx, "alice", ExecRequest{Program: program.Program{Code: counterProgram}, RetainHandles: true, Timeout: 2 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	id := res.ExecutionID
	if _, err := reg.BindRoute("alice", "old", id); err != nil {
		t.Fatal(err)
	}

	lost.lose.Store(true)
	if _, err := reg.BindRoute("alice", "shop", id); fault.CodeOf(err) != fault.Overloaded {
		t.Fatalf("a bind whose answer was lost: %v, want OVERLOADED", err)
	}
	if err := reg.UnbindRoute("alice", "old"); fault.CodeOf(err) != fault.Overloaded && err != nil {
		t.Fatalf("an unbind: %v", err)
	}
	lost.lose.Store(false)

	for _, name := range []string{"shop", "old"} {
		v, err := g.backing.Get(ctx, tableRoutes, key("apps", name))
		if err != nil {
			t.Fatal(err)
		}
		t.Logf("route %s in etcd: %q", name, v)
	}
	if err := reg.Locate(ctx, "shop", ResolveRoutes); err != nil {
		t.Fatalf("locating the route etcd holds: %v", err)
	}
	routes := reg.Routes("alice")
	if len(routes) != 1 || routes[0].Name != "shop" {
		t.Fatalf("alice's routes after the lost answers: %+v, want shop alone (as etcd holds them)", routes)
	}
	out, err := reg.Serve(ctx, "shop", ResolveRoutes, program.WireRequest{Method: "GET", URL: "http://shop.apps.localhost/"})
	if err != nil || out.Status != 200 {
		t.Fatalf("serving the route etcd holds: %d %v", out.Status, err)
	}
	if err := reg.Locate(ctx, "old", ResolveRoutes); fault.CodeOf(err) != fault.NotFound {
		t.Fatalf("the route etcd no longer holds: %v", err)
	}
}

// stallable holds every commit while stalled, as a SIGSTOPped etcd holds
// the transactions sent to it (and applies them once it resumes).
type stallable struct {
	persist.Store
	gate sync.RWMutex
	held atomic.Int32 // commits sent and not yet answered
}

func (s *stallable) Commit(ctx context.Context, txn persist.Txn) error {
	s.held.Add(1)
	defer s.held.Add(-1)
	s.gate.RLock()
	defer s.gate.RUnlock()
	return s.Store.Commit(ctx, txn)
}

// stallableGateway is a gateway on etcd (under prefix) whose commits st
// holds while stalled, with registry writes bounded at 300 ms as in a
// cluster, alice's space owned, and deploy deploying her counter.
func stallableGateway(t *testing.T, prefix string) (*gateway, *stallable, *Registry, func() (string, error)) {
	t.Helper()
	srv := etcdtest.Start(t)
	var st *stallable
	open := func() (persist.Store, error) {
		e, err := persist.OpenEtcd(context.Background(), persist.EtcdConfig{Endpoints: []string{srv.Endpoint}, Prefix: prefix})
		st = &stallable{Store: e}
		return st, err
	}
	clock := &fakeClock{now: time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)}
	clustered := func(o *Options) {
		o.Own = func(context.Context, string) error { return nil }
		o.WriteBound = 300 * time.Millisecond
	}
	g := startOn(t, open, clock, &eventLog{}, workers.Config{Workers: 1}, clustered)
	reg := g.store.Registry("apps", RegistryConfig{IdleBound: time.Hour})
	if err := reg.Own(context.Background(), "alice"); err != nil {
		t.Fatal(err)
	}
	deploy := func() (string, error) {
		res, err := reg.Execute(context.Background(), "alice", ExecRequest{Program: program.Program{Code: counterProgram}, RetainHandles: true, Timeout: 2 * time.Second})
		return res.ExecutionID, err
	}
	return g, st, reg, deploy
}

// Registry writes while the store holds every commit: each is answered
// OVERLOADED within the bound; once the store answers, a bind that was
// sent lands before the next bind of its name (which wins), a bind given
// up on before it was sent never lands, and a deploy given up on is
// taken back, from the store and from memory.
func TestWritesGivenUpOn(t *testing.T) {
	g, st, reg, deploy := stallableGateway(t, "/given")
	ctx := context.Background()
	one, err := deploy()
	if err != nil {
		t.Fatal(err)
	}
	two, err := deploy()
	if err != nil {
		t.Fatal(err)
	}

	st.gate.Lock()
	stalled := true
	defer func() {
		if stalled {
			st.gate.Unlock()
		}
	}()
	// At once: the bind of b is sent (and held); c waits for the route
	// writers' lock behind it and is given up on before it was sent; the
	// deploy's record is sent and held. Then a write is refused at once.
	var wg sync.WaitGroup
	answers := make([]error, 3)
	for i, write := range []func() error{
		func() error { _, err := reg.BindRoute("alice", "b", one); return err },
		func() error { _, err := reg.BindRoute("alice", "c", one); return err },
		func() error { _, err := deploy(); return err },
	} {
		wg.Add(1)
		go func() { defer wg.Done(); answers[i] = write() }()
		time.Sleep(30 * time.Millisecond)
	}
	wg.Wait()
	for i, err := range answers {
		if fault.CodeOf(err) != fault.Overloaded {
			t.Errorf("write %d while the store stalls: %v", i, err)
		}
	}
	if _, err := reg.BindRoute("alice", "d", one); fault.CodeOf(err) != fault.Overloaded || !errors.Is(err, errOverdue) {
		t.Errorf("a bind once a commit is overdue: %v", err)
	}
	st.gate.Unlock()
	stalled = false

	// The newer bind, retried while the commits held are answered.
	deadline := time.Now().Add(5 * time.Second)
	for {
		_, err := reg.BindRoute("alice", "b", two)
		if err == nil {
			break
		}
		if fault.CodeOf(err) != fault.Overloaded || time.Now().After(deadline) {
			t.Fatalf("the newer bind once the store answers: %v", err)
		}
		time.Sleep(10 * time.Millisecond)
	}
	settled := false
	for {
		b, _ := g.backing.Get(ctx, tableRoutes, key("apps", "b"))
		c, _ := g.backing.Get(ctx, tableRoutes, key("apps", "c"))
		var stored []string
		g.backing.Scan(ctx, tableHandles, persist.Range{}, func(k, _ []byte) bool {
			stored = append(stored, string(k))
			return true
		})
		listed := reg.List("alice")
		routes := reg.Routes("alice")
		if string(b) == two && c == nil && len(stored) == 2 && len(listed) == 2 && len(routes) == 1 && routes[0].ExecutionID == two {
			if settled {
				break
			}
			// Whatever still waited for the store has had its turn by
			// now: look again.
			time.Sleep(300 * time.Millisecond)
			settled = true
			continue
		}
		if time.Now().After(deadline) {
			t.Fatalf("after the stall: route b %q (want %s), c %q (want none), %d handles stored and %d listed (want 2), routes %+v", b, two, c, len(stored), len(listed), routes)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// The flusher of invocation counts commits under the lock that a route's
// bind takes too (metaMu, TestFlushesNeverUndoABind). While the store
// holds that commit, a bind waits for the lock, is given up on before it
// was sent, and leaves no commit of its own under way: the next write must
// still be refused at once, because the flush's commit has waited past the
// bound (it counts as a registry commit under way), not wait a bound
// again and land when the store resumes. TestClusterRegistryWritesWhileEtcdPaused
// saw exactly that once: bob's second bind, at a gateway whose only
// commit held by the paused etcd was the flush's, answered 200 once etcd
// resumed instead of 503 at once.
func TestWritesRefusedBehindAStalledFlush(t *testing.T) {
	srv := etcdtest.Start(t)
	var st *stallable
	open := func() (persist.Store, error) {
		e, err := persist.OpenEtcd(context.Background(), persist.EtcdConfig{Endpoints: []string{srv.Endpoint}, Prefix: "/flush"})
		st = &stallable{Store: e}
		return st, err
	}
	clock := &fakeClock{now: time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)}
	const bound = 300 * time.Millisecond
	clustered := func(o *Options) {
		o.Own = func(context.Context, string) error { return nil }
		o.WriteBound = bound
		o.FlushEvery = 20 * time.Millisecond
	}
	g := startOn(t, open, clock, &eventLog{}, workers.Config{Workers: 1}, clustered)
	reg := g.store.Registry("apps", RegistryConfig{IdleBound: time.Hour})
	ctx := context.Background()
	if err := reg.Own(ctx, "alice"); err != nil {
		t.Fatal(err)
	}
	res, err := reg.Execute(ctx, "alice", ExecRequest{Program: program.Program{Code: counterProgram}, RetainHandles: true, Timeout: 2 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	id := res.ExecutionID
	if _, err := reg.BindRoute("alice", "shop", id); err != nil {
		t.Fatal(err)
	}
	visit := func() {
		t.Helper()
		if out, err := reg.Serve(ctx, "shop", ResolveRoutes, program.WireRequest{Method: "GET", URL: "http://shop.apps.localhost/"}); err != nil || out.Status != 200 {
			t.Fatalf("a visit: %d %v", out.Status, err)
		}
	}
	visit()
	// Wait for the visit's count to be flushed, so that no commit is
	// under way when the store stalls.
	deadline := time.Now().Add(5 * time.Second)
	for {
		g.store.mu.Lock()
		dirty := len(g.store.dirty)
		g.store.mu.Unlock()
		if dirty == 0 && st.held.Load() == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the visit's count was not flushed")
		}
		time.Sleep(10 * time.Millisecond)
	}

	st.gate.Lock()
	stalled := true
	defer func() {
		if stalled {
			st.gate.Unlock()
		}
	}()
	// A visit makes the record dirty; the flusher's commit of its count
	// is then held by the store, and holds metaMu.
	visit()
	for st.held.Load() == 0 {
		if time.Now().After(deadline) {
			t.Fatal("the flusher sent no commit")
		}
		time.Sleep(10 * time.Millisecond)
	}
	// Given up on while it waited for the flusher's lock: never sent.
	if _, err := reg.BindRoute("alice", "first", id); fault.CodeOf(err) != fault.Overloaded {
		t.Fatalf("a bind behind the flush held by the store: %v", err)
	}
	// By now the flush's commit has waited past the bound: refused at once.
	if _, err := reg.BindRoute("alice", "second", id); fault.CodeOf(err) != fault.Overloaded || !errors.Is(err, errOverdue) {
		t.Errorf("a bind once the flush's commit is overdue: %v, want OVERLOADED refused at once (%v)", err, errOverdue)
	}
	st.gate.Unlock()
	stalled = false

	// Once the store answers, writes go through, and neither bind given
	// up on landed.
	for {
		_, err := reg.BindRoute("alice", "third", id)
		if err == nil {
			break
		}
		if fault.CodeOf(err) != fault.Overloaded || time.Now().After(deadline.Add(5*time.Second)) {
			t.Fatalf("a bind once the store answers: %v", err)
		}
		time.Sleep(10 * time.Millisecond)
	}
	for _, name := range []string{"first", "second"} {
		if v, err := g.backing.Get(ctx, tableRoutes, key("apps", name)); err != nil || v != nil {
			t.Errorf("route %s, given up on before it was sent, in the store: %q %v", name, v, err)
		}
	}
	routes := reg.Routes("alice")
	if len(routes) != 2 {
		t.Errorf("alice's routes: %+v, want shop and third", routes)
	}
}

// rejoining holds commits while stalled (stallable) and, while refuse is
// set, refuses each new fenced one as etcd refuses a fence that went with
// a lost lease: a gateway paused past its lease whose etcd resumed.
type rejoining struct {
	stallable
	refuse  atomic.Bool
	refused atomic.Int64 // fenced commits refused
}

func (r *rejoining) Commit(ctx context.Context, txn persist.Txn) error {
	if r.refuse.Load() && len(txn.Fences) > 0 {
		r.refused.Add(1)
		return persist.ErrFenced
	}
	return r.stallable.Commit(ctx, txn)
}

// A deploy answered 503 whose record etcd applied once it resumed, at a
// gateway that lost its lease meanwhile: the take-back is refused (its
// fence went with the lease), the gateway disowns its spaces and rejoins.
// The take-back is tried again until it lands, and owning the space again
// (which reloads it from the store) never brings the deploy back. Before,
// the one refused take-back left the record in etcd, and the reload after
// the rejoin served it (the red team's run 9: rt3-199 answered 503,
// listed and served afterwards). A gateway that knows nothing of the
// give-up skips the record too: it was marked in the store.
func TestDeployGivenUpOnIsTakenBackAcrossARejoin(t *testing.T) {
	srv := etcdtest.Start(t)
	var st *rejoining
	open := func() (persist.Store, error) {
		e, err := persist.OpenEtcd(context.Background(), persist.EtcdConfig{Endpoints: []string{srv.Endpoint}, Prefix: "/rejoin"})
		st = &rejoining{stallable: stallable{Store: e}}
		return st, err
	}
	var lost atomic.Bool
	clock := &fakeClock{now: time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)}
	clustered := func(o *Options) {
		o.Own = func(context.Context, string) error {
			if lost.Load() {
				return errors.New("this gateway is rejoining its cluster")
			}
			return nil
		}
		o.WriteBound = 300 * time.Millisecond
	}
	g := startOn(t, open, clock, &eventLog{}, workers.Config{Workers: 1}, clustered)
	reg := g.store.Registry("apps", RegistryConfig{IdleBound: time.Hour})
	ctx := context.Background()
	if err := reg.Own(ctx, "alice"); err != nil {
		t.Fatal(err)
	}
	deploy := func() (string, error) {
		res, err := reg.Execute(ctx, "alice", ExecRequest{Program: program.Program{Code: counterProgram}, RetainHandles: true, Timeout: 2 * time.Second})
		return res.ExecutionID, err
	}
	one, err := deploy()
	if err != nil {
		t.Fatal(err)
	}
	stored := func() []string {
		var ids []string
		g.backing.Scan(ctx, tableHandles, persist.Range{}, func(k, _ []byte) bool {
			_, id, _ := splitKey(k)
			ids = append(ids, id)
			return true
		})
		return ids
	}
	listed := func() []string {
		var ids []string
		for _, h := range reg.List("alice") {
			ids = append(ids, h.ExecutionID)
		}
		return ids
	}

	st.gate.Lock()
	if _, err := deploy(); fault.CodeOf(err) != fault.Overloaded {
		st.gate.Unlock()
		t.Fatalf("a deploy while the store stalls: %v, want OVERLOADED", err)
	}
	// The lease is lost meanwhile: the fence refused, the spaces disowned.
	st.refuse.Store(true)
	lost.Store(true)
	g.store.Disowned()
	st.gate.Unlock()
	waitfor.Until(t, 5*time.Second, "the held deploy's record applied", func() bool { return len(stored()) == 2 })
	// The take-back refused (its retries, while the space is not owned,
	// only look whether the record is still stored).
	waitfor.Until(t, 5*time.Second, "the take-back refused", func() bool { return st.refused.Load() >= 1 })
	if ids := listed(); len(ids) != 1 || ids[0] != one {
		t.Fatalf("listed while the take-back is refused: %v, want %s alone", ids, one)
	}

	marks := func() int {
		n := 0
		g.backing.Scan(ctx, tableTakeBacks, persist.Range{}, func(_, _ []byte) bool {
			n++
			return true
		})
		return n
	}
	if n := marks(); n != 1 {
		t.Fatalf("%d take-back marks in the store, want the deploy given up on marked", n)
	}
	// Another gateway knows nothing of the give-up (this one's memory of
	// it cleared): owning the space, while the take-back is still
	// refused, it loads the space from the store and must skip the
	// marked record.
	g.store.takeBacks.mu.Lock()
	g.store.takeBacks.pending = nil
	g.store.takeBacks.mu.Unlock()
	lost.Store(false)
	if err := reg.Own(ctx, "alice"); err != nil {
		t.Fatal(err)
	}
	if ids := listed(); len(ids) != 1 || ids[0] != one {
		t.Fatalf("listed by a gateway that loaded the space knowing nothing of the give-up: %v, want %s alone", ids, one)
	}

	// The store takes writes again: the take-back lands.
	st.refuse.Store(false)
	if err := reg.Own(ctx, "alice"); err != nil {
		t.Fatal(err)
	}
	if !waitfor.Within(10*time.Second, func() bool {
		if ids := listed(); len(ids) != 1 || ids[0] != one {
			t.Fatalf("listed after the rejoin: %v, want %s alone (a deploy answered 503 appeared)", ids, one)
		}
		ids := stored()
		return len(ids) == 1 && ids[0] == one && marks() == 0
	}) {
		t.Fatalf("the deploy answered 503 is still stored: %v (%d marks)", stored(), marks())
	}
	// Owned again from the store: still one handle.
	g.store.Disowned()
	if err := reg.Own(ctx, "alice"); err != nil {
		t.Fatal(err)
	}
	if ids := listed(); len(ids) != 1 || ids[0] != one {
		t.Fatalf("listed after loading the space again: %v, want %s alone", ids, one)
	}
}

// A deploy answered 503 while the store holds its record is neither
// listed nor served from the moment it is answered, though the store has
// not answered yet (etcd paused up to a lease): memory no longer waits for
// the store to drop it (red team, seventh session: listed and served 200
// for as long as etcd stayed paused).
func TestADeployGivenUpOnIsGoneAtOnce(t *testing.T) {
	g, st, reg, deploy := stallableGateway(t, "/gone")
	ctx := context.Background()
	kept, err := deploy()
	if err != nil {
		t.Fatal(err)
	}
	mustCall(t, reg, "alice", kept, `{"served":1}`)

	st.gate.Lock()
	if _, err := deploy(); fault.CodeOf(err) != fault.Overloaded || !errors.Is(err, errWriteAbandoned) {
		st.gate.Unlock()
		t.Fatalf("a deploy while the store holds its record: %v, want the 503 of a write given up on after it was sent", err)
	}
	listed := reg.List("alice")
	var extra []string
	g.store.mu.Lock()
	for id := range g.store.records {
		if id != kept {
			extra = append(extra, id)
		}
	}
	g.store.mu.Unlock()
	held := false
	for _, id := range extra {
		held = held || g.pool.Holds(id)
	}
	st.gate.Unlock()
	if len(listed) != 1 || len(extra) != 0 || held {
		t.Errorf("while the store still held it, the deploy answered 503 was listed (%d handles listed, want 1), kept in memory (%v) or its isolate held (%v)", len(listed), extra, held)
	}
	// Once the store answers, it is taken back there too; the kept
	// handle serves on.
	waitfor.Until(t, 5*time.Second, "the given-up deploy taken back from the store", func() bool {
		n := 0
		g.backing.Scan(ctx, tableHandles, persist.Range{}, func(k, _ []byte) bool { n++; return true })
		return n == 1
	})
	mustCall(t, reg, "alice", kept, `{"served":2}`)
}

// answeredWithin answers f's outcome, failing t if f has not answered
// within a generous deadline: the tests of writes while etcd stalls ask
// that a call not wait for etcd, whatever its answer.
func answeredWithin[T any](t *testing.T, what string, f func() (T, error)) (T, error) {
	t.Helper()
	type answer struct {
		out T
		err error
	}
	done := make(chan answer, 1)
	go func() {
		out, err := f()
		done <- answer{out, err}
	}()
	select {
	case a := <-done:
		return a.out, a.err
	case <-time.After(10 * time.Second):
		t.Fatalf("%s: no answer within 10 s", what)
		var none T
		return none, nil
	}
}
