package receipts

import (
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"sort"
	"sync"
	"sync/atomic"
	"time"
	"unicode/utf8"

	"github.com/google/uuid"

	"github.com/retainer-gw/retainer/budgets"
	"github.com/retainer-gw/retainer/internal/wirejson"
	"github.com/retainer-gw/retainer/store"
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

// Store keeps receipts in a store (package store) it does not own.
// Receipts are written without fences: each is a new key (a UUIDv7) that no
// other writer makes, so any gateway may write any tenant's.
//
// Put does not wait for the disk: a receipt is readable at once (from
// memory) and a writer goroutine commits every receipt waiting in one
// transaction, so a run's answer does not pay an fsync of its own and
// concurrent runs share one. Listings first commit what is waiting.
type Store struct {
	st        store.Store
	now       func() time.Time
	mu        sync.Mutex // guards retention, failed
	retention time.Duration
	failed    func(error) // told of each commit that failed (SetFailed)
	stop      chan struct{}
	done      chan struct{}

	pmu        sync.Mutex        // guards pending, committing, waitingBytes, order
	pending    map[string][]byte // key → receipt JSON, not yet written
	committing map[string][]byte // the batch being written now
	// The receipts waiting are held within budgets.ReceiptsWaitingBytes
	// (the store down: PostgreSQL unreachable); past it the oldest are
	// dropped, counted (dropped) and told (onDropped).
	waitingBytes int64
	order        []string // pending's keys, oldest first (some gone since)
	dropped      atomic.Int64
	onDropped    func(n int)
	cmu          sync.Mutex // serializes commits
	wake         chan struct{}
	written      chan struct{} // closed when the writer has stopped
	onCommit     func(n int)   // tests: called with each commit's size

	// tenantBytes is each tenant's quota of stored receipts (TenantBytes
	// unless SetTenantBytes said otherwise); used is what each tenant
	// stores, counted once per tenant the first time a commit touches it,
	// then kept by the commits (under cmu).
	tenantBytes int64
	used        map[string]int64
	waitingMax  int64 // tests: the bound of the receipts waiting (0: budgets.ReceiptsWaitingBytes)
}

// SetTenantBytes sets the per-tenant quota of stored receipts (at least
// one receipt's budgets.ReceiptBytes); the next commit of a tenant over it drops its
// oldest receipts.
func (s *Store) SetTenantBytes(n int64) {
	s.cmu.Lock()
	defer s.cmu.Unlock()
	s.tenantBytes = max(n, budgets.ReceiptBytes)
}

// Open drops the first layout's keys, sweeps once, and starts the hourly
// retention sweep. Close stops it; the store stays open.
func Open(st store.Store, retention time.Duration, now func() time.Time) (*Store, error) {
	if now == nil {
		now = time.Now
	}
	var old []store.Op
	if err := st.Scan(context.Background(), oldTable, store.Range{}, func(k, _ []byte) bool {
		old = append(old, store.Delete(oldTable, store.Copy(k)))
		return true
	}); err != nil {
		return nil, fmt.Errorf("receipts: %w", err)
	}
	if err := store.CommitChunked(context.Background(), st, nil, old); err != nil {
		return nil, fmt.Errorf("receipts: %w", err)
	}
	s := &Store{st: st, now: now, retention: retention, stop: make(chan struct{}), done: make(chan struct{}),
		pending: map[string][]byte{}, wake: make(chan struct{}, 1), written: make(chan struct{}),
		tenantBytes: TenantBytes, used: map[string]int64{}}
	s.Sweep()
	go s.sweepLoop()
	go s.writeLoop()
	return s, nil
}

// commitEvery paces the writer: after a commit it waits out the rest of
// this interval before the next, so receipts that come meanwhile share one
// transaction. A lone receipt is written at once; under a stream of runs
// the writer commits at most 50 times a second instead of once per run.
// Why: each bbolt commit costs two fdatasyncs, ~0.4 ms of CPU here
// (capability's BenchmarkKVGroupCommit), and receipts share the file, and
// its one writer, with kv commits that visitors' responses wait for. With
// sequential computations, committing receipts one by one was half of the
// gateway's CPU (docs/history/performance-log.md). A crash loses at most the receipts
// of the last interval, as it could always lose those not yet written.
const commitEvery = 20 * time.Millisecond

// retryEvery is how soon the writer tries again after a failed commit
// (the store down): the waiting receipts are written once it is back,
// whether or not another receipt comes.
const retryEvery = time.Second

// writeLoop commits waiting receipts as they come, paced by commitEvery,
// and what is left when the store closes.
func (s *Store) writeLoop() {
	defer close(s.written)
	var retry <-chan time.Time
	for {
		select {
		case <-s.stop:
			s.flush()
			return
		case <-s.wake:
		case <-retry:
		}
		started := time.Now()
		retry = nil
		if !s.commit() {
			retry = time.After(retryEvery)
		}
		if rest := commitEvery - time.Since(started); rest > 0 {
			select {
			case <-s.stop:
				s.flush()
				return
			case <-time.After(rest):
			}
		}
	}
}

// flush writes every waiting receipt, with the deletes that keep each
// tenant within its quota, in one transaction (or as few as the store's
// limits allow). On failure they wait for the next one (a newer Put of
// the same key wins).
func (s *Store) flush() error {
	s.cmu.Lock()
	defer s.cmu.Unlock()
	return s.flushLocked(context.Background())
}

// flushLocked is flush, each store call within ctx; cmu is held.
func (s *Store) flushLocked(ctx context.Context) error {
	s.pmu.Lock()
	batch := s.pending
	if len(batch) == 0 {
		s.pmu.Unlock()
		return nil
	}
	s.pending, s.committing = map[string][]byte{}, batch
	s.order, s.waitingBytes = nil, 0
	s.pmu.Unlock()
	if s.onCommit != nil {
		s.onCommit(len(batch))
	}
	err := func() (err error) {
		defer func() {
			if r := recover(); r != nil {
				err = fmt.Errorf("receipts: commit failed: %v", r)
			}
		}()
		byTenant := map[string][]string{}
		for k := range batch {
			prefix := prefixOf([]byte(k))
			byTenant[prefix] = append(byTenant[prefix], k)
		}
		var ops []store.Op
		for prefix, keys := range byTenant {
			if err := s.countTenant(ctx, prefix); err != nil {
				return err
			}
			sort.Strings(keys) // oldest first
			for _, k := range keys {
				old, err := s.st.Get(ctx, table, []byte(k))
				if err != nil {
					return err
				}
				s.used[prefix] += int64(len(batch[k]) - len(old))
			}
			drop, err := s.overQuota(ctx, prefix, keys, batch)
			if err != nil {
				return err
			}
			for _, k := range keys {
				if !drop[k] {
					ops = append(ops, store.Put(table, []byte(k), batch[k]))
				}
			}
			for k := range drop {
				if _, new := batch[k]; !new {
					ops = append(ops, store.Delete(table, []byte(k)))
				}
			}
		}
		return store.CommitChunked(ctx, s.st, nil, ops)
	}()
	if err != nil {
		s.used = map[string]int64{} // counted again from the store
	}
	dropped := 0
	s.pmu.Lock()
	if err != nil {
		// Back to waiting, older than what came meanwhile.
		var back []string
		for k, v := range batch {
			if _, newer := s.pending[k]; !newer {
				s.pending[k] = v
				s.waitingBytes += int64(len(v))
				back = append(back, k)
			}
		}
		sort.Slice(back, func(i, j int) bool {
			return back[i][len(prefixOf([]byte(back[i]))):] < back[j][len(prefixOf([]byte(back[j]))):]
		})
		s.order = append(back, s.order...)
		dropped = s.trimLocked()
	}
	s.committing = nil
	s.pmu.Unlock()
	s.toldDropped(dropped)
	return err
}

// SetFailed sets what is told of each failed commit of waiting receipts
// (they wait for the next): the gateway logs it.
func (s *Store) SetFailed(f func(error)) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.failed = f
}

