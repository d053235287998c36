package caddymodule

import (
	"context"
	"encoding/binary"
	"encoding/json"
	"strings"
	"sync"
	"time"

	"github.com/retainer-gw/retainer/store"
)

// usageTable holds each tenant's usage a UTC hour (docs/usage.md): key
// lp(registry NUL tenant) hour ("2006-01-02T15") gateway (the cluster
// member's name; "" on one machine), value the hour's counts as JSON. It
// lives in the receipts backend, as the logs do. Each gateway writes its
// own rows, so no two gateways add to the same value; a read sums them.
// (Rows written before hours were kept have a day, "2006-01-02", where
// the hour is, and count as the day's first hour.)
const usageTable = "usage.v1"

// usageRetention is how long an hour's usage is kept.
const usageRetention = 90 * 24 * time.Hour

// usageFlushEvery is how often counts in memory are added to the store.
const usageFlushEvery = 5 * time.Second

// usageCounts is what a tenant used in an hour (or a day, summed).
type usageCounts struct {
	Requests          int64   `json:"requests"`
	CPUMs             float64 `json:"cpuMs"`
	WallMs            float64 `json:"wallMs"`
	EgressBytes       int64   `json:"egressBytes"`
	AITokens          int64   `json:"aiTokens"`
	WebsocketMessages int64   `json:"websocketMessages"`
	// KVBytes and SQLBytes are what the tenant stored, the most seen in
	// the period (sampled at each flush while it is active).
	KVBytes  int64 `json:"kvBytes"`
	SQLBytes int64 `json:"sqlBytes"`
}

func (c *usageCounts) add(o *usageCounts) {
	c.Requests += o.Requests
	c.CPUMs += o.CPUMs
	c.WallMs += o.WallMs
	c.EgressBytes += o.EgressBytes
	c.AITokens += o.AITokens
	c.WebsocketMessages += o.WebsocketMessages
	c.KVBytes = max(c.KVBytes, o.KVBytes)
	c.SQLBytes = max(c.SQLBytes, o.SQLBytes)
}

type usageKey struct{ tenant, hour string }

// usageMeter counts what tenants use per UTC hour in memory and adds it to
// the store every usageFlushEvery (a read adds it first). It also keeps
// each tenant's total for the current UTC day, which plans are checked
// against on every request (plans.go): loaded from the store at start (a
// restart does not reset a day) and after each flush (the other gateways'
// rows included, in a cluster).
type usageMeter struct {
	st   store.Store
	node string // this gateway's name in a cluster, "" alone
	// kvUsed and sqlUsed are what a tenant stores now.
	kvUsed  func(registry, tenant string) int64
	sqlUsed func(registry, tenant string) int64
	// objectsUsed is what a tenant keeps in its bucket now.
	objectsUsed func(registry, tenant string) int64

	mu      sync.Mutex
	pending map[usageKey]*usageCounts
	day     string // the UTC day of base and fresh
	dayNum  int64  // day as Unix days
	// hourAt and hour are the newest hour counted (Unix seconds at its
	// start, and as stored), so a count formats no time.
	hourAt int64
	hour   string
	base   map[string]*usageCounts // today's totals in the store
	fresh  map[string]*usageCounts // today's counts not yet in base
	loaded map[string]bool         // base read from the store today
	// loading is each tenant whose day a plan check is reading (closed
	// when done); retryAt is when a tenant whose read failed may read
	// again (Unix nanoseconds): until then its checks answer memory.
	loading map[string]chan struct{}
	retryAt map[string]int64
	// gen counts a flush's start and end, and flushing says one runs: a
	// plan check's read of a day is taken as base only if no flush
	// started or ended while it read (the store's rows of this gateway
	// change then). unsure is each tenant with a row whose write is not
	// known to be in the store (a commit failed): its read may lack it.
	gen      uint64
	flushing bool
	unsure   map[string]bool
	// cut is each tenant's limit that refused it today and the handles
	// already told so (plans.go), so each is noted once a day.
	cut map[string]*planCut

	plans *tenantPlans

	cmu sync.Mutex // serializes flushes; no plan check waits for it
	// rows is this gateway's rows of the running hours as written (or
	// being written), so a flush writes each row's whole value, not an
	// addition: a commit that failed and was applied anyway, written
	// again, counts nothing twice. dirty is the rows whose last write
	// is not known to be committed. Both m.cmu held.
	rows  map[usageKey]*usageCounts
	dirty map[usageKey]bool
	stop  chan struct{}
	done  chan struct{}
}

