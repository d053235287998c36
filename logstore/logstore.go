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
	"fmt"
	"math/rand/v2"
	"sync"
	"time"
	"unicode/utf8"

	"github.com/retainer-gw/retainer/fault"
	"github.com/retainer-gw/retainer/store"
)

// The tables: entries by handle, the log's pages (handles: lp(tenant)
// lp(id) when seq → the entry's JSON); and by tenant, its order of age
// (byTenant: lp(tenant) when seq → size, id), which the quota drops
// from. lp is a 2-byte length and the bytes, so no tenant's prefix is
// another's.
const (
	handles  = "logs.v1"
	byTenant = "logs.tenants.v1"
)

const (
	// DefaultRetention is how long entries are kept unless log_retention
	// says otherwise.
	DefaultRetention = 7 * 24 * time.Hour
	// DefaultTenantBytes is a tenant's stored log unless log_bytes says
	// otherwise.
	DefaultTenantBytes = 64 << 20
	// MaxMessage bounds one stored entry's message; longer ones are cut
	// and marked.
	MaxMessage = 16 << 10
	// MaxLimit is the most entries one page holds; DefaultLimit a page's
	// size when the reader names none.
	MaxLimit     = 1000
	DefaultLimit = 100
	// TailsPerTenant is the most live tails a tenant holds at once.
	TailsPerTenant = 10
	// tailBuffer is how many entries a tail may be behind before it
	// loses them (and is told how many).
	tailBuffer = 256
	// flushEvery and flushAt pace the writer: entries wait at most
	// flushEvery, or until flushAt of them wait, and are committed in one
	// transaction, so a busy handle's logging costs one commit a second
	// rather than one per entry.
	flushEvery = time.Second
	flushAt    = 512
	// maxPending bounds the bytes waiting for the writer; past it new
	// entries are dropped (counted) until the writer catches up.
	maxPending = 16 << 20
)

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
}

// MarshalJSON writes the entry as the API shows it: time in RFC 3339 with
// milliseconds; a request entry's message, not stored, is its method, url
// and status.
func (e Entry) MarshalJSON() ([]byte, error) {
	if e.Level == "request" && e.Message == "" {
		e.Message = fmt.Sprintf("%s %s %d", e.Method, e.URL, e.Status)
	}
	type plain Entry
	return json.Marshal(struct {
		Time string `json:"time"`
		plain
	}{e.Time.UTC().Format("2006-01-02T15:04:05.000Z07:00"), plain(e)})
}

type pendingEntry struct {
	tenant, id string
	when       uint64
	seq        uint32
	value      []byte
}

// Store keeps the logs in a store (package store) it does not own. Entries
// are written without fences: each key is new (its time and a sequence
// number), and a handle's entries are written by the gateway serving it.
type Store struct {
	st  store.Store
	now func() time.Time

	mu           sync.Mutex // guards what follows up to cmu
	retention    time.Duration
	tenantBytes  int64
	pending      []pendingEntry
	pendingBytes int
	seq          uint32
	lost         int64                     // entries dropped past maxPending
	tails        map[string]map[*Tail]bool // tenant NUL id → its tails
	tailCount    map[string]int            // tenant → its tails
	closed       bool

	cmu  sync.Mutex       // serializes commits; guards used
	used map[string]int64 // tenant → stored bytes, counted on first touch

	wake chan struct{}
	stop chan struct{}
	done chan struct{}
}

// Open starts the writer and the hourly retention sweep. Close stops them
// (writing what waits); the store stays open.
func Open(st store.Store, retention time.Duration, tenantBytes int64, now func() time.Time) *Store {
	if now == nil {
		now = time.Now
	}
	s := &Store{st: st, now: now, seq: rand.Uint32(), tails: map[string]map[*Tail]bool{}, tailCount: map[string]int{},
		used: map[string]int64{}, wake: make(chan struct{}, 1), stop: make(chan struct{}), done: make(chan struct{})}
	s.Set(retention, tenantBytes)
	go s.loop()
	return s
}

// Set changes log_retention and log_bytes (zero: the defaults).
func (s *Store) Set(retention time.Duration, tenantBytes int64) {
	if retention <= 0 {
		retention = DefaultRetention
	}
	if tenantBytes <= 0 {
		tenantBytes = DefaultTenantBytes
	}
	s.mu.Lock()
	s.retention, s.tenantBytes = retention, max(tenantBytes, 4*MaxMessage)
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
			t.end()
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
	for {
		select {
		case <-s.stop:
			s.Flush()
			return
		case <-tick.C:
			s.Flush()
		case <-s.wake:
			s.Flush()
		case <-sweep.C:
			s.Sweep()
		}
	}
}

