// Package s3 is the objects backend on an S3-compatible service (AWS S3,
// Cloudflare R2, MinIO, Ceph, SeaweedFS) through minio-go, which a cluster
// needs: every gateway reads what another wrote (docs/objects-s3.md).
//
// An object of space s and key k is the S3 object <prefix><s>/<k> (the
// space path-escaped, so no space's objects fall under another's prefix);
// its size, our etag (hex MD5 of the bytes), version, upload time and the
// bucket's httpMetadata and customMetadata ride in one S3 user-metadata
// header. Atomicity is S3's: a single PUT or a completed multipart upload
// replaces an object whole, an aborted one leaves the old.
//
// It does not enforce keys, sizes, quotas or conditionals (package
// objects does, above every backend), and it keeps no state of its own:
// durability is the service's.
package s3

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/minio/minio-go/v7"
	"github.com/minio/minio-go/v7/pkg/credentials"

	"github.com/retainer-gw/retainer/objects"
)

// Config is the Caddyfile's `objects s3 { ... }` (docs/objects-s3.md).
type Config struct {
	// Endpoint is the service's URL, http:// or https:// (https when the
	// scheme is left out), without a path.
	Endpoint string
	// Bucket is the S3 bucket, created when missing.
	Bucket string
	// Region is the bucket's region ("us-east-1" when empty).
	Region string
	// AccessKey and SecretKey sign requests (Signature V4).
	AccessKey string
	SecretKey string
	// Prefix is put before every object's name, so several registries or
	// deployments can share one bucket ("retainer/").
	Prefix string
	// Buffers bounds the part buffers (PartSize each) the backend's puts
	// hold at once, BuffersPerSpace one space's; a put that finds none
	// waits BufferWait for one, then fails with objects.ErrBusy or
	// objects.ErrSpaceBusy. Zero Buffers: no bound.
	Buffers, BuffersPerSpace int
	BufferWait               time.Duration
}

type backend struct {
	client  *minio.Client
	core    minio.Core
	bucket  string
	prefix  string
	buffers *bufferBudget
}

// Open connects to the service and creates the bucket when it is missing.
func Open(ctx context.Context, c Config) (objects.Backend, error) {
	if c.Bucket == "" {
		return nil, errors.New("objects s3: bucket is required")
	}
	host, secure, err := endpoint(c.Endpoint)
	if err != nil {
		return nil, err
	}
	region := c.Region
	if region == "" {
		region = "us-east-1"
	}
	client, err := minio.New(host, &minio.Options{
		Creds:  credentials.NewStaticV4(c.AccessKey, c.SecretKey, ""),
		Secure: secure,
		Region: region,
	})
	if err != nil {
		return nil, fmt.Errorf("objects s3: %w", err)
	}
	exists, err := client.BucketExists(ctx, c.Bucket)
	if err != nil {
		return nil, fmt.Errorf("objects s3: reaching bucket %q at %s: %w", c.Bucket, c.Endpoint, err)
	}
	if !exists {
		if err := makeBucket(ctx, client, c.Bucket, region); err != nil {
			return nil, fmt.Errorf("objects s3: creating bucket %q: %w", c.Bucket, err)
		}
	}
	buffers := &bufferBudget{max: c.Buffers, perSpace: c.BuffersPerSpace, wait: c.BufferWait, bySpace: map[string]int{}, freed: make(chan struct{})}
	return &backend{client: client, core: minio.Core{Client: client}, bucket: c.Bucket, prefix: c.Prefix, buffers: buffers}, nil
}

// makeBucket creates the bucket unless another gateway of the cluster
// did meanwhile. Services answer that race differently: "already owned"
// or "already exists", and SeaweedFS, for one of several creates at once,
// "the specified bucket does not exist"; so a failed create is followed by
// a few looks for the bucket before it counts as failed.
func makeBucket(ctx context.Context, client *minio.Client, bucket, region string) error {
	err := client.MakeBucket(ctx, bucket, minio.MakeBucketOptions{Region: region})
	if code := minio.ToErrorResponse(err).Code; err == nil || code == "BucketAlreadyOwnedByYou" || code == "BucketAlreadyExists" {
		return nil
	}
	for wait := 50 * time.Millisecond; wait <= 800*time.Millisecond; wait *= 2 {
		if ok, _ := client.BucketExists(ctx, bucket); ok {
			return nil
		}
		select {
		case <-ctx.Done():
			return err
		case <-time.After(wait):
		}
	}
	return err
}

