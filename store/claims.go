package store

import (
	"encoding/binary"
	"maps"

	bolt "go.etcd.io/bbolt"
)

// The bbolt backend's claims. A claim raises its space's epoch; it was a
// transaction of its own, written (two fdatasyncs) before the first
// commit under it, so a new tenant's first deploy waited for the file
// twice (docs/decisions.md, "A bbolt claim is written with the next
// commit"). Now a claim raises the epoch in memory at once, and every
// transaction the file writes first writes the epochs claimed since the
// last one: a commit under a fence finds it written in its own
// transaction, and a commit under a superseded fence is refused whether
// the claim that superseded it is on disk yet or not (its epoch is in
// memory until it is). A claim no commit followed is written when the
// store closes; one lost with the process (a crash) was held by no one
// else: a bbolt file has one writer, its own process (OpenBolt's lock),
// and the next process claims again.

// update runs fn in a written transaction, after writing the epochs
// claimed so far; those are forgotten from memory once it is on disk.
func (b *Bolt) update(fn func(tx *bolt.Tx) error) error {
	var written map[string]uint64
	err := b.db.Update(func(tx *bolt.Tx) error {
		var err error
		if written, err = b.writeClaims(tx); err != nil {
			return err
		}
		return fn(tx)
	})
	if err == nil {
		b.claimsWritten(written)
	}
	return err
}

// writeClaims writes in tx the epochs claimed and not yet written, and
// answers them.
func (b *Bolt) writeClaims(tx *bolt.Tx) (map[string]uint64, error) {
	b.cmu.Lock()
	claimed := maps.Clone(b.claimed)
	b.cmu.Unlock()
	owners := tx.Bucket(bucketOwners)
	for space, epoch := range claimed {
		if err := owners.Put([]byte(space), binary.BigEndian.AppendUint64(nil, epoch)); err != nil {
			return nil, err
		}
	}
	return claimed, nil
}

// claimsWritten forgets the claims written, once on disk; a space claimed
// again meanwhile keeps its newer epoch.
func (b *Bolt) claimsWritten(written map[string]uint64) {
	if len(written) == 0 {
		return
	}
	b.cmu.Lock()
	for space, epoch := range written {
		if b.claimed[space] == epoch {
			delete(b.claimed, space)
		}
	}
	b.cmu.Unlock()
}

// writeClaimsLeft writes the claims no commit has written yet (Close).
func (b *Bolt) writeClaimsLeft() error {
	b.cmu.Lock()
	n := len(b.claimed)
	b.cmu.Unlock()
	if n == 0 {
		return nil
	}
	return b.update(func(*bolt.Tx) error { return nil })
}
