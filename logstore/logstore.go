// Package logstore keeps handles' logs in the store (docs/logs.md): console
// entries, the gateway's own entries and one request entry per invocation,
// written in batches, kept log_retention and at most log_bytes a tenant
// (oldest dropped first), read back in pages and followed live by tails.
package logstore

import (
	"context"
	"encoding/base64"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/retainer-gw/retainer/budgets"
	"github.com/retainer-gw/retainer/fault"
	"github.com/retainer-gw/retainer/internal/wirejson"
	"github.com/retainer-gw/retainer/store"
)

// The tables: entries by handle, the log's pages (handles: lp(tenant)
// lp(id) when seq → the entry's JSON); and by tenant, its order of age
// (lp(tenant) when seq → size, id), which the quota drops from: console
// and system entries in byTenant, request entries in requestsByTenant, so
// that each kind's oldest can be found without reading past the other's
// (docs/logs.md, "Storage, batching and limits"). lp is a 2-byte length
// and the bytes, so no tenant's prefix is another's.
const (
	handles          = "logs.v1"
	byTenant         = "logs.tenants.v1"
	requestsByTenant = "logs.requests.v1"
)

const (
	// A store opened with no retention or tenant bytes (tests; the app
	// passes log_retention and log_bytes) takes budgets.DefaultLogRetention
	// and budgets.DefaultLogBytes.
	// DefaultLimit is a page's size when the reader names none (at most
	// budgets.LogPageEntries).
	DefaultLimit = 100
	// tailBuffer is how many entries a tail may be behind before it
	// loses them (and is told how many); tailBytes how many bytes of them.
	tailBuffer = 256
	tailBytes  = 1 << 20
	// flushEvery and flushAt pace the writer: entries wait at most
	// flushEvery, or until flushAt of them wait (or a handle's wait is
	// a quarter full), and are committed in one transaction, so a busy
	// handle's logging costs one commit a second rather than one per
	// entry. Commits asked for early are at least flushGap apart (and
	// twice the last one's duration), so a flooding handle cannot make
	// the store commit back to back.
	flushEvery = time.Second
	flushAt    = 512
	flushGap   = 20 * time.Millisecond
	// budgets.LogPendingPerHandle bounds the bytes one handle has waiting
	// for the writer, whatever its tenant logs: past it the handle's new
	// entries are left out of the store (counted, and said in its log),
	// unless all handles' waiting entries together hold less than half of
	// budgets.LogPending: then a busy handle may have up to
	// budgets.LogPendingBusyHandle waiting (room others are not using), so
	// that one busy handle alone keeps its entries between two paced
	// commits. budgets.LogPending bounds all handles' together; past it
	// the tenant holding the most loses its waiting entries first, never a
	// tenant holding less.
	// budgets.LogMessageBytes and budgets.LogURLBytes bound an entry's
	// message and a request entry's url: longer ones are cut and marked
	// (urlTruncated).
)

// lost counts the entries every store of the process left out (Lost).
var lost atomic.Int64

// Lost is how many entries were left out of the store since the process
// started because their handle had too much waiting (a metric).
func Lost() int64 { return lost.Load() }

// Entry is one log entry. Request entries (Level "request") carry the
// invocation's method, url, status and durations.
type Entry struct {
	Time       time.Time `json:"-"`
	Level      string    `json:"level"`
	Message    string    `json:"message"`
	Method     string    `json:"method,omitempty"`
	URL        string    `json:"url,omitempty"`
	Status     int       `json:"status,omitempty"`
	DurationMs float64   `json:"durationMs,omitempty"`
	CPUMs      float64   `json:"cpuMs,omitempty"`
	// URLTruncated says URL is the first budgets.LogURLBytes bytes of a longer one.
	URLTruncated bool `json:"urlTruncated,omitempty"`
}

