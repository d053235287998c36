package caddymodule

import (
	"os"

	"github.com/retainer-gw/retainer/internal/gctarget"
)

// The Go collector's target for a gateway that serves handles, unless the
// operator set GOGC. The gateway's live heap is small (~10 MiB under load
// beside a thousand handles) and every request allocates a few KiB, most
// of it Caddy's and net/http's; at Go's default of 100 the collector
// started a cycle every ~2 MiB. At 400, paired `bash bench/ab.sh`: 8–16%
// less CPU a request, gateway and workers together (docs/history/performance-log.md,
// round 11). The headroom above the live heap stays within gcHeadroom
// (internal/gctarget): a gateway whose live heap is large, legitimately or
// because a tenant holds big bodies in flight, collects at no less than
// Go's default. The workers follow the same policy (their hello).
const (
	gatewayGCPercent = 400
	gcHeadroom       = 256 << 20
)

// tuneGC sets the policy when a runtime starts (never at Provision:
// `caddy validate` changes nothing).
func tuneGC() {
	if os.Getenv("GOGC") == "" {
		gctarget.Follow(gatewayGCPercent, gcHeadroom)
	}
}
