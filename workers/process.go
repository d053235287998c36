package workers

import (
	"os/exec"
	"strconv"
	"sync"
	"time"

	"github.com/retainer-gw/retainer/budgets"
	"github.com/retainer-gw/retainer/program"
	"github.com/retainer-gw/retainer/workers/wire"
)

// process is one worker process as the gateway sees it.
type process struct {
	pool  *Pool
	index int
	cmd   *exec.Cmd
	pid   int
	rpc   *wire.Conn
	// exited is closed once the process has been reaped.
	exited chan struct{}
	// mem is its memory as last measured (memory.go).
	mem memUse
	// stat is its /proc/<pid>/stat, kept open for its CPU time (procstat.go).
	stat procStat
	// fromStartup: it started from the pool's startup (startup.go).
	fromStartup bool

	mu         sync.Mutex             // guards everything below
	tenant     string                 // cordoned: the tenant it hosts ("" while spare)
	lastActive time.Time              // when work here last began or ended (recycling: cordon.go)
	busyUntil  time.Time              // waitUntil work of an answered invocation may run until then
	streams    map[string]bool        // response streams open here (handle id and stream)
	retiring   bool                   // taken out of service (unroute): calls here never start
	retired    string                 // why the pool let it go (its isolates are lost without blame)
	retained   map[string]isolateInfo // live isolates here
	pending    map[string]bool        // slots reserved by runs that may retain
	running    map[uint64]*callRecord // in-flight calls
	clock      clock                  // their kill clock (killclock.go)
	seq        uint64
	dead       bool
	// ranOnce and takenFirst are two facts, not one: every worker's
	// first run of a tenant is favoured (a taken spare's, or a worker's
	// started for its tenant), while only a taken spare owes the spares'
	// count (beginTakenRun) the end of its first run.
	ranOnce    bool   // it was sent a run of a tenant (favour_linux.go)
	takenFirst bool   // taken as a spare, its first run not answered yet (spares.go)
	overrunner uint64 // the call whose overrun made the gateway kill this worker
	// overrunNotCaused: the worker used less than half the overrunning
	// call's bound in CPU during its grace period (blame: no strike).
	overrunNotCaused bool
	// killedBy is why the gateway killed it ("" until it does);
	// operatorKill that it was an operator's word (Pool.KillWorker), which
	// strikes nobody, as a kill from outside does.
	killedBy     string
	operatorKill bool
	// visitor is, per handle, the time its isolate spent waiting for
	// visitors' request bodies (body.read calls): the worker moves the
	// bound by it, and so does the kill clock.
	visitor map[string]*visitorTime

	// picks are the runs a pick placed here that are not on record yet
	// (running), pickRetains those of them that may retain: placement
	// counts them, so that two runs arriving together do not both take
	// the worker that looked free (pool.go, reserve).
	picks, pickRetains int
}

// visitorTime is one handle's body.read time: the total of those ended,
// and how many are in flight since when.
type visitorTime struct {
	total   time.Duration
	pending int
	since   time.Time
}

// visitorWaited is handle id's body.read time so far. p.mu is held.
func (p *process) visitorWaited(id string) time.Duration {
	v := p.visitor[id]
	if v == nil {
		return 0
	}
	if v.pending > 0 {
		return v.total + time.Since(v.since)
	}
	return v.total
}

// bodyRead notes a body.read of handle id starting; the answer ends it.
func (p *process) bodyRead(id string) (end func()) {
	p.mu.Lock()
	v := p.visitor[id]
	if v == nil {
		v = &visitorTime{}
		p.visitor[id] = v
	}
	if v.pending++; v.pending == 1 {
		v.since = time.Now()
	}
	p.mu.Unlock()
	return func() {
		p.mu.Lock()
		if v.pending--; v.pending == 0 {
			v.total += time.Since(v.since)
		}
		p.mu.Unlock()
	}
}

// isolateInfo is what the gateway keeps of a retained isolate.
type isolateInfo struct {
	bound       time.Duration // its run bound
	concurrency int           // invocations in progress at once (≤ 1: one)
	// window holds a slot for each invocation sent to the worker and not
	// yet answered (Pool.Invoke): concurrency plus a few, by its pace.
	window *sendWindow
}

// stderrBurst is how many lines of a worker's output are relayed at once.
const stderrBurst = 64

// touch notes work in progress here now (a host call, a log line): the
// worker is not idle. An open response stream keeps it busy by itself
// (streamOpened).
func (p *process) touch() {
	p.mu.Lock()
	p.lastActive = time.Now()
	p.mu.Unlock()
}

// streamOpened and streamEnded keep count of the response streams open
// here: a worker with one open is never recycled.
func (p *process) streamOpened(id string, stream int64) {
	p.mu.Lock()
	if !p.dead {
		p.streams[streamKey(id, stream)] = true
	}
	p.mu.Unlock()
}

func (p *process) streamEnded(id string, stream int64) {
	p.mu.Lock()
	delete(p.streams, streamKey(id, stream))
	p.lastActive = time.Now()
	p.mu.Unlock()
}

func streamKey(id string, stream int64) string { return id + "/" + strconv.FormatInt(stream, 10) }

// owner is the tenant a cordoned worker hosts ("" while spare or shared).
func (p *process) owner() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.tenant
}

// inService reports whether calls may still be sent here.
func (p *process) inService() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return !p.dead && !p.retiring
}

func (p *process) alive() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return !p.dead
}

// Tenant is the tenant the worker hosts ("" when shared). (hostcache.Peer)
func (p *process) Tenant() string { return p.owner() }

// Holds reports whether id is a run or handle of this worker.
// (hostcache.Peer)
func (p *process) Holds(id string) bool { return p.holdsOrRuns(id) }

// recordLogs hands an invocation's console lines to OnLog, capped and
// checked like every other word of a worker.
func (p *process) recordLogs(id string, logs []program.LogEntry) {
	f := p.pool.cfg.OnLog
	if f == nil {
		return
	}
	if len(logs) > 1000 {
		logs = logs[:1000]
	}
	now := time.Now()
	for _, e := range logs {
		if len(e.Message) > budgets.LogBytes {
			e.Message = e.Message[:budgets.LogBytes]
		}
		if !validLevel(e.Level) {
			e.Level = "log"
		}
		e.Time = now
		f(id, e)
	}
}

func validLevel(l string) bool {
	switch l {
	case "log", "info", "warn", "error", "debug":
		return true
	}
	return false
}

// holdsOrRuns reports whether id lives in this worker or is being run or
// invoked there right now.
func (p *process) holdsOrRuns(id string) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if _, ok := p.retained[id]; ok {
		return true
	}
	for _, c := range p.running {
		if c.handleID == id {
			return true
		}
	}
	return false
}

func (p *process) holds(id string) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	_, ok := p.retained[id]
	return ok
}

// release drops id from this process's records; false if it was not there.
func (p *process) release(id string) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	_, ok := p.retained[id]
	delete(p.retained, id)
	if v := p.visitor[id]; v != nil && v.pending == 0 {
		delete(p.visitor, id)
	}
	return ok
}

// load is what placement compares: live isolates plus in-flight calls.
func (p *process) load() (retained, inflight int) {
	p.mu.Lock()
	defer p.mu.Unlock()
	return len(p.retained) + len(p.pending) + p.pickRetains, len(p.running) + p.picks
}
