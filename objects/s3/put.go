package s3

import (
	"bytes"
	"context"
	"crypto/md5"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"time"

	"github.com/minio/minio-go/v7"

	"github.com/retainer-gw/retainer/objects"
)

// PartSize is the size of a multipart upload's parts and of the one
// buffer a Put holds: a body no longer than it goes up in one PUT, a
// longer one in parts of it (S3's smallest part; 10,000 parts make
// objects up to 48.8 GiB).
const PartSize = 5 << 20

// copyLimit is the largest object S3 copies in one request.
const copyLimit = 5 << 30

// staging is where a multipart upload goes before it is copied to its
// name: a path-escaped space never holds a "%" that two hex digits do not
// follow, so no space is named "%staging".
const staging = "%staging/"

// Put reads the body into one PartSize buffer (after a first 64 KiB): a
// body that fits goes up in one PUT whose user metadata holds its MD5. A longer one goes up as a
// multipart upload to a staging name (its MD5 is known only at the end,
// and S3 fixes metadata when an upload begins), then is copied on the
// server to its name with its metadata, and the staging object deleted.
// Either way the name changes in one S3 operation; a failed body or an
// ended context aborts the upload and leaves the old object; a body read
// whole before the context ended is committed. Of meta, the
// metadata is kept, and the version and upload time when the bucket
// set them (a new random version and now otherwise); size and etag are
// counted here.
func (b *backend) Put(ctx context.Context, space, key string, body io.Reader, meta objects.Info) (objects.Info, error) {
	dir, err := b.dir(space)
	if err != nil {
		return objects.Info{}, err
	}
	name := dir + encodeKey(key, true)
	if len(name) > maxName {
		return objects.Info{}, fmt.Errorf("%w: objects s3: key of %d bytes: with the prefix and space, over S3's %d bytes a name", objects.ErrBadKey, len(key), maxName)
	}
	out := objects.Info{Key: key, Version: meta.Version, Uploaded: meta.Uploaded, HTTPMetadata: meta.HTTPMetadata, CustomMetadata: meta.CustomMetadata}
	if out.Version == "" {
		out.Version = newVersion()
	}
	// A small body is read into a small buffer first, so many visitors
	// putting small objects at once do not hold a part buffer each.
	small := getSmall()
	defer putSmall(small)
	buf := small
	n, err := io.ReadFull(body, buf)
	if err == nil {
		// A longer body holds a part buffer: the gateway's are counted.
		if err := b.buffers.take(ctx, space); err != nil {
			return objects.Info{}, err
		}
		defer b.buffers.give(space)
		buf = getBuf()
		defer putBuf(buf)
		copy(buf, small)
		var m int
		m, err = io.ReadFull(body, buf[len(small):])
		n += m
	}
	if err == io.EOF || err == io.ErrUnexpectedEOF {
		sum := md5.Sum(buf[:n])
		out.Size, out.ETag = int64(n), hex.EncodeToString(sum[:])
		if out.Uploaded.IsZero() {
			out.Uploaded = time.Now()
		}
		um, err := encodeMeta(out)
		if err != nil {
			return objects.Info{}, err
		}
		if err := ctx.Err(); err != nil {
			return objects.Info{}, err
		}
		c, cancel := commit(ctx)
		defer cancel()
		if _, err := b.core.PutObject(c, b.bucket, name, bytes.NewReader(buf[:n]), int64(n), base64.StdEncoding.EncodeToString(sum[:]), "", minio.PutObjectOptions{UserMetadata: um, DisableContentSha256: true}); err != nil {
			return objects.Info{}, fmt.Errorf("objects s3: put %q: %w", key, err)
		}
		out.Uploaded = out.Uploaded.Truncate(time.Millisecond).UTC()
		return out, nil
	}
	if err != nil {
		return objects.Info{}, err
	}
	return b.putParts(ctx, name, buf, body, out)
}

