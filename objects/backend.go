// Package objects is the tenants' buckets (docs/objects.md): the R2 API's
// objects kept per tenant and registry, on files under Caddy's data
// directory or in an S3-compatible service. This file is the contract a
// storage backend keeps; the bucket's rules (keys, conditionals, quota,
// etags) live above it so every backend answers the same.
package objects

import (
	"context"
	"errors"
	"io"
	"time"
)

// ErrNotFound is what a backend answers for a key it does not hold.
var ErrNotFound = errors.New("objects: no such object")

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

// ListOptions and ListPage are one page of a space's keys in byte order.
type ListOptions struct {
	Prefix    string
	Delimiter string
	Cursor    string // opaque, from the previous page
	Limit     int
}

type ListPage struct {
	Objects           []Info
	DelimitedPrefixes []string
	Truncated         bool
	Cursor            string
}

// Backend stores objects by space (a tenant's bucket in one registry) and
// key. Put is atomic: a reader sees the old object or the whole new one,
// and a Put whose body fails or whose context ends leaves the old one; it
// returns only once the object is durable. Get streams: no backend holds a
// whole object in memory.
type Backend interface {
	Put(ctx context.Context, space, key string, body io.Reader, meta Info) (Info, error)
	Get(ctx context.Context, space, key string, r *Range) (Info, io.ReadCloser, error)
	Head(ctx context.Context, space, key string) (Info, error)
	Delete(ctx context.Context, space string, keys ...string) error
	List(ctx context.Context, space string, o ListOptions) (ListPage, error)
}
