package capability

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"io"
	"sync"
	"time"

	"github.com/retainer-gw/retainer/budgets"
	"github.com/retainer-gw/retainer/fault"
	"github.com/retainer-gw/retainer/internal/readsome"
	"github.com/retainer-gw/retainer/internal/wirejson"
)

// Streamed fetch answers (README.md, API): an upstream answer whose length is
// unknown or over streamedAnswer is not read ahead. Its body waits here
// under a random token, owned by the run or handle that fetched it, and is
// either read by the program (fetch.read, during its run or invocation) or
// relayed whole to a visitor by the data plane, which takes it from here
// when the handler answers `new Response(upstream.body)`.

// streamedAnswer is the largest answer of known length read at once.
const streamedAnswer = 1 << 20

// fetchChunk is the most one fetch.read answers.
const fetchChunk = 64 << 10

// unreadStreamTimeout closes a stream nobody reads or takes for this long.
const unreadStreamTimeout = 30 * time.Second

// answeredTakeWait is how long a fetch (or bucket.get) at its owner's cap
// of unread answers waits for one of them to be taken before it throws. A
// handler's invocation that answers a body unread (`new Response(body)`)
// no longer holds it, but the gateway takes it (Take) only once the answer
// has come back and passed the output gate; meanwhile the handle's next
// invocation already runs in its worker. A handle of concurrency 16 whose
// invocations each answered an object's body threw at its 17th get (4-13
// of 1,280 gets in TestObjectsAnsweredBodiesAreNotHeld).
const answeredTakeWait = 2 * time.Second

// Budgets (docs/architecture.md, "Budgets"): unread answers are charged to
// the run or handle that fetched them and to its tenant, each capped below
// the gateway's own bound, so one tenant's unread streams cannot take the
// table from the others. A stream taken for a relay to a visitor still
// counts for its tenant until the relay ends. The caps are budgets'
// FetchStreams, FetchStreamsPerOwner and FetchStreamsPerTenant.

type fetchStream struct {
	tenant string
	owner  string
	object bool // an object's body (objects.go): relayed within max_object
	body   io.ReadCloser
	cancel context.CancelFunc // ends the upstream request
	mu     sync.Mutex         // one read at a time
	idle   *time.Timer
	done   bool
}

// FetchStreams holds the streamed answers not yet read to their end.
//
// A fetch takes its place in the budget before it dials (reserve): whether
// its answer will stream is known only from its head, and a budget checked
// then let an upstream see every fetch in flight as well as the ones held
// (276 open requests against a tenant's cap of 256). A fetch on its way
// holds its owner's and its tenant's place until its answer is read whole
// (the place comes back) or left unread (the place is the stream's).
type FetchStreams struct {
	mu       sync.Mutex
	open     map[string]*fetchStream
	byOwner  map[string]int // unread answers per run or handle
	byTenant map[string]int // unread answers and relays per tenant
	// Fetches on their way, before their head: in all, per owner, per
	// tenant.
	dialing    int
	dialOwner  map[string]int
	dialTenant map[string]int
	// changed is closed (and forgotten) when a place comes back or becomes
	// a stream's, waking the fetches waiting for one (reserve).
	changed chan struct{}
}

// DropOwner drops the unread answers owner still holds (its run ended).
// Streams already taken for a relay are not its any more.
func (fs *FetchStreams) DropOwner(owner string) {
	fs.mu.Lock()
	if fs.byOwner[owner] == 0 {
		fs.mu.Unlock()
		return
	}
	var tokens []string
	for token, st := range fs.open {
		if st.owner == owner {
			tokens = append(tokens, token)
		}
	}
	fs.mu.Unlock()
	for _, token := range tokens {
		fs.drop(token)
	}
}

// Counts answers how many streams owner and tenant hold (tests, metrics).
func (fs *FetchStreams) Counts(owner, tenant string) (int, int) {
	fs.mu.Lock()
	defer fs.mu.Unlock()
	return fs.byOwner[owner], fs.byTenant[tenant]
}

// release uncounts a stream for its owner (and, with tenant, its tenant).
// fs.mu is held.
func (fs *FetchStreams) release(st *fetchStream, tenant bool) {
	if fs.byOwner[st.owner]--; fs.byOwner[st.owner] <= 0 {
		delete(fs.byOwner, st.owner)
	}
	if tenant {
		fs.releaseTenant(st.tenant)
	}
	fs.wake()
}

