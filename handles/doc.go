// Package handles owns every retained handle's lifetime: who owns it, how it
// is found, when it ends and how it comes back.
//
// A Store holds the records of every registry (one per site; a registry's
// handles are invisible to another) in memory, written through to a
// backing store (package store: bbolt on one machine), each write under
// its tenant's fence. A record is
// committed before its executionId is returned, so a deployment survives a
// restart, a config reload, a crashed worker, parking and a bound hit: when
// its isolate is gone, the next request rebuilds it by running its program
// again (state kept in closures starts afresh).
//
// A handle ends when it is closed through the API, stays idle past its idle
// bound while nothing points at it (a deployment, which a route, a domain
// or a route's kept version points at, parks instead: deployments.go), is
// a route's replaced version past its retention (versions.go), reaches
// bound_strikes, or fails to rebuild. Every end deletes the
// record and its routes in one transaction (in order, when the store's
// limits split it) and is published once, with its
// reason, through Options.OnEnd. Afterwards the id answers HANDLES_CLOSED
// exactly as an id that never existed, and so does another tenant's id.
//
// The package runs no JavaScript itself: an Executor (the worker pool)
// holds the isolates. It deliberately knows nothing of Caddy or HTTP
// routing; tenants are opaque strings the caller has verified.
//
// Caveats: handle logs live in memory only (the last 1,000 entries per
// handle); lastInvokedAt and invocation counts are written in coalesced
// batches, so a crash of the gateway can lose the last few seconds of them
// (never a record).
package handles
