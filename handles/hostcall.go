package handles

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"strings"
	"time"

	"github.com/google/uuid"

	"github.com/retainer-gw/retainer/budgets"
	"github.com/retainer-gw/retainer/capability"
	"github.com/retainer-gw/retainer/fault"
	"github.com/retainer-gw/retainer/kv"
	"github.com/retainer-gw/retainer/kv/kvop"
	"github.com/retainer-gw/retainer/program"
)

// runState is a run in progress: its grants, the tool answers it records
// (a deploy) or replays (a rebuild), and the denials it met.
type runState struct {
	registry *Registry
	tenant   string
	grants   Grants
	replay   []ToolAnswer // a rebuild answers tools from these, in order
	// For spawn (nil budget: not a top-level run's family, e.g. a rebuild).
	budget    *SpawnBudget
	depth     int
	caller    CallerTools // the run's caller providers' tools (docs/protocol.md)
	deadline  time.Time
	timeout   time.Duration
	memoryMiB int
	replayed  int
	// records: a deploy's tool answers are recorded (a computation's
	// never are), within budgets.RecordedCalls and budgets.RecordedBytes; overRecord
	// marks a deploy that asked for more (it fails with QUOTA_EXCEEDED).
	records       bool
	recorded      []ToolAnswer
	recordedBytes int
	overRecord    bool
	denials       []string
	// life ends when the run ends (endRun): the children it spawned are
	// cancelled with it (spawn).
	life     context.Context
	end      context.CancelFunc
	mismatch bool // a rebuild's tool call did not match the recording
}

func (s *Store) beginRun(id string, rs *runState) {
	rs.life, rs.end = context.WithCancel(context.Background())
	s.mu.Lock()
	s.runs[id] = rs
	s.mu.Unlock()
}

// The fetch answers the run left unread are dropped with it (their places
// in its tenant's budget come back); a handle's, fetched during its
// invocations, end by their idle timeout instead, since its invocations
// share its id.
func (s *Store) endRun(id string) *runState {
	s.mu.Lock()
	rs := s.runs[id]
	delete(s.runs, id)
	host := s.opts.Host
	s.mu.Unlock()
	if rs != nil && rs.end != nil {
		rs.end()
	}
	if host != nil && host.Fetcher != nil && host.Fetcher.Streams != nil {
		host.Fetcher.Streams.DropOwner(id)
	}
	if host != nil && host.Objects != nil {
		host.Objects.DropOwner(id) // its unfinished bucket.put streams
	}
	return rs
}

// bindings are the names a program's runtime gets for its grants.
func bindings(g Grants) program.Bindings {
	b := program.Bindings{Providers: map[string][]string{}}
	for _, p := range g.Providers {
		b.Providers[p.Name] = p.Tools
	}
	for _, c := range g.Capabilities {
		if c == capability.KVRead || c == capability.KVWrite {
			b.KV = true
		}
		if c == capability.SQLRead || c == capability.SQLWrite {
			b.SQL = true
		}
		if c == capability.AIRun {
			b.AI = true
		}
		if c == capability.ObjectsRead || c == capability.ObjectsWrite {
			b.Objects = true
		}
	}
	return b
}

func newRunID() string { return uuid.NewString() }

// caller is what the store knows of a host call's id: the capability
// host, the run in progress or the handle's record (one of them), and its
// registry, tenant and grants (reg is nil for an unknown id).
func (s *Store) caller(id string) (host *capability.Host, rs *runState, rec *Record, reg *Registry, tenant string, grants Grants) {
	s.mu.Lock()
	defer s.mu.Unlock()
	host, rs, rec = s.opts.Host, s.runs[id], s.records[id]
	switch {
	case rs != nil:
		reg, tenant, grants = rs.registry, rs.tenant, rs.grants
	case rec != nil:
		reg, tenant, grants = s.registries[rec.Registry], rec.Tenant, rec.Grants
	}
	return
}

