package workers

import (
	"bytes"
	"os"
	"os/exec"
	"runtime"
	"strconv"
	"sync"
	"time"

	"golang.org/x/sys/unix"
)

// Workers on CPUs (Config.CPUs, the Caddyfile's worker_cpus). Pinned,
// every thread of a worker runs on one CPU, the way a workerd process is
// one thread. A worker's threads hand every invocation to each other (the
// read loop, the isolate's turn, V8's return through Go's scheduler);
// spread over CPUs each hand-off is a wake-up on another CPU, which on a
// virtual machine is an interrupt through the hypervisor. On one CPU it is
// a switch in place. The cost is parallelism: a pinned worker, so a tenant
// until it spills into a second worker, uses at most one CPU, and a
// computation's background work (the prewarmed isolate made to replace the
// one it took, V8's helper thread) competes with it instead of running
// beside it (docs/history/performance-log.md, round 13, has both measured).
//
// CPUsAuto keeps the hand-offs cheap while one CPU is enough: a worker
// starts pinned; one that used nearly all of its CPU over the last
// balanceEvery while other CPUs had time to spare is let go (every CPU
// the gateway may use), and pinned again once it uses little.
//
// The kernel cannot move a pinned worker, so the gateway does: a new worker
// goes to the CPU with the fewest workers, and every balanceEvery the
// busiest CPU gives a worker to the idlest when that lowers the busiest
// load by more than balanceMargin of a CPU.

// The worker_cpus modes.
const (
	CPUsShared = "shared" // every worker may run on every CPU (the kernel places threads)
	CPUsPinned = "pinned" // each worker on one CPU, always
	CPUsAuto   = "auto"   // pinned while one CPU is enough for it
)

// balanceEvery is how often the CPU use of workers is compared.
const balanceEvery = 500 * time.Millisecond

// balanceMargin is the least gain, in CPUs, that moves a worker: below it
// the loads are even enough, and a move would only chase noise.
const balanceMargin = 0.1

// With CPUsAuto: a pinned worker that used at least saturated of its CPU
// is let go when the other CPUs had at least spareNeeded idle
// between them; a worker let go is pinned again below calm. The gap keeps a
// worker from going back and forth: the same work costs more CPU unpinned.
const (
	saturated   = 0.85
	spareNeeded = 0.25
	calm        = 0.6
)

// cpuPlacement is which CPU each pinned worker runs on.
type cpuPlacement struct {
	mu       sync.Mutex
	mode     string
	cpus     []int                   // the CPUs the gateway may run on, read at start
	reserved map[int]int             // spawns under way, per CPU
	of       map[*process]int        // live pinned workers
	freed    map[*process]bool       // CPUsAuto: workers let go, on every CPU
	used     map[*process]cpuReading // their cpuUsed when last read
	// saturated and calm are CPUsAuto's thresholds (the constants; tests
	// on a loaded machine lower both, calm below saturated).
	saturated, calm float64
	stat            map[int]cpuStat // the CPUs' times at the last balance
	// idle is each CPU's idle fraction since the last balance: idleSince,
	// or (tests) what a test says the machine had.
	idle func() map[int]float64
	// margin is balanceMargin (tests on a loaded machine, where two busy
	// workers sharing a CPU get little of it, lower it).
	margin float64
}

func newCPUPlacement(mode string) *cpuPlacement {
	c := &cpuPlacement{mode: mode, reserved: map[int]int{}, of: map[*process]int{}, freed: map[*process]bool{}, used: map[*process]cpuReading{}, saturated: saturated, calm: calm, margin: balanceMargin}
	c.idle = c.idleSince
	var set unix.CPUSet
	if unix.SchedGetaffinity(0, &set) == nil {
		for i := 0; i < len(set)*64; i++ {
			if set.IsSet(i) {
				c.cpus = append(c.cpus, i)
			}
		}
	}
	return c
}

func (c *cpuPlacement) pins() bool { return c.mode == CPUsPinned || c.mode == CPUsAuto }

