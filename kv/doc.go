// Package kv is the tenants' key-value spaces: one per tenant and
// registry, in the store (package store), behind an output gate and a
// group commit (gate.go, commit.go). Its one subpackage, kv/cache, is the workers' read
// cache and write queue with the gateway's side that keeps them coherent:
// kv's every rule, from a program's kv.put to the disk, lives under this
// folder (docs/decisions.md, "kv read cache").
//
// It knows nothing of V8, Caddy, workers or grants (package capability
// checks those before a call gets here).
package kv
