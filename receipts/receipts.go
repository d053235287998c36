package receipts

import (
	"encoding/binary"
	"encoding/json"
	"time"

	"github.com/google/uuid"

	"github.com/retainer-gw/retainer/budgets"
)

// table holds receipts under length-prefixed keys (see key). The first
// layout ("receipts", tenant NUL id) let tenant "bob" list "bob\x00x"'s
// receipts; its keys are dropped on open (receipts are kept days, not
// forever).
const (
	table    = "receipts.v2"
	oldTable = "receipts"
)

// TenantBytes is the default per-tenant quota of stored receipts: past it
// a tenant's oldest receipts go first (a budget: docs/architecture.md,
// "Budgets"), so one tenant's runs never fill the store for the others.
const TenantBytes = budgets.ReceiptBytesPerTenant

// Receipt is the record of one run.
type Receipt struct {
	ID            string            `json:"resultId"`
	Tenant        string            `json:"tenant"`
	Registry      string            `json:"registry"`
	Code          string            `json:"code"`
	Modules       map[string]string `json:"modules,omitempty"`
	RetainHandles bool              `json:"retainHandles"`
	Grants        Grants            `json:"grants"`
	Outcome       Outcome           `json:"outcome"`
	Logs          []string          `json:"logs"`
	Timing        Timing            `json:"timing"`
	ExecutionID   string            `json:"executionId,omitempty"`
	// Kind is "execution" (POST /executions, the default when empty),
	// "run", "chain" or "generate" (the run service, README.md, API).
	Kind string `json:"kind,omitempty"`
	// Prompt and Model are a generated run's; the model's key never is.
	Prompt string `json:"prompt,omitempty"`
	Model  string `json:"model,omitempty"`
	// Steps are a chain's steps, in order, each with its input and output.
	Steps []Step `json:"steps,omitempty"`
	// Children are the runs spawned by this run, at every depth.
	Children  []Child  `json:"children,omitempty"`
	Truncated []string `json:"truncated,omitempty"`
}

// Step is one step of a chain.
type Step struct {
	Name       string          `json:"name"`
	Code       string          `json:"code"`
	Grants     Grants          `json:"grants"`
	Input      json.RawMessage `json:"input"`
	Outcome    Outcome         `json:"outcome"`
	Logs       []string        `json:"logs"`
	DurationMs float64         `json:"durationMs"`
}

// Child is one spawned run (beyond the seed, which persists none).
type Child struct {
	Depth      int     `json:"depth"`
	Outcome    string  `json:"outcome"` // "ok" or the error code
	DurationMs float64 `json:"durationMs"`
}

// Grants is what the program was allowed to use (never env values).
type Grants struct {
	Capabilities []string            `json:"capabilities"`
	Providers    map[string][]string `json:"providers"`
	Outbound     []string            `json:"outbound"`
	// OutboundHeaders are the request's outbound.headers as it gave them:
	// host → header → template, each {secret.NAME} kept as it is written,
	// never the secret's value (docs/secrets.md).
	OutboundHeaders map[string]map[string]string `json:"outboundHeaders,omitempty"`
	EnvKeys         []string                     `json:"envKeys,omitempty"`
}

// Outcome is how the run ended.
type Outcome struct {
	Status  string          `json:"status"` // "ok" or "error"
	Result  json.RawMessage `json:"result,omitempty"`
	Handler bool            `json:"handler,omitempty"`
	Error   *Error          `json:"error,omitempty"`
	Denials []string        `json:"denials,omitempty"`
}

// Error is a failed run's code and text.
type Error struct {
	Code    string `json:"code"`
	Message string `json:"message"`
}

// Timing is when the run was received, started and ended.
type Timing struct {
	Received   time.Time `json:"received"`
	Started    time.Time `json:"started"`
	Ended      time.Time `json:"ended"`
	DurationMs float64   `json:"durationMs"`
}

// NewID mints a resultId: a UUIDv7, so that ids sort by time.
func NewID() string { return uuid.Must(uuid.NewV7()).String() }

// tenantPrefix is a tenant's key prefix: its length, then its bytes, so
// that no tenant's prefix is a prefix of another's, whatever the ids hold.
func tenantPrefix(tenant string) []byte {
	p := binary.BigEndian.AppendUint32(nil, uint32(len(tenant)))
	return append(p, tenant...)
}

func key(tenant, id string) []byte { return append(tenantPrefix(tenant), id...) }

// prefixOf is the tenant prefix of a receipt's key, as a map key.
func prefixOf(k []byte) string {
	if len(k) < 4 {
		return ""
	}
	n := 4 + int(binary.BigEndian.Uint32(k[:4]))
	if n > len(k) {
		return ""
	}
	return string(k[:n])
}
