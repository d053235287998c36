// Package fault is Retainer's one error vocabulary: the codes of the product
// contract (README.md, Caddyfile and API), each with its HTTP status and whether a client
// may retry, and the verbatim texts the contract fixes.
//
// Every layer (sandbox, worker protocol, handles, Caddy module) reports a
// failure a client can see as a *Fault, so that its code, status and text are
// decided once, here. Compare faults with errors.Is against the sentinels
// (errors.Is(err, fault.ErrTimeout)) or read the code with CodeOf; never
// compare messages.
//
// The package deliberately knows nothing of HTTP routing, V8 or tenants: it
// only names what went wrong.
package fault

import (
	"errors"
	"fmt"
	"net/http"
)

// Code is one of the contract's error codes.
type Code string

// The contract's codes (README.md, API).
const (
	BadRequest      Code = "BAD_REQUEST"
	Unauthenticated Code = "UNAUTHENTICATED"
	Forbidden       Code = "FORBIDDEN"
	HandlesClosed   Code = "HANDLES_CLOSED"
	NoSuchHandle    Code = "NO_SUCH_HANDLE"
	NotFound        Code = "NOT_FOUND"
	Conflict        Code = "CONFLICT"
	TooLarge        Code = "TOO_LARGE"
	Syntax          Code = "SYNTAX"
	Runtime         Code = "RUNTIME"
	QuotaExceeded   Code = "QUOTA_EXCEEDED"
	HandlerError    Code = "HANDLER_ERROR"
	BadResponse     Code = "BAD_RESPONSE"
	Overloaded      Code = "OVERLOADED"
	WorkerCrashed   Code = "WORKER_CRASHED"
	Timeout         Code = "TIMEOUT"
	Memory          Code = "MEMORY"
	NotImplemented  Code = "NOT_IMPLEMENTED"
	RequestTimeout  Code = "REQUEST_TIMEOUT"
	Internal        Code = "INTERNAL"
)

var statuses = map[Code]int{
	BadRequest:      http.StatusBadRequest,
	Unauthenticated: http.StatusUnauthorized,
	Forbidden:       http.StatusForbidden,
	HandlesClosed:   http.StatusNotFound,
	NoSuchHandle:    http.StatusNotFound,
	NotFound:        http.StatusNotFound,
	Conflict:        http.StatusConflict,
	TooLarge:        http.StatusRequestEntityTooLarge,
	Syntax:          http.StatusUnprocessableEntity,
	Runtime:         http.StatusUnprocessableEntity,
	QuotaExceeded:   http.StatusTooManyRequests,
	HandlerError:    http.StatusInternalServerError,
	BadResponse:     http.StatusBadGateway,
	Overloaded:      http.StatusServiceUnavailable,
	WorkerCrashed:   http.StatusServiceUnavailable,
	Timeout:         http.StatusGatewayTimeout,
	Memory:          http.StatusInsufficientStorage,
	NotImplemented:  http.StatusNotImplemented,
	RequestTimeout:  http.StatusRequestTimeout,
	Internal:        http.StatusInternalServerError,
}

// HTTPStatus is the status the contract gives the code (500 for an unknown one).
func (c Code) HTTPStatus() int {
	if s, ok := statuses[c]; ok {
		return s
	}
	return http.StatusInternalServerError
}

// Retryable reports whether a client may send the same request again.
func (c Code) Retryable() bool { return c == Overloaded || c == WorkerCrashed }

// Fault is a failure with a contract code and the text a client reads.
type Fault struct {
	Code    Code
	Message string
	// Cause is kept for logs and errors.Unwrap; it never reaches a client.
	Cause error
}

// New makes a fault with a formatted message.
func New(code Code, format string, args ...any) *Fault {
	return &Fault{Code: code, Message: fmt.Sprintf(format, args...)}
}

// Wrap makes a fault that keeps cause for the logs.
func Wrap(code Code, cause error, format string, args ...any) *Fault {
	return &Fault{Code: code, Message: fmt.Sprintf(format, args...), Cause: cause}
}

func (f *Fault) Error() string { return string(f.Code) + ": " + f.Message }

func (f *Fault) Unwrap() error { return f.Cause }

// Is matches any fault of the same code, so the sentinels below work with
// errors.Is whatever the message.
func (f *Fault) Is(target error) bool {
	t, ok := target.(*Fault)
	return ok && t.Code == f.Code
}

// HTTPStatus is the fault's code's status.
func (f *Fault) HTTPStatus() int { return f.Code.HTTPStatus() }

// Retryable is the fault's code's retryability.
func (f *Fault) Retryable() bool { return f.Code.Retryable() }

