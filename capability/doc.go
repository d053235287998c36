// Package capability serves what a program may reach outside its isolate,
// and only what it was granted (docs/threat-model.md): a tenant's kv key space (package kv),
// outbound fetch to allow-listed hosts that can never be turned against the
// gateway's own network, and provider tools (upstream endpoints declared in
// the Caddyfile).
//
// Every call arrives from a worker as a request the gateway checks: the
// caller (handles) says which tenant, registry and grants the run has; this
// package enforces them and does the I/O. A denial is an error whose text
// names the missing capability.
//
// It knows nothing of V8, Caddy or handles' lifetimes.
package capability
