package workers

import (
	"context"
	"os"
	"strconv"
	"sync"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/retainer-gw/retainer/budgets"
	"github.com/retainer-gw/retainer/internal/waitfor"
	"github.com/retainer-gw/retainer/program"
	"github.com/retainer-gw/retainer/workers/wire"
)

// threadCPUs is the affinity of every thread of process pid, by thread.
func threadCPUs(t *testing.T, pid int) map[int][]int {
	t.Helper()
	entries, err := os.ReadDir("/proc/" + strconv.Itoa(pid) + "/task")
	if err != nil {
		t.Fatal(err)
	}
	out := map[int][]int{}
	for _, e := range entries {
		tid, _ := strconv.Atoi(e.Name())
		var set unix.CPUSet
		if err := unix.SchedGetaffinity(tid, &set); err != nil {
			continue // the thread ended
		}
		var cpus []int
		for i := 0; i < len(set)*64; i++ {
			if set.IsSet(i) {
				cpus = append(cpus, i)
			}
		}
		out[tid] = cpus
	}
	return out
}

// onOneCPU is the CPU every thread of pid runs on, or -1 when a thread may
// run on several or they differ.
func onOneCPU(t *testing.T, pid int) int {
	t.Helper()
	cpu := -1
	for tid, cpus := range threadCPUs(t, pid) {
		if len(cpus) != 1 || (cpu >= 0 && cpus[0] != cpu) {
			t.Logf("worker %d thread %d may run on %v", pid, tid, cpus)
			return -1
		}
		cpu = cpus[0]
	}
	return cpu
}

func allowedCPUs(t *testing.T) []int {
	t.Helper()
	return newCPUPlacement(CPUsPinned).cpus
}

// Every thread of a pinned worker runs on its one CPU, the workers go to
// different CPUs while there are enough, and no thread of the gateway is
// narrowed by the forks.
func TestPinnedWorkersRunOnOneCPUEach(t *testing.T) {
	cpus := allowedCPUs(t)
	before := threadCPUs(t, os.Getpid())
	pool := startPool(t, Config{Workers: 2, CPUs: CPUsPinned})
	if out, err := pool.Run(context.Background(), job("async () => 40 + 2")); err != nil || string(out.Result) != "42" {
		t.Fatalf("run: %v %s", err, out.Result)
	}
	seen := map[int]bool{}
	for _, s := range pool.Status() {
		got := onOneCPU(t, s.PID)
		if got < 0 || got != s.CPU {
			t.Fatalf("worker %d: threads on CPU %d, the pool says %d", s.Index, got, s.CPU)
		}
		seen[got] = true
	}
	if want := min(2, len(cpus)); len(seen) != want {
		t.Errorf("2 workers on %d CPUs (%v allowed), want %d", len(seen), cpus, want)
	}
	for tid, set := range threadCPUs(t, os.Getpid()) {
		if old, ok := before[tid]; ok && len(set) != len(old) {
			t.Errorf("gateway thread %d: CPUs %v after starting workers, %v before", tid, set, old)
		}
		if len(set) != len(cpus) {
			t.Errorf("gateway thread %d runs on %v, the process may use %v", tid, set, cpus)
		}
	}

	// Shared again (a reload): every CPU back.
	pool.SetCPUs(CPUsShared)
	for _, s := range pool.Status() {
		for tid, set := range threadCPUs(t, s.PID) {
			if len(set) != len(cpus) {
				t.Errorf("worker %d thread %d on %v after unpinning", s.Index, tid, set)
			}
		}
		if s.CPU != -1 {
			t.Errorf("worker %d still placed on CPU %d", s.Index, s.CPU)
		}
	}
}

// Shared, nothing is narrowed.
func TestUnpinnedWorkersMayUseEveryCPU(t *testing.T) {
	cpus := allowedCPUs(t)
	pool := startPool(t, Config{Workers: 1})
	s := pool.Status()[0]
	for tid, set := range threadCPUs(t, s.PID) {
		if len(set) != len(cpus) {
			t.Errorf("worker thread %d on %v, want %v", tid, set, cpus)
		}
	}
	if s.CPU != -1 {
		t.Errorf("unpinned worker reported on CPU %d", s.CPU)
	}
}