// MarshalJSON writes the entry as the API shows it: time in RFC 3339 with
// milliseconds; a request entry's message, not stored, is its method, url
// and status. Nothing is HTML-escaped: the answer measures what the reader
// receives.
func (e Entry) MarshalJSON() ([]byte, error) {
	if e.Level == "request" && e.Message == "" {
		e.Message = fmt.Sprintf("%s %s %d", e.Method, e.URL, e.Status)
	}
	type plain Entry
	return wirejson.Marshal(struct {
		Time string `json:"time"`
		plain
	}{e.Time.UTC().Format("2006-01-02T15:04:05.000Z07:00"), plain(e)})
}

type pendingEntry struct {
	tenant, id string
	when       uint64
	seq        uint32
	request    bool
	value      []byte
}

// pendingHandle is what one handle has waiting for the writer, and how
// many of its entries were left out since its last commit.
type pendingHandle struct {
	tenant, id string
	entries    []pendingEntry
	bytes      int
	lost       int64
}

// used is what a tenant stores, by kind.
type used struct{ console, requests int64 }

// Store keeps the logs in a store (package store) it does not own. Entries
// are written without fences: each key is new (its time and a sequence
// number), and a handle's entries are written by the gateway serving it.
type Store struct {
	st  store.Store
	now func() time.Time

	mu            sync.Mutex // guards what follows up to cmu
	retention     time.Duration
	tenantBytes   int64
	pending       map[string]*pendingHandle // tenant NUL id → what waits
	pendingBytes  int
	pendingCount  int
	tenantPending map[string]int // tenant → its bytes waiting
	seq           uint32
	tails         map[string]map[*Tail]bool // tenant NUL id → its tails
	tailCount     map[string]int            // tenant → its tails
	closed        bool

	cmu  sync.Mutex      // serializes commits; guards used
	used map[string]used // tenant → stored bytes, counted on first touch

	wake chan struct{}
	stop chan struct{}
	done chan struct{}
}

// Open starts the writer and the hourly retention sweep. Close stops them
// (writing what waits); the store stays open.
func Open(st store.Store, retention time.Duration, tenantBytes int64, now func() time.Time) *Store {
	s := newStore(st, retention, tenantBytes, now)
	go s.loop()
	return s
}

// newStore is a Store whose writer is not started.
func newStore(st store.Store, retention time.Duration, tenantBytes int64, now func() time.Time) *Store {
	if now == nil {
		now = time.Now
	}
	s := &Store{st: st, now: now, seq: rand.Uint32(), tails: map[string]map[*Tail]bool{}, tailCount: map[string]int{},
		pending: map[string]*pendingHandle{}, tenantPending: map[string]int{},
		used: map[string]used{}, wake: make(chan struct{}, 1), stop: make(chan struct{}), done: make(chan struct{})}
	s.Set(retention, tenantBytes)
	return s
}

// Set changes log_retention and log_bytes (zero: the defaults).
func (s *Store) Set(retention time.Duration, tenantBytes int64) {
	if retention <= 0 {
		retention = budgets.DefaultLogRetention
	}
	if tenantBytes <= 0 {
		tenantBytes = budgets.DefaultLogBytes
	}
	s.mu.Lock()
	s.retention, s.tenantBytes = retention, max(tenantBytes, 4*budgets.LogMessageBytes)
	s.mu.Unlock()
}

// Close writes what waits, ends every tail and stops the writer.
func (s *Store) Close() {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return
	}
	s.closed = true
	for _, set := range s.tails {
		for t := range set {
			t.end("")
		}
	}
	s.mu.Unlock()
	close(s.stop)
	<-s.done
}

func (s *Store) loop() {
	defer close(s.done)
	tick := time.NewTicker(flushEvery)
	defer tick.Stop()
	sweep := time.NewTicker(time.Hour)
	defer sweep.Stop()
	s.Sweep()
	// next is the earliest an early commit may start: flushGap after the
	// last, or twice as long as it took, so that the store's writer is
	// free at least two thirds of the time for everyone else's writes.
	next := time.Now()
	flush := func() {
		start := time.Now()
		s.Flush()
		next = time.Now().Add(max(flushGap, 2*time.Since(start)))
	}
	for {
		select {
		case <-s.stop:
			s.Flush()
			return
		case <-tick.C:
			flush()
		case <-s.wake:
			if gap := time.Until(next); gap > 0 {
				select {
				case <-time.After(gap):
				case <-s.stop:
					s.Flush()
					return
				}
			}
			flush()
		case <-sweep.C:
			s.Sweep()
		}
	}
}

