package capability

import (
	"github.com/retainer-gw/retainer/fault"
	"github.com/retainer-gw/retainer/kv/kvop"
)

// The capabilities an execution may be granted (README, docs/sql.md,
// docs/ai.md, docs/objects.md).
const (
	KVRead       = "kvRead"
	KVWrite      = "kvWrite"
	SQLRead      = "sqlRead"
	SQLWrite     = "sqlWrite"
	AIRun        = "ai"
	ObjectsRead  = "objectsRead"
	ObjectsWrite = "objectsWrite"
	Fetch        = "fetch"
	Spawn        = "spawn"
)

// Names are every capability, in the order an error lists them: what an
// execution request may ask for and what spawn may pass to a child.
var Names = []string{KVRead, KVWrite, SQLRead, SQLWrite, AIRun, ObjectsRead, ObjectsWrite, Fetch, Spawn}

// Known reports whether c names a capability.
func Known(c string) bool {
	for _, n := range Names {
		if n == c {
			return true
		}
	}
	return false
}

// KVGrant is the capability kv call op needs: kvRead to get or list,
// kvWrite to put or delete ("" for an op that is none of these).
func KVGrant(op kvop.Op) string {
	switch {
	case op.Reads():
		return KVRead
	case op.Writes():
		return KVWrite
	}
	return ""
}

// AllowsKV is the one check of a kv call against the grants: nil if they
// hold the capability op needs, its denial if not, BAD_REQUEST for an op
// that is no kv call.
func (g Grants) AllowsKV(op kvop.Op) error {
	need := KVGrant(op)
	if need == "" {
		return fault.New(fault.BadRequest, "Unknown host call %q.", op)
	}
	if !g.Has(need) {
		return Denied(need, string(op))
	}
	return nil
}