// Two busy workers pinned to one CPU while another is idle: the balance
// loop moves one of them.
func TestBusyPinnedWorkersAreMovedApart(t *testing.T) {
	cpus := allowedCPUs(t)
	if len(cpus) < 2 {
		t.Skipf("one CPU allowed (%v): nothing to move to", cpus)
	}
	pool := startPool(t, Config{Workers: 2, CPUs: CPUsPinned, Engine: wire.EngineConfig{Limits: budgets.Limits{Timeout: 90 * time.Second}}})
	// Both onto the first CPU, as two tenants' workers placed there would be.
	var first unix.CPUSet
	first.Set(cpus[0])
	pool.mu.Lock()
	workers := append([]*process(nil), pool.workers...)
	pool.mu.Unlock()
	pool.cpus.mu.Lock()
	for _, p := range workers {
		pinThreads(p.pid, &first)
		pool.cpus.of[p] = cpus[0]
	}
	pool.cpus.mu.Unlock()

	// On a loaded machine (go test runs packages in parallel) two busy
	// workers sharing a CPU may get a tenth of it between them: the gain
	// of a move is then under balanceMargin, and the balance rightly
	// leaves them. The margin is lowered so that any measured load counts.
	pool.cpus.mu.Lock()
	pool.cpus.margin = 0.01
	pool.cpus.mu.Unlock()

	// Two busy runs at once, one in each worker: the second starts once
	// the first is in flight, so the pool sends it to the other worker
	// (the least loaded). They spin until the test ends (ctx).
	busy := program.Job{Program: program.Program{Code: "async () => { const end = Date.now() + 60000; let n = 0; while (Date.now() < end) n++; return n > 0 }"}, Timeout: 90 * time.Second}
	var wg sync.WaitGroup
	ctx, cancel := context.WithCancel(context.Background())
	defer func() { cancel(); wg.Wait() }()
	inflight := func() (n []int) {
		for _, p := range workers {
			_, in := p.load()
			n = append(n, in)
		}
		return n
	}
	for i := 0; i < 2; i++ {
		wg.Add(1)
		go func() { defer wg.Done(); pool.Run(ctx, busy) }()
		waitfor.Until(t, 30*time.Second, "busy run "+strconv.Itoa(i+1)+" in flight", func() bool {
			n := inflight()
			return n[0]+n[1] == i+1
		})
	}
	if n := inflight(); n[0] != 1 || n[1] != 1 {
		t.Fatalf("runs in flight by worker %v, want one in each", n)
	}
	var st []WorkerStatus
	waitfor.Until(t, 30*time.Second, "two busy workers moved apart", func() bool {
		st = pool.Status()
		return st[0].CPU != st[1].CPU
	})
	for _, s := range st {
		if got := onOneCPU(t, s.PID); got != s.CPU {
			t.Fatalf("worker %d placed on CPU %d, its threads on %d", s.Index, s.CPU, got)
		}
	}
}

func TestPlanMove(t *testing.T) {
	cpus := []int{0, 1}
	for _, c := range []struct {
		name    string
		workers []placed
		index   int
		to      int
		ok      bool
	}{
		{"two busy on one CPU", []placed{{0, 0.9}, {0, 0.8}}, 0, 1, true},
		{"already apart", []placed{{0, 0.9}, {1, 0.8}}, 0, 0, false},
		{"one busy alone", []placed{{0, 1.0}}, 0, 0, false},
		{"gain under the margin", []placed{{0, 0.5}, {0, 0.05}, {1, 0.45}}, 0, 0, false},
		{"the move that leaves the lower peak", []placed{{0, 0.6}, {0, 0.3}, {0, 0.3}, {1, 0.2}}, 0, 1, true},
		{"idle", []placed{{0, 0}, {0, 0}}, 0, 0, false},
	} {
		i, to, ok := planMove(c.workers, cpus, balanceMargin)
		if ok != c.ok || (ok && (i != c.index || to != c.to)) {
			t.Errorf("%s: planMove = %d→%d %v, want %d→%d %v", c.name, i, to, ok, c.index, c.to, c.ok)
		}
	}
	if _, _, ok := planMove([]placed{{0, 1}, {0, 1}}, []int{0}, balanceMargin); ok {
		t.Error("a move with one CPU")
	}
}

