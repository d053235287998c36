package workers

import (
	"bufio"
	"bytes"
	"fmt"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/retainer-gw/retainer/budgets"
)

// Capacity by memory (docs/architecture.md, "Tenant cordons"): with
// `workers auto` a cordoned pool starts as many workers as its memory
// budget allows. What counts is each worker's own memory, not the binary's
// text that every worker maps from the same file: an idle worker is ~98 MiB
// resident of which ~23 MiB is its own. The pool reads the proportional set
// size (PSS: private pages plus an equal share of the shared ones), whose
// sum over the workers is what they cost the machine together.

// memUse is one worker's memory as last measured, in bytes.
type memUse struct {
	pss, private atomic.Int64
	at           atomic.Int64 // when (UnixNano) smaps_rollup was last read
	checked      atomic.Int64 // when (UnixNano) it was last measured or followed
	// mu holds what statm said at the last smaps_rollup read (bytes) and
	// the PSS and private memory read then: followed answers them moved
	// by what the anonymous memory moved since.
	mu                sync.Mutex
	anon, shared      int64
	basePSS, basePriv int64
}

// measureMemory reads a process's PSS and private memory from
// /proc/<pid>/smaps_rollup; ok is false when the kernel has none.
func measureMemory(pid int) (pss, private int64, ok bool) {
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/smaps_rollup", pid))
	if err != nil {
		return 0, 0, false
	}
	s := bufio.NewScanner(bytes.NewReader(data))
	for s.Scan() {
		f := strings.Fields(s.Text())
		if len(f) < 2 {
			continue
		}
		kb, err := strconv.ParseInt(f[1], 10, 64)
		if err != nil {
			continue
		}
		switch f[0] {
		case "Pss:":
			pss = kb << 10
			ok = true
		case "Private_Clean:", "Private_Dirty:":
			private += kb << 10
		}
	}
	return pss, private, ok
}

// machineMemory is what the machine, or the cgroup the gateway runs in,
// lets it use, in bytes (0 when unknown).
func machineMemory() int64 {
	total := int64(0)
	if data, err := os.ReadFile("/proc/meminfo"); err == nil {
		for _, line := range strings.Split(string(data), "\n") {
			if f := strings.Fields(line); len(f) >= 2 && f[0] == "MemTotal:" {
				kb, _ := strconv.ParseInt(f[1], 10, 64)
				total = kb << 10
			}
		}
	}
	for _, path := range []string{"/sys/fs/cgroup/memory.max", "/sys/fs/cgroup/memory/memory.limit_in_bytes"} {
		data, err := os.ReadFile(path)
		if err != nil {
			continue
		}
		limit, err := strconv.ParseInt(strings.TrimSpace(string(data)), 10, 64)
		if err == nil && limit > 0 && (total == 0 || limit < total) {
			total = limit
		}
	}
	return total
}

// DefaultWorkerMemory is worker_memory's default: half of what the machine
// or its cgroup has (budgets.DefaultWorkerMemoryUnknown when that cannot
// be read).
func DefaultWorkerMemory() int64 {
	if m := machineMemory(); m > 0 {
		return m / 2
	}
	return budgets.DefaultWorkerMemoryUnknown
}

// newWorkerEstimate is what one more worker is expected to cost before
// any has been measured: about its own memory when idle, rounded up.
const newWorkerEstimate = 32 << 20

// memoryEvery is how often the pool measures some of its workers'
// memory, and memoryBatch how many smaps_rollup reads at most each time:
// reading a V8 process's smaps_rollup walks its page tables (~3 ms here),
// and measuring 200 workers every 2 s took 40% of a core from the gateway.
// Workers not yet measured go first; the others take turns. A worker that
// has had nothing in progress since it was last measured is skipped until
// memoryStale has passed: with 100 idle workers the turns were over a
// quarter of an idle gateway's CPU (27% of its samples), measuring memory
// no work had touched (docs/history/performance-log.md).
//
// Between two smaps_rollup reads a worker that worked is followed through
// its statm (followed): its anonymous memory is its own, so its PSS moves
// by what that moves. smaps_rollup is read again when its file and shmem
// pages moved by more than memoryShareMoved (what the kernel apportions
// among the processes sharing them), or after memoryStale. Under 200
// tenants' load every worker works every second, and the turns read 8
// smaps_rollup a second (0.75% of the machine's samples) while a pass over
// the 200 took 25 s; now each is followed every second for a read of a
// few counters (docs/performance.md, "Many warm workers").
const (
	memoryEvery      = time.Second
	memoryBatch      = 8
	memoryStale      = 5 * time.Minute
	memoryShareMoved = 4 << 20
	// memoryIdleFollow is how often a worker that looks idle (no call in
	// progress or since) is followed all the same: a retained isolate's
	// timers run between invocations and may grow its heap with no call
	// (the red team's handle grew 160 MiB that way, unseen for five
	// minutes). A statm read is a few counters; 200 idle workers every
	// 5 s cost next to nothing.
	memoryIdleFollow = 5 * time.Second
)

