// Package budgets holds the caps on what the gateway keeps in memory for
// tenants, the default bounds of a run, and the byte budget that charges each hold to its tenant below a
// gateway-wide cap (docs/architecture.md, "Budgets", has the table of every
// cap and where it is enforced). Past a tenant's share the tenant gets
// QUOTA_EXCEEDED; past the gateway's cap the one who asked gets
// OVERLOADED; never another tenant.
//
// It knows nothing of HTTP, V8 or handles.
package budgets

import (
	"sync"
	"time"

	"github.com/retainer-gw/retainer/fault"
)

// The caps, one place for all (each package names them where it enforces
// them). A tenant is charged; on the public data plane a visitor address.
const (
	// Receipts: one stored receipt, and a tenant's receipts in all (its
	// oldest go first past it).
	ReceiptBytes          = 256 << 10
	ReceiptBytesPerTenant = 256 << 20
	// A deploy's recorded tool answers (replayed by a rebuild).
	RecordedCalls = 1000
	RecordedBytes = 1 << 20
	// Outbound fetch answers left unread: a run's or handle's, a
	// tenant's, the gateway's.
	FetchStreamsPerOwner  = 16
	FetchStreamsPerTenant = 256
	FetchStreams          = 10000
	// Chunked bucket.put uploads under way (docs/objects.md): per
	// tenant, and in one gateway.
	ObjectUploadsPerTenant = 64
	ObjectUploads          = 1024
	// Bucket puts under way however their bodies arrive (the control
	// plane's, a handler's request body, chunked), per tenant and in one
	// gateway; and the S3 backend's 5 MiB part buffers they hold while
	// their bodies arrive (a put waits ObjectPartBufferWait for one).
	ObjectPutsPerTenant        = 64
	ObjectPuts                 = 1024
	ObjectPartBuffersPerTenant = 8
	ObjectPartBuffers          = 32
	ObjectPartBufferWait       = 5 * time.Second
	// Streamed responses (SSE listeners included): a handle's isolate
	// holds this many; one visitor address at most StreamsPerVisitor of
	// one handle.
	StreamsPerHandle  = 1024
	StreamsPerVisitor = 64
	// Executor sockets a tenant holds on one site, and how long one may
	// stay silent.
	ExecutorSocketsPerTenant = 64
	ExecutorSocketIdle       = 5 * time.Minute
	// A tenant's kv: a key's and a value's bytes (the gateway refuses
	// past them, and a worker's cache refuses at once what the gateway
	// would).
	KVKeyBytes   = 512
	KVValueBytes = 1 << 20
	// A tenant's SQL database (docs/sql.md): its file by default
	// (sql_quota), one database's engine memory, one value, the
	// statements kept prepared a database, and the engines open at once
	// in the gateway.
	SQLQuota       = 1 << 30
	SQLMemory      = 32 << 20
	SQLValueBytes  = 16 << 20
	SQLCachedStmts = 32
	SQLOpen        = 32
	// In a cluster, the owners a gateway remembers for the keys and
	// tenants it forwarded (all forgotten past it; docs/cluster.md), and
	// the largest forwarded body the forwarding HMAC covers by its digest
	// (read whole on both gateways).
	ForwardOwners     = 100_000
	ForwardDigestBody = 64 << 10
	// In a cluster, the forwarded requests' nonces an owner remembers in
	// each 32 s (docs/cluster.md): past it, forwards answer OVERLOADED.
	ForwardNonces = 1 << 20
	// In a cluster, the store reads a visitor address may cause by naming
	// keys a gateway has not seen (a second's worth, and a burst), counted
	// in LookupBuckets buckets that addresses share by hash.
	LookupsPerVisitor     = 50
	LookupBurstPerVisitor = 100
	LookupBuckets         = 4096
	// Names a tenant binds in a registry; a name or host freed by its
	// handle's end stays its tenant's for NameReservation.
	RoutesPerTenant  = 100
	DomainsPerTenant = 100
	NameReservation  = 24 * time.Hour
	// WebSockets: the defaults of websockets_per_handle and
	// websockets_per_tenant, and a message's bound either way.
	WebsocketsPerHandle = 1000
	WebsocketsPerTenant = 10000
	WebsocketMessage    = 1 << 20
	// A handle's log in memory (its newest entries; the oldest dropped).
	HandleLogBytes = 64 << 10
	// WebSockets one visitor address holds open on one handle.
	WebsocketsPerVisitor = 64
	// Handles' log entries waiting to be written to the store
	// (docs/logs.md): one handle's console and system entries, and its
	// request entries (its excess is left out), and all handles' (the
	// tenant waiting the most loses its entries first).
	LogPendingPerHandle         = 64 << 10
	LogPendingRequestsPerHandle = 256 << 10
	LogPending                  = 16 << 20
	// ai.run calls in flight to the model endpoint (a streamed one until
	// its stream ends; docs/ai.md): a tenant's (past it a call waits for
	// one of the tenant's own to end), and the gateway's (past it
	// OVERLOADED), which also bounds the AI client's connections.
	AICallsPerTenant = 16
	AICalls          = 256
)