// commit is the writer's flush; a failure is told to SetFailed's function
// and answers false.
func (s *Store) commit() bool {
	err := s.flush()
	if err == nil {
		return true
	}
	s.mu.Lock()
	f := s.failed
	s.mu.Unlock()
	if f != nil {
		f(err)
	}
	return false
}

// SetRetention changes the retention (a config reload).
func (s *Store) SetRetention(d time.Duration) {
	s.mu.Lock()
	s.retention = d
	s.mu.Unlock()
}

// Close stops the sweep and writes what is waiting.
func (s *Store) Close() {
	select {
	case <-s.stop:
	default:
		close(s.stop)
	}
	<-s.done
	<-s.written
}

func (s *Store) sweepLoop() {
	defer close(s.done)
	t := time.NewTicker(time.Hour)
	defer t.Stop()
	for {
		select {
		case <-s.stop:
			return
		case <-t.C:
		}
		func() {
			defer func() { recover() }()
			s.Sweep()
		}()
	}
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

// countTenant counts what the tenant of prefix stores, once. cmu is held.
func (s *Store) countTenant(ctx context.Context, prefix string) error {
	if _, ok := s.used[prefix]; ok {
		return nil
	}
	var n int64
	err := s.st.Scan(ctx, table, store.Range{Prefix: []byte(prefix)}, func(_, v []byte) bool {
		n += int64(len(v))
		return true
	})
	if err == nil {
		s.used[prefix] = n
	}
	return err
}

// overQuota answers the receipts to drop, oldest first (ids are UUIDv7s:
// key order is time order), so that the tenant of prefix is within its
// quota once the batch's keys (sorted) are written: stored ones first,
// then the batch's own. cmu is held.
func (s *Store) overQuota(ctx context.Context, prefix string, keys []string, batch map[string][]byte) (map[string]bool, error) {
	drop := map[string]bool{}
	if s.used[prefix] <= s.tenantBytes {
		return drop, nil
	}
	err := s.st.Scan(ctx, table, store.Range{Prefix: []byte(prefix)}, func(k, v []byte) bool {
		if _, new := batch[string(k)]; !new {
			drop[string(k)] = true
			s.used[prefix] -= int64(len(v))
		}
		return s.used[prefix] > s.tenantBytes
	})
	for _, k := range keys {
		if s.used[prefix] <= s.tenantBytes {
			break
		}
		drop[k] = true
		s.used[prefix] -= int64(len(batch[k]))
	}
	return drop, err
}

// Put stores a receipt, cutting what does not fit the size bound. It is
// readable at once; the disk write follows (see Store).
func (s *Store) Put(r Receipt) error {
	data, err := fit(&r)
	if err != nil {
		return err
	}
	k := string(key(r.Tenant, r.ID))
	s.pmu.Lock()
	if old, ok := s.pending[k]; ok {
		s.waitingBytes -= int64(len(old))
	} else {
		s.order = append(s.order, k)
	}
	s.pending[k] = data
	s.waitingBytes += int64(len(data))
	n := s.trimLocked()
	s.pmu.Unlock()
	s.toldDropped(n)
	select {
	case s.wake <- struct{}{}:
	default:
	}
	return nil
}

// trimLocked drops the oldest waiting receipts while they are past
// budgets.ReceiptsWaitingBytes, and answers how many it dropped: with
// PostgreSQL unreachable, runs go on and their receipts wait in memory,
// which they would fill. pmu is held.
func (s *Store) trimLocked() int {
	n := 0
	for s.waitingBytes > s.waitingCap() && len(s.order) > 0 {
		k := s.order[0]
		s.order = s.order[1:]
		if v, ok := s.pending[k]; ok {
			delete(s.pending, k)
			s.waitingBytes -= int64(len(v))
			n++
		}
	}
	if len(s.order) > 2*len(s.pending)+64 {
		// Keys written or dropped meanwhile: the order is built again.
		kept := s.order[:0]
		for _, k := range s.order {
			if _, ok := s.pending[k]; ok {
				kept = append(kept, k)
			}
		}
		s.order = kept
	}
	return n
}

// waitingCap is the bound of the receipts waiting (tests lower it).
func (s *Store) waitingCap() int64 {
	if s.waitingMax > 0 {
		return s.waitingMax
	}
	return budgets.ReceiptsWaitingBytes
}

// toldDropped counts n dropped receipts and tells onDropped.
func (s *Store) toldDropped(n int) {
	if n == 0 {
		return
	}
	s.dropped.Add(int64(n))
	s.mu.Lock()
	f := s.onDropped
	s.mu.Unlock()
	if f != nil {
		f(n)
	}
}

// SetDropped sets what is told when waiting receipts are dropped past
// budgets.ReceiptsWaitingBytes: the gateway counts and logs them.
func (s *Store) SetDropped(f func(n int)) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.onDropped = f
}