// reserve chooses the CPU for a worker about to start (-1: unpinned): the
// one with the fewest workers, counting starts under way.
func (c *cpuPlacement) reserve() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	if !c.pins() || len(c.cpus) == 0 {
		return -1
	}
	count := map[int]int{}
	for _, cpu := range c.of {
		count[cpu]++
	}
	best, bestN := -1, 0
	for _, cpu := range c.cpus {
		n := count[cpu] + c.reserved[cpu]
		if best < 0 || n < bestN {
			best, bestN = cpu, n
		}
	}
	c.reserved[best]++
	return best
}

// started records where a reserved start went (p nil: it failed). A
// worker that started unpinned (cpu -1) while pinning was turned on is
// pinned now.
func (c *cpuPlacement) started(cpu int, p *process) {
	if cpu < 0 {
		if p == nil {
			return
		}
		if cpu = c.reserve(); cpu < 0 {
			return
		}
		var set unix.CPUSet
		set.Set(cpu)
		pinThreads(p.pid, &set)
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	c.reserved[cpu]--
	if p != nil && c.pins() {
		c.of[p] = cpu
		c.used[p] = cpuReading{ns: cpuUsed(p), at: time.Now()}
	}
}

// forget drops a worker that died.
func (c *cpuPlacement) forget(p *process) {
	c.mu.Lock()
	defer c.mu.Unlock()
	delete(c.of, p)
	delete(c.freed, p)
	delete(c.used, p)
}

// cpuOf is the CPU worker p is pinned to, or -1.
func (c *cpuPlacement) cpuOf(p *process) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	if cpu, ok := c.of[p]; ok {
		return cpu
	}
	return -1
}

// startPinned starts cmd from this goroutine's OS thread with its CPU
// affinity narrowed to cpu (a child inherits the affinity of the thread
// that forked it, keeps it across exec, and so does every thread it
// starts; Go in the worker then sees one CPU and runs one P). The thread
// gets its own affinity back after the fork; it is never discarded,
// because Pdeathsig fires when the forking thread exits.
func startPinned(cmd *exec.Cmd, cpu int) error {
	if cpu < 0 {
		return cmd.Start()
	}
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	var old, one unix.CPUSet
	if err := unix.SchedGetaffinity(0, &old); err != nil {
		return cmd.Start()
	}
	one.Set(cpu)
	if err := unix.SchedSetaffinity(0, &one); err != nil {
		return cmd.Start()
	}
	defer unix.SchedSetaffinity(0, &old)
	return cmd.Start()
}

// pinThreads sets the affinity of every thread of process pid to set,
// going over the thread list until no thread is new (a thread started
// during the pass by one not yet moved would inherit the old affinity).
func pinThreads(pid int, set *unix.CPUSet) {
	done := map[int]bool{}
	for pass := 0; pass < 4; pass++ {
		entries, err := os.ReadDir("/proc/" + strconv.Itoa(pid) + "/task")
		if err != nil {
			return
		}
		fresh := false
		for _, e := range entries {
			tid, err := strconv.Atoi(e.Name())
			if err != nil || done[tid] {
				continue
			}
			fresh = true
			done[tid] = true
			unix.SchedSetaffinity(tid, set) // a thread that just ended answers ESRCH
		}
		if !fresh {
			return
		}
	}
}

// cpuUsed is the time worker p has run (nanoseconds; procStat.cpu, 0
// when it cannot be read). Not its threads' wait to run: a pinned worker's
// threads wait for each other, and the sum of those waits says nothing of
// how many CPUs the worker could use (docs/history/performance-log.md).
//
// One read of /proc/<pid>/stat a worker: the kernel sums the threads'
// precise run time and reports it in clock ticks (10 ms, 0.02 of a CPU
// over balanceEvery, well inside balanceMargin). Reading each thread's
// schedstat instead took ~13 reads a worker every balance: with 100 idle
// workers that was 2.9% of a core, two thirds of an idle gateway's CPU,
// and it grew with every worker (docs/history/performance-log.md).
func cpuUsed(p *process) uint64 {
	return uint64(max(p.stat.cpu(p.pid), 0))
}

// idleThrough reports whether worker p had nothing of the gateway's in
// progress and no call since before the last balance, interval ago.
// Its isolates may still have worked: a retained isolate's timers run
// between invocations (docs/runtime.md), so an idle-looking worker is
// still read, only less often (idleReadEvery).
func idleThrough(p *process, now time.Time, interval time.Duration) bool {
	idle, _, ok := p.idleFor(now)
	return ok && idle >= interval
}