// commit is the context of a put's steps that must not be cut halfway
// by the request's end: the start of an upload (whose id an ended
// request would lose, leaving it unfinished on the service), the commit
// of a body read whole, and the cleanup. The request's end is checked
// before each.
func commit(ctx context.Context) (context.Context, context.CancelFunc) {
	return context.WithTimeout(context.WithoutCancel(ctx), 10*time.Minute)
}

// cleanupWait bounds a failed put's abort of its upload and removal of
// its staged object.
const cleanupWait = 10 * time.Second

func (b *backend) putParts(ctx context.Context, name string, buf []byte, body io.Reader, out objects.Info) (_ objects.Info, err error) {
	if err := ctx.Err(); err != nil {
		return objects.Info{}, err
	}
	tmp := b.prefix + staging + newVersion()
	c, cancel := commit(ctx)
	defer cancel()
	id, err := b.core.NewMultipartUpload(c, b.bucket, tmp, minio.PutObjectOptions{})
	if err != nil {
		return objects.Info{}, fmt.Errorf("objects s3: put %q: %w", out.Key, err)
	}
	completed := false
	defer func() {
		// Best effort, within cleanupWait: a service that is down keeps
		// what it had (docs/objects-s3.md: an unfinished upload or a
		// staged object under <prefix>%staging/).
		cc, cancel := context.WithTimeout(context.WithoutCancel(ctx), cleanupWait)
		defer cancel()
		if !completed {
			b.core.AbortMultipartUpload(cc, b.bucket, tmp, id)
		}
		// Also when completing failed: the service may have completed it.
		b.client.RemoveObject(cc, b.bucket, tmp, minio.RemoveObjectOptions{})
	}()
	whole := md5.New()
	var parts []minio.CompletePart
	n := len(buf)
	for n > 0 {
		part := buf[:n]
		whole.Write(part)
		out.Size += int64(n)
		p, err := b.uploadPart(ctx, tmp, id, len(parts)+1, part)
		if err != nil {
			return objects.Info{}, fmt.Errorf("objects s3: put %q: %w", out.Key, err)
		}
		parts = append(parts, minio.CompletePart{PartNumber: p.PartNumber, ETag: p.ETag})
		n, err = io.ReadFull(body, buf)
		if err == io.EOF || err == io.ErrUnexpectedEOF {
			err = nil
		} else if err == nil && len(parts) == 10000 {
			err = errors.New("objects s3: object over 10,000 parts")
		}
		if err != nil {
			return objects.Info{}, err
		}
	}
	if err := ctx.Err(); err != nil {
		return objects.Info{}, err
	}
	if _, err := b.core.CompleteMultipartUpload(c, b.bucket, tmp, id, parts, minio.PutObjectOptions{}); err != nil {
		return objects.Info{}, fmt.Errorf("objects s3: put %q: %w", out.Key, err)
	}
	completed = true
	out.ETag = hex.EncodeToString(whole.Sum(nil))
	if out.Uploaded.IsZero() {
		out.Uploaded = time.Now()
	}
	um, err := encodeMeta(out)
	if err != nil {
		return objects.Info{}, err
	}
	dst := minio.CopyDestOptions{Bucket: b.bucket, Object: name, UserMetadata: um, ReplaceMetadata: true}
	src := minio.CopySrcOptions{Bucket: b.bucket, Object: tmp}
	if out.Size <= copyLimit {
		_, err = b.client.CopyObject(c, dst, src)
	} else {
		_, err = b.client.ComposeObject(c, dst, src)
	}
	if err != nil {
		return objects.Info{}, fmt.Errorf("objects s3: put %q: %w", out.Key, err)
	}
	out.Uploaded = out.Uploaded.Truncate(time.Millisecond).UTC()
	return out, nil
}

func (b *backend) uploadPart(ctx context.Context, tmp, id string, number int, part []byte) (minio.ObjectPart, error) {
	sum := md5.Sum(part)
	return b.core.PutObjectPart(ctx, b.bucket, tmp, id, number, bytes.NewReader(part), int64(len(part)),
		minio.PutObjectPartOptions{Md5Base64: base64.StdEncoding.EncodeToString(sum[:]), DisableContentSha256: true})
}