// Sentinels for errors.Is.
var (
	ErrBadRequest    = &Fault{Code: BadRequest}
	ErrHandlesClosed = &Fault{Code: HandlesClosed}
	// ErrCollateral marks the bound fault of an invocation that was in
	// progress on an isolate when another invocation's bound hit it
	// (docs/architecture.md): it answers the bound's error but takes no
	// strike.
	ErrCollateral = errors.New("in progress when another invocation hit a bound")
	// ErrNotCaused marks a TIMEOUT the program did not cause: its isolate's
	// thread used less than half the bound in CPU during the call (the
	// machine was busy, or it waited for an upstream, a tool or the
	// visitor). It answers TIMEOUT but takes no strike.
	ErrNotCaused = errors.New("the program used less than half its bound in CPU")
	// ErrNotStarted marks the WORKER_CRASHED fault of a call its worker
	// never started (it was never sent, or its worker was taken out of
	// service first): it had no effect, so it is sent again, once.
	ErrNotStarted    = errors.New("the call never started in its worker")
	ErrNoSuchHandle  = &Fault{Code: NoSuchHandle}
	ErrTooLarge      = &Fault{Code: TooLarge}
	ErrSyntax        = &Fault{Code: Syntax}
	ErrRuntime       = &Fault{Code: Runtime}
	ErrHandlerError  = &Fault{Code: HandlerError}
	ErrBadResponse   = &Fault{Code: BadResponse}
	ErrOverloaded    = &Fault{Code: Overloaded}
	ErrWorkerCrashed = &Fault{Code: WorkerCrashed}
	ErrTimeout       = &Fault{Code: Timeout}
	ErrMemory        = &Fault{Code: Memory}
	ErrQuota         = &Fault{Code: QuotaExceeded}
	ErrConflict      = &Fault{Code: Conflict}
	ErrNotFound      = &Fault{Code: NotFound}
)

// As returns err as a *Fault; an error that is not one becomes INTERNAL with a
// generic text (its detail stays in Cause for the logs).
func As(err error) *Fault {
	if err == nil {
		return nil
	}
	var f *Fault
	if errors.As(err, &f) {
		return f
	}
	return &Fault{Code: Internal, Message: "Internal error.", Cause: err}
}

// CodeOf is the code of err ("" for nil).
func CodeOf(err error) Code {
	if err == nil {
		return ""
	}
	return As(err).Code
}

// The contract's verbatim texts.

// TimedOut is the TIMEOUT fault for a bound of ms milliseconds.
func TimedOut(ms int64) *Fault {
	return New(Timeout, "Execution timed out at its %d ms bound. Do less work per run and return the part that is already finished.", ms)
}

// OutOfMemory is the MEMORY fault for a bound of mib MiB.
func OutOfMemory(mib int) *Fault {
	return New(Memory, "Execution exceeded its %d MiB memory bound. Hold less in memory per run.", mib)
}

// NotAResponse is the BAD_RESPONSE fault for a handler that answered something
// other than a Response.
func NotAResponse() *Fault {
	return New(BadResponse, "The fetch handle answered with a value that is not a Response.")
}

// OutsideWireShape is the BAD_RESPONSE fault for an answer the host could not
// accept (bad status, headers or body).
func OutsideWireShape() *Fault {
	return New(BadResponse, "The fetch handle answered outside the response wire shape.")
}

// UnknownHandle is the NO_SUCH_HANDLE fault for a handle name that the
// execution does not hold.
func UnknownHandle(id, name string) *Fault {
	return New(NoSuchHandle, "Execution \"%s\" has no handle named \"%s\". The granted handles are: fetch.", id, name)
}

// AlreadyCompleted is the text of a provider tool called after its run.
const AlreadyCompleted = "Execution has already completed."

// Closed is the HANDLES_CLOSED fault; closed, expired and invented ids all
// answer it, byte for byte.
func Closed(id string) *Fault {
	return New(HandlesClosed, "Execution \"%s\" holds no handles: they were closed, expired at the idle bound, or never granted. Execute again with retainHandles to get a fresh executionId.", id)
}

// CrashedWorker is the retryable WORKER_CRASHED fault.
func CrashedWorker() *Fault {
	return New(WorkerCrashed, "The worker process serving this execution stopped. Retry the request.")
}

// NotStarted is the WORKER_CRASHED fault of a call that never started
// (ErrNotStarted): the caller sends it again.
func NotStarted() *Fault {
	return &Fault{Code: WorkerCrashed, Message: CrashedWorker().Message, Cause: ErrNotStarted}
}

// Overload is the retryable OVERLOADED fault.
func Overload() *Fault {
	return New(Overloaded, "Too many invocations are waiting. Retry shortly.")
}