// Append adds an entry to id's log: it is shown to the handle's tails at
// once and written with the next batch. A handle with budgets.LogPendingPerHandle
// bytes waiting loses the entry (its tails still see it), unless all
// handles' waiting entries hold less than half of budgets.LogPending and it
// has less than budgets.LogPendingBusyHandle waiting; the next commit says
// in its log how many it lost.
func (s *Store) Append(tenant, id string, e Entry) {
	if e.Time.IsZero() {
		e.Time = s.now()
	}
	e.Message = cut(e.Message, budgets.LogMessageBytes)
	if len(e.URL) > budgets.LogURLBytes {
		e.URL, e.URLTruncated = cutBytes(e.URL, budgets.LogURLBytes), true
	}
	value, err := encodeStored(e)
	if err != nil {
		return
	}
	// The maps' key, tenant NUL id, made on the stack: looked up with
	// string(key) it is not copied (one allocation fewer a request).
	var kb [128]byte
	key := append(append(append(kb[:0], tenant...), 0), id...)
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return
	}
	for t := range s.tails[string(key)] {
		t.send(e)
	}
	h := s.pending[string(key)]
	if h == nil {
		h = &pendingHandle{tenant: tenant, id: id}
		s.pending[string(key)] = h
	}
	if h.bytes+len(value) > handleRoom(s.pendingBytes+len(value)) || (s.pendingBytes+len(value) > budgets.LogPending && !s.evictLocked(tenant, len(value))) {
		h.lost++
		lost.Add(1)
		s.mu.Unlock()
		s.wakeWriter()
		return
	}
	s.seq++
	h.entries = append(h.entries, pendingEntry{tenant: tenant, id: id, when: unixNano(e.Time), seq: s.seq, request: e.Level == "request", value: value})
	h.bytes += len(value)
	s.pendingBytes += len(value)
	s.pendingCount++
	s.tenantPending[tenant] += len(value)
	full := s.pendingCount >= flushAt || h.bytes >= budgets.LogPendingPerHandle/4
	s.mu.Unlock()
	if full {
		s.wakeWriter()
	}
}

// handleRoom is how many bytes a handle may have waiting when all
// handles' would be pending: budgets.LogPendingBusyHandle while that is
// under half of budgets.LogPending (a busy handle uses room others leave),
// else budgets.LogPendingPerHandle, which every handle has whatever others
// hold (docs/logs.md, "Storage, batching and limits").
func handleRoom(pending int) int {
	if pending <= budgets.LogPending/2 {
		return budgets.LogPendingBusyHandle
	}
	return budgets.LogPendingPerHandle
}

func (s *Store) wakeWriter() {
	select {
	case s.wake <- struct{}{}:
	default:
	}
}

// evictLocked makes room for n bytes of tenant's when all handles' waiting
// entries hold budgets.LogPending: the tenant holding the most waiting loses its
// newest waiting entries, unless that is tenant itself (or it holds no
// more than tenant), which then loses the new one (false). s.mu is held.
func (s *Store) evictLocked(tenant string, n int) bool {
	for s.pendingBytes+n > budgets.LogPending {
		top, most := "", 0
		for t, b := range s.tenantPending {
			if b > most {
				top, most = t, b
			}
		}
		if top == "" || top == tenant || most <= s.tenantPending[tenant]+n {
			return false
		}
		for _, h := range s.pending {
			if h.tenant != top {
				continue
			}
			for len(h.entries) > 0 && s.pendingBytes+n > budgets.LogPending {
				p := h.entries[len(h.entries)-1]
				h.entries = h.entries[:len(h.entries)-1]
				h.bytes -= len(p.value)
				s.pendingBytes -= len(p.value)
				s.pendingCount--
				if s.tenantPending[top] -= len(p.value); s.tenantPending[top] <= 0 {
					delete(s.tenantPending, top)
				}
				h.lost++
				lost.Add(1)
			}
		}
	}
	return true
}