// cpuReading is a worker's cpuUsed when last read, when, and the load
// (CPUs used) between that read and the one before.
type cpuReading struct {
	ns   uint64
	at   time.Time
	load float64
}

// idleReadEvery is how often the balance reads the CPU time of a worker
// that looks idle (idleThrough) and used less than idleLoad at its last
// read: with 200 idle workers, reading each at every balance was most of
// an idle gateway's CPU (docs/performance.md, "Many warm workers"), and a
// worker busy only with its isolates' timers is still seen within this,
// then read at every balance while it stays busy.
const (
	idleReadEvery = 2 * time.Second
	idleLoad      = 0.05
)

// placed is one pinned worker's CPU and its load (CPUs used: cpuUsed) in
// the last interval.
type placed struct {
	cpu  int
	load float64
}

// planMove chooses at most one worker to move from the busiest CPU to the
// idlest: the one that leaves the larger of the two loads lowest, and only
// if that is lower than the busiest load by more than margin
// (balanceMargin).
func planMove(workers []placed, cpus []int, margin float64) (index, to int, ok bool) {
	if len(cpus) < 2 {
		return 0, 0, false
	}
	total := map[int]float64{}
	for _, w := range workers {
		total[w.cpu] += w.load
	}
	busiest, idlest := cpus[0], cpus[0]
	for _, cpu := range cpus {
		if total[cpu] > total[busiest] {
			busiest = cpu
		}
		if total[cpu] < total[idlest] {
			idlest = cpu
		}
	}
	best, bestMax := -1, total[busiest]
	for i, w := range workers {
		if w.cpu != busiest {
			continue
		}
		m := max(total[busiest]-w.load, total[idlest]+w.load)
		if m < bestMax {
			best, bestMax = i, m
		}
	}
	if best < 0 || total[busiest]-bestMax <= margin {
		return 0, 0, false
	}
	return best, idlest, true
}

// balance reads each worker's CPU use since the last balance; with
// CPUsAuto it lets go of the workers one CPU is too little for and pins
// again those that calmed down; then it moves one pinned worker if
// planMove says so.
func (c *cpuPlacement) balance(interval time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if !c.pins() {
		return
	}
	load := map[*process]float64{}
	at := time.Now()
	for _, set := range []map[*process]bool{c.pinnedSet(), c.freed} {
		for p := range set {
			last, ok := c.used[p]
			if ok && last.load < idleLoad && at.Sub(last.at) < idleReadEvery && idleThrough(p, at, interval) {
				// Nothing of the gateway's ran there since the last
				// balance and it used next to nothing when last read: its
				// /proc is read again later (idleReadEvery).
				load[p] = last.load
				continue
			}
			now := cpuUsed(p)
			reading := cpuReading{ns: now, at: at}
			if ok && now >= last.ns && at.After(last.at) {
				// Over the time since the last read, which spans several
				// balances when the worker looked idle.
				reading.load = float64(now-last.ns) / float64(at.Sub(last.at).Nanoseconds())
				load[p] = reading.load
			}
			c.used[p] = reading
		}
	}
	idle := c.idle()
	if c.mode == CPUsAuto {
		// Those let go now are judged again at the next balance, unpinned.
		calmed := make([]*process, 0, len(c.freed))
		for p := range c.freed {
			if load[p] < c.calm {
				calmed = append(calmed, p)
			}
		}
		for p, cpu := range c.of {
			spare := 0.0
			for other, f := range idle {
				if other != cpu {
					spare += f
				}
			}
			if load[p] >= c.saturated && spare >= spareNeeded {
				pinThreads(p.pid, c.every())
				delete(c.of, p)
				c.freed[p] = true
			}
		}
		for _, p := range calmed {
			cpu := c.leastLoaded(load)
			var one unix.CPUSet
			one.Set(cpu)
			pinThreads(p.pid, &one)
			delete(c.freed, p)
			c.of[p] = cpu
		}
	}
	procs := make([]*process, 0, len(c.of))
	workers := make([]placed, 0, len(c.of))
	for p, cpu := range c.of {
		procs = append(procs, p)
		workers = append(workers, placed{cpu: cpu, load: load[p]})
	}
	i, to, ok := planMove(workers, c.cpus, c.margin)
	if !ok {
		return
	}
	var one unix.CPUSet
	one.Set(to)
	pinThreads(procs[i].pid, &one)
	c.of[procs[i]] = to
}

