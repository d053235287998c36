// Package kvop names the kv host calls, once, for the gateway (handles,
// capability, kv) and the workers' cache (kv/cache) alike. It imports
// nothing, so that a worker process can name them without linking the
// store (docs/architecture.md).
package kvop

import "strings"

// Op is a kv host call's name, as a program's runtime sends it.
type Op string

// The kv host calls.
const (
	Get    Op = "kv.get"
	Put    Op = "kv.put"
	Delete Op = "kv.delete"
	List   Op = "kv.list"
)

// Is reports whether host call op is a kv call (one of the above, or any
// other a runtime might send under the kv. prefix, which kv refuses).
func Is(op string) bool { return strings.HasPrefix(op, "kv.") }

// Writes reports whether op writes (a put or a delete).
func (op Op) Writes() bool { return op == Put || op == Delete }

// Reads reports whether op reads (a get or a list).
func (op Op) Reads() bool { return op == Get || op == List }
