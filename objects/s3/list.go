package s3

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"

	"github.com/minio/minio-go/v7"

	"github.com/retainer-gw/retainer/objects"
)

// List asks S3 for one page in byte order. The cursor is the name of the
// last key or delimited prefix of the page before: S3 starts after it,
// and a delimited prefix S3 rolls up again (its keys sort after it) is
// dropped. S3's list answers no user metadata, so each object of the
// page is read by a HEAD (16 at a time).
func (b *backend) List(ctx context.Context, space string, o objects.ListOptions) (objects.ListPage, error) {
	dir, err := b.dir(space)
	if err != nil {
		return objects.ListPage{}, err
	}
	limit, after, err := o.Page()
	if err != nil {
		return objects.ListPage{}, err
	}
	if after != "" {
		after = dir + after
	}
	type item struct {
		name   string // in the bucket
		prefix bool
	}
	var items []item
	for len(items) <= limit {
		if err := ctx.Err(); err != nil {
			return objects.ListPage{}, err
		}
		res, err := b.listPage(ctx, dir+encodeKey(o.Prefix, false), after, o.Delimiter, limit+2-len(items))
		if err != nil {
			return objects.ListPage{}, fmt.Errorf("objects s3: list: %w", err)
		}
		// Contents and CommonPrefixes are each sorted; merge them.
		var page []item
		for _, c := range res.Contents {
			page = append(page, item{name: c.Key})
		}
		for _, p := range res.CommonPrefixes {
			page = append(page, item{name: p.Prefix, prefix: true})
		}
		slices.SortFunc(page, func(a, b item) int { return strings.Compare(a.name, b.name) })
		for _, it := range page {
			if !(it.prefix && it.name == after) {
				items = append(items, it)
			}
		}
		if !res.IsTruncated || len(page) == 0 {
			break
		}
		after = page[len(page)-1].name
	}
	var out objects.ListPage
	if len(items) > limit {
		items, out.Truncated = items[:limit], true
		out.Cursor = objects.PageCursor(strings.TrimPrefix(items[limit-1].name, dir))
	}
	var keys []string
	for _, it := range items {
		k := decodeKey(strings.TrimPrefix(it.name, dir))
		if it.prefix {
			out.DelimitedPrefixes = append(out.DelimitedPrefixes, k)
		} else {
			keys = append(keys, k)
		}
	}
	infos, err := b.heads(ctx, space, keys)
	if err != nil {
		return objects.ListPage{}, err
	}
	out.Objects = infos
	return out, nil
}

// listPage is one ListObjectsV2 call within ctx: minio-go's takes no
// context, so a call past ctx's end is left to finish on its own (a
// stalled service: until the connection fails) and its answer dropped.
func (b *backend) listPage(ctx context.Context, prefix, after, delimiter string, max int) (minio.ListBucketV2Result, error) {
	type answer struct {
		res minio.ListBucketV2Result
		err error
	}
	ch := make(chan answer, 1)
	go func() {
		res, err := b.core.ListObjectsV2(b.bucket, prefix, after, "", delimiter, max)
		ch <- answer{res, err}
	}()
	select {
	case a := <-ch:
		return a.res, a.err
	case <-ctx.Done():
		return minio.ListBucketV2Result{}, ctx.Err()
	}
}

// heads reads each key's Info, in order, dropping keys deleted since the
// list.
func (b *backend) heads(ctx context.Context, space string, keys []string) ([]objects.Info, error) {
	infos := make([]objects.Info, len(keys))
	errs := make([]error, len(keys))
	sem := make(chan struct{}, 16)
	var wg sync.WaitGroup
	for i, k := range keys {
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer func() { <-sem; wg.Done() }()
			infos[i], errs[i] = b.Head(ctx, space, k)
		}()
	}
	wg.Wait()
	out := infos[:0]
	for i := range infos {
		if errors.Is(errs[i], objects.ErrNotFound) {
			continue
		}
		if errs[i] != nil {
			return nil, errs[i]
		}
		out = append(out, infos[i])
	}
	return out, nil
}
