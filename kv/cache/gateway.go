package cache

import (
	"context"
	"encoding/json"
	"sync"
	"sync/atomic"
	"time"

	"github.com/retainer-gw/retainer/fault"
	"github.com/retainer-gw/retainer/internal/hostcache"
)

// GatewayConfig is what the gateway's side of the cache is told of kv.
type GatewayConfig struct {
	// Apply applies kv writes of run or handle id, hosted by a worker of
	// tenant ("" when shared), in order, each checked as the kv.put or
	// kv.delete host call it stands for; the first refused ends them with
	// its error. due is when the bound of the invocation that made the
	// first of them ends (the earliest, zero: not known): the store is
	// waited for within half what is left of it, as for a kv call (docs/
	// cluster.md, "Failures"). Without it a worker's batch is refused.
	Apply func(ctx context.Context, tenant, id string, due time.Time, writes []Write) error
	// SpaceOf names the kv key space of run or handle id ("" for none)
	// and whether the id may read and write it. Workers cache reads only
	// of ids that may read, under this name. Without it nothing is cached.
	SpaceOf func(id string) (space string, readable, writable bool)
}

// Gateway is the gateway's side of the workers' kv caches: it says which
// space a kv call reached (the worker caches nothing without it), records
// which keys each worker may hold, applies the workers' batches of queued
// writes, and drops what a write changed from every other worker that may
// hold it before the write is answered. It implements hostcache.Gateway.
type Gateway struct {
	cfg GatewayConfig

	mu      sync.Mutex
	workers map[hostcache.Peer]*known // workers that may cache something
}

// known is what the gateway knows of one worker's cache: the keys it may
// hold, and how many drops it was told (tests count them).
type known struct {
	held held
	told atomic.Int64
}

// NewGateway is the gateway's side of the cache.
func NewGateway(cfg GatewayConfig) *Gateway {
	return &Gateway{cfg: cfg, workers: map[hostcache.Peer]*known{}}
}

var _ hostcache.Gateway = (*Gateway)(nil)

// run is what the gateway says of a run's kv (SpaceOf): its key space
// ("" for none) and whether it may read and write it.
type run struct {
	space              string
	readable, writable bool
}

func (g *Gateway) runOf(id string) run {
	if g.cfg.SpaceOf != nil {
		space, readable, writable := g.cfg.SpaceOf(id)
		return run{space, readable, writable}
	}
	return run{}
}

// Call serves a worker's host call: for a kv call, its key is noted
// before it is served and the hint made after; a write is dropped from
// the other workers' caches before it is answered.
func (g *Gateway) Call(p hostcache.Peer, id, op string, args json.RawMessage, serve func() (json.RawMessage, error)) (json.RawMessage, json.RawMessage, error) {
	var r run
	var key *string
	switch op {
	case opGet, opPut, opDelete:
		r = g.runOf(id)
		var keys []string
		if a, err := decodeArgs(args); err == nil && a.Key != nil {
			key = a.Key
			keys = []string{*key}
		}
		g.note(p, r, keys...)
	}
	res, err := serve()
	if err != nil {
		return res, nil, err
	}
	var h *hint
	switch op {
	case opGet:
		h = g.spaceHint(p, r, nil, nil)
	case opPut, opDelete:
		if key != nil {
			var drops drops
			h = g.spaceHint(p, r, []string{*key}, &drops)
			drops.send(g)
		}
	}
	if h == nil {
		return res, nil, nil
	}
	return res, encodeJSON(h), nil
}

// Batch applies a worker's queued writes in order, each run's consecutive
// writes as one call of Apply for that run (checked like any of its host
// calls), and answers how many were applied before a refusal.
func (g *Gateway) Batch(ctx context.Context, p hostcache.Peer, body []byte) ([]byte, error) {
	var b batch
	// The body is part of a frame the transport already held to its cap.
	if err := b.decode(body); err != nil {
		return nil, err
	}
	return encodeJSON(g.apply(ctx, p, b.Writes)), nil
}

// Carry is Batch for writes that came with answers of ids, in one frame
// (hostcache.Answer): an answer is released only when every write of its
// id in the batch was applied. The worker's cache sends an answer along
// only when the batch holds every write its id still owes, so a released
// answer waits, past this, for nothing but the commit (the output gate);
// one whose id's writes were refused, or not reached after another id's
// were, is not released, and waits in the worker as any other (Worker,
// flush). Another run's refusal therefore never fails an answer: it is
// only sent again.
func (g *Gateway) Carry(ctx context.Context, p hostcache.Peer, body []byte, ids []string) ([]byte, []bool, error) {
	var b batch
	if err := b.decode(body); err != nil {
		return nil, nil, err
	}
	rep := g.apply(ctx, p, b.Writes)
	late := map[string]bool{}
	for _, w := range b.Writes[rep.Applied:] {
		late[w.ID] = true
	}
	release := make([]bool, len(ids))
	for i, id := range ids {
		release[i] = id != "" && !late[id]
	}
	return encodeJSON(rep), release, nil
}

