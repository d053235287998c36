package logstore

// The store's keys: a handle's entries by time and sequence, and a
// tenant's entries (the order the quota and the sweep drop from).

import (
	"encoding/binary"
)

func lp(b []byte, s string) []byte {
	b = binary.BigEndian.AppendUint16(b, uint16(len(s)))
	return append(b, s...)
}

func handleKey(tenant, id string, when uint64, seq uint32) []byte {
	k := lp(lp(make([]byte, 0, 4+len(tenant)+len(id)+12), tenant), id)
	return binary.BigEndian.AppendUint32(binary.BigEndian.AppendUint64(k, when), seq)
}

func handleKeyTime(k []byte, prefix int) (uint64, uint32) {
	if len(k) < prefix+12 {
		return 0, 0
	}
	return binary.BigEndian.Uint64(k[prefix:]), binary.BigEndian.Uint32(k[prefix+8:])
}

func tenantKey(tenant string, when uint64, seq uint32) []byte {
	k := lp(make([]byte, 0, 2+len(tenant)+12), tenant)
	return binary.BigEndian.AppendUint32(binary.BigEndian.AppendUint64(k, when), seq)
}

func parseTenant(k []byte) (string, bool) {
	if len(k) < 2 {
		return "", false
	}
	n := int(binary.BigEndian.Uint16(k))
	if len(k) < 2+n {
		return "", false
	}
	return string(k[2 : 2+n]), true
}

func tenantKeyTime(k []byte) (uint64, uint32) {
	if len(k) < 14 {
		return 0, 0
	}
	return binary.BigEndian.Uint64(k[len(k)-12:]), binary.BigEndian.Uint32(k[len(k)-4:])
}

func tenantValue(size int64, id string) []byte {
	return append(binary.BigEndian.AppendUint32(nil, uint32(size)), id...)
}

func parseTenantValue(v []byte) (int64, string, bool) {
	if len(v) < 4 {
		return 0, "", false
	}
	return int64(binary.BigEndian.Uint32(v)), string(v[4:]), true
}

// pageRecord is a page's record in a tenant's order (pagesByTenant or
// pageRequestsByTenant): the bytes its section counts, the page's last
// order time (the sweep's), whether the page has the other section too,
// and its handle.
func pageRecord(size int64, last uint64, mixed bool, id string) []byte {
	v := binary.BigEndian.AppendUint64(binary.BigEndian.AppendUint32(make([]byte, 0, 13+len(id)), uint32(size)), last)
	m := byte(0)
	if mixed {
		m = 1
	}
	return append(append(v, m), id...)
}

func parsePageRecord(v []byte) (size int64, last uint64, mixed bool, id string, ok bool) {
	if len(v) < 13 {
		return 0, 0, false, "", false
	}
	return int64(binary.BigEndian.Uint32(v)), binary.BigEndian.Uint64(v[4:]), v[12] == 1, string(v[13:]), true
}
