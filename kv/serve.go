package kv

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/binary"
	"encoding/json"

	"github.com/retainer-gw/retainer/budgets"
	"github.com/retainer-gw/retainer/fault"
	"github.com/retainer-gw/retainer/internal/wirejson"
	"github.com/retainer-gw/retainer/kv/kvop"
	"github.com/retainer-gw/retainer/store"
)

type kvArgs struct {
	Key    string `json:"key"`
	Value  string `json:"value"`
	Prefix string `json:"prefix"`
	Limit  int    `json:"limit"`
	Cursor string `json:"cursor"`
}

func checkKey(k string) error {
	if k == "" {
		return bad("A kv key may not be empty.")
	}
	if len(k) > budgets.KVKeyBytes {
		return bad("A kv key is at most %d bytes.", budgets.KVKeyBytes)
	}
	return nil
}

// Serve runs one kv operation for a tenant on behalf of owner (the run or
// handle whose writes a later Barrier waits for).
func (kv *KV) Serve(registry, tenant, owner, op string, raw json.RawMessage) (json.RawMessage, error) {
	return kv.ServeWithin(context.Background(), registry, tenant, owner, op, raw)
}

// ServeWithin is Serve for a caller whose ctx bounds the reads it waits
// for (a run's bound): past it the call answers OVERLOADED. Only with a
// Bound (a cluster's store); one machine's waits for its file.
func (kv *KV) ServeWithin(ctx context.Context, registry, tenant, owner, op string, raw json.RawMessage) (json.RawMessage, error) {
	var a kvArgs
	if err := json.Unmarshal(raw, &a); err != nil {
		return nil, bad("Malformed kv arguments.")
	}
	ns := space(registry, tenant)
	switch kvop.Op(op) {
	case kvop.Get:
		if err := checkKey(a.Key); err != nil {
			return nil, err
		}
		full := string(ns) + a.Key
		for waited := 0; ; waited++ {
			kv.mu.Lock()
			p, ok := kv.pending[full]
			kv.mu.Unlock()
			if ok && p.owner != owner && waited < 3 {
				// Another's pending write is read once it is durable: a
				// value read is never one that is un-said later (a lost
				// commit drops it, and the read sees what was stored).
				// The reader's own writes it reads at once: its answer
				// waits for them anyway (Barrier).
				wctx, cancel := kv.storeCtx(ctx)
				err := kv.waitFor(wctx, p.seq)
				expired := wctx.Err() != nil
				cancel()
				if err != nil && expired {
					return nil, err // not durable in time: not read
				}
				continue
			}
			if ok {
				if p.value == nil {
					return json.RawMessage("null"), nil
				}
				return wirejson.Marshal(*p.value)
			}
			break
		}
		var v []byte
		kv.mu.Lock()
		err := kv.readStore(ctx, ns, func(ctx context.Context) (err error) {
			if v, err = kv.w.Get(ctx, tableKV, []byte(full)); err != nil {
				return kv.unanswered(err)
			}
			return nil
		})
		kv.mu.Unlock()
		if err != nil {
			return nil, err
		}
		if v == nil {
			return json.RawMessage("null"), nil
		}
		return wirejson.Marshal(string(v))
	case kvop.Put:
		return nil, kv.WriteWithin(ctx, registry, tenant, owner, a.Key, &a.Value)
	case kvop.Delete:
		return nil, kv.WriteWithin(ctx, registry, tenant, owner, a.Key, nil)
	case kvop.List:
		// A listing sees the space's pending writes by waiting for them.
		// Like a read, it is refused at once while the store is stalled,
		// and one left waiting past its bound marks the stall: otherwise
		// the handler's next call waited its whole bound again, and a
		// kv counter's visit at the moment etcd was killed passed its
		// run's bound (TIMEOUT, not OVERLOADED; TestClusterEtcdKilled).
		var out json.RawMessage
		kv.mu.Lock()
		seq := kv.spaces[string(ns)]
		err := kv.readStore(ctx, ns, func(ctx context.Context) error {
			err := kv.waitFor(ctx, seq)
			if err == nil {
				out, err = kv.list(ctx, ns, a)
			}
			return err
		})
		kv.mu.Unlock()
		return out, err
	}
	return nil, bad("Unknown kv operation.")
}

// Used is what tenant stores in registry's kv (keys and values, pending
// writes counted, as the quota counts them): the usage export's kvBytes.
func (kv *KV) Used(registry, tenant string) int64 {
	ns := space(registry, tenant)
	kv.mu.Lock()
	used, ok := kv.usage[string(ns)]
	kv.mu.Unlock()
	if ok {
		return used
	}
	ctx, cancel := kv.storeCtx(context.Background())
	defer cancel()
	used, _ = kv.storedUsage(ctx, ns)
	return used
}

func (kv *KV) storedUsage(ctx context.Context, ns []byte) (int64, error) {
	u, err := kv.w.Get(ctx, tableUsage, ns)
	if len(u) == 8 {
		return int64(binary.BigEndian.Uint64(u)), nil
	}
	return 0, err
}

// list answers keys of the tenant's space with the prefix, after the
// cursor. The cursor is the last key returned, encoded; it is read inside
// the caller's space only, so it cannot lead outside it.
func (kv *KV) list(ctx context.Context, ns []byte, a kvArgs) (json.RawMessage, error) {
	limit := a.Limit
	if limit <= 0 || limit > 1000 {
		limit = 1000
	}
	start := append(append([]byte{}, ns...), a.Prefix...)
	after := []byte(nil)
	if a.Cursor != "" {
		c, err := base64.RawURLEncoding.DecodeString(a.Cursor)
		if err != nil {
			return nil, bad("The kv cursor is not one this gateway made.")
		}
		after = append(append([]byte{}, ns...), c...)
		if bytes.Compare(after, start) > 0 {
			start = after
		}
	}
	type page struct {
		Keys   []string `json:"keys"`
		Cursor *string  `json:"cursor"`
	}
	out := page{Keys: []string{}}
	full := append(append([]byte{}, ns...), a.Prefix...)
	// Keys only, and no more of them than the answer needs (the cursor's
	// own key, the page, one more to know there is more): a tenant may
	// hold 100 MiB in values of 1 MiB, and a list that read them grew the
	// gateway by GBs (docs/cluster.md, "Listing keys").
	rng := store.Range{Prefix: full, From: start, Limit: limit + 2, KeysOnly: true}
	err := kv.w.Scan(ctx, tableKV, rng, func(k, _ []byte) bool {
		if after != nil && bytes.Equal(k, after) {
			return true
		}
		if len(out.Keys) == limit {
			cur := base64.RawURLEncoding.EncodeToString([]byte(out.Keys[len(out.Keys)-1]))
			out.Cursor = &cur
			return false
		}
		out.Keys = append(out.Keys, string(k[len(ns):]))
		return true
	})
	if err != nil {
		return nil, kv.unanswered(err)
	}
	return wirejson.Marshal(out)
}

func bad(format string, args ...any) error {
	return fault.New(fault.BadRequest, format, args...)
}