// Dropped is how many waiting receipts were dropped so far.
func (s *Store) Dropped() int64 { return s.dropped.Load() }

// waiting is a receipt not yet on disk, if any.
func (s *Store) waiting(k []byte) ([]byte, bool) {
	s.pmu.Lock()
	defer s.pmu.Unlock()
	if v, ok := s.pending[string(k)]; ok {
		return v, true
	}
	v, ok := s.committing[string(k)]
	return v, ok
}

// fit marshals r within budgets.ReceiptBytes, whatever the run (a budget: docs/
// architecture.md, "Budgets"). Parts no receipt needs whole are capped
// first, before anything is marshalled (a 2 KB chain request once made a
// 252 MiB receipt, and each try below marshals it again); then, while the
// receipt is over the bound, it loses steps' logs, children, logs, steps'
// inputs and results, denials, the result, the prompt, modules, steps'
// code, the code, and at last the steps themselves. Each cut is named in
// Truncated. The JSON is written without HTML escaping (wirejson), so the
// bound measures what a reader of the receipt receives: escaped, a log of
// '<' would take six bytes a character and be cut six times as soon.
func fit(r *Receipt) ([]byte, error) {
	precap(r)
	data, err := wirejson.Marshal(r)
	if err != nil || len(data) <= budgets.ReceiptBytes {
		return data, err
	}
	cut := func(name string, f func()) bool {
		f()
		r.Truncated = appendOnce(r.Truncated, name)
		data, err = wirejson.Marshal(r)
		return err == nil && len(data) <= budgets.ReceiptBytes
	}
	if len(r.Steps) > 0 && cut("steps' logs", func() {
		for i := range r.Steps {
			r.Steps[i].Logs = []string{}
		}
	}) {
		return data, nil
	}
	if len(r.Children) > 0 && cut("children", func() { r.Children = nil }) {
		return data, nil
	}
	if cut("logs", func() {
		for len(r.Logs) > 0 {
			r.Logs = r.Logs[:len(r.Logs)/2]
			if d, _ := wirejson.Marshal(r); len(d) <= budgets.ReceiptBytes {
				break
			}
		}
	}) {
		return data, nil
	}
	if len(r.Steps) > 0 && cut("steps' inputs and results", func() {
		for i := range r.Steps {
			r.Steps[i].Input = cutJSON
			r.Steps[i].Outcome.Result = cutJSON
			r.Steps[i].Outcome.Denials = countOnly(r.Steps[i].Outcome.Denials)
		}
	}) {
		return data, nil
	}
	if len(r.Outcome.Denials) > 1 && cut("denials", func() { r.Outcome.Denials = countOnly(r.Outcome.Denials) }) {
		return data, nil
	}
	if cut("result", func() { r.Outcome.Result = json.RawMessage(`"[result over the receipt size bound]"`) }) {
		return data, nil
	}
	if r.Prompt != "" && cut("prompt", func() { r.Prompt = cutText(r.Prompt, budgets.ReceiptBytes/8, "prompt") }) {
		return data, nil
	}
	if cut("modules", func() { r.Modules = map[string]string{} }) {
		return data, nil
	}
	if len(r.Steps) > 0 && cut("steps' code", func() {
		for i := range r.Steps {
			r.Steps[i].Code = cutText(r.Steps[i].Code, 256, "code")
		}
	}) {
		return data, nil
	}
	if cut("code", func() { r.Code = cutText(r.Code, budgets.ReceiptBytes/2, "code") }) {
		return data, nil
	}
	// What is left over the bound is the steps themselves (their number)
	// or texts no run makes so long; the receipt keeps what the run was
	// and how it ended.
	n := len(r.Steps)
	cut(fmt.Sprintf("steps (%d)", n), func() { r.Steps = nil })
	if err == nil && len(data) > budgets.ReceiptBytes {
		cut("code, logs and error text", func() {
			r.Code, r.Logs, r.Modules = cutText(r.Code, 1024, "code"), []string{}, nil
			if r.Outcome.Error != nil {
				r.Outcome.Error.Message = cutText(r.Outcome.Error.Message, 1024, "text")
			}
			r.Prompt = cutText(r.Prompt, 1024, "prompt")
		})
	}
	return data, err
}