// Append adds an entry to id's log: it is shown to the handle's tails at
// once and written with the next batch.
func (s *Store) Append(tenant, id string, e Entry) {
	if e.Time.IsZero() {
		e.Time = s.now()
	}
	e.Message = cut(e.Message, MaxMessage)
	if len(e.URL) > 2048 {
		e.URL = cut(e.URL, 2048)
	}
	value, err := json.Marshal(struct {
		Level      string  `json:"level"`
		Message    string  `json:"message,omitempty"`
		Method     string  `json:"method,omitempty"`
		URL        string  `json:"url,omitempty"`
		Status     int     `json:"status,omitempty"`
		DurationMs float64 `json:"durationMs,omitempty"`
		CPUMs      float64 `json:"cpuMs,omitempty"`
	}{e.Level, e.Message, e.Method, e.URL, e.Status, e.DurationMs, e.CPUMs})
	if err != nil {
		return
	}
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return
	}
	for t := range s.tails[tenant+"\x00"+id] {
		t.send(e)
	}
	if s.pendingBytes+len(value) > maxPending {
		s.lost++
		s.mu.Unlock()
		return
	}
	s.seq++
	s.pending = append(s.pending, pendingEntry{tenant: tenant, id: id, when: uint64(e.Time.UnixNano()), seq: s.seq, value: value})
	s.pendingBytes += len(value)
	n := len(s.pending)
	s.mu.Unlock()
	if n >= flushAt {
		select {
		case s.wake <- struct{}{}:
		default:
		}
	}
}

// cut keeps the first n bytes of text (on a rune boundary) and says so.
func cut(text string, n int) string {
	if len(text) <= n {
		return text
	}
	k := n
	for k > 0 && !utf8.RuneStart(text[k]) {
		k--
	}
	return text[:k] + fmt.Sprintf("\n[entry cut: a stored log entry keeps %d KiB; %d bytes in all]", n>>10, len(text))
}

// Flush commits every entry waiting, then drops the oldest entries of each
// tenant it touched that is over its quota.
func (s *Store) Flush() {
	s.cmu.Lock()
	defer s.cmu.Unlock()
	s.mu.Lock()
	batch := s.pending
	s.pending, s.pendingBytes = nil, 0
	quota := s.tenantBytes
	s.mu.Unlock()
	if len(batch) == 0 {
		return
	}
	ctx := context.Background()
	ops := make([]store.Op, 0, 2*len(batch))
	added := map[string]int64{}
	for _, p := range batch {
		hk := handleKey(p.tenant, p.id, p.when, p.seq)
		size := int64(len(hk) + len(p.value))
		ops = append(ops, store.Put(handles, hk, p.value), store.Put(byTenant, tenantKey(p.tenant, p.when, p.seq), tenantValue(size, p.id)))
		added[p.tenant] += size
	}
	if err := store.CommitChunked(ctx, s.st, nil, ops); err != nil {
		return // lost, as entries not yet written are at a crash
	}
	for tenant, n := range added {
		used, ok := s.used[tenant]
		if !ok {
			// First touch: what is stored now, this batch included.
			used = s.count(ctx, tenant)
		} else {
			used += n
		}
		if used > quota {
			used -= s.drop(ctx, tenant, used-quota)
		}
		s.used[tenant] = used
	}
}

// count is what tenant stores.
func (s *Store) count(ctx context.Context, tenant string) int64 {
	var n int64
	s.st.Scan(ctx, byTenant, store.Range{Prefix: lp(nil, tenant)}, func(_, v []byte) bool {
		if size, _, ok := parseTenantValue(v); ok {
			n += size
		}
		return true
	})
	return n
}

// drop deletes tenant's oldest entries until at least n bytes went, and
// answers how many did.
func (s *Store) drop(ctx context.Context, tenant string, n int64) int64 {
	var ops []store.Op
	var gone int64
	s.st.Scan(ctx, byTenant, store.Range{Prefix: lp(nil, tenant)}, func(k, v []byte) bool {
		size, id, ok := parseTenantValue(v)
		ops = append(ops, store.Delete(byTenant, store.Copy(k)))
		if ok {
			when, seq := tenantKeyTime(k)
			ops = append(ops, store.Delete(handles, handleKey(tenant, id, when, seq)))
			gone += size
		}
		return gone < n
	})
	if store.CommitChunked(ctx, s.st, nil, ops) != nil {
		return 0
	}
	return gone
}

