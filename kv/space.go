package kv

import (
	"crypto/sha256"
	"encoding/hex"
)

// SpaceName names, opaquely, the kv key space of a tenant in a registry:
// the name workers cache that space's reads under and the gateway drops
// keys by (kv/cache). It is stable: caches and hints name a space by it,
// so it must not change for the same registry and tenant.
func SpaceName(registry, tenant string) string {
	sum := sha256.Sum256([]byte(registry + "\x00" + tenant))
	return hex.EncodeToString(sum[:16])
}