// AddStep appends a chain's step, cutting at once what the receipt would
// cut anyway when it is put (precap): a chain held every step's input and
// result until then (32 steps answering 8 MiB each: 256 MiB a chain).
func (r *Receipt) AddStep(s Step) {
	r.Steps = append(r.Steps, s)
	precap(r)
}

// precapPart is the most one step's input or result, a prompt, or the
// denials of a run may take before the receipt is even marshalled.
const precapPart = budgets.ReceiptBytes / 4

// precap cuts, without marshalling, what is over precapPart on its own.
func precap(r *Receipt) {
	capped := false
	for i := range r.Steps {
		st := &r.Steps[i]
		if len(st.Input) > precapPart {
			st.Input, capped = cutJSON, true
		}
		if len(st.Outcome.Result) > precapPart {
			st.Outcome.Result, capped = cutJSON, true
		}
		if len(st.Code) > precapPart {
			st.Code, capped = cutText(st.Code, precapPart, "code"), true
		}
		if len(st.Outcome.Denials) > 100 {
			st.Outcome.Denials, capped = countOnly(st.Outcome.Denials), true
		}
	}
	if capped {
		r.Truncated = appendOnce(r.Truncated, "steps' inputs and results")
	}
	if len(r.Outcome.Result) > budgets.ReceiptBytes {
		r.Outcome.Result = json.RawMessage(`"[result over the receipt size bound]"`)
		r.Truncated = appendOnce(r.Truncated, "result")
	}
	if len(r.Outcome.Denials) > 100 {
		r.Outcome.Denials = countOnly(r.Outcome.Denials)
		r.Truncated = appendOnce(r.Truncated, "denials")
	}
	if len(r.Prompt) > precapPart {
		r.Prompt = cutText(r.Prompt, precapPart, "prompt")
		r.Truncated = appendOnce(r.Truncated, "prompt")
	}
}

