package store

import (
	"context"

	bolt "go.etcd.io/bbolt"
)

// bulkOps and bulkBytes bound one of bbolt's transactions in CommitBulk.
// Limits bound what must be atomic (the same on every backend); on bbolt
// each transaction is also a sync of the file, so 128 operations a
// transaction made a commit of a busy handle's 8,000 log entries 125
// syncs (~350 ms on the project's machine; docs/logs.md, "Storage,
// batching and limits"). 8,192 operations (4,096 log entries) keep one
// transaction, which holds bbolt's one writer, to tens of milliseconds on
// a loaded machine, between which other writers' transactions go.
const (
	bulkOps   = 8192
	bulkBytes = 4 << 20
)

// CommitBulk commits ops, which need no fence and no atomicity with one
// another (log entries, a sweep's deletes), in order and in as few
// transactions as the backend writes well: on bbolt up to bulkOps a
// transaction, elsewhere as CommitChunked does. Each chunk is atomic; the
// whole is not.
func CommitBulk(ctx context.Context, s Store, ops []Op) error {
	b, ok := s.(*Bolt)
	if !ok {
		return CommitChunked(ctx, s, nil, ops)
	}
	for len(ops) > 0 {
		n, bytes := 0, 0
		for n < len(ops) && n < bulkOps {
			size := len(ops[n].Table) + len(ops[n].Key) + len(ops[n].Value)
			if n > 0 && bytes+size > bulkBytes {
				break
			}
			bytes += size
			n++
		}
		if err := b.commitBulk(ops[:n]); err != nil {
			return err
		}
		ops = ops[n:]
	}
	return nil
}

// commitBulk writes ops in one transaction (Commit's writes, without its
// limits, fences and conditions).
func (b *Bolt) commitBulk(ops []Op) error {
	if err := checkSize(Txn{Then: ops}, Limits{Ops: bulkOps, Bytes: boltLimits.Bytes}); err != nil {
		return err
	}
	return b.db.Update(func(tx *bolt.Tx) error {
		buckets := map[string]*bolt.Bucket{}
		for _, o := range ops {
			bk := buckets[o.Table]
			if bk == nil {
				var err error
				if o.Delete {
					if bk = tx.Bucket([]byte(o.Table)); bk == nil {
						continue // nothing to delete
					}
				} else if bk, err = tx.CreateBucketIfNotExists([]byte(o.Table)); err != nil {
					return err
				}
				buckets[o.Table] = bk
			}
			var err error
			if o.Delete {
				err = bk.Delete(o.Key)
			} else {
				err = bk.Put(o.Key, o.Value)
			}
			if err != nil {
				return err
			}
		}
		return nil
	})
}