// encodeStored is an entry's stored value (without its time, which is in
// its key), not HTML-escaped: the bytes wirejson.Marshal makes of the
// entry's fields (omitting the empty ones but level), appended by hand
// because a request entry is encoded on every request
// (docs/performance.md).
func encodeStored(e Entry) ([]byte, error) {
	b := make([]byte, 0, 96+len(e.Message)+len(e.URL))
	b = append(b, `{"level":`...)
	b = wirejson.AppendString(b, e.Level)
	if e.Message != "" {
		b = wirejson.AppendString(append(b, `,"message":`...), e.Message)
	}
	if e.Method != "" {
		b = wirejson.AppendString(append(b, `,"method":`...), e.Method)
	}
	if e.URL != "" {
		b = wirejson.AppendString(append(b, `,"url":`...), e.URL)
	}
	if e.Status != 0 {
		b = strconv.AppendInt(append(b, `,"status":`...), int64(e.Status), 10)
	}
	ok := true
	if e.DurationMs != 0 {
		b, ok = wirejson.AppendFloat(append(b, `,"durationMs":`...), e.DurationMs)
	}
	if e.CPUMs != 0 && ok {
		b, ok = wirejson.AppendFloat(append(b, `,"cpuMs":`...), e.CPUMs)
	}
	if !ok {
		return nil, errors.New("logstore: a duration is not a finite number")
	}
	if e.URLTruncated {
		b = append(b, `,"urlTruncated":true`...)
	}
	return append(b, '}'), nil
}

// unixNano is t as the keys order it: 0 before 1970, the largest time
// after 2262 (where UnixNano overflows).
func unixNano(t time.Time) uint64 {
	switch {
	case t.Before(time.Unix(0, 0)):
		return 0
	case t.After(time.Unix(0, math.MaxInt64)):
		return math.MaxInt64
	}
	return uint64(t.UnixNano())
}

// cut keeps the longest start of text whose JSON encoding is at most n
// bytes (on a rune boundary) and says so.
func cut(text string, n int) string {
	kept, cutOff := wirejson.Cut(text, n+2) // the quotes are not the message's
	if !cutOff {
		return text
	}
	return kept + fmt.Sprintf("\n[entry cut: a stored log entry keeps %d KiB; %d bytes in all]", n>>10, len(text))
}

// cutBytes keeps the first n bytes of text, on a rune boundary.
func cutBytes(text string, n int) string {
	for n > 0 && n < len(text) && text[n]&0xc0 == 0x80 {
		n--
	}
	return text[:n]
}

// Flush commits every entry waiting, then drops the oldest entries of each
// tenant it touched that is over its quota.
func (s *Store) Flush() {
	s.cmu.Lock()
	defer s.cmu.Unlock()
	s.mu.Lock()
	waiting := s.pending
	s.pending = map[string]*pendingHandle{}
	s.pendingBytes, s.pendingCount = 0, 0
	clear(s.tenantPending)
	batch := s.batchLocked(waiting)
	quota := s.tenantBytes
	s.mu.Unlock()
	s.commit(batch, quota)
}

// FlushHandle commits what waits of one handle's log (a read of it), and
// nothing of any other's.
func (s *Store) FlushHandle(tenant, id string) {
	s.cmu.Lock()
	defer s.cmu.Unlock()
	s.mu.Lock()
	key := tenant + "\x00" + id
	h := s.pending[key]
	if h == nil {
		s.mu.Unlock()
		return
	}
	delete(s.pending, key)
	s.pendingBytes -= h.bytes
	s.pendingCount -= len(h.entries)
	if s.tenantPending[tenant] -= h.bytes; s.tenantPending[tenant] <= 0 {
		delete(s.tenantPending, tenant)
	}
	batch := s.batchLocked(map[string]*pendingHandle{key: h})
	quota := s.tenantBytes
	s.mu.Unlock()
	s.commit(batch, quota)
}

