package kv

import (
	"context"

	"github.com/retainer-gw/retainer/budgets"
	"github.com/retainer-gw/retainer/fault"
	"github.com/retainer-gw/retainer/store"
)

// Write is a put (value non-nil) or a delete of one key, checked (key,
// value, quota) and accepted behind the output gate.
func (kv *KV) Write(registry, tenant, owner, key string, value *string) error {
	return kv.WriteWithin(context.Background(), registry, tenant, owner, key, value)
}

// WriteWithin is Write for a caller whose ctx bounds the store reads the
// check waits for (a run's bound).
func (kv *KV) WriteWithin(ctx context.Context, registry, tenant, owner, key string, value *string) error {
	if err := checkKey(key); err != nil {
		return err
	}
	if value != nil && len(*value) > budgets.KVValueBytes {
		return bad("A kv value is at most %d bytes.", budgets.KVValueBytes)
	}
	return kv.accept(ctx, space(registry, tenant), store.Space(registry, tenant), owner, key, value)
}

// accept checks a put (value non-nil) or delete against the quota and
// takes it into the pending set.
func (kv *KV) accept(ctx context.Context, ns []byte, fenceSpace, owner, key string, value *string) error {
	full := string(ns) + key
	kv.mu.Lock()
	defer kv.mu.Unlock()
	// What the write replaces and the space's bytes in use are read from
	// the store without holding kv.mu (a store that does not answer holds
	// no other tenant's kv call); they stand if no commit ended meanwhile
	// (a stored value changes only by this KV's commits), else they are
	// read again, at most three times (the quota's count may then be off
	// by the size of a value written meanwhile).
	var old string
	var had bool
	var used int64
	for try := 0; ; try++ {
		if kv.closed {
			return fault.New(fault.Overloaded, "The gateway is stopping.")
		}
		if err := kv.overdue(); err != nil {
			return err
		}
		p, pending := kv.pending[full]
		u, known := kv.usage[string(ns)]
		if pending && known {
			old, had, used = "", p.value != nil, u
			if had {
				old = *p.value
			}
			break
		}
		commits := kv.commits
		var stored []byte
		var storedUse int64
		err := kv.readStore(ctx, ns, func(ctx context.Context) (err error) {
			stored, storedUse, err = kv.readStored(ctx, full, ns, !known)
			return err
		})
		if err != nil {
			return err
		}
		if kv.commits != commits && try < 2 {
			continue
		}
		if p, ok := kv.pending[full]; ok {
			old, had = "", p.value != nil
			if had {
				old = *p.value
			}
		} else {
			old, had = string(stored), stored != nil
		}
		if u, ok := kv.usage[string(ns)]; ok {
			used = u
		} else {
			used = storedUse
		}
		break
	}
	if had {
		used -= int64(len(key) + len(old))
	}
	if value != nil {
		grows := !had || len(*value) > len(old)
		used += int64(len(key) + len(*value))
		if used > kv.quota {
			return fault.New(fault.QuotaExceeded, "The tenant's kv quota of %d bytes is used up.", kv.quota)
		}
		if grows && kv.Full != nil && kv.Full() {
			return fault.New(fault.QuotaExceeded, "The gateway's kv store is full (its kv_budget); deleting keys frees room.")
		}
	}
	if used < 0 {
		used = 0
	}
	kv.usage[string(ns)] = used
	kv.touched[string(ns)] = fenceSpace
	kv.seq++
	kv.pending[full] = pendingWrite{seq: kv.seq, value: value, owner: owner, space: fenceSpace}
	kv.owners[owner] = kv.seq
	kv.spaces[string(ns)] = kv.seq
	select {
	case kv.wake <- struct{}{}:
	default:
	}
	return nil
}

// readStored reads a key's stored value and, when usage, its space's
// stored bytes in use, within ctx (readStore's, the bound's). kv.mu is
// not held.
func (kv *KV) readStored(ctx context.Context, full string, ns []byte, usage bool) (v []byte, used int64, err error) {
	if v, err = kv.w.Get(ctx, tableKV, []byte(full)); err != nil {
		return nil, 0, kv.unanswered(err)
	}
	if usage {
		if used, err = kv.storedUsage(ctx, ns); err != nil {
			return nil, 0, kv.unanswered(err)
		}
	}
	return v, used, nil
}