// cutJSON stands for a value cut from a receipt.
var cutJSON = json.RawMessage(`"[cut at the receipt size bound]"`)

// cutText keeps the first n bytes of s (on a rune boundary) and says so.
func cutText(s string, n int, what string) string {
	if len(s) <= n {
		return s
	}
	for n > 0 && !utf8.RuneStart(s[n]) {
		n--
	}
	return s[:n] + fmt.Sprintf("\n[%s cut at the receipt size bound: %d bytes in all]", what, len(s))
}

// countOnly keeps the first denial and how many there were.
func countOnly(denials []string) []string {
	if len(denials) <= 1 {
		return denials
	}
	return []string{cutText(denials[0], 1024, "denial"), fmt.Sprintf("[%d denials in all; the others cut at the receipt size bound]", len(denials))}
}

func appendOnce(list []string, s string) []string {
	for _, x := range list {
		if x == s {
			return list
		}
	}
	return append(list, s)
}

// ErrNotFound answers an unknown id and another tenant's id alike.
var ErrNotFound = errors.New("no such receipt")

// ErrUnavailable wraps a failure of the store under the receipts (its
// PostgreSQL stopped or unreachable, a read that failed): the receipt may
// well exist, and a later try may find it.
var ErrUnavailable = errors.New("receipts: the store is unavailable")

// Get answers the tenant's receipt id.
func (s *Store) Get(tenant, id string) (Receipt, error) {
	return s.GetWithin(context.Background(), tenant, id)
}

