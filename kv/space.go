package kv

import (
	"bytes"
	"crypto/sha256"
	"encoding/binary"
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

// space is the key prefix of a tenant in a registry; the length prefixes
// make it impossible for one space to be a prefix of another.
func space(registry, tenant string) []byte {
	var b bytes.Buffer
	var n [4]byte
	binary.BigEndian.PutUint32(n[:], uint32(len(registry)))
	b.Write(n[:])
	b.WriteString(registry)
	binary.BigEndian.PutUint32(n[:], uint32(len(tenant)))
	b.Write(n[:])
	b.WriteString(tenant)
	return b.Bytes()
}
