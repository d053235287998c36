// Package receipts keeps a receipt of every run: what program ran, what it
// was allowed to touch, how it ended, what it printed and how long it took,
// so that agents (JSON) and the people who supervise them (HTML) can see
// what a model-written program did.
//
// Receipts live in a table of the registry's store (package store), under their
// tenant, for a retention period swept in the background; a receipt is
// bounded in size and says where it was truncated. They never hold a
// request's env values (Receipt has no field for them).
//
// The package knows nothing of HTTP routing or V8: the Caddy module records
// receipts and serves them; Render makes the page.
package receipts