func (g *Gateway) apply(ctx context.Context, p hostcache.Peer, writes []BatchWrite) batchReply {
	if g.cfg.Apply == nil {
		return refused(0, fault.New(fault.Forbidden, "This gateway serves no host calls."))
	}
	applied := 0
	var seg []Write
	var keys []string
	// What the batch wrote leaves the other workers' caches before the
	// batch is answered, whichever way it ends: one message to each for
	// the whole batch, not one a key waited for in turn.
	var drops drops
	defer drops.send(g)
	for applied < len(writes) {
		id := writes[applied].ID
		end := applied
		seg, keys = seg[:0], keys[:0]
		var due time.Time
		for end < len(writes) && writes[end].ID == id {
			w := writes[end]
			seg = append(seg, w.Write)
			keys = append(keys, w.Key)
			if !w.Due.IsZero() && (due.IsZero() || w.Due.Before(due)) {
				due = w.Due
			}
			end++
		}
		if id == "" || !p.Holds(id) {
			return refused(applied, fault.New(fault.Forbidden, "No run of this worker has that id."))
		}
		r := g.runOf(id)
		g.note(p, r, keys...)
		if err := g.cfg.Apply(ctx, p.Tenant(), id, due, seg); err != nil {
			// The gateway applies a run's writes in order and stops at
			// the first it refuses; which one is not said, so the run's
			// writes of this batch count as not applied (they are sent
			// again or fail their run; a write applied twice is the same
			// write).
			return refused(applied, err)
		}
		g.spaceHint(p, r, keys, &drops)
		applied = end
	}
	return batchReply{Applied: applied}
}

func refused(applied int, err error) batchReply {
	f := fault.As(err)
	if f == nil {
		f = fault.New(fault.Internal, "Internal error.")
	}
	return batchReply{Applied: applied, Code: f.Code, Message: f.Message}
}

// spaceHint names r's key space; the keys it wrote are added to drops,
// which the caller sends to every other worker before it answers the
// write.
func (g *Gateway) spaceHint(p hostcache.Peer, r run, written []string, drops *drops) *hint {
	if r.space == "" {
		return nil
	}
	// The writer's own worker updates its cache itself; a writer that may
	// not read keeps nothing, so its worker is told too.
	except := p
	if !r.readable {
		except = nil
	}
	if len(written) > 0 {
		drops.add(except, r.space, written)
	}
	if !r.readable {
		return nil
	}
	return &hint{Space: r.space, Write: r.writable}
}

// note records, before the call that reads or writes them is served, that
// the worker's cache may come to hold keys of r's space (held says why
// before and not after).
// A worker is known here from its first call that could let it cache
// anything (one the hint of which names a space), keys or not: a dropped
// cache (DropAll) reaches every such worker.
func (g *Gateway) note(p hostcache.Peer, r run, keys ...string) {
	if r.space == "" || !r.readable {
		return // a run that may not read caches nothing
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	w := g.workers[p]
	if w == nil {
		w = &known{}
		g.workers[p] = w
	}
	if len(keys) > 0 {
		w.held.note(r.space, keys...)
	}
}

// Gone forgets a worker that ended.
func (g *Gateway) Gone(p hostcache.Peer) {
	g.mu.Lock()
	defer g.mu.Unlock()
	delete(g.workers, p)
}

// Told is how many drops were sent to worker p (tests count them).
func (g *Gateway) Told(p hostcache.Peer) int64 {
	g.mu.Lock()
	defer g.mu.Unlock()
	if w := g.workers[p]; w != nil {
		return w.told.Load()
	}
	return 0
}

// DropAll drops every worker's whole cache (a commit failed) and waits
// until each has.
func (g *Gateway) DropAll() { g.drop(nil, "", nil, true) }

// drop drops keys of space from the cache of every worker but except that
// may hold one of them, one message to each with the keys it may hold, and
// waits until each has done it; a worker that does not answer is ended by
// its Tell (its cache would stay stale). all drops every cache.
func (g *Gateway) drop(except hostcache.Peer, space string, keys []string, all bool) {
	type target struct {
		p    hostcache.Peer
		keys []string
		w    *known
	}
	var targets []target
	g.mu.Lock()
	for p, w := range g.workers {
		if p == except {
			continue
		}
		if all {
			targets = append(targets, target{p, nil, w})
		} else if keys := w.held.mayHold(space, keys); len(keys) > 0 {
			targets = append(targets, target{p, keys, w})
		}
	}
	g.mu.Unlock()
	var wg sync.WaitGroup
	for _, t := range targets {
		wg.Add(1)
		go func() {
			defer wg.Done()
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			t.w.told.Add(1)
			if t.p.Tell(ctx, encodeJSON(drop{Space: space, Keys: t.keys, All: all})) != nil {
				// Its transport ends it; it is forgotten here now, in case
				// a call noted it again after its end was told (Gone).
				g.Gone(t.p)
			}
		}()
	}
	wg.Wait()
}

// drops gathers the keys a write batch changed, per space (and per worker
// whose own cache is current), each once.
type drops struct{ list []dropTo }

type dropTo struct {
	except hostcache.Peer
	space  string
	keys   []string
	seen   map[string]bool
}

func (d *drops) add(except hostcache.Peer, space string, keys []string) {
	var t *dropTo
	for i := range d.list {
		if d.list[i].except == except && d.list[i].space == space {
			t = &d.list[i]
			break
		}
	}
	if t == nil {
		d.list = append(d.list, dropTo{except: except, space: space, seen: map[string]bool{}})
		t = &d.list[len(d.list)-1]
	}
	for _, k := range keys {
		if !t.seen[k] {
			t.seen[k] = true
			t.keys = append(t.keys, k)
		}
	}
}

// send drops the gathered keys from the other workers' caches, one message
// to each per space, and waits for them.
func (d *drops) send(g *Gateway) {
	for _, t := range d.list {
		g.drop(t.except, t.space, t.keys, false)
	}
}
