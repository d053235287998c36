package capability

import (
	"bytes"
	"encoding/base64"
	"encoding/binary"
	"encoding/json"
	"errors"

	bolt "go.etcd.io/bbolt"

	"github.com/retainer-gw/retainer/fault"
	"github.com/retainer-gw/retainer/internal/wirejson"
)

// KV limits (SPEC §6).
const (
	MaxKeyBytes   = 512
	MaxValueBytes = 1 << 20
)

var (
	bucketKV    = []byte("kv")
	bucketUsage = []byte("kvusage")
)

// KV is the tenants' key spaces in bbolt: one per tenant and registry.
// Writes go through bbolt's Batch, so concurrent puts share a commit
// instead of each paying an fsync.
type KV struct {
	db    *bolt.DB
	quota int64
}

// NewKV prepares the buckets. quota is each tenant's byte budget (keys plus
// values) per registry; default 100 MiB.
func NewKV(db *bolt.DB, quota int64) (*KV, error) {
	if quota <= 0 {
		quota = 100 << 20
	}
	err := db.Update(func(tx *bolt.Tx) error {
		if _, err := tx.CreateBucketIfNotExists(bucketKV); err != nil {
			return err
		}
		_, err := tx.CreateBucketIfNotExists(bucketUsage)
		return err
	})
	return &KV{db: db, quota: quota}, err
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

type kvArgs struct {
	Key    string `json:"key"`
	Value  string `json:"value"`
	Prefix string `json:"prefix"`
	Limit  int    `json:"limit"`
	Cursor string `json:"cursor"`
}

func checkKey(k string) error {
	if k == "" {
		return bad("A kv key may not be empty.")
	}
	if len(k) > MaxKeyBytes {
		return bad("A kv key is at most %d bytes.", MaxKeyBytes)
	}
	return nil
}

// Serve runs one kv operation for a tenant.
func (kv *KV) Serve(registry, tenant, op string, raw json.RawMessage) (json.RawMessage, error) {
	var a kvArgs
	if err := json.Unmarshal(raw, &a); err != nil {
		return nil, bad("Malformed kv arguments.")
	}
	ns := space(registry, tenant)
	switch op {
	case "kv.get":
		if err := checkKey(a.Key); err != nil {
			return nil, err
		}
		var out json.RawMessage = []byte("null")
		err := kv.db.View(func(tx *bolt.Tx) error {
			if v := tx.Bucket(bucketKV).Get(append(ns, a.Key...)); v != nil {
				out, _ = wirejson.Marshal(string(v))
			}
			return nil
		})
		return out, err
	case "kv.put":
		if err := checkKey(a.Key); err != nil {
			return nil, err
		}
		if len(a.Value) > MaxValueBytes {
			return nil, bad("A kv value is at most %d bytes.", MaxValueBytes)
		}
		return nil, kv.write(ns, a.Key, &a.Value)
	case "kv.delete":
		if err := checkKey(a.Key); err != nil {
			return nil, err
		}
		return nil, kv.write(ns, a.Key, nil)
	case "kv.list":
		return kv.list(ns, a)
	}
	return nil, bad("Unknown kv operation.")
}

var errQuota = errors.New("quota")

// write puts (value non-nil) or deletes a key, keeping the tenant's usage.
func (kv *KV) write(ns []byte, key string, value *string) error {
	err := kv.db.Batch(func(tx *bolt.Tx) error {
		b, usage := tx.Bucket(bucketKV), tx.Bucket(bucketUsage)
		k := append(append([]byte{}, ns...), key...)
		var used int64
		if u := usage.Get(ns); len(u) == 8 {
			used = int64(binary.BigEndian.Uint64(u))
		}
		if old := b.Get(k); old != nil {
			used -= int64(len(key) + len(old))
		}
		if value != nil {
			used += int64(len(key) + len(*value))
			if used > kv.quota {
				return errQuota
			}
			if err := b.Put(k, []byte(*value)); err != nil {
				return err
			}
		} else if err := b.Delete(k); err != nil {
			return err
		}
		if used < 0 {
			used = 0
		}
		var u [8]byte
		binary.BigEndian.PutUint64(u[:], uint64(used))
		return usage.Put(ns, u[:])
	})
	if errors.Is(err, errQuota) {
		return fault.New(fault.QuotaExceeded, "The tenant's kv quota of %d bytes is used up.", kv.quota)
	}
	return err
}

// list answers keys of the tenant's space with the prefix, after the
// cursor. The cursor is the last key returned, encoded; it is read inside
// the caller's space only, so it cannot lead outside it.
func (kv *KV) list(ns []byte, a kvArgs) (json.RawMessage, error) {
	limit := a.Limit
	if limit <= 0 || limit > 1000 {
		limit = 1000
	}
	start := append(append([]byte{}, ns...), a.Prefix...)
	after := []byte(nil)
	if a.Cursor != "" {
		c, err := base64.RawURLEncoding.DecodeString(a.Cursor)
		if err != nil {
			return nil, bad("The kv cursor is not one this gateway made.")
		}
		after = append(append([]byte{}, ns...), c...)
		if bytes.Compare(after, start) > 0 {
			start = after
		}
	}
	type page struct {
		Keys   []string `json:"keys"`
		Cursor *string  `json:"cursor"`
	}
	out := page{Keys: []string{}}
	err := kv.db.View(func(tx *bolt.Tx) error {
		c := tx.Bucket(bucketKV).Cursor()
		full := append(append([]byte{}, ns...), a.Prefix...)
		for k, _ := c.Seek(start); k != nil && bytes.HasPrefix(k, full); k, _ = c.Next() {
			if after != nil && bytes.Equal(k, after) {
				continue
			}
			if len(out.Keys) == limit {
				cur := base64.RawURLEncoding.EncodeToString([]byte(out.Keys[len(out.Keys)-1]))
				out.Cursor = &cur
				return nil
			}
			out.Keys = append(out.Keys, string(k[len(ns):]))
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	return wirejson.Marshal(out)
}