// batchLocked is the entries of the handles waiting, each handle that lost
// entries followed by a system entry that says how many. s.mu is held.
func (s *Store) batchLocked(waiting map[string]*pendingHandle) []pendingEntry {
	var batch []pendingEntry
	for _, h := range waiting {
		batch = append(batch, h.entries...)
		if h.lost > 0 {
			e := Entry{Level: "system", Message: fmt.Sprintf("%d log entries of this handle were left out of the stored log: "+
				"more of them waited to be written at once than a handle may have waiting (%d KiB, or up to %d KiB while the gateway has room; "+
				"its tails saw them). Log less, or less at a time.", h.lost, budgets.LogPendingPerHandle>>10, budgets.LogPendingBusyHandle>>10)}
			if v, err := encodeStored(e); err == nil {
				s.seq++
				batch = append(batch, pendingEntry{tenant: h.tenant, id: h.id, when: unixNano(s.now()), seq: s.seq, value: v})
			}
		}
	}
	return batch
}

// commit writes batch in one transaction (chunked when large), then drops
// the oldest entries of each tenant it touched that is over quota: of
// the kind, request or console, that holds more than half of it first.
func (s *Store) commit(batch []pendingEntry, quota int64) {
	if len(batch) == 0 {
		return
	}
	ctx := context.Background()
	ops := make([]store.Op, 0, 2*len(batch))
	added := map[string]used{}
	for _, p := range batch {
		hk := handleKey(p.tenant, p.id, p.when, p.seq)
		size := int64(len(hk) + len(p.value))
		order := byTenant
		a := added[p.tenant]
		if p.request {
			order = requestsByTenant
			a.requests += size
		} else {
			a.console += size
		}
		added[p.tenant] = a
		ops = append(ops, store.Put(handles, hk, p.value), store.Put(order, tenantKey(p.tenant, p.when, p.seq), tenantValue(size, p.id)))
	}
	if err := store.CommitBulk(ctx, s.st, ops); err != nil {
		return // lost, as entries not yet written are at a crash
	}
	for tenant, a := range added {
		u, ok := s.used[tenant]
		if !ok {
			// First touch: what is stored now, this batch included.
			u = used{s.countIn(ctx, byTenant, tenant), s.countIn(ctx, requestsByTenant, tenant)}
		} else {
			u.console += a.console
			u.requests += a.requests
		}
		if over := u.console + u.requests - quota; over > 0 {
			// Request entries go first while they hold more than half.
			if extra := min(over, u.requests-quota/2); extra > 0 {
				gone := s.drop(ctx, requestsByTenant, tenant, extra)
				u.requests -= gone
				over -= gone
			}
			if over > 0 {
				gone := s.drop(ctx, byTenant, tenant, over)
				u.console -= gone
				over -= gone
			}
			if over > 0 {
				u.requests -= s.drop(ctx, requestsByTenant, tenant, over)
			}
		}
		s.used[tenant] = u
	}
}

// count is what tenant stores.
func (s *Store) count(ctx context.Context, tenant string) int64 {
	return s.countIn(ctx, byTenant, tenant) + s.countIn(ctx, requestsByTenant, tenant)
}

// countIn is what tenant stores of the kind order lists.
func (s *Store) countIn(ctx context.Context, order, tenant string) int64 {
	var n int64
	s.st.Scan(ctx, order, store.Range{Prefix: lp(nil, tenant)}, func(_, v []byte) bool {
		if size, _, ok := parseTenantValue(v); ok {
			n += size
		}
		return true
	})
	return n
}

// drop deletes tenant's oldest entries of the kind order lists until at
// least n bytes went, and answers how many did.
func (s *Store) drop(ctx context.Context, order, tenant string, n int64) int64 {
	var ops []store.Op
	var gone int64
	s.st.Scan(ctx, order, store.Range{Prefix: lp(nil, tenant)}, func(k, v []byte) bool {
		size, id, ok := parseTenantValue(v)
		ops = append(ops, store.Delete(order, store.Copy(k)))
		if ok {
			when, seq := tenantKeyTime(k)
			ops = append(ops, store.Delete(handles, handleKey(tenant, id, when, seq)))
			gone += size
		}
		return gone < n
	})
	if store.CommitBulk(ctx, s.st, ops) != nil {
		return 0
	}
	return gone
}

