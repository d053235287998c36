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
	"sort"
	"sync"
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
// that many keys. KeysOnly: Scan's fn gets v nil, and the backend does not
// read the values at all (a tenant's kv.list over values up to 1 MiB each
// must not pull them: docs/cluster.md, "Listing keys").
type Range struct {
	Prefix   []byte
	From     []byte
	To       []byte
	Reverse  bool
	Limit    int
	KeysOnly bool
}

// Limits bound one transaction: operations and conditions together, and
// the bytes of their keys and values.
type Limits struct {
	Ops   int
	Bytes int
}

// Fence is a writer's claim on a space. A transaction without fences is
// guarded by its conditions alone (nothing the gateway writes is).
type Fence struct {
	Space string
	Epoch uint64
}

// Txn is one atomic commit, in the spaces of its fences (a group commit
// of kv writes spans many).
type Txn struct {
	Fences []Fence
	If     []Cond
	Then   []Op
}

// Cond is a condition on one key: it exists (Exists), or it holds Value
// (Value nil: it is absent).
type Cond struct {
	Table  string
	Key    []byte
	Value  []byte
	Exists bool
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

// Exists is a Cond that key exists, whatever it holds.
func Exists(table string, key []byte) Cond { return Cond{Table: table, Key: key, Exists: true} }

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

// checkSize answers ErrTooLarge for a transaction past l; each fence
// counts as a condition.
func checkSize(t Txn, l Limits) error {
	ops, bytes := t.size()
	ops += len(t.Fences)
	if ops > l.Ops || bytes > l.Bytes {
		return fmt.Errorf("%w (%d operations and %d bytes; at most %d and %d)", ErrTooLarge, ops, bytes, l.Ops, l.Bytes)
	}
	return nil
}

// CommitChunked commits ops under fences in as few transactions as the
// backend's limits allow, in order. Each chunk is atomic; the whole is
// not, so it is for work that may stop half done and be done again: an
// ended handle's names, a retention sweep, a group of independent kv
// writes. A single op past the limits answers ErrTooLarge.
func CommitChunked(ctx context.Context, s Store, fences []Fence, ops []Op) error {
	l := s.Limits()
	room := l.Ops - len(fences)
	for len(ops) > 0 {
		n, bytes := 0, 0
		for n < len(ops) && n < room {
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
		if err := s.Commit(ctx, Txn{Fences: fences, Then: ops[:n]}); err != nil {
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

// Space names the space of a registry's tenant; Space(registry, "") is
// the registry's own (what its tenants share: route names, hosts).
func Space(registry, tenant string) string { return registry + "\x00" + tenant }

// Writer is one writer of a store: the store and the fences it holds,
// each space claimed the first time the writer commits in it. Everything
// one gateway persists goes through one Writer, so its packages never
// fence each other out. Safe for concurrent use.
type Writer struct {
	Store
	claim    func(ctx context.Context, space string) (Fence, error)
	mu       sync.Mutex
	fences   map[string]Fence
	claiming map[string]chan struct{} // claims under way, closed when they end
	gen      uint64                   // moved by Forget
}

// NewWriter answers a writer of s that claims spaces with s.Claim (one
// machine: nobody else writes).
func NewWriter(s Store) *Writer { return NewWriterClaiming(s, s.Claim) }

// NewWriterClaiming answers a writer of s whose spaces are claimed by
// claim (a cluster member's claim under its lease, which refuses a space
// another live gateway owns).
func NewWriterClaiming(s Store, claim func(ctx context.Context, space string) (Fence, error)) *Writer {
	return &Writer{Store: s, claim: claim, fences: map[string]Fence{}}
}

// Forget drops the writer's fences for spaces (all of them when none are
// named): the next commit there claims again. A gateway forgets what it
// lost (its lease, or a fence refused).
func (w *Writer) Forget(spaces ...string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.gen++
	if len(spaces) == 0 {
		w.fences = map[string]Fence{}
		return
	}
	for _, sp := range spaces {
		delete(w.fences, sp)
	}
}

// Fence answers the writer's fence for space, claiming it on first use.
// The claim is made without holding the writer's lock, so a store slow to
// answer one claim holds up no other space's commits (a cluster's etcd
// unreachable: the spaces a gateway owns keep their fences); callers that
// want the same space meanwhile wait for that claim (a second claim would
// make the first fence stale), and a claim that ends after Forget is not
// kept.
func (w *Writer) Fence(ctx context.Context, space string) (Fence, error) {
	for {
		w.mu.Lock()
		if f, ok := w.fences[space]; ok {
			w.mu.Unlock()
			return f, nil
		}
		if busy, ok := w.claiming[space]; ok {
			w.mu.Unlock()
			select {
			case <-busy:
				continue
			case <-ctx.Done():
				return Fence{}, ctx.Err()
			}
		}
		done := make(chan struct{})
		if w.claiming == nil {
			w.claiming = map[string]chan struct{}{}
		}
		w.claiming[space] = done
		gen := w.gen
		w.mu.Unlock()
		f, err := w.claim(ctx, space)
		w.mu.Lock()
		delete(w.claiming, space)
		close(done)
		if err == nil && gen == w.gen {
			w.fences[space] = f
		}
		w.mu.Unlock()
		if err != nil {
			return Fence{}, err
		}
		return f, nil
	}
}

// FencesOf answers the writer's fences for spaces.
func (w *Writer) FencesOf(ctx context.Context, spaces ...string) ([]Fence, error) {
	out := make([]Fence, 0, len(spaces))
	for _, sp := range spaces {
		f, err := w.Fence(ctx, sp)
		if err != nil {
			return nil, err
		}
		out = append(out, f)
	}
	return out, nil
}

// CommitIn commits conds and ops atomically under the writer's fence for
// space.
func (w *Writer) CommitIn(ctx context.Context, space string, conds []Cond, ops []Op) error {
	f, err := w.Fence(ctx, space)
	if err != nil {
		return err
	}
	return w.Store.Commit(ctx, Txn{Fences: []Fence{f}, If: conds, Then: ops})
}

// CommitChunkedIn commits ops under the writer's fence for space, chunked
// (CommitChunked).
func (w *Writer) CommitChunkedIn(ctx context.Context, space string, ops []Op) error {
	f, err := w.Fence(ctx, space)
	if err != nil {
		return err
	}
	return CommitChunked(ctx, w.Store, []Fence{f}, ops)
}

// CommitSpaces commits each space's ops under the writer's fence for it,
// packing spaces into as few transactions as the limits allow (a group
// commit of many tenants' writes is one transaction when it fits). Each
// transaction is atomic; the whole is not (CommitChunked).
func (w *Writer) CommitSpaces(ctx context.Context, bySpace map[string][]Op) error {
	spaces := make([]string, 0, len(bySpace))
	for sp := range bySpace {
		spaces = append(spaces, sp)
	}
	sort.Strings(spaces)
	l := w.Store.Limits()
	var txn Txn
	bytes := 0
	flush := func() error {
		if len(txn.Then) == 0 {
			return nil
		}
		err := w.Store.Commit(ctx, txn)
		txn, bytes = Txn{}, 0
		return err
	}
	for _, sp := range spaces {
		f, err := w.Fence(ctx, sp)
		if err != nil {
			return err
		}
		fenced := false
		for _, o := range bySpace[sp] {
			b := len(o.Table) + len(o.Key) + len(o.Value)
			extra := 1
			if !fenced {
				extra = 2
			}
			if len(txn.Then) > 0 && (len(txn.Fences)+len(txn.Then)+extra > l.Ops || bytes+b > l.Bytes) {
				if err := flush(); err != nil {
					return err
				}
				fenced = false
			}
			if !fenced {
				txn.Fences = append(txn.Fences, f)
				fenced = true
			}
			txn.Then = append(txn.Then, o)
			bytes += b
		}
	}
	return flush()
}