// HostCall serves a program's request for kv, fetch or a provider tool; id
// is the run's id (a computation, a deploy, a rebuild) or a live handle's
// (an invocation). The worker pool has checked that id runs or lives in
// the worker that asks.
//
// workerTenant is the tenant the asking worker hosts ("" when workers are
// shared): with tenant cordons, a worker is answered only for its tenant.
func (s *Store) HostCall(ctx context.Context, workerTenant, id, op string, args json.RawMessage) (json.RawMessage, error) {
	host, rs, rec, reg, tenant, grants := s.caller(id)
	if op == "body.read" {
		// The handle's own request body: no capability, only the handle
		// it was sent to (readBody checks the id).
		if rec == nil || workerTenant != "" && workerTenant != tenant {
			return nil, fault.New(fault.Forbidden, "No invocation holds this id.")
		}
		return s.readBody(ctx, id, args)
	}
	if host == nil {
		return nil, fault.New(fault.Forbidden, "This gateway grants no capabilities.")
	}
	if err := heldFor(reg, workerTenant, tenant); err != nil {
		return nil, err
	}
	cfg := reg.config()
	if op == "fetch" || op == "tool" || op == "spawn" {
		// Nothing leaves the gateway on a program's behalf before the
		// writes it made before are durable (the output gate).
		if err := s.outputGate(ctx, id); err != nil {
			return nil, err
		}
	}
	if op == "spawn" {
		if rs == nil {
			return nil, fault.New(fault.Forbidden, "spawn is available during a run, not from a handler.")
		}
		return s.spawn(ctx, rs, args)
	}
	if op == "tool" {
		if rs == nil {
			return nil, fault.New(fault.Forbidden, "%s", fault.AlreadyCompleted)
		}
		return s.toolCall(ctx, host, id, rs, cfg, args)
	}
	call := capability.Call{
		Tenant: tenant, Registry: reg.name, ExecutionID: id, Op: op, Args: args,
		Grants: capability.Grants{Capabilities: grants.Capabilities, Outbound: grants.Outbound, AllowPrivate: cfg.OutboundAllowPrivate, Headers: grants.Headers},
	}
	if rec != nil && op == "objects.upload" {
		// bucket.put(key, request.body): the gateway reads the body
		// itself (docs/objects.md).
		call.RequestBody = func(token string) (io.ReadCloser, error) { return s.takeBody(ctx, id, token) }
	}
	if kvop.Is(op) {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, kvWait(ctx, rs, rec, cfg))
		defer cancel()
	}
	if strings.HasPrefix(op, "objects.") {
		// A bucket call waits on the object store as a kv call on etcd
		// (docs/objects.md); the bytes of a body under way are not bounded.
		call.Wait = kvWait(ctx, rs, rec, cfg)
	}
	res, err := host.Serve(ctx, call)
	s.noteDenial(err, reg, rs, id)
	s.noteKVUnanswered(err, op, rec)
	return res, err
}

// heldFor refuses a capability call whose id is no run or handle the store
// knows (reg nil), or, with tenant cordons, one of another tenant than the
// asking worker hosts (workerTenant, "" when workers are shared).
func heldFor(reg *Registry, workerTenant, tenant string) error {
	if reg == nil || workerTenant != "" && workerTenant != tenant {
		return fault.New(fault.Forbidden, "No run holds this id.")
	}
	return nil
}

// noteDenial records a refused capability: in the run's receipt, or in the
// handle's log.
func (s *Store) noteDenial(err error, reg *Registry, rs *runState, id string) {
	if err == nil || !capability.IsDenial(err) {
		return
	}
	msg := fault.As(err).Message
	if rs != nil {
		s.mu.Lock()
		rs.denials = append(rs.denials, msg)
		s.mu.Unlock()
	} else {
		reg.systemLog(id, "Denied: "+msg)
	}
}

// toolArgs is a program's tool call: its first argument, and, for the
// calls that pass several, the count and the rest.
type toolArgs struct {
	Provider string            `json:"provider"`
	Tool     string            `json:"tool"`
	Args     json.RawMessage   `json:"args"`
	Argc     int               `json:"argc"`
	More     []json.RawMessage `json:"more"`
}

// list is the call's arguments as a caller tool receives them.
func (a toolArgs) list() []json.RawMessage {
	if a.Argc == 0 {
		return []json.RawMessage{}
	}
	out := []json.RawMessage{compact(a.Args)}
	for _, m := range a.More {
		out = append(out, compact(m))
	}
	return out
}

