// Package objects is the tenants' buckets (docs/objects.md): the R2 API's
// objects kept per tenant and registry, on files under Caddy's data
// directory or in an S3-compatible service. This file is the contract a
// storage backend keeps; the bucket's rules (keys, conditionals, quota,
// etags) live above it so every backend answers the same.
package objects

import (
	"context"
	"encoding/base64"
	"errors"
	"io"
	"time"
)

// ErrNotFound is what a backend answers for a key it does not hold.
var ErrNotFound = errors.New("objects: no such object")

// ErrBadCursor is a List cursor no page of this backend gave.
var ErrBadCursor = errors.New("objects: malformed cursor")

// ErrBusy is a put a backend refused because the buffers it holds for
// puts are all taken on this gateway (it waited for one first); ErrSpaceBusy
// because the space holds its share of them. The bucket answers them as
// OVERLOADED and QUOTA_EXCEEDED.
var (
	ErrBusy      = errors.New("objects: the backend's put buffers are all in use")
	ErrSpaceBusy = errors.New("objects: the space holds its share of the backend's put buffers")
)

// ErrBadKey is a key the backend cannot name (too long once its prefix is
// added): BAD_REQUEST.
var ErrBadKey = errors.New("objects: the key is too long for the backend")

// ErrRange is what the bucket answers for a Range that is not
// Satisfiable (an offset past the object's end).
var ErrRange = errors.New("objects: range not satisfiable")

// Info is what a backend keeps of one object beside its bytes.
type Info struct {
	Key      string
	Size     int64
	ETag     string // hex MD5 of the bytes, without quotes
	Uploaded time.Time
	Version  string
	// HTTPMetadata and CustomMetadata are kept as the bucket gives them.
	HTTPMetadata   map[string]string
	CustomMetadata map[string]string
}

// Range is a part of an object to read: Offset and Length (Length < 0:
// to the end), or the last Suffix bytes when Suffix > 0.
type Range struct {
	Offset int64
	Length int64
	Suffix int64
}

// Resolve is the part r selects of an object of size bytes, as an offset
// and a length, the same for every backend: nil is the whole object; a
// length past the end stops at it; a suffix longer than the object is all
// of it; an offset at or past the end selects nothing (the bucket refuses
// such a range with ErrRange before it reads: Satisfiable).
func (r *Range) Resolve(size int64) (off, n int64) {
	switch {
	case r == nil:
		return 0, size
	case r.Suffix > 0:
		return max(0, size-r.Suffix), min(r.Suffix, size)
	case r.Offset >= size:
		return size, 0
	case r.Length < 0 || r.Offset+r.Length > size:
		return r.Offset, size - r.Offset
	}
	return r.Offset, r.Length
}

// Satisfiable reports a range that selects part of an object of size
// bytes, as R2 answers it: no negative numbers, and an offset before the
// end (or 0 of an empty object).
func (r *Range) Satisfiable(size int64) bool {
	if r == nil {
		return true
	}
	if r.Offset < 0 || r.Suffix < 0 {
		return false
	}
	return r.Suffix > 0 || r.Offset < size || r.Offset == 0
}

// ListOptions and ListPage are one page of a space's keys in byte order.
type ListOptions struct {
	Prefix    string
	Delimiter string
	Cursor    string // opaque, from the previous page
	Limit     int
}

// Page answers the page's size (Limit, at most MaxListLimit; unset is
// MaxListLimit) and what Cursor names: what the backend gave PageCursor
// for the previous page's last entry, or ErrBadCursor for a cursor no
// backend made. Every backend pages the same way.
func (o ListOptions) Page() (limit int, after string, err error) {
	limit = o.Limit
	if limit <= 0 || limit > MaxListLimit {
		limit = MaxListLimit
	}
	if o.Cursor != "" {
		b, err := base64.RawURLEncoding.DecodeString(o.Cursor)
		if err != nil || len(b) == 0 {
			return 0, "", ErrBadCursor
		}
		after = string(b)
	}
	return limit, after, nil
}

// PageCursor is the cursor of a page whose last entry is last (in the
// backend's own terms; ListOptions.Page answers it back).
func PageCursor(last string) string { return base64.RawURLEncoding.EncodeToString([]byte(last)) }

type ListPage struct {
	Objects           []Info
	DelimitedPrefixes []string
	Truncated         bool
	Cursor            string
}

// Backend stores objects by space (a tenant's bucket in one registry) and
// key. Put is atomic: a reader sees the old object or the whole new one,
// and a Put whose body fails or whose context ends leaves the old one; it
// returns only once the object is durable. Put keeps meta's Version,
// HTTPMetadata and CustomMetadata, and sets the answer's Key, Size, ETag
// (the hex MD5 of the bytes, computed as they stream: the bucket's etag)
// and Uploaded (when it committed). Get streams: no backend holds a whole
// object in memory; it answers the whole object's Info and the bytes
// r.Resolve selects (none for an offset past the end). List answers at most Limit entries (objects and
// delimited prefixes together, 1,000 when Limit is 0), in byte order of
// the keys, and a Cursor when Truncated.
type Backend interface {
	Put(ctx context.Context, space, key string, body io.Reader, meta Info) (Info, error)
	Get(ctx context.Context, space, key string, r *Range) (Info, io.ReadCloser, error)
	Head(ctx context.Context, space, key string) (Info, error)
	Delete(ctx context.Context, space string, keys ...string) error
	List(ctx context.Context, space string, o ListOptions) (ListPage, error)
}
