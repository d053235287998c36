package handles

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/retainer-gw/retainer/capability"
	"github.com/retainer-gw/retainer/fault"
	"github.com/retainer-gw/retainer/program"
)

// SpawnBudget is one top-level run's budget for `spawn` (README.md, API): how deep
// children may nest and how many may run in all, and the record of each
// child for the run's receipt. Safe for concurrent use (children run in
// parallel).
type SpawnBudget struct {
	MaxDepth    int
	MaxChildren int

	mu       sync.Mutex // guards children, records
	children int
	records  []SpawnRecord
}

// SpawnRecord is one spawned child, for the receipt.
type SpawnRecord struct {
	Depth      int
	Outcome    string // "ok" or the error code
	DurationMs float64
}

// Records are the children spawned so far, in the order they ended.
func (b *SpawnBudget) Records() []SpawnRecord {
	if b == nil {
		return nil
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	return append([]SpawnRecord(nil), b.records...)
}

func (b *SpawnBudget) take() bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.children >= b.MaxChildren {
		return false
	}
	b.children++
	return true
}

func (b *SpawnBudget) record(r SpawnRecord) {
	b.mu.Lock()
	b.records = append(b.records, r)
	b.mu.Unlock()
}

type spawnArgs struct {
	Body         string   `json:"body"`
	Capabilities []string `json:"capabilities"`
}

// spawn runs a child of run rs: a fresh isolate of the same tenant, with
// only the capabilities it is passed (never more than its parent holds),
// fetch under the parent's allow list, no provider tools, within the
// parent's remaining time and the run's budget.
func (s *Store) spawn(ctx context.Context, rs *runState, raw json.RawMessage) (json.RawMessage, error) {
	if !hasCapability(rs.grants.Capabilities, capability.Spawn) {
		return nil, capability.Denied(capability.Spawn, "spawn")
	}
	if rs.budget == nil {
		return nil, fault.New(fault.Forbidden, "spawn is available during a run, not from a handler.")
	}
	var a spawnArgs
	if err := json.Unmarshal(raw, &a); err != nil {
		return nil, fault.New(fault.BadRequest, "spawn: malformed arguments.")
	}
	var extra []string
	for _, c := range a.Capabilities {
		if !capability.Known(c) || !hasCapability(rs.grants.Capabilities, c) {
			extra = append(extra, c)
		}
	}
	if len(extra) > 0 {
		return nil, fault.New(fault.Forbidden, "spawn: the child asks for capabilities its parent does not hold: %s.", strings.Join(extra, ", "))
	}
	depth := rs.depth + 1
	if depth > rs.budget.MaxDepth {
		return nil, fault.New(fault.QuotaExceeded, "spawn: the run's budget of depth %d is spent (this child would be at depth %d).", rs.budget.MaxDepth, depth)
	}
	remaining := time.Until(rs.deadline)
	if remaining <= 0 {
		return nil, fault.TimedOut(rs.timeout.Milliseconds())
	}
	if !rs.budget.take() {
		return nil, fault.New(fault.QuotaExceeded, "spawn: the run's budget of %d children is spent.", rs.budget.MaxChildren)
	}
	timeout := rs.timeout
	if remaining < timeout {
		timeout = remaining
	}
	// A child lives no longer than its parent's run: when the parent ends
	// (it answered, or hit its bound), the child is cancelled, and its own
	// children with it; a child still running in its worker can spawn no
	// more (its run is gone from the registry) and ends by its bound, which
	// is the parent's remaining time at most.
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	if rs.life != nil {
		stop := context.AfterFunc(rs.life, cancel)
		defer stop()
	}
	start := time.Now()
	res, err := rs.registry.Execute(ctx, rs.tenant, ExecRequest{
		// Errors count the child's lines from its body's first (docs/runtime.md).
		Program:   program.Program{Code: "async () => {\n" + a.Body + "\n}", Origin: &program.Origin{File: "spawn", Line: 2}},
		Timeout:   timeout,
		MemoryMiB: rs.memoryMiB,
		Grants:    Grants{Capabilities: a.Capabilities, Outbound: rs.grants.Outbound},
		Depth:     depth,
		Budget:    rs.budget,
	})
	rec := SpawnRecord{Depth: depth, Outcome: "ok", DurationMs: float64(time.Since(start).Microseconds()) / 1000}
	if err != nil {
		rec.Outcome = string(fault.CodeOf(err))
	}
	rs.budget.record(rec)
	if err != nil {
		f := fault.As(err)
		// The parent's await rejects with the child's code and message.
		return nil, &fault.Fault{Code: f.Code, Message: fmt.Sprintf("%s: %s", f.Code, f.Message)}
	}
	if res.Outcome.Result == nil {
		return json.RawMessage("null"), nil
	}
	return res.Outcome.Result, nil
}

func hasCapability(list []string, c string) bool {
	for _, x := range list {
		if x == c {
			return true
		}
	}
	return false
}