// Sweep deletes every entry older than the retention.
func (s *Store) Sweep() {
	s.cmu.Lock()
	defer s.cmu.Unlock()
	s.mu.Lock()
	cutoff := uint64(s.now().Add(-s.retention).UnixNano())
	s.mu.Unlock()
	ctx := context.Background()
	var from []byte
	for {
		// The next tenant with entries, then its entries before the cutoff.
		var tenant string
		found := false
		s.st.Scan(ctx, byTenant, store.Range{From: from, Limit: 1}, func(k, _ []byte) bool {
			tenant, found = parseTenant(k)
			return false
		})
		if !found {
			return
		}
		prefix := lp(nil, tenant)
		var ops []store.Op
		var gone int64
		s.st.Scan(ctx, byTenant, store.Range{Prefix: prefix, To: binary.BigEndian.AppendUint64(append([]byte{}, prefix...), cutoff)}, func(k, v []byte) bool {
			ops = append(ops, store.Delete(byTenant, store.Copy(k)))
			if size, id, ok := parseTenantValue(v); ok {
				when, seq := tenantKeyTime(k)
				ops = append(ops, store.Delete(handles, handleKey(tenant, id, when, seq)))
				gone += size
			}
			return true
		})
		if store.CommitChunked(ctx, s.st, nil, ops) == nil {
			if used, ok := s.used[tenant]; ok {
				s.used[tenant] = max(used-gone, 0)
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

// List answers a page of id's log. With a cursor: the entries after the
// one it names; else with since: the first entries at or after it; else
// the newest entries. limit ≤ 0 is DefaultLimit; more than MaxLimit is
// MaxLimit. The cursor is the last entry's (or, on an empty page, the one
// given), so polling with it reads each entry once.
func (s *Store) List(tenant, id string, since time.Time, limit int, cursor string) (Page, error) {
	if limit <= 0 {
		limit = DefaultLimit
	}
	limit = min(limit, MaxLimit)
	s.Flush()
	s.mu.Lock()
	oldest := uint64(s.now().Add(-s.retention).UnixNano())
	s.mu.Unlock()
	prefix := lp(lp(nil, tenant), id)
	r := store.Range{Prefix: prefix, Limit: limit}
	switch {
	case cursor != "":
		c, err := base64.RawURLEncoding.DecodeString(cursor)
		if err != nil || len(c) != 12 {
			return Page{}, fault.New(fault.BadRequest, "cursor: not one this API gave.")
		}
		r.From = append(append(append([]byte{}, prefix...), c...), 0)
	case !since.IsZero():
		if since.UnixNano() > int64(oldest) {
			oldest = uint64(since.UnixNano())
		}
	default:
		r.Reverse = true
	}
	if r.From == nil {
		r.From = binary.BigEndian.AppendUint64(append([]byte{}, prefix...), oldest)
	}
	var out []Entry
	var last []byte
	err := s.st.Scan(context.Background(), handles, r, func(k, v []byte) bool {
		when, seq := handleKeyTime(k, len(prefix))
		if when < oldest {
			return !r.Reverse
		}
		var e Entry
		if json.Unmarshal(v, &e) != nil {
			return true
		}
		e.Time = time.Unix(0, int64(when))
		out = append(out, e)
		if last == nil || !r.Reverse {
			last = binary.BigEndian.AppendUint32(binary.BigEndian.AppendUint64(nil, when), seq)
		}
		return true
	})
	if err != nil {
		return Page{}, fault.New(fault.Overloaded, "The log store did not answer: %v", err)
	}
	if r.Reverse {
		for i, j := 0, len(out)-1; i < j; i, j = i+1, j-1 {
			out[i], out[j] = out[j], out[i]
		}
	}
	page := Page{Entries: out, Cursor: cursor}
	if last != nil {
		page.Cursor = base64.RawURLEncoding.EncodeToString(last)
	}
	if page.Entries == nil {
		page.Entries = []Entry{}
	}
	return page, nil
}

// Tail is a live follower of one handle's log.
type Tail struct {
	C       chan Entry    // entries as they are appended
	Done    chan struct{} // closed when the store closes
	s       *Store
	tenant  string
	key     string
	dropped int64 // under s.mu
	ended   bool
}

func (t *Tail) send(e Entry) {
	select {
	case t.C <- e:
	default:
		t.dropped++
	}
}

func (t *Tail) end() {
	if !t.ended {
		t.ended = true
		close(t.Done)
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
	s := t.s
	s.mu.Lock()
	defer s.mu.Unlock()
	if set := s.tails[t.key]; set[t] {
		delete(set, t)
		if len(set) == 0 {
			delete(s.tails, t.key)
		}
		if s.tailCount[t.tenant]--; s.tailCount[t.tenant] <= 0 {
			delete(s.tailCount, t.tenant)
		}
	}
	t.end()
}

// Tail follows id's log from now on; past TailsPerTenant tails of the
// tenant at once it answers QUOTA_EXCEEDED.
func (s *Store) Tail(tenant, id string) (*Tail, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return nil, fault.New(fault.Overloaded, "The gateway is stopping.")
	}
	if s.tailCount[tenant] >= TailsPerTenant {
		return nil, fault.New(fault.QuotaExceeded, "A tenant may hold %d tails at once; close one first.", TailsPerTenant)
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