func (c *cpuPlacement) pinnedSet() map[*process]bool {
	out := make(map[*process]bool, len(c.of))
	for p := range c.of {
		out[p] = true
	}
	return out
}

// every is the set of every CPU the gateway may use.
func (c *cpuPlacement) every() *unix.CPUSet {
	var all unix.CPUSet
	for _, cpu := range c.cpus {
		all.Set(cpu)
	}
	return &all
}

// leastLoaded is the CPU whose pinned workers used the least.
func (c *cpuPlacement) leastLoaded(load map[*process]float64) int {
	total := map[int]float64{}
	for p, cpu := range c.of {
		total[cpu] += load[p]
	}
	best := c.cpus[0]
	for _, cpu := range c.cpus {
		if total[cpu] < total[best] {
			best = cpu
		}
	}
	return best
}

// cpuStat is one CPU's idle and total time in /proc/stat (USER_HZ ticks).
type cpuStat struct{ idle, total uint64 }

// idleSince is each allowed CPU's idle fraction since the last call (none
// the first time, or when /proc/stat cannot be read).
func (c *cpuPlacement) idleSince() map[int]float64 {
	b, err := os.ReadFile("/proc/stat")
	if err != nil {
		return nil
	}
	now := map[int]cpuStat{}
	for _, line := range bytes.Split(b, []byte("\n")) {
		f := bytes.Fields(line)
		if len(f) < 9 || !bytes.HasPrefix(f[0], []byte("cpu")) || len(f[0]) == 3 {
			continue
		}
		cpu, err := strconv.Atoi(string(f[0][3:]))
		if err != nil {
			continue
		}
		var st cpuStat
		for i := 1; i <= 8; i++ { // user nice system idle iowait irq softirq steal
			v, _ := strconv.ParseUint(string(f[i]), 10, 64)
			st.total += v
			if i == 4 || i == 5 {
				st.idle += v
			}
		}
		now[cpu] = st
	}
	out := map[int]float64{}
	for _, cpu := range c.cpus {
		old, ok := c.stat[cpu]
		cur := now[cpu]
		if ok && cur.total > old.total && cur.idle >= old.idle {
			out[cpu] = float64(cur.idle-old.idle) / float64(cur.total-old.total)
		}
	}
	c.stat = now
	return out
}

// balanceLoop runs balance until the pool stops.
func (pool *Pool) balanceLoop() {
	defer pool.wg.Done()
	t := time.NewTicker(balanceEvery)
	defer t.Stop()
	for {
		select {
		case <-pool.stop:
			return
		case <-t.C:
			pool.cpus.balance(balanceEvery)
		}
	}
}

// SetCPUs applies a changed worker_cpus to the running workers (a config
// reload): pinning, each is placed as a new one would be; shared, each
// gets every CPU the gateway may use back.
func (pool *Pool) SetCPUs(mode string) {
	pool.mu.Lock()
	live := make([]*process, 0, len(pool.workers))
	for _, p := range pool.workers {
		if p != nil && p.alive() {
			live = append(live, p)
		}
	}
	pool.mu.Unlock()
	c := pool.cpus
	c.mu.Lock()
	was := c.pins()
	c.mode = mode
	if !c.pins() {
		for p := range c.of {
			pinThreads(p.pid, c.every())
		}
		c.of, c.freed, c.used = map[*process]int{}, map[*process]bool{}, map[*process]cpuReading{}
		c.mu.Unlock()
		return
	}
	if mode == CPUsPinned { // the ones auto let go are pinned again below
		for p := range c.freed {
			delete(c.freed, p)
		}
	}
	placed := c.pinnedSet()
	c.mu.Unlock()
	if was && mode == CPUsAuto {
		return
	}
	for _, p := range live {
		if placed[p] {
			continue
		}
		cpu := c.reserve()
		if cpu < 0 {
			return
		}
		var one unix.CPUSet
		one.Set(cpu)
		pinThreads(p.pid, &one)
		c.started(cpu, p)
	}
}
