package capability

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"strings"
	"time"

	"github.com/retainer-gw/retainer/fault"
	"github.com/retainer-gw/retainer/kv"
	"github.com/retainer-gw/retainer/kv/kvop"
	"github.com/retainer-gw/retainer/sqldb"
)

// Grants are what one run may use.
type Grants struct {
	Capabilities []string
	Outbound     []string            // allow-list host patterns
	Providers    map[string][]string // provider → tools
	// AllowPrivate lifts the internal-address check of fetch (never the
	// allow list): the Caddyfile's outbound_allow_private.
	AllowPrivate bool
	// Headers are outbound.headers (docs/secrets.md): host pattern →
	// header → a template whose {secret.NAME} the gateway fills at fetch.
	Headers map[string]map[string]string
}

// Has reports a capability.
func (g Grants) Has(c string) bool {
	for _, x := range g.Capabilities {
		if x == c {
			return true
		}
	}
	return false
}

// Call is one request from a program.
type Call struct {
	Tenant      string
	Registry    string
	ExecutionID string // the run's id
	Grants      Grants
	Op          string
	Args        json.RawMessage
	// RequestBody opens, by its token, the invoked handler's request body
	// for bucket.put (nil outside an invocation; docs/objects.md).
	RequestBody func(token string) (io.ReadCloser, error)
	// Wait bounds how long a bucket call waits on the object store (0:
	// none but ctx's): past it the call fails OVERLOADED, retryable, which
	// the program can catch (docs/objects.md).
	Wait time.Duration
}

// Denied is the error for a capability that was not granted; its text names
// it (docs/threat-model.md).
func Denied(capability, what string) *fault.Fault {
	return fault.New(fault.Forbidden, "%s needs the %s capability, which this execution was not granted.", what, capability)
}

// IsDenial reports a Denied error (the receipt records denials).
func IsDenial(err error) bool {
	f := fault.As(err)
	return f != nil && f.Code == fault.Forbidden
}

// Host serves calls. Safe for concurrent use.
type Host struct {
	KV      *kv.KV
	Fetcher *Fetcher
	Tools   *Tools
	// SQL is the tenants' databases (nil: none); SQLAnswer bounds one
	// answer (max_response_body).
	SQL       *sqldb.DBs
	SQLAnswer int
	// Secrets fill outbound.headers (nil: none; docs/secrets.md).
	Secrets *Secrets
	// AI serves ai.run (nil: none; docs/ai.md).
	AI *AI
	// Objects serves the bucket (nil: none; docs/objects.md).
	Objects *Objects
	// OnFetchBytes, if set, hears the bytes of each outbound fetch's
	// request and answer as they cross to and from the isolate (usage
	// metering, docs/usage.md).
	OnFetchBytes func(registry, tenant string, n int64)
}

// Serve dispatches a call that is not a tool call (tools go through the
// handles layer, which records and replays them).
func (h *Host) Serve(ctx context.Context, c Call) (json.RawMessage, error) {
	switch c.Op {
	case string(kvop.Get), string(kvop.List), string(kvop.Put), string(kvop.Delete):
		if err := c.Grants.AllowsKV(kvop.Op(c.Op)); err != nil {
			return nil, err
		}
	case "fetch":
		if !c.Grants.Has(Fetch) {
			return nil, Denied(Fetch, "fetch")
		}
		var inject func(ctx context.Context, scheme, host, port string) (http.Header, error)
		if len(c.Grants.Headers) > 0 {
			if h.Secrets == nil {
				return nil, errNoSecretsKey()
			}
			inject = h.Secrets.injector(c.Registry, c.Tenant, c.Grants.Headers, c.Grants.AllowPrivate)
		}
		res, err := h.Fetcher.fetch(ctx, c.ExecutionID, c.Tenant, c.Grants.Outbound, c.Grants.AllowPrivate, c.Args, inject)
		h.fetchBytes(c, len(c.Args)+len(res))
		return res, err
	case "sql":
		return h.sql(ctx, c)
	case "ai":
		if !c.Grants.Has(AIRun) {
			return nil, Denied(AIRun, "ai.run")
		}
		if h.AI == nil {
			return nil, fault.New(fault.BadRequest, "ai.run: this gateway has no ai block (docs/ai.md).")
		}
		return h.AI.run(ctx, h.Fetcher.Streams, c)
	case "fetch.read":
		// A streamed ai.run answer, and an object's body, are read as a
		// fetch answer is.
		if !c.Grants.Has(Fetch) && !c.Grants.Has(AIRun) && !c.Grants.Has(ObjectsRead) && !c.Grants.Has(ObjectsWrite) || h.Fetcher.Streams == nil {
			return nil, Denied(Fetch, "fetch")
		}
		res, err := h.Fetcher.Streams.read(ctx, c.ExecutionID, c.Args)
		h.fetchBytes(c, len(res))
		return res, err
	default:
		if strings.HasPrefix(c.Op, "objects.") {
			return h.objectsCall(ctx, c)
		}
		return nil, fault.New(fault.BadRequest, "Unknown host call %q.", c.Op)
	}
	return h.KV.ServeWithin(ctx, c.Registry, c.Tenant, c.ExecutionID, c.Op, c.Args)
}

func (h *Host) fetchBytes(c Call, n int) {
	if h.OnFetchBytes != nil && n > 0 {
		h.OnFetchBytes(c.Registry, c.Tenant, int64(n))
	}
}

// sql is a program's db call (docs/sql.md): sqlRead or sqlWrite reads,
// only sqlWrite writes; a write refused for want of sqlWrite is a denial.
func (h *Host) sql(ctx context.Context, c Call) (json.RawMessage, error) {
	write := c.Grants.Has(SQLWrite)
	if !write && !c.Grants.Has(SQLRead) {
		return nil, Denied(SQLRead, "db")
	}
	if h.SQL == nil {
		return nil, fault.New(fault.BadRequest, "This gateway keeps no SQL databases.")
	}
	var req sqldb.Request
	if err := json.Unmarshal(c.Args, &req); err != nil {
		return nil, bad("Malformed db call.")
	}
	res, err := h.SQL.Serve(ctx, c.Registry, c.Tenant, write, h.SQLAnswer, req)
	if errors.Is(err, sqldb.ErrNeedsWrite) {
		return nil, Denied(SQLWrite, "A statement that writes")
	}
	return res, err
}

// KVWrite is a kv.put (value non-nil) or kv.delete under c's grants, with
// c.Op naming which: Serve's checks, without the arguments' JSON; ctx
// bounds the store reads its check waits for.
func (h *Host) KVWrite(ctx context.Context, c Call, key string, value *string) error {
	if !kvop.Op(c.Op).Writes() {
		return bad("Malformed kv writes.")
	}
	if err := c.Grants.AllowsKV(kvop.Op(c.Op)); err != nil {
		return err
	}
	return h.KV.WriteWithin(ctx, c.Registry, c.Tenant, c.ExecutionID, key, value)
}

func bad(format string, args ...any) error {
	return fault.New(fault.BadRequest, format, args...)
}