// A run's bounds where the configuration names none (Limits). A handle's
// queue is the invocations one isolate holds waiting.
const (
	RunTimeout        = 500 * time.Millisecond
	RunMemoryMiB      = 64
	RequestBodyBytes  = 1 << 20
	ResponseBodyBytes = 8 << 20
	HandleQueue       = 64
)

// Limits are a run's bounds as the gateway's configuration sets them
// (timeout, memory, max_request_body, max_response_body, and a handle's
// queue). They are built once from the configuration (caddymodule) and
// passed down whole: to the registry, to the worker pool, across the
// process boundary to each worker, and to its engine. No package keeps a
// default of its own; a zero field takes the one above (WithDefaults).
type Limits struct {
	// Timeout bounds a run or an invocation.
	Timeout time.Duration `json:"timeout"`
	// MemoryMiB bounds an isolate's heap.
	MemoryMiB int `json:"memoryMiB"`
	// RequestBody bounds a request body: an API request's, a visitor's,
	// an outbound fetch's.
	RequestBody int `json:"requestBody"`
	// ResponseBody bounds a handler's response body and an outbound
	// fetch's answer.
	ResponseBody int `json:"responseBody"`
	// HandleQueue is how many invocations wait for one isolate.
	HandleQueue int `json:"handleQueue"`
}

// WithDefaults answers l with each unset (zero or negative) field at its
// default.
func (l Limits) WithDefaults() Limits {
	if l.Timeout <= 0 {
		l.Timeout = RunTimeout
	}
	if l.MemoryMiB <= 0 {
		l.MemoryMiB = RunMemoryMiB
	}
	if l.RequestBody <= 0 {
		l.RequestBody = RequestBodyBytes
	}
	if l.ResponseBody <= 0 {
		l.ResponseBody = ResponseBodyBytes
	}
	if l.HandleQueue <= 0 {
		l.HandleQueue = HandleQueue
	}
	return l
}

// Buffered bodies: what the gateway holds whole in memory while it answers
// (a streamed answer read whole for the API's invoke or the executor
// socket). Answers over 1 MiB reach visitors as streams, a window at a time.
const (
	BodyBytes          = 1 << 30   // gateway-wide
	BodyBytesPerTenant = 256 << 20 // one tenant's share
)

// Visitors' request bodies the data plane reads whole (up to
// WholeRequestBody each) before it calls the handler: what the gateway holds
// of them while they arrive, in all and for one visitor address, and for
// the visitors of one tenant's handlers (a share well below the whole, so
// visitors of one tenant, however many addresses they come from, leave
// the rest to the others).
const (
	WholeRequestBody            = 1 << 20
	RequestBodiesHeld           = 256 << 20
	RequestBodiesHeldPerVisitor = 16 << 20
	RequestBodiesHeldPerTenant  = 64 << 20
)

// What a program sends out of its isolate (README.md, Caddyfile), each
// measured in the bytes that cross the worker boundary after JSON encoding
// (internal/wirejson), so that no program can make its worker send a
// frame the gateway must refuse. The worker enforces them (sandbox); the
// gateway's frame caps are built from them (workers/wire).
const (
	// The console output of one run, invocation or timer callback: its
	// lines, and its bytes (one line's too).
	LogLines = 1000
	LogBytes = 64 << 10
	// A run's result.
	ResultBytes = 8 << 20
	// A thrown text; a longer one is cut.
	ThrownBytes = 64 << 10
	// A handler's response headers in all.
	ResponseHeadBytes = 64 << 10
	// What a streamed response's buffer holds before its pump waits: the
	// most one stream read answers.
	StreamWindow = 64 << 10
	// The encoded arguments of a kv or SQL call (a 1 MiB value and a
	// 512-byte key) and of a provider tool call.
	KVArgsBytes   = 1<<20 + 4<<10
	ToolArgsBytes = 1<<20 + 4<<10
)

// HostArgsBytes is the most a host call's encoded arguments may take, for
// a request-body bound of requestBody (a fetch body is a Latin-1 string:
// at worst six bytes per byte once encoded).
func HostArgsBytes(requestBody int) int {
	return max(6*requestBody+64<<10, KVArgsBytes)
}

// Bytes is a byte budget: a gateway-wide cap and a cap per tenant.
type Bytes struct {
	mu        sync.Mutex
	total     int64
	max       int64
	perTenant int64
	by        map[string]int64
}