func openUsage(st store.Store, node string, kvUsed, sqlUsed, objectsUsed func(registry, tenant string) int64) *usageMeter {
	m := &usageMeter{st: st, node: node, kvUsed: kvUsed, sqlUsed: sqlUsed, objectsUsed: objectsUsed,
		pending: map[usageKey]*usageCounts{}, rows: map[usageKey]*usageCounts{}, dirty: map[usageKey]bool{},
		loading: map[string]chan struct{}{}, unsure: map[string]bool{},
		stop: make(chan struct{}), done: make(chan struct{})}
	m.plans = openTenantPlans(st)
	m.resetDay(time.Now())
	go m.loop()
	return m
}

func (m *usageMeter) loop() {
	defer close(m.done)
	tick := time.NewTicker(usageFlushEvery)
	defer tick.Stop()
	sweep := time.NewTicker(time.Hour)
	defer sweep.Stop()
	reload := time.NewTicker(time.Minute)
	defer reload.Stop()
	m.sweep()
	for {
		select {
		case <-m.stop:
			m.flush()
			return
		case <-tick.C:
			m.flush()
		case <-sweep.C:
			m.sweep()
			m.plans.sweepCuts()
		case <-reload.C:
			// Another gateway of a cluster may have recorded a tenant's
			// plan (plans.go).
			m.plans.load()
		}
	}
}

func (m *usageMeter) close() {
	m.plans.stop() // the records and cuts written in the background (plans.go)
	close(m.stop)
	<-m.done
}

// resetDay starts the totals of t's UTC day (m.mu held, or before the
// meter runs).
func (m *usageMeter) resetDay(t time.Time) {
	m.day = t.UTC().Format(time.DateOnly)
	m.dayNum = t.Unix() / 86400
	m.base = map[string]*usageCounts{}
	m.fresh = map[string]*usageCounts{}
	m.loaded = map[string]bool{}
	m.retryAt = map[string]int64{}
	m.cut = map[string]*planCut{}
}

// counts answers what to add to for tenant (a logTenant) at t, creating
// it (m.mu held): the hour's pending counts and the day's fresh ones.
func (m *usageMeter) counts(tenant string, t time.Time) (*usageCounts, *usageCounts) {
	sec := t.Unix()
	hour := m.hour
	if sec < m.hourAt || sec >= m.hourAt+3600 {
		hour = t.UTC().Format("2006-01-02T15")
		if sec > m.hourAt {
			m.hourAt, m.hour = sec-sec%3600, hour
		}
	}
	if day := sec / 86400; day != m.dayNum {
		if day < m.dayNum {
			// Late (a request that ended as the day turned): counted in
			// its hour, not in today's totals.
			return m.pendingFor(tenant, hour), &usageCounts{}
		}
		m.resetDay(t)
	}
	f := m.fresh[tenant]
	if f == nil {
		f = &usageCounts{}
		m.fresh[tenant] = f
	}
	return m.pendingFor(tenant, hour), f
}

func (m *usageMeter) pendingFor(tenant, hour string) *usageCounts {
	k := usageKey{tenant, hour}
	d := m.pending[k]
	if d == nil {
		d = &usageCounts{}
		m.pending[k] = d
	}
	return d
}

// add counts one invocation of tenant's (a logTenant).
func (m *usageMeter) add(tenant string, at time.Time, wallMs, cpuMs float64, egress int64) {
	m.mu.Lock()
	for _, c := range m.countsBoth(tenant, at) {
		c.Requests++
		c.WallMs += wallMs
		c.CPUMs += cpuMs
		c.EgressBytes += egress
	}
	m.mu.Unlock()
}

func (m *usageMeter) countsBoth(tenant string, at time.Time) [2]*usageCounts {
	p, f := m.counts(tenant, at)
	return [2]*usageCounts{p, f}
}

// addOther applies f to tenant's counts of the running hour and of its
// day: what no request entry counted.
func (m *usageMeter) addOther(tenant string, f func(*usageCounts)) {
	m.mu.Lock()
	defer m.mu.Unlock()
	for _, c := range m.countsBoth(tenant, time.Now()) {
		f(c)
	}
}

// addEgress counts bytes a tenant sent that no request entry counted (a
// streamed answer, an outbound fetch).
func (m *usageMeter) addEgress(tenant string, n int64) {
	m.addOther(tenant, func(c *usageCounts) { c.EgressBytes += n })
}

// addCPU counts isolate CPU time no request entry counted (a WebSocket
// event's, a run's).
func (m *usageMeter) addCPU(tenant string, ms float64) {
	m.addOther(tenant, func(c *usageCounts) { c.CPUMs += ms })
}

// addAITokens counts tokens of a tenant's ai.run.
func (m *usageMeter) addAITokens(tenant string, n int64) {
	m.addOther(tenant, func(c *usageCounts) { c.AITokens += n })
}

