package caddymodule

import (
	"os"
	"runtime/debug"
	"sync"
)

// gatewayGCPercent is the Go collector's target for a gateway that serves
// handles, used unless the operator set GOGC. The gateway's live heap is
// small (tens of MiB beside thousands of handles) and every request
// allocates a few KiB, most of it Caddy's and net/http's; at Go's default
// of 100 the collector's marking took ~9% of the gateway's CPU under load.
// At 400: trivial handle, paired `bash bench/ab.sh`, 75 → 70 µs of gateway
// CPU a request (docs/performance.md, round 11). What it costs is heap
// that waits longer to be collected, up to five times the live heap
// instead of two; GOMEMLIMIT (which Caddy sets from a container's memory
// limit) still bounds it.
const gatewayGCPercent = 400

var tuneGCOnce sync.Once

// tuneGC sets the collector's target once per process, when the first
// runtime starts (never at Provision: `caddy validate` changes nothing).
func tuneGC() {
	tuneGCOnce.Do(func() {
		if os.Getenv("GOGC") == "" {
			debug.SetGCPercent(gatewayGCPercent)
		}
	})
}