// GetWithin is Get, its store read within ctx (a request's bound: past
// it, ErrUnavailable).
func (s *Store) GetWithin(ctx context.Context, tenant, id string) (Receipt, error) {
	var r Receipt
	if v, ok := s.waiting(key(tenant, id)); ok {
		return r, json.Unmarshal(v, &r)
	}
	v, err := s.st.Get(ctx, table, key(tenant, id))
	if err != nil {
		return r, fmt.Errorf("%w: %v", ErrUnavailable, err)
	}
	if v == nil {
		return r, ErrNotFound
	}
	return r, json.Unmarshal(v, &r)
}

// Summary is one line of a receipt list.
type Summary struct {
	ID          string    `json:"resultId"`
	Status      string    `json:"status"`
	Code        string    `json:"errorCode,omitempty"`
	ExecutionID string    `json:"executionId,omitempty"`
	Received    time.Time `json:"received"`
	DurationMs  float64   `json:"durationMs"`
}

// List answers the tenant's receipts newest first, limit at a time; cursor
// is the last id of the previous page ("" for the first). The next cursor
// is "" at the end.
func (s *Store) List(tenant string, limit int, cursor string) ([]Summary, string, error) {
	return s.ListWithin(context.Background(), tenant, limit, cursor)
}

// ListWithin is List within ctx (a request's bound: past it,
// ErrUnavailable), the wait for a commit under way included: a listing
// does not queue behind a writer that waits for a stalled store.
func (s *Store) ListWithin(ctx context.Context, tenant string, limit int, cursor string) ([]Summary, string, error) {
	if limit <= 0 || limit > 100 {
		limit = 20
	}
	// A listing reads the file: what waits is written first.
	for !s.cmu.TryLock() {
		select {
		case <-ctx.Done():
			return nil, "", fmt.Errorf("%w: a commit of waiting receipts is under way: %v", ErrUnavailable, ctx.Err())
		case <-time.After(5 * time.Millisecond):
		}
	}
	err := s.flushLocked(ctx)
	s.cmu.Unlock()
	if err != nil {
		return nil, "", fmt.Errorf("%w: %v", ErrUnavailable, err)
	}
	prefix := tenantPrefix(tenant)
	out := []Summary{}
	next := ""
	// Newest first, from just before the cursor's key.
	r := store.Range{Prefix: prefix, Reverse: true}
	if cursor != "" {
		r.To = key(tenant, cursor)
	}
	err = s.st.Scan(ctx, table, r, func(_, v []byte) bool {
		if len(out) == limit {
			next = out[len(out)-1].ID
			return false
		}
		var r Receipt
		if err := json.Unmarshal(v, &r); err != nil {
			return true
		}
		sum := Summary{ID: r.ID, Status: r.Outcome.Status, ExecutionID: r.ExecutionID, Received: r.Timing.Received, DurationMs: r.Timing.DurationMs}
		if r.Outcome.Error != nil {
			sum.Code = r.Outcome.Error.Code
		}
		out = append(out, sum)
		return true
	})
	if err != nil {
		return nil, "", fmt.Errorf("%w: %v", ErrUnavailable, err)
	}
	return out, next, nil
}

// Sweep deletes receipts older than the retention.
func (s *Store) Sweep() int {
	s.flush() // what waits is swept like the rest
	s.mu.Lock()
	retention := s.retention
	s.mu.Unlock()
	if retention <= 0 {
		return 0
	}
	cutoff := s.now().Add(-retention)
	s.cmu.Lock()
	defer s.cmu.Unlock()
	s.used = map[string]int64{} // counted again from the store
	var gone []store.Op
	s.st.Scan(context.Background(), table, store.Range{}, func(k, v []byte) bool {
		var r struct {
			Timing Timing `json:"timing"`
		}
		if json.Unmarshal(v, &r) == nil && r.Timing.Received.Before(cutoff) {
			gone = append(gone, store.Delete(table, store.Copy(k)))
		}
		return true
	})
	// Chunked: a sweep stopped half done is done again by the next.
	if store.CommitChunked(context.Background(), s.st, nil, gone) != nil {
		return 0
	}
	return len(gone)
}
