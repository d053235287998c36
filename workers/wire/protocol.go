package wire

import (
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/retainer-gw/retainer/budgets"
	"github.com/retainer-gw/retainer/fault"
	"github.com/retainer-gw/retainer/program"
)

// ProtocolVersion is checked in the hello handshake: a worker from another
// build is refused.
const ProtocolVersion = "retainer-worker/3"

// Subcommand is the first argument that puts the binary in worker mode.
const Subcommand = "retainer-worker"

// Paths of the worker's server (gateway → worker). Each request and its
// answer are JSON (the messages below) except: /invoke, a binary
// InvokeRequest answered by a binary InvokeReply, and /stream-read,
// answered by a binary StreamReply (invokewire.go); /cache-tell, whose
// body is the host cache's own. The worker reads frames up to
// MaxGatewayFrame.
const (
	PathHello  = "/hello"
	PathRun    = "/run"
	PathInvoke = "/invoke"
	PathClose  = "/close"
	// PathStreamRead takes the next chunk of a streamed response, waiting
	// up to StreamWait for one; PathStreamCancel gives a stream up.
	PathStreamRead   = "/stream-read"
	PathStreamCancel = "/stream-cancel"
	// PathCacheTell carries a message of the gateway's side of the host
	// cache to the worker's (opaque here: internal/hostcache; kv/cache
	// drops what another worker's write changed).
	PathCacheTell = "/cache-tell"
	PathProbe     = "/probe"
	// PathProbeForeign makes one system call through a foreign entry
	// (body: "i386" or "x32"); a hardened worker dies of it.
	PathProbeForeign = "/probe-foreign"
)

// Paths of the gateway's server (worker → gateway), every one JSON but
// /cache-batch, whose body and answer are the host cache's own; the
// gateway reads frames up to WorkerFrameCap (MaxWorkerPost for /log and
// /lost, whose messages are small), and a worker that sends more is
// killed.
const (
	PathLog  = "/log"
	PathLost = "/lost"
	PathHost = "/host"
	// PathCacheBatch carries what the worker's host cache sends on its
	// own (kv/cache: a binary frame of queued writes, with its own
	// version) and the gateway side's reply; opaque here.
	PathCacheBatch = "/cache-batch"
	// PathCacheAnswers is /cache-batch with invocations' answers carried
	// along, each released by the gateway as if it had come in a frame of
	// its own once the writes it waits for are applied (carry.go).
	PathCacheAnswers = "/cache-answers"
)

// Size caps for what crosses the boundary. Every bound on what a program
// sends outward is enforced inside the worker, on the encoded bytes (the
// sandbox measures results, thrown texts, logs, response heads and bodies,
// host-call arguments); these caps only keep a worker that breaks the
// protocol anyway from costing the gateway memory, and such a worker is
// killed (a crash no call explains, docs/architecture.md).
const (
	MaxWorkerPost    = 256 << 10 // a worker's own request (a log line, a lost isolate)
	FdIn             = 3         // the worker reads the gateway's frames here (Link)
	FdOut            = 4         // and writes its own here
	HandshakeTimeout = 30 * time.Second
	// MaxGatewayFrame is what a worker reads from the gateway (trusted; a
	// fetch answer of 8 MiB of control bytes encodes to 48 MiB).
	MaxGatewayFrame = 256 << 20
	// HelloFrame is what a worker may send before it knows the gateway's
	// cap from the handshake.
	HelloFrame = 64 << 10
)

// WorkerFrameCap is the largest frame the gateway reads from a worker, for
// the bounds the worker enforces: a run's result (8 MiB encoded) or a
// response body (its bytes as they are) plus their logs and heads, or a
// host call's arguments, each with a MiB to spare. Pool.Invoke holds a
// body to its own bound again.
func WorkerFrameCap(e EngineConfig) int {
	c := budgets.ResultBytes
	if e.Limits.ResponseBody > c {
		c = e.Limits.ResponseBody
	}
	if h := budgets.HostArgsBytes(e.Limits.RequestBody); h > c {
		c = h
	}
	return c + 1<<20
}

// WorkerConfig is what a worker is told in the handshake.
type WorkerConfig struct {
	Engine     EngineConfig `json:"engine"`
	Landlock   bool         `json:"landlock"`
	Seccomp    bool         `json:"seccomp"`
	RlimitData uint64       `json:"rlimitData"`
	// Probe enables the /probe call, which tries forbidden system calls and
	// reports that they fail. Tests turn it on; the product never does.
	Probe bool `json:"probe"`
	// FrameCap is the largest frame the gateway reads from this worker.
	FrameCap int `json:"frameCap"`
	// GCPercent and GCHeadroom are the worker's Go collector policy, the
	// gateway's own (GOGC, which the worker's empty environment cannot
	// carry): with a headroom, internal/gctarget's (GCPercent while the
	// live heap is small); without, the fixed target GCPercent (0 keeps
	// Go's default, -1 turns the collector off as GOGC=off does).
	GCPercent  int    `json:"gcPercent,omitempty"`
	GCHeadroom uint64 `json:"gcHeadroom,omitempty"`
}

// EngineConfig is the part of sandbox.Config that crosses the boundary:
// the run limits as the gateway's configuration set them, whole.
type EngineConfig struct {
	Prewarm   int            `json:"prewarm"`
	HostCalls bool           `json:"hostCalls"`
	Limits    budgets.Limits `json:"limits"`
	JIT       bool           `json:"jit"`
	Wasm      bool           `json:"wasm"`
}

