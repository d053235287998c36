// Package store is the contract for everything the gateway persists: the
// registry (handle records, routes, domains, reserved names), tenants' kv
// and receipts. It is an ordered key-value store in named tables with
// conditional transactions, the model bbolt and etcd share, so the packages
// above it keep their rules (quotas, output gates, coherence) and any
// backend that passes the contract suite (package storetest) can hold them.
//
// The unit of ownership is the space: a registry's tenant, or a registry
// for what its tenants share (route names, hosts). A writer claims a space
// and gets a Fence; every transaction it commits carries the fence, and a
// transaction whose fence a later claim superseded is refused whole
// (ErrFenced). On one machine there is one writer and the fence never
// moves; across gateways it is what keeps a paused former owner from
// writing over the new one (docs/cluster.md).
package store

import (
	"context"
	"errors"
	"fmt"
)

// Store is one backend. Safe for concurrent use.
type Store interface {
	// Get answers the value of key in table, or nil when there is none.
	// The answer is the caller's to keep.
	Get(ctx context.Context, table string, key []byte) ([]byte, error)
	// Scan calls fn with the keys of table in r, in key order (or reverse
	// order), until fn answers false. k and v are valid only during the
	// call. A backend may read in pages: Scan is not one snapshot of the
	// whole range (each page is).
	Scan(ctx context.Context, table string, r Range, fn func(k, v []byte) bool) error
	// Commit applies txn.Then if its fence is current and each of txn.If
	// holds, all or nothing. A failed condition answers ErrConflict; a
	// stale fence ErrFenced; a transaction past Limits ErrTooLarge (use
	// CommitChunked for work that may be split).
	Commit(ctx context.Context, txn Txn) error
	// Claim makes the caller the writer of space and answers its fence;
	// every fence of the space given before is stale from then on.
	Claim(ctx context.Context, space string) (Fence, error)
	// Limits are the most one transaction may hold.
	Limits() Limits
	// Close releases the backend.
	Close() error
}

// Range selects keys From ≤ k < To (To nil: to the table's end; Prefix
// set: keys that begin with it, within From and To). Limit > 0 stops after
// that many keys.
type Range struct {
	Prefix  []byte
	From    []byte
	To      []byte
	Reverse bool
	Limit   int
}

// Limits bound one transaction: operations and conditions together, and
// the bytes of their keys and values.
type Limits struct {
	Ops   int
	Bytes int
}

// Fence is a writer's claim on a space. The zero Fence guards nothing:
// only records outside every space (the store's own meta) use it.
type Fence struct {
	Space string
	Epoch uint64
}

// Txn is one atomic commit.
type Txn struct {
	Fence Fence
	If    []Cond
	Then  []Op
}

// Cond is a condition on one key: it holds Value (Value nil: it is absent).
type Cond struct {
	Table string
	Key   []byte
	Value []byte
}

// Op puts Value at Key, or deletes Key.
type Op struct {
	Table  string
	Key    []byte
	Value  []byte
	Delete bool
}

// Put is an Op that writes value at key.
func Put(table string, key, value []byte) Op { return Op{Table: table, Key: key, Value: value} }

// Delete is an Op that removes key (nothing when it is absent).
func Delete(table string, key []byte) Op { return Op{Table: table, Key: key, Delete: true} }

// Absent is a Cond that key does not exist.
func Absent(table string, key []byte) Cond { return Cond{Table: table, Key: key} }

// Holds is a Cond that key holds value.
func Holds(table string, key, value []byte) Cond {
	if value == nil {
		value = []byte{}
	}
	return Cond{Table: table, Key: key, Value: value}
}

var (
	// ErrConflict: a condition of the transaction did not hold.
	ErrConflict = errors.New("store: a condition of the transaction did not hold")
	// ErrFenced: the transaction's fence was superseded by a later claim.
	ErrFenced = errors.New("store: the writer's claim on the space was superseded")
	// ErrTooLarge: the transaction is past the backend's limits.
	ErrTooLarge = errors.New("store: the transaction is past the backend's limits")
)

// size is what a transaction counts against Limits.
func (t Txn) size() (ops, bytes int) {
	for _, c := range t.If {
		bytes += len(c.Table) + len(c.Key) + len(c.Value)
	}
	for _, o := range t.Then {
		bytes += len(o.Table) + len(o.Key) + len(o.Value)
	}
	return len(t.If) + len(t.Then), bytes
}

// checkSize answers ErrTooLarge for a transaction past l; one fenced
// transaction also counts its fence's condition.
func checkSize(t Txn, l Limits) error {
	ops, bytes := t.size()
	if t.Fence.Space != "" {
		ops++
	}
	if ops > l.Ops || bytes > l.Bytes {
		return fmt.Errorf("%w (%d operations and %d bytes; at most %d and %d)", ErrTooLarge, ops, bytes, l.Ops, l.Bytes)
	}
	return nil
}

// CommitChunked commits ops under fence in as few transactions as the
// backend's limits allow, in order. Each chunk is atomic; the whole is
// not, so it is for work that may stop half done and be done again: an
// ended handle's names, a retention sweep, a group of independent kv
// writes. A single op past the limits answers ErrTooLarge.
func CommitChunked(ctx context.Context, s Store, fence Fence, ops []Op) error {
	l := s.Limits()
	for len(ops) > 0 {
		n, bytes := 0, 0
		for n < len(ops) && n+2 <= l.Ops { // one op left for the fence
			b := len(ops[n].Table) + len(ops[n].Key) + len(ops[n].Value)
			if n > 0 && bytes+b > l.Bytes {
				break
			}
			bytes += b
			n++
		}
		if n == 0 {
			n = 1
		}
		if err := s.Commit(ctx, Txn{Fence: fence, Then: ops[:n]}); err != nil {
			return err
		}
		ops = ops[n:]
	}
	return nil
}

// Copy answers a copy of b, for values kept past a Scan callback.
func Copy(b []byte) []byte {
	if b == nil {
		return nil
	}
	return append([]byte{}, b...)
}