// memoryLoop measures the workers' memory in the background, so that
// capacity checks (canStart) read numbers instead of /proc on the request
// path.
func (pool *Pool) memoryLoop() {
	defer pool.wg.Done()
	t := time.NewTicker(memoryEvery)
	defer t.Stop()
	next := 0
	for {
		next = pool.measureSome(next, memoryBatch)
		pool.trimSpares()
		select {
		case <-pool.stop:
			return
		case <-t.C:
		}
	}
}

// measureSome measures the workers not yet measured, then the others from
// slot next on, at most n in all; it answers where the next turn starts.
func (pool *Pool) measureSome(next, n int) int {
	pool.mu.Lock()
	workers := append([]*process(nil), pool.workers...)
	pool.mu.Unlock()
	done := 0
	for _, p := range workers {
		if done < n && p != nil && p.mem.pss.Load() == 0 && p.alive() {
			p.measure()
			done++
		}
	}
	now := time.Now()
	for i := 0; i < len(workers); i++ {
		slot := (next + i) % len(workers)
		p := workers[slot]
		if p == nil || p.mem.pss.Load() == 0 || !p.alive() {
			continue
		}
		if !p.workedSinceMeasured(now) && now.Sub(time.Unix(0, p.mem.checked.Load())) < memoryIdleFollow {
			continue
		}
		if p.followed(now) {
			continue
		}
		if done < n {
			p.measure()
			done++
			next = slot + 1
		}
	}
	return next
}

// workedSinceMeasured reports whether the worker's memory may have moved
// since it was last measured or followed: something is in progress there,
// or was since, or the last smaps_rollup read is older than memoryStale.
func (p *process) workedSinceMeasured(now time.Time) bool {
	if now.Sub(time.Unix(0, p.mem.at.Load())) > memoryStale {
		return true
	}
	checked := time.Unix(0, p.mem.checked.Load())
	idle, _, ok := p.idleFor(now)
	return !ok || now.Add(-idle).After(checked)
}

// followed brings the worker's measure up to date from its statm alone
// when that is enough (see memoryEvery): it reports false when
// smaps_rollup must be read instead.
func (p *process) followed(now time.Time) bool {
	if now.Sub(time.Unix(0, p.mem.at.Load())) > memoryStale {
		return false
	}
	anon, shared, ok := p.stat.memory(p.pid)
	p.mem.mu.Lock()
	defer p.mem.mu.Unlock()
	if !ok || p.mem.basePSS == 0 || abs(shared-p.mem.shared) > memoryShareMoved {
		return false
	}
	moved := anon - p.mem.anon
	p.mem.pss.Store(max(p.mem.basePSS+moved, 1))
	p.mem.private.Store(max(p.mem.basePriv+moved, 0))
	p.mem.checked.Store(now.UnixNano())
	return true
}

func abs(n int64) int64 {
	if n < 0 {
		return -n
	}
	return n
}

// measure reads the worker's memory now: smaps_rollup, and statm beside it
// for followed.
func (p *process) measure() {
	p.mem.mu.Lock()
	defer p.mem.mu.Unlock()
	anon, shared, statm := p.stat.memory(p.pid)
	if pss, private, ok := measureMemory(p.pid); ok {
		now := time.Now().UnixNano()
		p.mem.anon, p.mem.shared, p.mem.basePSS, p.mem.basePriv = anon, shared, pss, private
		if !statm {
			p.mem.basePSS = 0 // nothing to follow from
		}
		p.mem.pss.Store(pss)
		p.mem.private.Store(private)
		p.mem.at.Store(now)
		p.mem.checked.Store(now)
	}
}