// endpoint splits a URL into minio-go's host and TLS flag.
func endpoint(s string) (host string, secure bool, err error) {
	if s == "" {
		return "", false, errors.New("objects s3: endpoint is required")
	}
	if !strings.Contains(s, "://") {
		s = "https://" + s
	}
	// The errors do not repeat the endpoint: it may hold a password.
	u, err := url.Parse(s)
	if err != nil {
		return "", false, errors.New("objects s3: the endpoint is not a URL")
	}
	if u.Scheme != "http" && u.Scheme != "https" {
		return "", false, errors.New("objects s3: the endpoint's scheme must be http or https")
	}
	if u.Host == "" || (u.Path != "" && u.Path != "/") || u.RawQuery != "" || u.User != nil {
		return "", false, errors.New("objects s3: the endpoint is a scheme, a host and a port, nothing else")
	}
	return u.Host, u.Scheme == "https", nil
}

// dir is a space's prefix in the bucket.
func (b *backend) dir(space string) (string, error) {
	if space == "" {
		return "", errors.New("objects s3: empty space")
	}
	return b.prefix + url.PathEscape(space) + "/", nil
}

func notFound(err error) bool {
	r := minio.ToErrorResponse(err)
	return r.Code == "NoSuchKey" || r.StatusCode == http.StatusNotFound && r.Code != "NoSuchBucket"
}

func newVersion() string {
	var b [16]byte
	rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

func (b *backend) Head(ctx context.Context, space, key string) (objects.Info, error) {
	dir, err := b.dir(space)
	if err != nil {
		return objects.Info{}, err
	}
	oi, err := b.client.StatObject(ctx, b.bucket, dir+encodeKey(key, true), minio.StatObjectOptions{})
	if err != nil {
		if notFound(err) {
			return objects.Info{}, objects.ErrNotFound
		}
		return objects.Info{}, fmt.Errorf("objects s3: head %q: %w", key, err)
	}
	return info(key, oi)
}

// Get asks S3 for the range. Ranges past the end are clamped as R2 does:
// an offset at or past the end (which S3 refuses with 416) and a zero
// length read nothing.
func (b *backend) Get(ctx context.Context, space, key string, r *objects.Range) (objects.Info, io.ReadCloser, error) {
	dir, err := b.dir(space)
	if err != nil {
		return objects.Info{}, nil, err
	}
	var opts minio.GetObjectOptions
	if r != nil {
		switch {
		case r.Suffix > 0:
			err = opts.SetRange(0, -r.Suffix)
		case r.Length == 0 || r.Offset < 0:
			i, err := b.Head(ctx, space, key)
			if err != nil {
				return objects.Info{}, nil, err
			}
			if r.Offset < 0 {
				return objects.Info{}, nil, fmt.Errorf("objects s3: negative offset %d", r.Offset)
			}
			return i, io.NopCloser(strings.NewReader("")), nil
		case r.Length < 0 && r.Offset > 0:
			err = opts.SetRange(r.Offset, 0)
		case r.Length > 0:
			err = opts.SetRange(r.Offset, r.Offset+r.Length-1)
		}
		if err != nil {
			return objects.Info{}, nil, err
		}
	}
	body, oi, _, err := b.core.GetObject(ctx, b.bucket, dir+encodeKey(key, true), opts)
	if err != nil {
		if notFound(err) {
			return objects.Info{}, nil, objects.ErrNotFound
		}
		if minio.ToErrorResponse(err).Code == "InvalidRange" {
			i, err := b.Head(ctx, space, key)
			if err != nil {
				return objects.Info{}, nil, err
			}
			return i, io.NopCloser(strings.NewReader("")), nil
		}
		return objects.Info{}, nil, fmt.Errorf("objects s3: get %q: %w", key, err)
	}
	i, err := info(key, oi)
	if err != nil {
		body.Close()
		return objects.Info{}, nil, err
	}
	return i, body, nil
}

func (b *backend) Delete(ctx context.Context, space string, keys ...string) error {
	dir, err := b.dir(space)
	if err != nil {
		return err
	}
	if len(keys) == 1 {
		if err := b.client.RemoveObject(ctx, b.bucket, dir+encodeKey(keys[0], true), minio.RemoveObjectOptions{}); err != nil && !notFound(err) {
			return fmt.Errorf("objects s3: delete %q: %w", keys[0], err)
		}
		return nil
	}
	ch := make(chan minio.ObjectInfo, len(keys))
	for _, k := range keys {
		ch <- minio.ObjectInfo{Key: dir + encodeKey(k, true)}
	}
	close(ch)
	for e := range b.client.RemoveObjects(ctx, b.bucket, ch, minio.RemoveObjectsOptions{}) {
		if e.Err != nil && !notFound(e.Err) {
			return fmt.Errorf("objects s3: delete %q: %w", decodeKey(strings.TrimPrefix(e.ObjectName, dir)), e.Err)
		}
	}
	return nil
}
