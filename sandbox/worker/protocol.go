package worker

import (
	"encoding/json"
	"fmt"
	"time"

	"github.com/retainer-gw/retainer/fault"
	"github.com/retainer-gw/retainer/sandbox"
)

// ProtocolVersion is checked in the hello handshake: a worker from another
// build is refused.
const ProtocolVersion = "retainer-worker/1"

// Subcommand is the first argument that puts the binary in worker mode.
const Subcommand = "retainer-worker"

// Paths of the worker's server (gateway → worker).
const (
	pathHello  = "/hello"
	pathRun    = "/run"
	pathInvoke = "/invoke"
	pathClose  = "/close"
	pathProbe  = "/probe"
)

// Paths of the gateway's server (worker → gateway).
const (
	pathLog  = "/log"
	pathLost = "/lost"
	pathHost = "/host"
)

// Size caps for what crosses the boundary. Bodies are base64 in JSON, so
// the wire is ~4/3 of the byte bounds plus the envelope.
const (
	maxReplyBytes   = 16 << 20  // a worker's answer to a call
	maxWorkerPost   = 256 << 10 // a worker's own request (a log line, a lost isolate)
	maxHostCall     = 4 << 20   // a host call's arguments (a kv value or a fetch body, as JSON)
	maxLogMessage   = 64 << 10
	maxFrame        = maxReplyBytes + 64<<10 // the largest frame either side accepts
	fdConn          = 3                      // the worker's end of the socketpair
	handshakeTimout = 30 * time.Second
)

// WorkerConfig is what a worker is told in the handshake.
type WorkerConfig struct {
	Engine     EngineConfig `json:"engine"`
	Landlock   bool         `json:"landlock"`
	Seccomp    bool         `json:"seccomp"`
	RlimitData uint64       `json:"rlimitData"`
	// Probe enables the /probe call, which tries forbidden system calls and
	// reports that they fail. Tests turn it on; the product never does.
	Probe bool `json:"probe"`
}

// EngineConfig is the part of sandbox.Config that crosses the boundary.
type EngineConfig struct {
	Prewarm         int           `json:"prewarm"`
	HostCalls       bool          `json:"hostCalls"`
	Timeout         time.Duration `json:"timeout"`
	MemoryMiB       int           `json:"memoryMiB"`
	MaxResponseBody int           `json:"maxResponseBody"`
	HandleQueue     int           `json:"handleQueue"`
	JIT             bool          `json:"jit"`
	Wasm            bool          `json:"wasm"`
}

type helloRequest struct {
	Version string       `json:"version"`
	Config  WorkerConfig `json:"config"`
}

type helloReply struct {
	Version string `json:"version"`
	PID     int    `json:"pid"`
	Error   string `json:"error,omitempty"`
}

// wireFault is a fault as it crosses the boundary.
type wireFault struct {
	Code    fault.Code `json:"code"`
	Message string     `json:"message"`
}

func toWire(err error) *wireFault {
	if err == nil {
		return nil
	}
	f := fault.As(err)
	return &wireFault{Code: f.Code, Message: f.Message}
}

func (w *wireFault) err() error {
	if w == nil {
		return nil
	}
	return &fault.Fault{Code: w.Code, Message: w.Message}
}

type runReply struct {
	Outcome sandbox.Outcome `json:"outcome"`
	Fault   *wireFault      `json:"fault,omitempty"`
}

type invokeRequest struct {
	ID      string              `json:"id"`
	Name    string              `json:"name"`
	Request sandbox.WireRequest `json:"request"`
}

type invokeReply struct {
	Response sandbox.WireResponse `json:"response"`
	// Logs are the invocation's console lines, recorded before it answers.
	Logs  []sandbox.LogEntry `json:"logs,omitempty"`
	Fault *wireFault         `json:"fault,omitempty"`
}

type closeRequest struct {
	ID string `json:"id"`
}

type closeReply struct {
	Fault *wireFault `json:"fault,omitempty"`
}

type logPost struct {
	ID    string           `json:"id"`
	Entry sandbox.LogEntry `json:"entry"`
}

// hostPost is a program's request for a host service (kv, fetch, a tool).
type hostPost struct {
	ID   string          `json:"id"`
	Op   string          `json:"op"`
	Args json.RawMessage `json:"args"`
}

type hostReply struct {
	Result json.RawMessage `json:"result,omitempty"`
	Fault  *wireFault      `json:"fault,omitempty"`
}

type lostPost struct {
	ID    string     `json:"id"`
	Fault *wireFault `json:"fault"`
}

// ProbeReport says what each forbidden action did inside a worker.
type ProbeReport struct {
	Environment []string          `json:"environment"`
	Results     map[string]string `json:"results"` // action → "denied: <errno>" or "ALLOWED"
}

// decodeCapped reads one JSON value of at most max bytes; anything bigger
// or malformed is an error.
func decodeCapped(data []byte, max int, v any) error {
	if len(data) > max {
		return fmt.Errorf("message over %d bytes", max)
	}
	return json.Unmarshal(data, v)
}
