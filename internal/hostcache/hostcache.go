// Package hostcache is the seam between the worker transport and what a
// worker caches of host calls' answers (kv's read cache and its queued
// writes, kv/cache). The gateway's pool (workers) and the worker
// (sandbox/child) carry the cache's notes and messages as opaque
// bytes and call it through these interfaces: neither names an operation
// of its own, and the cache's coherence rule lives whole in its package.
//
// It imports nothing, so both sides and the cache can import it.
package hostcache

import (
	"context"
	"encoding/json"
	"time"
)

// Peer is one worker as the gateway's side of a cache sees it. It is
// comparable (a pointer), so a cache may key what it knows by it.
type Peer interface {
	// Tell sends msg to the worker's cache and waits for its answer; a
	// worker that does not answer is ended (its cache would stay stale).
	Tell(ctx context.Context, msg []byte) error
	// Tenant is the tenant the worker hosts ("" when shared).
	Tenant() string
	// Holds reports whether id is a run or handle of the worker.
	Holds(id string) bool
}

// Gateway is the gateway's side of a cache.
type Gateway interface {
	// Call serves a worker's host call (op of run or handle id) through
	// serve, and answers, with serve's answer, a note for the worker's
	// cache (nil for none). The cache may record what the worker will come
	// to hold before serve runs.
	Call(p Peer, id, op string, args json.RawMessage, serve func() (json.RawMessage, error)) (res, note json.RawMessage, err error)
	// Batch serves what a worker's cache sends on its own (its queued
	// writes) and answers the reply to carry back. An error means the body
	// was malformed: the transport ends the worker.
	Batch(ctx context.Context, p Peer, body []byte) ([]byte, error)
	// Carry is Batch for a body that came with answers of runs or handles
	// ids (Answer): release says, per answer, whether what it waited for
	// was applied, so that the transport may hand it on (the output gate
	// then holds it until that is durable); an answer not released is
	// sent again by the worker's cache, its own way.
	Carry(ctx context.Context, p Peer, body []byte, ids []string) (reply []byte, release []bool, err error)
	// Gone forgets a worker that ended.
	Gone(p Peer)
}

// Worker is the worker's side of a cache. Every host call of the worker's
// programs goes through it.
type Worker interface {
	// Now answers a host call at once, on the isolate's own thread, when
	// it can (ok false: send it through Call). It never waits. due
	// answers when the calling invocation's bound ends (zero: not known):
	// what is sent later on the call's behalf carries what is left of it.
	Now(id, op string, args json.RawMessage, due func() time.Time) (res json.RawMessage, ok bool)
	// Call serves a host call, through roundTrip to the gateway (which
	// answers the gateway side's note) when the cache cannot.
	Call(ctx context.Context, id, op string, args json.RawMessage, roundTrip func() (res, note json.RawMessage, err error)) (json.RawMessage, error)
	// Settle waits until what the cache holds back for id (writes not yet
	// applied) has reached the gateway, and answers the gateway's refusal
	// of any of it (once).
	Settle(id string) error
	// WhenSettled calls f with what Settle would answer, once it would
	// not wait: at once when nothing is held back for id, otherwise later
	// from the cache's own goroutine (an answer that must wait parks no
	// goroutine of its own). carry, when set, makes the answer f would
	// write (nil: it may not be carried): when id has writes held back,
	// the cache may send that answer with them in one frame instead,
	// and f is then never called.
	WhenSettled(id string, carry func() *Answer, f func(error))
	// SettledNow is WhenSettled's answer when it would be at once: ok
	// false when id has writes held back (then WhenSettled waits). It
	// spares the common answer WhenSettled's two closures.
	SettledNow(id string) (ok bool, err error)
	// Tell serves a message the gateway's side sent (Peer.Tell).
	Tell(msg []byte) error
}

// Answer is an answer the worker's cache may carry to the gateway with the
// writes it waits for, in one frame: the gateway applies the writes, then
// hands the answer on (Gateway.Carry), and the output gate holds it until
// they are durable (docs/decisions.md, "kv answers carried with their
// writes").
type Answer struct {
	ID    string // the run or handle it answers for (the cache sets it)
	Tag   uint64 // the transport's: the call it answers
	Reply []byte // the transport's encoded answer
	// Sent runs once the gateway has taken the answer (the transport's
	// bookkeeping of a call answered).
	Sent func()
}
