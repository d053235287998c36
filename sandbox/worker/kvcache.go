package worker

import (
	"context"
	"encoding/json"
	"sync"

	"github.com/retainer-gw/retainer/internal/wirejson"
)

// The worker's kv read cache (issue 19): a kv.get answered from the worker
// costs no round trip to the gateway.
//
// Coherence rule. The gateway is the only writer of kv. It tells a worker
// which key space (a tenant's, in a registry) a run's kv calls reach, with
// the answer of a kv call that succeeded (so the run holds the grant); the
// worker then caches values per space and key:
//   - what a kv.get answered, unless a write to that key was sent from this
//     worker, or an invalidation arrived, while the get was in flight;
//   - what a kv.put or kv.delete of this worker wrote, once the gateway
//     accepted it, unless another write to the key was in flight alongside
//     it or an invalidation arrived meanwhile.
//
// Before the gateway acknowledges a write from one worker, every other
// worker that was told of that space drops the key (kvInvalidate, answered
// before the write's own answer), so a write is visible everywhere before
// the writer's await ends and long before its response leaves (the output
// gate). A failed commit drops every worker's whole cache.

// kvHint is the gateway's word, with a kv answer, on the space it reached.
type kvHint struct {
	Space string `json:"space"`
}

type kvInvalidate struct {
	Space string `json:"space,omitempty"`
	Key   string `json:"key,omitempty"`
	All   bool   `json:"all,omitempty"` // every space (a failed commit)
}

// maxCacheBytes bounds the cached values of one worker; past it the cache
// starts afresh.
const maxCacheBytes = 8 << 20

// maxCacheRuns bounds how many run and handle ids the cache remembers.
const maxCacheRuns = 10000

type cacheKey struct{ space, key string }

type kvCache struct {
	mu       sync.Mutex
	spaceOf  map[string]string // run or handle id → its kv space
	values   map[cacheKey]json.RawMessage
	bytes    int
	gen      uint64              // invalidations received
	writes   map[cacheKey]uint64 // writes sent, per key
	inflight map[cacheKey]int    // writes in flight, per key
}

func newKVCache() *kvCache {
	return &kvCache{spaceOf: map[string]string{}, values: map[cacheKey]json.RawMessage{},
		writes: map[cacheKey]uint64{}, inflight: map[cacheKey]int{}}
}

type kvArgs struct {
	Key   *string `json:"key"`
	Value *string `json:"value"`
}

// lookup answers a kv.get from the cache, if it can, without waiting.
func (c *kvCache) lookup(id, op string, args json.RawMessage) (json.RawMessage, bool) {
	if op != "kv.get" {
		return nil, false
	}
	var a kvArgs
	if json.Unmarshal(args, &a) != nil || a.Key == nil {
		return nil, false
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	space, known := c.spaceOf[id]
	if !known {
		return nil, false
	}
	v, ok := c.values[cacheKey{space, *a.Key}]
	return v, ok
}

// call serves kv.get from the cache when it can, and otherwise asks the
// gateway through rt, caching what the rule allows.
func (c *kvCache) call(ctx context.Context, id, op string, args json.RawMessage, rt func() (json.RawMessage, *kvHint, error)) (json.RawMessage, error) {
	var a kvArgs
	if json.Unmarshal(args, &a) != nil || a.Key == nil {
		res, _, err := rt()
		return res, err
	}
	c.mu.Lock()
	space, known := c.spaceOf[id]
	k := cacheKey{space, *a.Key}
	if op == "kv.get" && known {
		if v, ok := c.values[k]; ok {
			c.mu.Unlock()
			return v, nil
		}
	}
	gen := c.gen
	var seq uint64
	alone := false
	if known && op != "kv.get" {
		c.writes[k]++
		seq = c.writes[k]
		alone = c.inflight[k] == 0
		c.inflight[k]++
	}
	sentWrites := c.writes[k]
	c.mu.Unlock()

	res, hint, err := rt()

	c.mu.Lock()
	defer c.mu.Unlock()
	if known && op != "kv.get" {
		if c.inflight[k]--; c.inflight[k] <= 0 {
			delete(c.inflight, k)
		}
	}
	if err != nil || hint == nil || hint.Space == "" {
		if known && op != "kv.get" {
			c.drop(k)
		}
		return res, err
	}
	if len(c.spaceOf) >= maxCacheRuns {
		c.spaceOf = map[string]string{}
	}
	c.spaceOf[id] = hint.Space
	if !known || hint.Space != space {
		// Nothing was sequenced against this key: a write drops it (and
		// keeps gets in flight from caching what came before it).
		if op != "kv.get" {
			c.gen++
			c.drop(cacheKey{hint.Space, *a.Key})
		}
		return res, nil
	}
	switch op {
	case "kv.get":
		if c.gen == gen && c.writes[k] == sentWrites && c.inflight[k] == 0 {
			c.store(k, res)
		}
	case "kv.put", "kv.delete":
		if alone && c.gen == gen && c.writes[k] == seq {
			v := json.RawMessage("null")
			if op == "kv.put" && a.Value != nil {
				v, _ = wirejson.Marshal(*a.Value)
			}
			c.store(k, v)
		} else {
			c.drop(k)
		}
	}
	return res, nil
}

func (c *kvCache) store(k cacheKey, v json.RawMessage) {
	c.drop(k)
	if c.bytes+len(v)+len(k.key) > maxCacheBytes {
		c.values = map[cacheKey]json.RawMessage{}
		c.bytes = 0
	}
	c.values[k] = v
	c.bytes += len(v) + len(k.key)
}

func (c *kvCache) drop(k cacheKey) {
	if v, ok := c.values[k]; ok {
		c.bytes -= len(v) + len(k.key)
		delete(c.values, k)
	}
}

// invalidate drops what the gateway says another worker's write changed.
func (c *kvCache) invalidate(m kvInvalidate) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.gen++
	if m.All {
		c.values = map[cacheKey]json.RawMessage{}
		c.bytes = 0
		return
	}
	c.drop(cacheKey{m.Space, m.Key})
}
