package workers

import "github.com/retainer-gw/retainer/workers/wire"

// A worker's start was 40-60 ms of CPU, about half of it making what every
// worker of a pool makes the same: the runtime's startup snapshot and the
// runtime modules' code caches (sandbox/startup.go). Under 200 tenants'
// load, starts share two cores with the tenants' work, and a newcomer that
// found no spare up waited 0.5-3 s for one. So the pool keeps what its
// first worker made, answered with its hello (its first call, before it
// served anything, so nothing of a tenant's can be in it), and every later
// worker starts from it. A worker checks what it is given as V8 would
// read it and makes its own when it cannot use it (docs/decisions.md,
// "Workers start from the first one's snapshot").

// keepStartup keeps the first startup a worker answered; later ones are
// the same.
func (pool *Pool) keepStartup(s *wire.Startup) {
	if s != nil && len(s.Snapshot) > 0 {
		pool.startup.CompareAndSwap(nil, s)
	}
}

// dropStartup forgets s when a worker given it failed to start: the next
// worker makes its own, and answers it.
func (pool *Pool) dropStartup(s *wire.Startup) {
	if s != nil {
		pool.startup.CompareAndSwap(s, nil)
	}
}
