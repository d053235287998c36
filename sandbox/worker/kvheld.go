package worker

// kvHeld is, for one worker, what its kv read cache may hold as the gateway
// can tell: a worker caches a value only from a kv call the gateway
// answered or a write the gateway accepted, so every key it may hold is
// one it read or wrote through the gateway. A write then has to leave the
// caches of those workers only (kvInvalidate), instead of every worker
// that ever used the space: a tenant's counter written 7,000 times a
// second woke its other worker for each batch, whether or not that worker
// had ever read the counter (~10 µs of worker CPU a request, measured in
// docs/performance.md).
//
// A key is noted before the call that could put it in the cache is
// served (before the read, before the write is accepted), never after:
// a write accepted after the note finds the worker among those to tell,
// and one accepted before it is what the read answers. Noting a key the
// worker then never caches costs one needless message at most.
//
// The keys of a space are bounded (maxHeldKeys in all); past the bound a
// space counts as wholly held, and every write to it is told, as before.
type kvHeld struct {
	spaces map[string]map[string]struct{} // a nil set: any key of the space
	n      int                            // keys noted, over every space
	limit  int                            // 0: maxHeldKeys
}

// maxHeldKeys bounds the keys noted per worker (the worker's own cache is
// bounded in bytes: maxCacheBytes).
const maxHeldKeys = 10000

// note records that the worker may cache keys of space.
func (h *kvHeld) note(space string, keys ...string) {
	if h.spaces == nil {
		h.spaces = map[string]map[string]struct{}{}
	}
	set, known := h.spaces[space]
	if known && set == nil {
		return // wholly held already
	}
	limit := h.limit
	if limit == 0 {
		limit = maxHeldKeys
	}
	if set == nil {
		set = map[string]struct{}{}
		h.spaces[space] = set
	}
	for _, k := range keys {
		if _, ok := set[k]; ok {
			continue
		}
		if h.n >= limit {
			h.n -= len(set)
			h.spaces[space] = nil
			return
		}
		set[k] = struct{}{}
		h.n++
	}
}

// mayHold answers those of keys (of space) the worker may cache; nil when
// none.
func (h *kvHeld) mayHold(space string, keys []string) []string {
	set, known := h.spaces[space]
	if !known {
		return nil
	}
	if set == nil {
		return keys
	}
	var out []string
	for _, k := range keys {
		if _, ok := set[k]; ok {
			out = append(out, k)
		}
	}
	return out
}
