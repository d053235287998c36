package program

import (
	"encoding/json"
	"time"
)

// Job is one run of a program.
type Job struct {
	// ID is the execution id under which a handler is retained.
	ID      string  `json:"id"`
	Program Program `json:"program"`
	// RetainHandles keeps the isolate alive when the program answers a
	// request handler.
	RetainHandles bool `json:"retainHandles,omitempty"`
	// Timeout and MemoryMiB bound this run (and, when retained, each later
	// invocation); zero takes the engine's defaults.
	Timeout   time.Duration     `json:"timeout,omitempty"`
	MemoryMiB int               `json:"memoryMiB,omitempty"`
	Env       map[string]string `json:"env,omitempty"`
	// Concurrency is how many invocations of a retained handler may be in
	// progress at once (docs/architecture.md); 0 or 1: one at a time.
	Concurrency int `json:"concurrency,omitempty"`
	// Bindings name what the runtime installs: provider objects with their
	// tools, and whether env carries kv. Installing a binding grants
	// nothing: the host checks every call.
	Bindings Bindings `json:"bindings,omitempty"`
}

// Bindings are the names the runtime exposes to a program.
type Bindings struct {
	Providers map[string][]string `json:"providers,omitempty"`
	KV        bool                `json:"kv,omitempty"`
	SQL       bool                `json:"sql,omitempty"` // db (docs/sql.md)
	AI        bool                `json:"ai,omitempty"`  // ai (docs/ai.md)

	// Objects: bucket (docs/objects.md).
	Objects bool `json:"objects,omitempty"`
}

// Outcome is what a run answers. Logs are filled on failure too.
type Outcome struct {
	// Result is the JSON of the program's value; nil when it answered
	// undefined or a handler.
	Result json.RawMessage `json:"result,omitempty"`
	Logs   []string        `json:"logs"`
	// Handler is true when the program answered a request handler.
	Handler bool `json:"handler,omitempty"`
	// Retained is true when the isolate now lives on under Job.ID.
	Retained bool `json:"retained,omitempty"`
	// Scheduled is true when the handler is an object with a scheduled
	// method (events.go).
	Scheduled bool `json:"scheduled,omitempty"`
	// CPUNs is the isolate's CPU time the run was charged, in ns
	// (sandbox/threadhold.go): usage metering's (docs/usage.md).
	CPUNs int64 `json:"cpuNs,omitempty"`
}

// LogEntry is one console call of a retained handler, for the handle's log.
type LogEntry struct {
	Time    time.Time `json:"time"`
	Level   string    `json:"level"`
	Message string    `json:"message"`
}