// toolCall answers a provider tool: from the recording during a rebuild,
// from the upstream otherwise (and records the answer for later rebuilds).
func (s *Store) toolCall(ctx context.Context, host *capability.Host, id string, rs *runState, cfg RegistryConfig, raw json.RawMessage) (json.RawMessage, error) {
	var a toolArgs
	if err := json.Unmarshal(raw, &a); err != nil {
		return nil, fault.New(fault.BadRequest, "Malformed tool arguments.")
	}
	granted, caller := false, false
	for _, p := range rs.grants.Providers {
		if p.Name == a.Provider {
			for _, t := range p.Tools {
				granted = granted || t == a.Tool
			}
			caller = p.Caller
		}
	}
	if !granted {
		return nil, capability.Denied(a.Provider+"."+a.Tool, "The tool "+a.Provider+"."+a.Tool)
	}
	args := compact(a.Args)
	if caller {
		args, _ = json.Marshal(a.list())
	}
	s.mu.Lock()
	if rs.replay != nil {
		defer s.mu.Unlock()
		if rs.replayed >= len(rs.replay) {
			rs.mismatch = true
			return nil, fault.New(fault.Runtime, "Rebuild: the program called %s.%s, which it did not call when it was deployed.", a.Provider, a.Tool)
		}
		want := rs.replay[rs.replayed]
		if want.Provider != a.Provider || want.Tool != a.Tool || !bytes.Equal(compact(want.Args), args) {
			rs.mismatch = true
			return nil, fault.New(fault.Runtime, "Rebuild: the program's tool call %s.%s does not match the recorded call %s.%s.", a.Provider, a.Tool, want.Provider, want.Tool)
		}
		rs.replayed++
		if want.Error != "" {
			return nil, fault.New(fault.BadRequest, "%s", want.Error)
		}
		return want.Answer, nil
	}
	if rs.records && (len(rs.recorded) >= budgets.RecordedCalls || rs.recordedBytes >= budgets.RecordedBytes) {
		rs.overRecord = true
		s.mu.Unlock()
		return nil, recordFault()
	}
	s.mu.Unlock()
	var res json.RawMessage
	var err error
	if caller {
		// A caller-tool call waits no longer than its run: when the run
		// ends, its pending calls are released (the socket's slots with
		// them), answered or not.
		callCtx, cancel := context.WithCancel(ctx)
		if rs.life != nil {
			stop := context.AfterFunc(rs.life, cancel)
			defer stop()
		}
		res, err = callerTool(callCtx, rs.caller, a)
		cancel()
	} else {
		upstream := cfg.Providers[a.Provider][a.Tool]
		if upstream == "" {
			return nil, fault.New(fault.BadRequest, "The tool %s.%s is not declared in this site's configuration.", a.Provider, a.Tool)
		}
		res, err = host.Tools.Call(ctx, upstream, id, rs.tenant, args)
	}
	ans := ToolAnswer{Provider: a.Provider, Tool: a.Tool, Args: args, Answer: res}
	if err != nil {
		ans.Error = fault.As(err).Message
	}
	if !rs.records {
		return res, err
	}
	size := len(ans.Provider) + len(ans.Tool) + len(ans.Args) + len(ans.Answer) + len(ans.Error)
	s.mu.Lock()
	defer s.mu.Unlock()
	if rs.recordedBytes+size > budgets.RecordedBytes {
		// The answer is not kept, so the program may not have it either:
		// a rebuild could not give it back.
		rs.overRecord = true
		return nil, recordFault()
	}
	rs.recorded = append(rs.recorded, ans)
	rs.recordedBytes += size
	return res, err
}

// recordFault is the error a deploy's tool call past the recording's
// bound throws in the program; the deploy then fails with it, whatever the
// program does with the error.
func recordFault() error {
	return fault.New(fault.QuotaExceeded, "A deploy records its tool answers to replay when its handle is rebuilt, at most %d calls and %d bytes in all: this one asked for more. Call fewer tools while deploying, or fetch the data in the handler instead.", budgets.RecordedCalls, budgets.RecordedBytes)
}

// callerTool asks the run's caller for a caller tool's answer. A caller that
// is gone, or an answer that is not JSON, throws in the program; the run
// goes on.
func callerTool(ctx context.Context, caller CallerTools, a toolArgs) (json.RawMessage, error) {
	if caller == nil {
		return nil, fault.New(fault.BadRequest, "The caller that provides %s.%s is not connected.", a.Provider, a.Tool)
	}
	res, err := caller(ctx, a.Provider, a.Tool, a.list())
	if err != nil {
		return nil, err
	}
	if len(res) == 0 {
		return json.RawMessage("null"), nil
	}
	if !json.Valid(res) {
		return nil, fault.New(fault.BadRequest, "The caller's answer to %s.%s is not JSON.", a.Provider, a.Tool)
	}
	return res, nil
}

func compact(raw json.RawMessage) json.RawMessage {
	if len(raw) == 0 {
		return json.RawMessage("null")
	}
	var b bytes.Buffer
	if json.Compact(&b, raw) != nil {
		return raw
	}
	return b.Bytes()
}