// worker_cpus auto: a worker that needs more than its CPU while another
// CPU has time is let go, and pinned again once it is calm.
func TestAutoLetsGoOfAWorkerOneCPUIsTooLittleFor(t *testing.T) {
	cpus := allowedCPUs(t)
	if len(cpus) < 2 {
		t.Skipf("one CPU allowed (%v): no other CPU to give it", cpus)
	}
	pool := startPool(t, Config{Workers: 1, CPUs: CPUsAuto, Engine: wire.EngineConfig{Limits: budgets.Limits{Timeout: 20 * time.Second}}})
	// The other CPUs have time to spare, and a busy worker counts as
	// saturated at a quarter of its CPU (calm below a tenth), whatever else runs on this
	// machine beside the test (go test runs packages in parallel, and a
	// process sharing the worker's CPU takes its share).
	pool.cpus.mu.Lock()
	pool.cpus.saturated, pool.cpus.calm = 0.25, 0.1
	pool.cpus.idle = func() map[int]float64 {
		out := map[int]float64{}
		for _, cpu := range cpus {
			out[cpu] = 0.5
		}
		return out
	}
	pool.cpus.mu.Unlock()
	if s := pool.Status()[0]; s.CPU < 0 || onOneCPU(t, s.PID) != s.CPU {
		t.Fatalf("an idle worker under auto is not pinned: %+v", s)
	}
	busy := program.Job{Program: program.Program{Code: "async () => { const end = Date.now() + 8000; let n = 0; while (Date.now() < end) n++; return n > 0 }"}, Timeout: 15 * time.Second}
	done := make(chan error, 1)
	go func() { _, err := pool.Run(context.Background(), busy); done <- err }()
	waitFor := func(what string, within time.Duration, ok func(WorkerStatus) bool) {
		t.Helper()
		if !waitfor.Within(within, func() bool { return ok(pool.Status()[0]) }) {
			t.Fatalf("%s: %+v", what, pool.Status()[0])
		}
	}
	// On a loaded machine the pool's measures come late: the busy run's
	// 8 s leave it several periods to see the saturation in.
	waitFor("a saturated worker is still pinned", 7500*time.Millisecond, func(s WorkerStatus) bool {
		if s.CPU >= 0 {
			return false
		}
		for tid, set := range threadCPUs(t, s.PID) {
			if len(set) != len(cpus) {
				t.Fatalf("let go, but thread %d is on %v", tid, set)
			}
		}
		return true
	})
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	waitFor("a calm worker is not pinned again", 20*time.Second, func(s WorkerStatus) bool { return s.CPU >= 0 && onOneCPU(t, s.PID) == s.CPU })
}

// Under auto a saturated worker stays pinned when no other CPU has time
// to give: letting it go would only spread it over busy CPUs.
func TestAutoKeepsASaturatedWorkerPinnedOnABusyMachine(t *testing.T) {
	cpus := allowedCPUs(t)
	pool := startPool(t, Config{Workers: 1, CPUs: CPUsAuto, Engine: wire.EngineConfig{Limits: budgets.Limits{Timeout: 10 * time.Second}}})
	pool.cpus.mu.Lock()
	pool.cpus.idle = func() map[int]float64 { return map[int]float64{} } // no CPU idle
	pool.cpus.mu.Unlock()
	busy := program.Job{Program: program.Program{Code: "async () => { const end = Date.now() + 2000; let n = 0; while (Date.now() < end) n++; return n > 0 }"}, Timeout: 10 * time.Second}
	if _, err := pool.Run(context.Background(), busy); err != nil {
		t.Fatal(err)
	}
	if s := pool.Status()[0]; s.CPU < 0 || onOneCPU(t, s.PID) != s.CPU {
		t.Fatalf("a saturated worker with %v all busy was let go: %+v", cpus, s)
	}
}

