package cache

import "github.com/retainer-gw/retainer/budgets"

// held is, for one worker, what its kv read cache may hold as the gateway
// can tell: a worker caches a value only from a kv call the gateway
// answered or a write the gateway accepted, so every key it may hold is
// one it read or wrote through the gateway. A write then has to leave the
// caches of those workers only (a drop), instead of every worker
// that ever used the space: a tenant's counter written 7,000 times a
// second woke its other worker for each batch, whether or not that worker
// had ever read the counter (~10 µs of worker CPU a request, measured in
// docs/history/performance-log.md).
//
// A key is noted before the call that could put it in the cache is
// served (before the read, before the write is accepted), never after:
// a write accepted after the note finds the worker among those to tell,
// and one accepted before it is what the read answers. Noting a key the
// worker then never caches costs one needless message at most.
//
// What is noted is bounded in bytes (budgets.KVHeldBytesPerWorker a worker: a worker
// taken over could otherwise make the gateway keep every key it names);
// past the bound a space counts as wholly held, and every write to it is
// told, as before. A key the gateway refuses (empty, over budgets.KVKeyBytes) is
// never cached, so it is never noted.
type held struct {
	spaces map[string]map[string]struct{} // a nil set: any key of the space
	bytes  int                            // what the noted keys cost, over every space
	limit  int                            // 0: budgets.KVHeldBytesPerWorker
}

// heldKeyCost is what a key costs beside its bytes (its map entry,
// roughly), counted against budgets.KVHeldBytesPerWorker.
const heldKeyCost = 64

// note records that the worker may cache keys of space.
func (h *held) note(space string, keys ...string) {
	if h.spaces == nil {
		h.spaces = map[string]map[string]struct{}{}
	}
	set, known := h.spaces[space]
	if known && set == nil {
		return // wholly held already
	}
	limit := h.limit
	if limit == 0 {
		limit = budgets.KVHeldBytesPerWorker
	}
	if set == nil {
		set = map[string]struct{}{}
		h.spaces[space] = set
	}
	for _, k := range keys {
		if k == "" || len(k) > budgets.KVKeyBytes {
			continue // refused by the gateway: never cached
		}
		if _, ok := set[k]; ok {
			continue
		}
		if h.bytes+len(k)+heldKeyCost > limit {
			for k := range set {
				h.bytes -= len(k) + heldKeyCost
			}
			h.spaces[space] = nil
			return
		}
		set[k] = struct{}{}
		h.bytes += len(k) + heldKeyCost
	}
}

// mayHold answers those of keys (of space) the worker may cache; nil when
// none.
func (h *held) mayHold(space string, keys []string) []string {
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