// Budget is a pool's capacity as the admin endpoint and the metrics show it.
type Budget struct {
	// Mode is "auto" (as many workers as WorkerMemory allows, up to
	// MaxWorkers) or "fixed" (Workers processes, the spare included).
	Mode         string `json:"mode"`
	Workers      int    `json:"workers"`      // processes up or starting
	MaxWorkers   int    `json:"maxWorkers"`   // the most there may be
	WorkerMemory int64  `json:"workerMemory"` // auto: the budget in bytes
	UsedMemory   int64  `json:"usedMemory"`   // the workers' PSS, summed
	NextWorker   int64  `json:"nextWorker"`   // what one more is expected to cost
	// Spares is how many workers the pool keeps started ahead of the
	// tenants that will need them (spares.go).
	Spares int `json:"spares"`
}

// Budget reports the pool's capacity and what its workers use.
func (pool *Pool) Budget() Budget {
	pool.mu.Lock()
	defer pool.mu.Unlock()
	used, next := pool.memoryUsed()
	b := Budget{Mode: "fixed", Workers: pool.processes(), MaxWorkers: pool.cfg.Workers, UsedMemory: used, NextWorker: next}
	if pool.cordoned() {
		b.Spares = pool.sparesWanted(time.Now())
	}
	if pool.auto() {
		b.Mode, b.MaxWorkers, b.WorkerMemory = "auto", pool.cfg.MaxWorkers, pool.cfg.WorkerMemory
	}
	return b
}

// memoryUsed sums the live workers' measured PSS, counting one estimate
// for each worker not yet measured or still starting; next is what one
// more worker is expected to cost (the mean private memory of the
// measured ones). pool.mu is held.
func (pool *Pool) memoryUsed() (used, next int64) {
	var private int64
	measured, unmeasured := 0, len(pool.starting)
	for _, p := range pool.workers {
		if p == nil {
			continue
		}
		pss := p.mem.pss.Load()
		if pss == 0 {
			unmeasured++
			continue
		}
		used += pss
		private += p.mem.private.Load()
		measured++
	}
	next = newWorkerEstimate
	if measured > 0 {
		next = max(private/int64(measured), 16<<20)
	}
	return used + int64(unmeasured)*next, next
}

// processes counts the worker processes up or starting. pool.mu is held.
func (pool *Pool) processes() int {
	n := len(pool.starting)
	for _, p := range pool.workers {
		if p != nil {
			n++
		}
	}
	return n
}

// canStart reports whether one more worker process fits: under the fixed
// count, or (auto) under max_workers and the memory budget. pool.mu is held.
func (pool *Pool) canStart() bool {
	n := pool.processes()
	if !pool.auto() {
		return n < pool.cfg.Workers
	}
	if n >= pool.cfg.MaxWorkers {
		return false
	}
	used, next := pool.memoryUsed()
	return n == 0 || used+next <= pool.cfg.WorkerMemory
}

// SetBudget applies a changed capacity (a config reload): worker_memory,
// max_workers and recycle_idle. Workers already up stay; a smaller budget
// only stops new ones from starting.
func (pool *Pool) SetBudget(workerMemory int64, maxWorkers int, recycleIdle time.Duration) {
	pool.mu.Lock()
	defer pool.mu.Unlock()
	if workerMemory > 0 {
		pool.cfg.WorkerMemory = workerMemory
	}
	if maxWorkers > 0 {
		pool.cfg.MaxWorkers = maxWorkers
	}
	if recycleIdle > 0 {
		pool.cfg.RecycleIdle = recycleIdle
	}
}

// SetTenantWorkerMemory applies a changed tenant_worker_memory (a config
// reload; cordon.go).
func (pool *Pool) SetTenantWorkerMemory(n int64) {
	pool.mu.Lock()
	defer pool.mu.Unlock()
	if n > 0 {
		pool.cfg.TenantWorkerMemory = n
	}
}

// clockTicks is the kernel's USER_HZ, in which /proc reports CPU times
// (100 on every Linux architecture Go supports).
const clockTicks = 100