// NewBytes is a budget of max bytes, perTenant of them for any one tenant.
func NewBytes(max, perTenant int64) *Bytes {
	return &Bytes{max: max, perTenant: perTenant, by: map[string]int64{}}
}

// Take charges n bytes to tenant, or answers why it cannot.
func (b *Bytes) Take(tenant string, n int64) error {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.by[tenant]+n > b.perTenant {
		return fault.New(fault.QuotaExceeded, "This tenant's answers hold %d MiB of the gateway's memory, the most one tenant may; read fewer large answers at once.", b.perTenant>>20)
	}
	if b.total+n > b.max {
		return fault.New(fault.Overloaded, "The gateway holds as many buffered answers as it may; try again shortly.")
	}
	b.by[tenant] += n
	b.total += n
	return nil
}

// Give returns n bytes tenant took.
func (b *Bytes) Give(tenant string, n int64) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.by[tenant] -= n; b.by[tenant] <= 0 {
		delete(b.by, tenant)
	}
	b.total -= n
}

// Held is what tenant holds now, and what all do.
func (b *Bytes) Held(tenant string) (tenantBytes, total int64) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.by[tenant], b.total
}

// Counts is how many of something each key holds (a tenant's sockets, a
// visitor's streams), each below a cap its caller names. The zero value is
// ready.
type Counts struct {
	mu sync.Mutex
	n  map[string]int
}

// Take counts one more for key, or answers false when key holds max.
func (c *Counts) Take(key string, max int) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.n[key] >= max {
		return false
	}
	if c.n == nil {
		c.n = map[string]int{}
	}
	c.n[key]++
	return true
}

// Give uncounts one that key took.
func (c *Counts) Give(key string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.n[key]--; c.n[key] <= 0 {
		delete(c.n, key)
	}
}

// Held is how many key holds.
func (c *Counts) Held(key string) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.n[key]
}

// A cluster's stores (docs/cluster.md): the longest a handler's kv call
// waits for etcd (a read unanswered, a write not committed: 503
// OVERLOADED, retryable), and the receipts a gateway holds in memory
// while PostgreSQL cannot take them, past which the oldest are dropped
// (counted, logged) rather than memory grown. (One PostgreSQL call's bound
// is the store's: store.PostgresCallBound.)
const (
	ClusterKVBound       = 1500 * time.Millisecond
	ReceiptsWaitingBytes = 64 << 20
)

// A tenant's SQL in a cluster (docs/sql.md, docs/cluster.md) and a
// program's statements: the pages one transaction changes, held in the
// gateway's memory until its commit (past it the transaction fails with
// SQL_ERROR, nothing written), the pages all databases' transactions hold
// at once in one gateway (past it OVERLOADED, retryable), and a
// statement's parameters (past them the statement fails with SQL_ERROR).
const (
	SQLDirtyBytes    = 64 << 20
	SQLDirtyBytesAll = 256 << 20
	SQLParams        = 1000
)

// What a tenant's host asks of the API (README.md, API; docs/protocol.md):
// a chain's steps (past them BAD_REQUEST), a handle's invocations in
// progress as a deploy may set them (`concurrency`; past it BAD_REQUEST);
// on one executor socket, the executions, caller-tool calls and
// invocations in flight (past them that message is answered OVERLOADED,
// the socket stays) and the caller providers and one provider's tools a
// message may declare (past them BAD_REQUEST).
const (
	ChainSteps              = 32
	HandleConcurrency       = 1000
	ExecutorSocketRuns      = 16
	ExecutorSocketCalls     = 64
	ExecutorSocketInvokes   = 64
	ExecutorCallerProviders = 32
	ExecutorCallerTools     = 256
)

// On-demand TLS (docs/domains.md): the denied hosts a gateway logs in one
// second, whoever's handshakes they are (past it the denial is not
// logged; the handshake fails either way).
const TLSDenialLogsPerSecond = 100

// A handle's log (docs/logs.md, docs/runtime.md): the entries it keeps in
// memory (its newest; the oldest dropped and counted past it), and in the
// store one entry's message and a request entry's URL (longer ones cut
// and marked: a visitor's long query string cannot make its tenant's
// entries large); a page a reader asks for holds at most LogPageEntries
// (a larger limit is taken as it); a tenant holds LogTailsPerTenant live
// tails at once (past them QUOTA_EXCEEDED).
const (
	LogTailsPerTenant = 10
	HandleLogEntries  = 1000
	LogMessageBytes   = 16 << 10
	LogURLBytes       = 256
	LogPageEntries    = 1000
)

