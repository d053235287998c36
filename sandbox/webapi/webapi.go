// Package webapi is how a web API of the runtime declares its Go half:
// the host operations its JavaScript asks for by name (coldHost('name')),
// each once, with the arguments it needs and a Go function that knows
// nothing of V8. A web API is a folder under sandbox/webapi/ that holds
// both halves: its JavaScript (files joined into the runtime in the order
// of their names, with the rest of it) and its Go package, whose API the
// engine installs (webAPIs, sandbox/install.go). An API with no Go half
// (fetch's classes, events, blobs) is a folder of JavaScript alone; one
// whose Go half is not host operations (websocket's record format, which
// the gateway reads) has no API table. The engine checks every name the
// runtime asks for against the declared ones, and every declared one
// against a use (TestHostFunctionsAreDeclaredOnce).
//
// It imports nothing: the Go halves of the web APIs build and test
// without V8.
package webapi

import (
	"fmt"
	"strconv"
)

// Arg is one argument as the runtime passed it; the engine's values
// answer these (bytes cross as Latin-1 strings, internal/wirejson).
type Arg interface {
	String() string
	Integer() int64
	Boolean() bool
}

// API is a web API's Go half: its host operations, and for an API that
// keeps state between calls (a text decoder mid-stream, a compression
// stream), how to make that state for one isolate.
type API struct {
	Ops []Op
	// NewSession makes the API's state for one isolate, at the first call
	// of one of its operations there; the engine closes it when the
	// isolate ends. nil for an API without state.
	NewSession func() Session
}

// Session is a web API's state in one isolate. Its operations are called
// on the isolate's own thread, one at a time, and Close last.
type Session interface {
	Close()
}

// Op is one host operation of a web API.
type Op struct {
	// Name is the name the runtime asks for.
	Name string
	// Args is how many arguments it needs, and Needs says which, for the
	// error when fewer come ("a key and data").
	Args  int
	Needs string
	// Do is the operation; it answers a string (bytes as Latin-1). With
	// is instead the operation of an API with a session, given the
	// isolate's.
	Do   func(args []Arg) (string, error)
	With func(s Session, args []Arg) (string, error)
}

// Call runs op with args (and the isolate's session, for an operation
// that takes one), refusing too few.
func (op Op) Call(s Session, args []Arg) (string, error) {
	if len(args) < op.Args {
		return "", fmt.Errorf("%s needs %s", op.Name, op.Needs)
	}
	if op.With != nil {
		return op.With(s, args)
	}
	return op.Do(args)
}

// TextArg is an argument given as its text (a number as its digits, true
// as "true"), for running operations without an isolate: the APIs' own
// tests do.
type TextArg string

func (a TextArg) String() string { return string(a) }
func (a TextArg) Integer() int64 { n, _ := strconv.ParseInt(string(a), 10, 64); return n }
func (a TextArg) Boolean() bool  { return a == "true" }

// Run runs api's operation name with args given as text, in session s
// (nil for an operation without one).
func (api API) Run(s Session, name string, args ...string) (string, error) {
	for _, op := range api.Ops {
		if op.Name == name {
			in := make([]Arg, len(args))
			for i, a := range args {
				in[i] = TextArg(a)
			}
			return op.Call(s, in)
		}
	}
	return "", fmt.Errorf("no operation %q", name)
}