// releaseTenant uncounts one stream of tenant. fs.mu is held.
func (fs *FetchStreams) releaseTenant(tenant string) {
	if fs.byTenant[tenant]--; fs.byTenant[tenant] <= 0 {
		delete(fs.byTenant, tenant)
	}
	fs.wake()
}

// wake tells the fetches waiting for a place that one came back. fs.mu is
// held.
func (fs *FetchStreams) wake() {
	if fs.changed != nil {
		close(fs.changed)
		fs.changed = nil
	}
}

// place is a fetch's place in the budget from before its dial: given back
// by done (its answer was read whole, or it failed), or made its stream's
// by put.
type place struct {
	fs            *FetchStreams
	owner, tenant string
	taken         bool
}

// reserve takes a place for a fetch by owner (of tenant) before it dials.
// Past the owner's or the tenant's cap of unread answers the fetch throws
// QUOTA_EXCEEDED in the program, and past the gateway's OVERLOADED, as an
// open past them would; while the cap is only full of fetches on their way
// (whose answers may be read whole and give their places back), it waits
// for a place, within ctx (the run's bound). At the owner's cap of unread
// answers it first waits answeredTakeWait for one to be taken (some may
// have been answered by the handle's invocations already).
func (fs *FetchStreams) reserve(ctx context.Context, owner, tenant string) (*place, error) {
	fs.mu.Lock()
	defer fs.mu.Unlock()
	if fs.open == nil {
		fs.open = map[string]*fetchStream{}
		fs.byOwner = map[string]int{}
		fs.byTenant = map[string]int{}
		fs.dialOwner = map[string]int{}
		fs.dialTenant = map[string]int{}
	}
	var taken <-chan time.Time // answeredTakeWait, from the first time at the owner's cap
	for {
		full := false
		switch {
		case fs.byTenant[tenant] >= budgets.FetchStreamsPerTenant:
			return nil, fault.New(fault.QuotaExceeded, "The tenant holds %d fetch answers unread or being relayed, the most it may: read them to their end or cancel their bodies first.", budgets.FetchStreamsPerTenant)
		case len(fs.open)+fs.dialing >= budgets.FetchStreams:
			return nil, fault.New(fault.Overloaded, "Too many streamed fetch answers are open on this gateway.")
		case fs.byOwner[owner] >= budgets.FetchStreamsPerOwner:
			if taken == nil {
				t := time.NewTimer(answeredTakeWait)
				defer t.Stop()
				taken = t.C
			}
			full = true
		}
		if !full && fs.byOwner[owner]+fs.dialOwner[owner] < budgets.FetchStreamsPerOwner && fs.byTenant[tenant]+fs.dialTenant[tenant] < budgets.FetchStreamsPerTenant {
			break
		}
		if fs.changed == nil {
			fs.changed = make(chan struct{})
		}
		changed := fs.changed
		fs.mu.Unlock()
		select {
		case <-changed:
			fs.mu.Lock()
		case <-taken:
			fs.mu.Lock()
			return nil, fault.New(fault.QuotaExceeded, "This run or handle holds %d fetch answers unread, the most it may: read them to their end or cancel their bodies first.", budgets.FetchStreamsPerOwner)
		case <-ctx.Done():
			fs.mu.Lock()
			return nil, fault.New(fault.QuotaExceeded, "This run or handle, or its tenant, has as many fetches on their way or unread as it may (%d, %d for the tenant); this one waited for a place until its run ended.", budgets.FetchStreamsPerOwner, budgets.FetchStreamsPerTenant)
		}
	}
	fs.dialing++
	fs.dialOwner[owner]++
	fs.dialTenant[tenant]++
	return &place{fs: fs, owner: owner, tenant: tenant}, nil
}

// undial uncounts p as a fetch on its way. fs.mu is held.
func (p *place) undial() bool {
	if p.taken {
		return false
	}
	p.taken = true
	fs := p.fs
	fs.dialing--
	if fs.dialOwner[p.owner]--; fs.dialOwner[p.owner] <= 0 {
		delete(fs.dialOwner, p.owner)
	}
	if fs.dialTenant[p.tenant]--; fs.dialTenant[p.tenant] <= 0 {
		delete(fs.dialTenant, p.tenant)
	}
	return true
}