// A tenant's secrets (docs/secrets.md): a value's bytes (past it
// TOO_LARGE) and how many it keeps (past it QUOTA_EXCEEDED); and a
// handle's cron schedules (docs/schedules.md; past them BAD_REQUEST).
const (
	SecretValueBytes   = 8 << 10
	SecretsPerTenant   = 100
	SchedulesPerHandle = 5
)

// A program's calls: an object's httpMetadata and customMetadata together
// (names and values, as R2 bounds its custom metadata; past it
// BAD_REQUEST), and the AI endpoint's answer read whole (past it the call
// fails with BAD_REQUEST).
const (
	ObjectMetadataBytes = 8 << 10
	AIAnswerBytes       = 8 << 20
)

// A program's text streams in its isolate (sandbox/webapi/text): the
// streaming TextDecoders and the (de)compression streams one isolate keeps
// (past them another of its own loses its state or is closed first: a
// program juggling more breaks only itself), and what one decompressed
// chunk may grow to before it is handed back (past it the stream errors,
// a decompression bomb costing the worker no more).
const (
	TextDecodersPerIsolate       = 64
	CompressionStreamsPerIsolate = 64
	DecompressChunkBytes         = 32 << 20
)

// A program's outbound fetch (capability/fetch.go): the redirects one
// fetch follows (past them the fetch throws), and how long one fetch may
// take to its answer's end, read whole or streamed up to its head (the
// run's own bound usually ends it sooner; past it the fetch throws).
const (
	FetchRedirects = 10
	FetchTimeout   = 30 * time.Second
)

// Handlers' console lines copied into Caddy's log: each tenant's rate and
// burst, under the gateway's, so one tenant's flood never drops
// another's lines (past them lines are left out of Caddy's log, counted in
// the tenant's next line; the handle's own log keeps them); a line's
// message there (cut past it), and the tenants whose rates are kept (an
// idle one forgotten first).
const (
	ConsoleLinesPerSecondPerTenant = 10
	ConsoleBurstPerTenant          = 100
	ConsoleLinesPerSecond          = 50
	ConsoleBurst                   = 200
	ConsoleLineBytes               = 4096
	ConsoleTenants                 = 4096
)

// A tenant's domains (docs/domains.md): how long a claim may stay pending
// after its first PUT (then it is dropped), and its verification attempts,
// each a DNS query the gateway sends for it: a burst, then one every
// DomainVerifyEvery (past them 429 QUOTA_EXCEEDED).
const (
	DomainClaimPending = 7 * 24 * time.Hour
	DomainVerifyBurst  = 10
	DomainVerifyEvery  = 6 * time.Second
)

// A log page being answered (docs/logs.md): the part held at a time,
// charged to the tenant in the BodyBytes budget, and how long each part
// may take to be written (past it a reader who stopped reading is cut
// off and the part let go).
const (
	LogPagePartBytes = 256 << 10
	LogPagePartWrite = 10 * time.Second
)

// Spare workers the pool keeps started ahead of newcomers, at most
// (workers/spares.go): with `workers auto`, one more for every 25 tenant
// workers and for each newcomer that found none up lately. Newcomers past
// them wait for a worker's start within their bound.
const SpareWorkers = 8

// Worker first runs favoured by the scheduler at once, at most
// (workers/favour_linux.go): a worker's first run, most often a new
// tenant's first request, runs a few nice steps ahead of the gateway's
// workers for at most a quarter of a second. Past them a first run runs
// as every other.
const FavouredFirstRuns = 8

// A tenant's kv in a registry (keys and values, pending writes counted):
// past it the write throws QUOTA_EXCEEDED.
const KVBytesPerTenant = 100 << 20

// A worker's kv read cache (kv/cache, docs/architecture.md): the values
// one worker caches (past it the cache starts afresh: its programs read
// through to the gateway), the run and handle ids it remembers, one batch
// of writes it sends (the rest wait for the next), and what the keys the
// gateway notes for one worker may cost it (~10,000 keys of 40 bytes;
// past it a space counts as wholly held and every write to it is told).
// A program can fill them; nothing it does is refused by them.
const (
	KVCacheBytesPerWorker = 8 << 20
	KVCacheRunsPerWorker  = 10000
	KVWriteBatchBytes     = 4 << 20
	KVHeldBytesPerWorker  = 1 << 20
)

// A program in its isolate: its host calls in flight (past them the call
// throws) and its pending timers (past them setTimeout throws).
const (
	HostCallsPerIsolate = 64
	TimersPerIsolate    = 10000
)

// A worker's connection to the gateway (workers/wire): the requests one
// side handles at once for its peer; a worker past it is killed as a
// flood (a crash no call explains). A worker sends at most half of it
// (wire.MaxCalls): its isolates' host calls past that wait in the worker
// within their run, so no program makes its worker break the protocol.
const WireRequestsServing = 4096