// addSocketMessages counts WebSocket messages to or from a tenant's
// handles.
func (m *usageMeter) addSocketMessages(tenant string, n int64) {
	m.addOther(tenant, func(c *usageCounts) { c.WebsocketMessages += n })
}

// today answers tenant's totals for the current UTC day, what waits in
// memory included. A tenant's first call of the day (on this gateway)
// reads its day from the store; later ones read memory only. The read
// holds no lock a flush holds (docs/usage.md): with the store stalled it
// costs the read's own bound, and a failed read answers what memory
// holds, read again no sooner than usageFlushEvery later.
func (m *usageMeter) today(tenant string) usageCounts {
	now := time.Now()
	m.mu.Lock()
	if day := now.Unix() / 86400; day != m.dayNum {
		if day < m.dayNum {
			m.mu.Unlock()
			return usageCounts{}
		}
		m.resetDay(now)
	}
	if !m.loaded[tenant] && now.UnixNano() >= m.retryAt[tenant] {
		m.mu.Unlock()
		m.load(tenant)
		m.mu.Lock()
	}
	defer m.mu.Unlock()
	var c usageCounts
	if b := m.base[tenant]; b != nil {
		c.add(b)
	}
	if f := m.fresh[tenant]; f != nil {
		c.add(f)
	}
	return c
}

// load reads tenant's day into base, once at a time for a tenant (the
// others wait for that read, within its bound). A read that a flush
// raced (the store's rows of this gateway changed meanwhile) is read
// again, twice at most; a flush under way, or a row of the tenant's whose
// write is not known to be committed, leaves base as memory has it, read
// at a later call.
func (m *usageMeter) load(tenant string) {
	m.mu.Lock()
	if c := m.loading[tenant]; c != nil {
		m.mu.Unlock()
		<-c
		return
	}
	c := make(chan struct{})
	m.loading[tenant] = c
	m.mu.Unlock()
	defer func() {
		m.mu.Lock()
		delete(m.loading, tenant)
		m.mu.Unlock()
		close(c)
	}()
	for try := 0; try < 3; try++ {
		m.mu.Lock()
		day, gen := m.day, m.gen
		skip := m.loaded[tenant] || m.flushing || m.unsure[tenant]
		m.mu.Unlock()
		if skip {
			return
		}
		totals, err := m.readDay(tenant, day)
		m.mu.Lock()
		if err != nil {
			if m.day == day {
				m.retryAt[tenant] = time.Now().Add(usageFlushEvery).UnixNano()
			}
			m.mu.Unlock()
			return
		}
		if m.day == day && m.gen == gen && !m.flushing && !m.unsure[tenant] {
			m.base[tenant] = totals
			m.loaded[tenant] = true
			m.mu.Unlock()
			return
		}
		m.mu.Unlock()
	}
}

func usageStoreKey(tenant, hour, node string) []byte {
	k := binary.BigEndian.AppendUint16(nil, uint16(len(tenant)))
	return append(append(append(k, tenant...), hour...), node...)
}

// parseUsageKey answers a row's tenant, hour ("2006-01-02T15") and day.
func parseUsageKey(k []byte) (tenant, hour string, ok bool) {
	if len(k) < 2 {
		return "", "", false
	}
	n := int(binary.BigEndian.Uint16(k))
	if len(k) < 2+n+10 {
		return "", "", false
	}
	tenant, rest := string(k[2:2+n]), string(k[2+n:])
	if len(rest) >= 13 && rest[10] == 'T' {
		return tenant, rest[:13], true
	}
	if len(rest) == 10 {
		return tenant, rest + "T00", true // a day's row from before hours
	}
	return "", "", false
}