// KVSpace names, opaquely, the kv key space of run or handle id ("" for
// an id that holds none) and whether it may read and write it: workers
// cache kv reads under that name (kv/cache) for ids that
// may read, answer writes at once only for ids that may write, and every
// write drops the key from the caches.
func (s *Store) KVSpace(id string) (space string, readable, writable bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	var registry, tenant string
	var grants Grants
	switch rs, rec := s.runs[id], s.records[id]; {
	case rs != nil:
		registry, tenant, grants = rs.registry.name, rs.tenant, rs.grants
	case rec != nil:
		registry, tenant, grants = rec.Registry, rec.Tenant, rec.Grants
	default:
		return "", false, false
	}
	g := capability.Grants{Capabilities: grants.Capabilities}
	return kv.SpaceName(registry, tenant), g.AllowsKV(kvop.Get) == nil, g.AllowsKV(kvop.Put) == nil
}

// KVWrite is one write of a kv.batch: a worker's writes, sent in the order
// its programs made them (kv/cache).
type KVWrite struct {
	Op    string // kv.put or kv.delete
	Key   string
	Value *string // nil for a delete
}

// KVWrites applies run or handle id's writes in order, each checked as the
// kv.put or kv.delete host call it stands for (the same lookup, tenant and
// grant checks as HostCall); the first that fails ends them with its error
// (the worker fails the invocations that made it and the rest).
func (s *Store) KVWrites(ctx context.Context, workerTenant, id string, writes []KVWrite) error {
	host, rs, rec, reg, tenant, grants := s.caller(id)
	if host == nil || host.KV == nil {
		return fault.New(fault.Forbidden, "This gateway grants no capabilities.")
	}
	if err := heldFor(reg, workerTenant, tenant); err != nil {
		return err
	}
	if len(writes) > 10000 {
		return fault.New(fault.BadRequest, "Malformed kv writes.")
	}
	call := capability.Call{
		Tenant: tenant, Registry: reg.name, ExecutionID: id,
		Grants: capability.Grants{Capabilities: grants.Capabilities},
	}
	ctx, cancel := context.WithTimeout(ctx, kvWait(ctx, rs, rec, reg.config()))
	defer cancel()
	for _, w := range writes {
		value := w.Value
		switch kvop.Op(w.Op) {
		case kvop.Put:
			if value == nil {
				value = new(string)
			}
		case kvop.Delete:
			value = nil
		default:
			return fault.New(fault.BadRequest, "Malformed kv writes.")
		}
		call.Op = w.Op
		if err := host.KVWrite(ctx, call, w.Key, value); err != nil {
			s.noteDenial(err, reg, rs, id)
			s.noteKVUnanswered(err, w.Op, rec)
			return err
		}
	}
	return nil
}

// noteKVUnanswered marks a handle whose kv call failed retryably (the
// store did not answer in time, a commit failed): if its handler throws
// for it, the visitor is answered 503 OVERLOADED, retryable, instead of
// 500 (invoke.go). rec is nil for a run.
func (s *Store) noteKVUnanswered(err error, op string, rec *Record) {
	if rec == nil || !kvop.Is(op) && !strings.HasPrefix(op, "objects.") || fault.CodeOf(err) != fault.Overloaded {
		return
	}
	if ls := s.liveFor(rec.ID); ls != nil {
		ls.kvUnanswered.Store(time.Now().UnixNano())
	}
}

// kvWait is how long a kv call of run rs or handle rec may wait for the
// store: half what is left of its run's bound (a handle's timeout, a run's
// time left; the invocation's time left when the worker sent it with the
// call, program.DueOf), so that a store that does not answer (a cluster's
// etcd unreachable) gets the program OVERLOADED to answer or throw before
// its own bound ends it with TIMEOUT, its isolate with it, however many
// calls it made before. The kv store's own bound applies too.
func kvWait(ctx context.Context, rs *runState, rec *Record, cfg RegistryConfig) time.Duration {
	bound := cfg.Limits.Timeout
	switch {
	case rs != nil && !rs.deadline.IsZero():
		bound = time.Until(rs.deadline)
	case rec != nil && rec.TimeoutMs > 0:
		bound = time.Duration(rec.TimeoutMs) * time.Millisecond
	}
	if due, ok := program.DueOf(ctx); ok {
		bound = min(bound, time.Until(due))
	}
	return max(bound/2, 10*time.Millisecond)
}