// done gives p back: its fetch left no stream. Safe to call after put.
func (p *place) done() {
	if p == nil {
		return
	}
	p.fs.mu.Lock()
	if p.undial() {
		p.fs.wake()
	}
	p.fs.mu.Unlock()
}

// put registers a body in the place its fetch reserved and answers its
// token.
func (fs *FetchStreams) put(p *place, body io.ReadCloser, cancel context.CancelFunc) string {
	var b [16]byte
	rand.Read(b[:])
	token := hex.EncodeToString(b[:])
	fs.mu.Lock()
	defer fs.mu.Unlock()
	p.undial()
	fs.byOwner[p.owner]++
	fs.byTenant[p.tenant]++
	st := &fetchStream{owner: p.owner, tenant: p.tenant, body: body, cancel: cancel}
	st.idle = time.AfterFunc(unreadStreamTimeout, func() { fs.drop(token) })
	fs.open[token] = st
	fs.wake() // a fetch waiting for a place may now find the cap full of streams
	return token
}

// putObject registers an object's body (objects.go) in the place p.
func (fs *FetchStreams) putObject(p *place, body io.ReadCloser) string {
	token := fs.put(p, body, func() {})
	fs.mu.Lock()
	if st := fs.open[token]; st != nil {
		st.object = true
	}
	fs.mu.Unlock()
	return token
}

func (fs *FetchStreams) drop(token string) {
	fs.mu.Lock()
	st := fs.open[token]
	delete(fs.open, token)
	if st != nil {
		fs.release(st, true)
	}
	fs.mu.Unlock()
	if st != nil {
		st.idle.Stop()
		st.cancel()
		st.body.Close()
	}
}

// Take hands a stream to the data plane, which relays it to a visitor and
// must close it. owner must be the one that fetched it.
func (fs *FetchStreams) Take(token, owner string) (io.ReadCloser, error) {
	fs.mu.Lock()
	st := fs.open[token]
	if st == nil || st.owner != owner {
		fs.mu.Unlock()
		return nil, fault.New(fault.BadResponse, "The handler answered a fetch body that is gone (read, or never its own).")
	}
	delete(fs.open, token)
	fs.release(st, false) // the tenant's count ends with the relay
	fs.mu.Unlock()
	st.idle.Stop()
	return &takenBody{ReadCloser: st.body, cancel: st.cancel, object: st.object, done: func() {
		fs.mu.Lock()
		fs.releaseTenant(st.tenant)
		fs.mu.Unlock()
	}}, nil
}

type takenBody struct {
	io.ReadCloser
	cancel context.CancelFunc
	object bool
	once   sync.Once
	done   func()
}

// ObjectBody reports an object's body (docs/objects.md): its relay is
// bounded by max_object, not max_response_body.
func (b *takenBody) ObjectBody() bool { return b.object }

func (b *takenBody) Close() error {
	b.once.Do(b.done)
	b.cancel()
	return b.ReadCloser.Close()
}

// read answers fetch.read: what has arrived, up to 64 KiB, as a Latin-1
// string, and whether the body ended.
func (fs *FetchStreams) read(ctx context.Context, owner string, raw json.RawMessage) (json.RawMessage, error) {
	var a struct {
		Stream string `json:"stream"`
	}
	if err := json.Unmarshal(raw, &a); err != nil {
		return nil, bad("fetch.read: malformed arguments.")
	}
	fs.mu.Lock()
	st := fs.open[a.Stream]
	fs.mu.Unlock()
	if st == nil || st.owner != owner {
		return nil, bad("The fetch body is no longer readable (read to its end, relayed, or unread for %v).", unreadStreamTimeout)
	}
	st.mu.Lock()
	defer st.mu.Unlock()
	st.idle.Reset(unreadStreamTimeout)
	buf := make([]byte, fetchChunk)
	n, err := readsome.Read(ctx, st.body, buf)
	done := false
	switch {
	case errors.Is(err, io.EOF):
		done = true
	case err != nil:
		fs.drop(a.Stream)
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		return nil, bad("fetch: the upstream's body failed: %v.", err)
	}
	if done {
		fs.drop(a.Stream)
	}
	return wirejson.Chunk(buf[:n], done)
}
