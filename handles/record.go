package handles

import (
	"encoding/json"
	"time"

	"github.com/retainer-gw/retainer/program"
)

// Record is a retained handle as persisted. Env holds the tenant's
// configuration and secrets: it is never echoed by the API.
type Record struct {
	ID        string            `json:"id"`
	Registry  string            `json:"registry"`
	Tenant    string            `json:"tenant"`
	Program   program.Program   `json:"program"`
	Env       map[string]string `json:"env,omitempty"`
	Grants    Grants            `json:"grants"`
	TimeoutMs int64             `json:"timeoutMs"`
	MemoryMiB int               `json:"memoryMiB"`
	// Concurrency is how many invocations may be in progress at once
	// (docs/architecture.md); 0 is 1. Kept across rebuilds.
	Concurrency   int          `json:"concurrency,omitempty"`
	CreatedAt     time.Time    `json:"createdAt"`
	LastInvokedAt time.Time    `json:"lastInvokedAt"`
	Invocations   int64        `json:"invocations"`
	Strikes       int          `json:"strikes"`
	Routes        []string     `json:"routes,omitempty"`
	ToolAnswers   []ToolAnswer `json:"toolAnswers,omitempty"`
	// BodyChunks is how many chunks of the store hold the program and the
	// tool answers (records.go); 0 for a record stored whole.
	BodyChunks int `json:"bodyChunks,omitempty"`
	// IdleMs is the handle's own idle bound (deployments.go); 0 is the
	// registry's.
	IdleMs int64 `json:"idleMs,omitempty"`
	// Schedules are the handle's cron expressions (schedules.go).
	Schedules []string `json:"schedules,omitempty"`
	// served (memory only, guarded by the store's lock) holds once the
	// handle's isolate served a request since it was last built: parking
	// one that has not loses nothing (lifecycle.go, parkOne).
	served bool
}

// Grants are the capabilities a program was given (docs/threat-model.md).
type Grants struct {
	Capabilities []string   `json:"capabilities,omitempty"`
	Providers    []Provider `json:"providers,omitempty"`
	Outbound     []string   `json:"outbound,omitempty"`
	// Headers are outbound.headers: host → header → template naming
	// secrets, never their values (docs/secrets.md).
	Headers map[string]map[string]string `json:"headers,omitempty"`
}

// Provider is a granted provider and its tools. A caller provider's tools
// run in the process of the host that started the run, answered over its
// executor connection (docs/protocol.md); the others are upstreams declared in the
// Caddyfile.
type Provider struct {
	Name   string   `json:"name"`
	Tools  []string `json:"tools"`
	Caller bool     `json:"caller,omitempty"`
}

// ToolAnswer is one provider tool call made while the handle was deployed,
// replayed in order when it is rebuilt. Args is the call's first argument
// for an upstream tool and the list of its arguments for a caller tool.
type ToolAnswer struct {
	Provider string          `json:"provider"`
	Tool     string          `json:"tool"`
	Args     json.RawMessage `json:"args"`
	Answer   json.RawMessage `json:"answer,omitempty"`
	Error    string          `json:"error,omitempty"`
}

// Info is what the API shows of a handle (README.md, API).
type Info struct {
	ExecutionID   string    `json:"executionId"`
	Handles       []string  `json:"handles"`
	CreatedAt     time.Time `json:"createdAt"`
	LastInvokedAt time.Time `json:"lastInvokedAt"`
	Invocations   int64     `json:"invocations"`
	IdleBoundMs   int64     `json:"idleBoundMs"`
	Routes        []string  `json:"routes"`
	Concurrency   int       `json:"concurrency"`
	// InProgress is the invocations under way or waiting now.
	InProgress int64 `json:"inProgress"`
	// Deployment is true while a route, a domain or a route's kept
	// version points at the handle: the idle bound parks it, never ends
	// it (docs/deployments.md).
	Deployment bool `json:"deployment,omitempty"`
}

// Route is a bound route name.
type Route struct {
	Name        string `json:"name"`
	ExecutionID string `json:"executionId"`
	// Split is the route's split, if it is one (split.go).
	Split []Share `json:"split,omitempty"`
}

func (r *Record) job() program.Job {
	return program.Job{
		ID:            r.ID,
		Program:       r.Program,
		RetainHandles: true,
		Timeout:       time.Duration(r.TimeoutMs) * time.Millisecond,
		MemoryMiB:     r.MemoryMiB,
		Concurrency:   r.Concurrency,
		Env:           r.Env,
		Bindings:      bindings(r.Grants),
	}
}