// flush adds what waits to this gateway's hours in the store, then reads
// the day's totals of the tenants it touched back (every gateway's). Each
// row is written whole, from rows: a row not there yet is read first,
// and a failed read leaves what waits for the next flush (a row written
// from a failed read would lose the hour's counts before); a failed
// commit leaves its rows dirty, written again by the next flush (what
// they count is neither lost nor, if the commit was applied after all,
// counted twice).
func (m *usageMeter) flush() {
	m.cmu.Lock()
	defer m.cmu.Unlock()
	m.mu.Lock()
	batch := m.pending
	m.pending = map[usageKey]*usageCounts{}
	day := m.day
	// What waits becomes part of base at once: base is read back from
	// the store below, which then has it.
	touched := map[string]bool{}
	for tenant, f := range m.fresh {
		b := m.base[tenant]
		if b == nil {
			b = &usageCounts{}
			m.base[tenant] = b
		}
		b.add(f)
		touched[tenant] = true
	}
	m.fresh = map[string]*usageCounts{}
	if len(batch) == 0 && len(m.dirty) == 0 {
		m.mu.Unlock()
		return
	}
	m.gen++
	m.flushing = true
	m.mu.Unlock()
	defer func() {
		// A tenant whose counts are in base but not known to be in the
		// store (a row dirty, or put back to wait) is read by no plan
		// check until a flush has written them.
		m.mu.Lock()
		m.gen++
		m.flushing = false
		m.unsure = map[string]bool{}
		for k := range m.dirty {
			m.unsure[k.tenant] = true
		}
		for k := range batch {
			m.unsure[k.tenant] = true
		}
		m.mu.Unlock()
	}()
	ctx := context.Background()
	stored := map[string][2]int64{}
	for k, d := range batch {
		row := m.rows[k]
		if row == nil {
			v, err := m.st.Get(ctx, usageTable, usageStoreKey(k.tenant, k.hour, m.node))
			if err != nil {
				break
			}
			row = &usageCounts{}
			if v != nil {
				json.Unmarshal(v, row)
			}
			m.rows[k] = row
		}
		registry, owner, _ := strings.Cut(k.tenant, "\x00")
		s, ok := stored[k.tenant]
		if !ok {
			if m.kvUsed != nil {
				s[0] = m.kvUsed(registry, owner)
			}
			if m.sqlUsed != nil {
				s[1] = m.sqlUsed(registry, owner)
			}
			stored[k.tenant] = s
		}
		row.add(d)
		row.KVBytes, row.SQLBytes = max(row.KVBytes, s[0]), max(row.SQLBytes, s[1])
		m.dirty[k] = true
		delete(batch, k)
	}
	if len(batch) > 0 {
		// A row's read failed: the store is not answering, so nothing is
		// written now; what was not added to a row waits again.
		m.mu.Lock()
		for k, d := range batch {
			m.pendingFor(k.tenant, k.hour).add(d)
		}
		m.mu.Unlock()
		return
	}
	var ops []store.Op
	for k := range m.dirty {
		b, _ := json.Marshal(m.rows[k])
		ops = append(ops, store.Put(usageTable, usageStoreKey(k.tenant, k.hour, m.node), b))
		touched[k.tenant] = true
	}
	if store.CommitChunked(ctx, m.st, nil, ops) != nil {
		return // base keeps what was counted; the rows are written again
	}
	m.dirty = map[usageKey]bool{}
	m.mu.Lock()
	same := m.day == day
	hour := m.hour
	m.mu.Unlock()
	for k := range m.rows {
		if k.hour < hour {
			delete(m.rows, k) // an hour that ended: read again if a late count comes
		}
	}
	if same {
		m.loadToday(touched)
	}
}

// readDay answers tenant's totals of day in the store (every gateway's
// rows).
func (m *usageMeter) readDay(tenant, day string) (*usageCounts, error) {
	t := &usageCounts{}
	err := m.st.Scan(context.Background(), usageTable, store.Range{Prefix: usageStoreKey(tenant, day, "")}, func(k, v []byte) bool {
		_, hour, ok := parseUsageKey(k)
		if !ok || hour[:10] != day {
			return true
		}
		var c usageCounts
		if json.Unmarshal(v, &c) != nil {
			return true
		}
		t.add(&c)
		return true
	})
	return t, err
}

// loadToday sets base to the store's totals of today for the tenants in
// only (m.cmu held, this gateway's rows committed). A failed read leaves
// that tenant's base, and the rest unread, as they are.
func (m *usageMeter) loadToday(only map[string]bool) {
	m.mu.Lock()
	day := m.day
	m.mu.Unlock()
	for tenant := range only {
		t, err := m.readDay(tenant, day)
		if err != nil {
			return
		}
		m.mu.Lock()
		if m.day != day {
			m.mu.Unlock()
			return
		}
		m.base[tenant] = t
		m.loaded[tenant] = true
		m.mu.Unlock()
	}
}

// sweep deletes hours older than usageRetention.
func (m *usageMeter) sweep() {
	cutoff := time.Now().UTC().Add(-usageRetention).Format(time.DateOnly)
	var ops []store.Op
	m.st.Scan(context.Background(), usageTable, store.Range{KeysOnly: true}, func(k, _ []byte) bool {
		if _, hour, ok := parseUsageKey(k); ok && hour[:10] < cutoff {
			ops = append(ops, store.Delete(usageTable, store.Copy(k)))
		}
		return true
	})
	store.CommitChunked(context.Background(), m.st, nil, ops)
}