// Sweep deletes every entry older than the retention.
func (s *Store) Sweep() {
	s.cmu.Lock()
	defer s.cmu.Unlock()
	s.mu.Lock()
	cutoff := unixNano(s.now().Add(-s.retention))
	s.mu.Unlock()
	for _, order := range []string{byTenant, requestsByTenant} {
		s.sweep(order, cutoff)
	}
}

// sweep deletes the entries order lists that are older than cutoff.
func (s *Store) sweep(order string, cutoff uint64) {
	ctx := context.Background()
	var from []byte
	for {
		// The next tenant with entries, then its entries before the cutoff.
		var tenant string
		found := false
		s.st.Scan(ctx, order, store.Range{From: from, Limit: 1}, func(k, _ []byte) bool {
			tenant, found = parseTenant(k)
			return false
		})
		if !found {
			return
		}
		prefix := lp(nil, tenant)
		var ops []store.Op
		var gone int64
		s.st.Scan(ctx, order, store.Range{Prefix: prefix, To: binary.BigEndian.AppendUint64(append([]byte{}, prefix...), cutoff)}, func(k, v []byte) bool {
			ops = append(ops, store.Delete(order, store.Copy(k)))
			if size, id, ok := parseTenantValue(v); ok {
				when, seq := tenantKeyTime(k)
				ops = append(ops, store.Delete(handles, handleKey(tenant, id, when, seq)))
				gone += size
			}
			return true
		})
		if store.CommitBulk(ctx, s.st, ops) == nil {
			if u, ok := s.used[tenant]; ok {
				if order == requestsByTenant {
					u.requests = max(u.requests-gone, 0)
				} else {
					u.console = max(u.console-gone, 0)
				}
				s.used[tenant] = u
			}
		}
		from = append(prefix, 0xff)
	}
}

// Page is one page of a handle's log: entries oldest first, and the
// cursor that reads on after them.
type Page struct {
	Entries []Entry
	Cursor  string
}

// List answers a page of id's log, whole (Read writes one in parts). With
// a cursor: the entries after the one it names; else with since: the
// first entries at or after it; else the newest entries. limit ≤ 0 is
// DefaultLimit; more than budgets.LogPageEntries is that many. The cursor is the last
// entry's (or, on an empty page, the one given), so polling with it reads
// each entry once.
func (s *Store) List(tenant, id string, since time.Time, limit int, cursor string) (Page, error) {
	page := Page{Entries: []Entry{}}
	next, err := s.read(tenant, id, since, limit, cursor, math.MaxInt, func(part []encoded) error {
		for _, e := range part {
			page.Entries = append(page.Entries, e.entry)
		}
		return nil
	})
	if err != nil {
		return Page{}, err
	}
	page.Cursor = next
	return page, nil
}

// Read is List for a reader that writes the page as it is read: write is
// called with the entries' JSON in parts of at most partBytes (an entry
// is never larger), each read from the store after the last was written,
// so at most one part is held at once. It answers the cursor that reads on
// after the page; an error of write ends the page.
func (s *Store) Read(tenant, id string, since time.Time, limit int, cursor string, partBytes int, write func(entries [][]byte) error) (string, error) {
	var part [][]byte
	return s.read(tenant, id, since, limit, cursor, partBytes, func(es []encoded) error {
		part = part[:0]
		for _, e := range es {
			part = append(part, e.json)
		}
		return write(part)
	})
}

// encoded is an entry read, and its JSON as the API answers it.
type encoded struct {
	entry Entry
	json  []byte
}

// MaxEntryBytes bounds one entry's JSON as Read writes it (a part holds at
// least one entry): its message, its url, and the rest.
const MaxEntryBytes = budgets.LogMessageBytes + 2*budgets.LogURLBytes + 1024

