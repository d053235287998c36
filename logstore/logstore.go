// Package logstore keeps handles' logs in the store (docs/logs.md): console
// entries, the gateway's own entries and one request entry per invocation,
// written in batches, kept log_retention and at most log_bytes a tenant
// (oldest dropped first), read back in pages and followed live by tails.
package logstore

import (
	"fmt"
	"math"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"time"

	"github.com/retainer-gw/retainer/budgets"
	"github.com/retainer-gw/retainer/internal/wirejson"
	"github.com/retainer-gw/retainer/store"
)

// The tables. Pages (page.go, docs/logs.md): a handle's entries, one
// record a commit (pages: lp(tenant) lp(id) when seq of its first entry →
// the page), and by tenant, its order of age (lp(tenant) when seq → the
// section's size, the page's last time, whether the page has the other
// section, id), which the quota and the sweep drop from: pages' console
// and system entries in pagesByTenant, their request entries in
// pageRequestsByTenant, so that each kind's oldest can be found without
// reading past the other's. lp is a 2-byte length and the bytes, so no
// tenant's prefix is another's.
//
// The tables written before pages, one key an entry, are still read,
// paged, swept and counted, never written (their entries are older than
// every page of their handle): handles (lp(tenant) lp(id) when seq → the
// entry's JSON), byTenant and requestsByTenant (lp(tenant) when seq →
// size, id).
const (
	pages                = "logs.pages.v1"
	pagesByTenant        = "logs.pages.tenants.v1"
	pageRequestsByTenant = "logs.pages.requests.v1"

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
	// flushEvery, or until flushAt of them wait (or a handle has
	// flushBytes of console entries, or four times that of request
	// entries, waiting), and are committed in one transaction, a page a
	// handle (page.go), so a busy handle's logging costs a few puts a
	// commit rather than two an entry, and a commit costs mostly its
	// sync, whatever it holds. Commits asked for early are at least
	// flushGap apart (and twice the last one's duration), so a flooding
	// handle cannot make the store commit back to back.
	flushEvery = time.Second
	flushAt    = 2048
	flushBytes = budgets.LogPendingPerHandle / 4
	flushGap   = 20 * time.Millisecond
	// budgets.LogPendingPerHandle bounds the bytes of console and system
	// entries one handle has waiting for the writer, whatever its tenant
	// logs, and budgets.LogPendingRequestsPerHandle those of its request
	// entries (one an invocation, at most ~400 bytes each: room for ~190
	// ms of a busy handle's, for a commit slowed by a loaded disk): past
	// them the handle's new entries of that kind are left out of the
	// store (counted, and said in its log).
	// budgets.LogPending bounds all handles' together; past it the tenant
	// holding the most loses its waiting entries first, never a tenant
	// holding less.
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

// pendingHandle is what one handle has waiting for the writer (its pages,
// encoded as they will be stored), and how many of its entries were left
// out since its last commit.
type pendingHandle struct {
	tenant, id string
	pages      []*page
	n, bytes   int
	// kind is the bytes of its console and system entries, and of its
	// request entries (each bounded on its own).
	kind [2]int
	lost int64
}

// add appends e to the handle's last page, or to a new one when it would
// pass pageBytes, and answers the bytes it took.
func (h *pendingHandle) add(e *Entry, when uint64, seq uint32) int {
	var p *page
	if len(h.pages) > 0 {
		p = h.pages[len(h.pages)-1]
	}
	if p == nil || p.n > 0 && p.bytes()+entryBound(e) > pageBytes {
		next := &page{}
		if p != nil {
			next.last, next.floored = p.last, true
		}
		h.pages = append(h.pages, next)
		p = next
	}
	h.n++
	return p.add(e, when, seq)
}

// entryBound is at least what e takes in a page.
func entryBound(e *Entry) int { return len(e.Level) + len(e.Message) + len(e.Method) + len(e.URL) + 96 }

// used is what a tenant stores, by kind, and how much of it is in the
// one-entry-a-key tables written before pages (docs/logs.md).
type used struct{ console, requests, oldConsole, oldRequests int64 }

// stored is the key of a handle's last stored entry, as the writer last
// wrote or read it, and when (commit.go).
type stored struct {
	last key
	at   time.Time
}

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

	cmu  sync.Mutex        // serializes commits; guards used and last
	used map[string]used   // tenant → stored bytes, counted on first touch
	last map[string]stored // tenant NUL id → its last stored entry

	wake  chan struct{}
	hurry chan struct{} // a handle's request entries are half their bound
	stop  chan struct{}
	done  chan struct{}
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
		used: map[string]used{}, last: map[string]stored{}, wake: make(chan struct{}, 1), hurry: make(chan struct{}, 1), stop: make(chan struct{}), done: make(chan struct{})}
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
	// free at least two thirds of the time for everyone else's writes;
	// soon is flushGap after it, when a handle's request entries are half
	// way to their bound: a slow commit (a loaded disk's sync) does not
	// make visitors' entries wait past it, while a flood of console
	// entries still waits.
	next, soon := time.Now(), time.Now()
	flush := func() {
		start := time.Now()
		s.Flush()
		end := time.Now()
		next, soon = end.Add(max(flushGap, 2*end.Sub(start))), end.Add(flushGap)
	}
	for {
		select {
		case <-s.stop:
			s.Flush()
			return
		case <-tick.C:
			flush()
		case <-s.wake:
			hurried := false
			for {
				select {
				case <-s.hurry:
					hurried = true
				default:
				}
				until := next
				if hurried {
					until = soon
				}
				gap := time.Until(until)
				if gap <= 0 {
					break
				}
				t := time.NewTimer(gap)
				select {
				case <-t.C:
				case <-s.hurry:
					t.Stop()
					hurried = true
				case <-s.stop:
					t.Stop()
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
// bytes waiting loses the entry (its tails still see it); the next commit
// says in its log how many it lost.
func (s *Store) Append(tenant, id string, e Entry) {
	if e.Time.IsZero() {
		e.Time = s.now()
	}
	e.Message = cut(e.Message, budgets.LogMessageBytes)
	if len(e.URL) > budgets.LogURLBytes {
		e.URL, e.URLTruncated = cutBytes(e.URL, budgets.LogURLBytes), true
	}
	if validEntry(&e) != nil {
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
	// An entry's stored size is known once it is encoded; the bounds are
	// held with its upper bound (its message, URL and the rest).
	size, kind, bound := entryBound(&e), 0, budgets.LogPendingPerHandle
	if e.Level == "request" {
		kind, bound = 1, budgets.LogPendingRequestsPerHandle
	}
	if h.kind[kind]+size > bound || (s.pendingBytes+size > budgets.LogPending && !s.evictLocked(tenant, size)) {
		h.lost++
		lost.Add(1)
		s.mu.Unlock()
		s.wakeWriter()
		return
	}
	s.seq++
	n := h.add(&e, unixNano(e.Time), s.seq)
	h.bytes += n
	h.kind[kind] += n
	s.pendingBytes += n
	s.pendingCount++
	s.tenantPending[tenant] += n
	full := s.pendingCount >= flushAt || h.kind[kind] >= flushBytes<<(2*kind)
	hurry := kind == 1 && h.kind[1] >= budgets.LogPendingRequestsPerHandle/2
	s.mu.Unlock()
	if hurry {
		select {
		case s.hurry <- struct{}{}:
		default:
		}
	}
	if full {
		s.wakeWriter()
	}
}

func (s *Store) wakeWriter() {
	select {
	case s.wake <- struct{}{}:
	default:
	}
}

// evictLocked makes room for n bytes of tenant's when all handles' waiting
// entries hold budgets.LogPending: the tenant holding the most waiting loses
// the waiting entries of its handle holding the most, unless that is
// tenant itself (or it holds no more than tenant), which then loses the new
// one (false). s.mu is held.
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
		var h *pendingHandle
		for _, p := range s.pending {
			if p.tenant == top && (h == nil || p.bytes > h.bytes) {
				h = p
			}
		}
		if h == nil || h.bytes == 0 {
			delete(s.tenantPending, top)
			continue
		}
		s.pendingBytes -= h.bytes
		s.pendingCount -= h.n
		if s.tenantPending[top] -= h.bytes; s.tenantPending[top] <= 0 {
			delete(s.tenantPending, top)
		}
		h.lost += int64(h.n)
		lost.Add(int64(h.n))
		h.pages, h.n, h.bytes, h.kind = nil, 0, 0, [2]int{}
	}
	return true
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
	s.pendingCount -= h.n
	if s.tenantPending[tenant] -= h.bytes; s.tenantPending[tenant] <= 0 {
		delete(s.tenantPending, tenant)
	}
	batch := s.batchLocked(map[string]*pendingHandle{key: h})
	quota := s.tenantBytes
	s.mu.Unlock()
	s.commit(batch, quota)
}