// The balance reads the CPU time of a worker that worked since the last
// balance at every balance, and one that stayed idle through it and used
// next to nothing when last read only every idleReadEvery: with 200 idle
// workers those reads were most of an idle gateway's CPU.
func TestBalanceReadsOnlyWorkersThatWorked(t *testing.T) {
	pool := startPool(t, Config{Workers: 2, CPUs: CPUsPinned, Engine: wire.EngineConfig{Limits: budgets.Limits{Timeout: 90 * time.Second}}})
	busy := program.Job{Program: program.Program{Code: "async () => { const end = Date.now() + 4000; let n = 0; while (Date.now() < end) n++; return n > 0 }"}, Timeout: 10 * time.Second}
	done := make(chan error, 1)
	go func() { _, err := pool.Run(context.Background(), busy); done <- err }()
	defer func() {
		if err := <-done; err != nil {
			t.Error(err)
		}
	}()
	var working, idle *process
	deadline := time.Now().Add(5 * time.Second)
	for working == nil && time.Now().Before(deadline) {
		for i, s := range pool.Status() {
			if s.Queue > 0 {
				pool.mu.Lock()
				working, idle = pool.workers[i], pool.workers[1-i]
				pool.mu.Unlock()
			}
		}
		time.Sleep(20 * time.Millisecond)
	}
	if working == nil {
		t.Fatal("the busy run is in neither worker")
	}
	const interval = 200 * time.Millisecond
	for time.Now().Before(deadline) {
		if d, _, ok := idle.idleFor(time.Now()); ok && d > 2*balanceEvery {
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	// Both read a moment ago, the idle one at rest.
	pool.cpus.mu.Lock()
	fresh := time.Now().Add(-interval)
	pool.cpus.used[idle] = cpuReading{ns: cpuUsed(idle), at: fresh}
	pool.cpus.used[working] = cpuReading{ns: cpuUsed(working), at: fresh}
	pool.cpus.mu.Unlock()
	pool.cpus.balance(interval)
	pool.cpus.mu.Lock()
	readIdle := pool.cpus.used[idle].at != fresh
	readWorking := pool.cpus.used[working].at != fresh
	pool.cpus.mu.Unlock()
	if readIdle {
		t.Fatal("the CPU time of a worker idle through the interval was read again within idleReadEvery")
	}
	if !readWorking {
		t.Fatal("the CPU time of a worker with a call in progress was not read")
	}
}

// A worker whose isolate works only in its timers, between invocations,
// has no call in progress and looks idle to the gateway; the balance still
// sees its load within idleReadEvery (found by the red team: two such
// workers pinned to one CPU were never moved apart when idle-looking
// workers were never read).
func TestBalanceSeesAWorkerBusyOnlyWithTimers(t *testing.T) {
	pool := startPool(t, Config{Workers: 2, CPUs: CPUsPinned, Engine: wire.EngineConfig{Limits: budgets.Limits{Timeout: 90 * time.Second}}})
	deploy(t, pool, "spinner", `async () => {
		setInterval(() => { const end = Date.now() + 40; while (Date.now() < end) {} }, 50);
		return { fetch() { return new Response('ok') } } }`)
	// The spinner asks for 0.8 of a CPU; on a loaded machine (CI beside
	// other packages) it got as little as 0.02, so "busy" here is any
	// load an idle worker does not show (~0.001). What the never-read
	// version lacks is the read itself: its last reading stays from before
	// the worker began to look idle.
	var balanced time.Time
	waitfor.Until(t, idleReadEvery+20*time.Second, "the load of a worker busy only with its isolate's timers", func() bool {
		if time.Since(balanced) >= balanceEvery {
			pool.cpus.balance(balanceEvery)
			balanced = time.Now()
		}
		pool.mu.Lock()
		workers := append([]*process(nil), pool.workers...)
		pool.mu.Unlock()
		for _, p := range workers {
			if p == nil {
				continue
			}
			pool.cpus.mu.Lock()
			r := pool.cpus.used[p]
			pool.cpus.mu.Unlock()
			now := time.Now()
			if d, _, ok := p.idleFor(now); ok && r.load > 0.01 && r.at.Sub(now.Add(-d)) > 2*balanceEvery {
				return true // read busy well after it began to look idle
			}
		}
		return false
	})
}