func (s *Store) read(tenant, id string, since time.Time, limit int, cursor string, partBytes int, write func([]encoded) error) (string, error) {
	if limit <= 0 {
		limit = DefaultLimit
	}
	limit = min(limit, budgets.LogPageEntries)
	partBytes = max(partBytes, MaxEntryBytes)
	s.FlushHandle(tenant, id)
	s.mu.Lock()
	oldest := unixNano(s.now().Add(-s.retention))
	s.mu.Unlock()
	ctx := context.Background()
	prefix := lp(lp(nil, tenant), id)
	var from []byte
	switch {
	case cursor != "":
		c, err := base64.RawURLEncoding.DecodeString(cursor)
		if err != nil || len(c) != 12 {
			return "", fault.New(fault.BadRequest, "cursor: not one this API gave.")
		}
		from = append(append(append([]byte{}, prefix...), c...), 0)
	case !since.IsZero():
		if since.After(time.Unix(0, math.MaxInt64)) {
			return cursor, nil // after every time a key can hold: none
		}
		from = binary.BigEndian.AppendUint64(append([]byte{}, prefix...), max(oldest, unixNano(since)))
	default:
		// The newest limit entries: the oldest of them is where the page
		// starts (keys only; nothing is decoded).
		err := s.st.Scan(ctx, handles, store.Range{Prefix: prefix, Limit: limit, Reverse: true}, func(k, _ []byte) bool {
			if when, _ := handleKeyTime(k, len(prefix)); when < oldest {
				return false
			}
			from = store.Copy(k)
			return true
		})
		if err != nil {
			return "", fault.New(fault.Overloaded, "The log store did not answer: %v", err)
		}
		if from == nil {
			return cursor, nil
		}
	}
	var last []byte
	for left := limit; left > 0; {
		var part []encoded
		size, more := 0, false
		err := s.st.Scan(ctx, handles, store.Range{Prefix: prefix, From: from, Limit: left}, func(k, v []byte) bool {
			when, seq := handleKeyTime(k, len(prefix))
			from = append(store.Copy(k), 0)
			if when < oldest {
				return true
			}
			var e Entry
			if json.Unmarshal(v, &e) != nil {
				return true
			}
			e.Time = time.Unix(0, int64(when))
			b, err := e.MarshalJSON()
			if err != nil {
				return true
			}
			if len(part) > 0 && size+len(b) > partBytes {
				from = store.Copy(k) // read again in the next part
				more = true
				return false
			}
			part = append(part, encoded{e, b})
			size += len(b)
			last = binary.BigEndian.AppendUint32(binary.BigEndian.AppendUint64(nil, when), seq)
			return true
		})
		if err != nil {
			return "", fault.New(fault.Overloaded, "The log store did not answer: %v", err)
		}
		if len(part) > 0 {
			if err := write(part); err != nil {
				return "", err
			}
		}
		left -= len(part)
		if !more {
			break
		}
	}
	if last == nil {
		return cursor, nil
	}
	return base64.RawURLEncoding.EncodeToString(last), nil
}

// Tail is a live follower of one handle's log.
type Tail struct {
	C    chan Entry    // entries as they are appended
	Done chan struct{} // closed when the store closes or the handle ends
	// Reason, once Done is closed, says why the tail ended ("" when the
	// store closed: the gateway stops or reloads).
	Reason  string
	held    atomic.Int64 // bytes of the entries in C
	s       *Store
	tenant  string
	key     string
	dropped int64 // under s.mu
	ended   bool
}

func (t *Tail) send(e Entry) {
	n := entrySize(e)
	if t.held.Load()+n > tailBytes {
		t.dropped++
		return
	}
	select {
	case t.C <- e:
		t.held.Add(n)
	default:
		t.dropped++
	}
}

// entrySize is what an entry waiting for a tail is counted as.
func entrySize(e Entry) int64 { return int64(len(e.Message) + len(e.Method) + len(e.URL) + 64) }

// Took says the reader has taken e from C (it no longer counts against
// the bytes the tail may be behind).
func (t *Tail) Took(e Entry) { t.held.Add(-entrySize(e)) }