type HelloRequest struct {
	Version string       `json:"version"`
	Config  WorkerConfig `json:"config"`
	// Startup is the snapshot and module caches the pool's first worker
	// made, to start from instead of making them; WantStartup asks the
	// worker to answer its own (the pool has none yet).
	Startup     *Startup `json:"startup,omitempty"`
	WantStartup bool     `json:"wantStartup,omitempty"`
}

type HelloReply struct {
	Version string `json:"version"`
	PID     int    `json:"pid"`
	Error   string `json:"error,omitempty"`
	// Startup answers WantStartup, made before the worker served
	// anything; FromStartup says it started from the one given.
	Startup     *Startup `json:"startup,omitempty"`
	FromStartup bool     `json:"fromStartup,omitempty"`
}

// Startup is a worker's runtime snapshot and runtime modules' code caches
// (sandbox.Startup), made by a pool's first worker as it starts and given
// to the workers started after it (docs/decisions.md, "Workers start from
// the first one's snapshot").
type Startup struct {
	Snapshot []byte            `json:"snapshot"`
	Modules  map[string][]byte `json:"modules"`
	Sum      []byte            `json:"sum"` // the maker's SHA-256 of them
}

// Fault is a fault as it crosses the boundary.
type Fault struct {
	Code    fault.Code `json:"code"`
	Message string     `json:"message"`
	// Collateral: a bound hit this invocation's isolate while another
	// invocation was the cause (no strike).
	Collateral bool `json:"collateral,omitempty"`
	// NotCaused: a TIMEOUT the program did not spend the CPU for (no
	// strike; fault.ErrNotCaused).
	NotCaused bool `json:"notCaused,omitempty"`
}

func ToWire(err error) *Fault {
	if err == nil {
		return nil
	}
	f := fault.As(err)
	return &Fault{Code: f.Code, Message: f.Message, Collateral: errors.Is(err, fault.ErrCollateral), NotCaused: errors.Is(err, fault.ErrNotCaused)}
}

func (w *Fault) Err() error {
	if w == nil {
		return nil
	}
	f := &fault.Fault{Code: w.Code, Message: w.Message}
	switch {
	case w.Collateral:
		f.Cause = fault.ErrCollateral
	case w.NotCaused:
		f.Cause = fault.ErrNotCaused
	}
	return f
}

type RunReply struct {
	Outcome program.Outcome `json:"outcome"`
	Fault   *Fault          `json:"fault,omitempty"`
}

type InvokeRequest struct {
	ID      string              `json:"id"`
	Name    string              `json:"name"`
	Request program.WireRequest `json:"request"`
}

type InvokeReply struct {
	Response program.WireResponse `json:"response"`
	// Logs are the invocation's console lines, recorded before it answers.
	Logs  []program.LogEntry `json:"logs,omitempty"`
	Fault *Fault             `json:"fault,omitempty"`
}

// StreamWait is the longest a stream read waits in the worker for a chunk;
// the gateway then asks again (so a read is never a call without an end).
const StreamWait = 15 * time.Second

type StreamRequest struct {
	ID     string `json:"id"`
	Stream int64  `json:"stream"`
	WaitMs int64  `json:"waitMs,omitempty"`
}

type StreamReply struct {
	Data  []byte `json:"data,omitempty"` // at most budgets.StreamWindow bytes
	Done  bool   `json:"done,omitempty"`
	Fault *Fault `json:"fault,omitempty"`
}

type CloseRequest struct {
	ID string `json:"id"`
}

type CloseReply struct {
	Fault *Fault `json:"fault,omitempty"`
}

type LogPost struct {
	ID    string           `json:"id"`
	Entry program.LogEntry `json:"entry"`
}

// HostPost is a program's request for a host service (kv, fetch, a tool).
type HostPost struct {
	ID   string          `json:"id"`
	Op   string          `json:"op"`
	Args json.RawMessage `json:"args"`
	// Left is what was left of the calling invocation's bound when the
	// call was sent, in microseconds (0: not known, as from a call made
	// outside one): the gateway bounds the call's waits by it.
	Left int64 `json:"left,omitempty"`
}

type HostReply struct {
	Result json.RawMessage `json:"result,omitempty"`
	Fault  *Fault          `json:"fault,omitempty"`
	// Cache is the gateway side's note for the worker's host cache
	// (internal/hostcache), opaque here.
	Cache json.RawMessage `json:"cache,omitempty"`
}

type LostPost struct {
	ID    string `json:"id"`
	Fault *Fault `json:"fault"`
}

// ProbeReport says what each forbidden action did inside a worker.
type ProbeReport struct {
	Environment []string          `json:"environment"`
	Results     map[string]string `json:"results"` // action → "denied: <errno>" or "ALLOWED"
	// GCPercent is the worker's Go collector target as it runs; GCHeadroom
	// the bound it follows (0: fixed).
	GCPercent  int    `json:"gcPercent"`
	GCHeadroom uint64 `json:"gcHeadroom"`
	// TimerSlack is the timer slack (ns) of the thread that answered, as
	// the worker inherited it from its gateway (workers'
	// timerslack_linux.go).
	TimerSlack int64 `json:"timerSlack"`
	// ForcedGCs counts the worker's forced collections (runtime/metrics'
	// /gc/cycles/forced:gc-cycles): a warm spare returns its start's heap
	// with one (sandbox/child's warmSpare).
	ForcedGCs uint64 `json:"forcedGCs"`
}

// DecodeCapped reads one JSON value of at most max bytes; anything bigger
// or malformed is an error.
func DecodeCapped(data []byte, max int, v any) error {
	if len(data) > max {
		return fmt.Errorf("message over %d bytes", max)
	}
	return json.Unmarshal(data, v)
}