func (t *Tail) end(reason string) {
	if !t.ended {
		t.ended, t.Reason = true, reason
		close(t.Done)
	}
}

// EndTails ends every tail of id's log, saying why (the handle ended), and
// frees their places in the tenant's count at once.
func (s *Store) EndTails(tenant, id, reason string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for t := range s.tails[tenant+"\x00"+id] {
		t.closeLocked()
		t.end(reason)
	}
}

// Dropped answers how many entries the tail lost since it was last asked.
func (t *Tail) Dropped() int64 {
	t.s.mu.Lock()
	defer t.s.mu.Unlock()
	n := t.dropped
	t.dropped = 0
	return n
}

// Close ends the tail.
func (t *Tail) Close() {
	t.s.mu.Lock()
	defer t.s.mu.Unlock()
	t.closeLocked()
	t.end("")
}

// closeLocked forgets the tail; s.mu is held.
func (t *Tail) closeLocked() {
	s := t.s
	if set := s.tails[t.key]; set[t] {
		delete(set, t)
		if len(set) == 0 {
			delete(s.tails, t.key)
		}
		if s.tailCount[t.tenant]--; s.tailCount[t.tenant] <= 0 {
			delete(s.tailCount, t.tenant)
		}
	}
}

// Tail follows id's log from now on; past budgets.LogTailsPerTenant tails of the
// tenant at once it answers QUOTA_EXCEEDED.
func (s *Store) Tail(tenant, id string) (*Tail, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return nil, fault.New(fault.Overloaded, "The gateway is stopping.")
	}
	if s.tailCount[tenant] >= budgets.LogTailsPerTenant {
		return nil, fault.New(fault.QuotaExceeded, "A tenant may hold %d tails at once; close one first.", budgets.LogTailsPerTenant)
	}
	t := &Tail{C: make(chan Entry, tailBuffer), Done: make(chan struct{}), s: s, tenant: tenant, key: tenant + "\x00" + id}
	if s.tails[t.key] == nil {
		s.tails[t.key] = map[*Tail]bool{}
	}
	s.tails[t.key][t] = true
	s.tailCount[tenant]++
	return t, nil
}

func lp(b []byte, s string) []byte {
	b = binary.BigEndian.AppendUint16(b, uint16(len(s)))
	return append(b, s...)
}

func handleKey(tenant, id string, when uint64, seq uint32) []byte {
	k := lp(lp(make([]byte, 0, 4+len(tenant)+len(id)+12), tenant), id)
	return binary.BigEndian.AppendUint32(binary.BigEndian.AppendUint64(k, when), seq)
}

func handleKeyTime(k []byte, prefix int) (uint64, uint32) {
	if len(k) < prefix+12 {
		return 0, 0
	}
	return binary.BigEndian.Uint64(k[prefix:]), binary.BigEndian.Uint32(k[prefix+8:])
}

func tenantKey(tenant string, when uint64, seq uint32) []byte {
	k := lp(make([]byte, 0, 2+len(tenant)+12), tenant)
	return binary.BigEndian.AppendUint32(binary.BigEndian.AppendUint64(k, when), seq)
}

func parseTenant(k []byte) (string, bool) {
	if len(k) < 2 {
		return "", false
	}
	n := int(binary.BigEndian.Uint16(k))
	if len(k) < 2+n {
		return "", false
	}
	return string(k[2 : 2+n]), true
}

func tenantKeyTime(k []byte) (uint64, uint32) {
	if len(k) < 14 {
		return 0, 0
	}
	return binary.BigEndian.Uint64(k[len(k)-12:]), binary.BigEndian.Uint32(k[len(k)-4:])
}

func tenantValue(size int64, id string) []byte {
	return append(binary.BigEndian.AppendUint32(nil, uint32(size)), id...)
}

func parseTenantValue(v []byte) (int64, string, bool) {
	if len(v) < 4 {
		return 0, "", false
	}
	return int64(binary.BigEndian.Uint32(v)), string(v[4:]), true
}
