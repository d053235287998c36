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
	"bytes"
	"context"
	"crypto/md5"
	"crypto/rand"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"sync"
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

// PartSize is the size of a multipart upload's parts and of the one
// buffer a Put holds: a body no longer than it goes up in one PUT, a
// longer one in parts of it (S3's smallest part; 10,000 parts make
// objects up to 48.8 GiB).
const PartSize = 5 << 20

// maxName is S3's longest object name: a key can be as long as what
// the prefix and the space leave of it.
const maxName = 1024

// copyLimit is the largest object S3 copies in one request.
const copyLimit = 5 << 30

// staging is where a multipart upload goes before it is copied to its
// name: a path-escaped space never holds a "%" that two hex digits do not
// follow, so no space is named "%staging".
const staging = "%staging/"

// metaKey is the user-metadata header holding our Info.
const metaKey = "Retainer"

type backend struct {
	client  *minio.Client
	core    minio.Core
	bucket  string
	prefix  string
	buffers *bufferBudget
}

// bufferBudget counts the part buffers puts hold, in all and by space.
type bufferBudget struct {
	max, perSpace int
	wait          time.Duration
	mu            sync.Mutex
	held          int
	bySpace       map[string]int
	freed         chan struct{} // closed (and replaced) when one is given back
}

// take holds a buffer for space, waiting at most b.wait for one.
func (b *bufferBudget) take(ctx context.Context, space string) error {
	if b.max <= 0 {
		return nil
	}
	timer := time.NewTimer(b.wait)
	defer timer.Stop()
	for {
		var why error
		b.mu.Lock()
		switch {
		case b.perSpace > 0 && b.bySpace[space] >= b.perSpace:
			why = objects.ErrSpaceBusy
		case b.held >= b.max:
			why = objects.ErrBusy
		default:
			b.held++
			b.bySpace[space]++
			b.mu.Unlock()
			return nil
		}
		freed := b.freed
		b.mu.Unlock()
		select {
		case <-freed:
		case <-timer.C:
			return why
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

func (b *bufferBudget) give(space string) {
	if b.max <= 0 {
		return
	}
	b.mu.Lock()
	b.held--
	if b.bySpace[space]--; b.bySpace[space] <= 0 {
		delete(b.bySpace, space)
	}
	close(b.freed)
	b.freed = make(chan struct{})
	b.mu.Unlock()
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

// stored is what rides in the user-metadata header.
type stored struct {
	ETag     string            `json:"e"`
	Size     int64             `json:"s"`
	Version  string            `json:"v"`
	Uploaded int64             `json:"u"` // Unix milliseconds
	HTTP     map[string]string `json:"h,omitempty"`
	Custom   map[string]string `json:"c,omitempty"`
}

func encodeMeta(i objects.Info) (map[string]string, error) {
	j, err := json.Marshal(stored{ETag: i.ETag, Size: i.Size, Version: i.Version, Uploaded: i.Uploaded.UnixMilli(), HTTP: i.HTTPMetadata, Custom: i.CustomMetadata})
	if err != nil {
		return nil, err
	}
	// Header values are ASCII; keys and values of customMetadata are not.
	return map[string]string{metaKey: base64.RawURLEncoding.EncodeToString(j)}, nil
}

// info reads our Info from an object's headers. An object another tool
// put in the bucket has no such header: it answers what S3 knows.
func info(key string, oi minio.ObjectInfo) (objects.Info, error) {
	v := oi.UserMetadata[metaKey]
	if v == "" {
		v = oi.Metadata.Get("X-Amz-Meta-" + metaKey)
	}
	if v == "" {
		size := oi.Size
		if r := oi.Metadata.Get("Content-Range"); r != "" {
			if i := strings.LastIndexByte(r, '/'); i >= 0 {
				if n, err := strconv.ParseInt(r[i+1:], 10, 64); err == nil {
					size = n
				}
			}
		}
		return objects.Info{Key: key, Size: size, ETag: strings.Trim(oi.ETag, `"`), Version: oi.VersionID, Uploaded: oi.LastModified.UTC()}, nil
	}
	j, err := base64.RawURLEncoding.DecodeString(v)
	if err != nil {
		return objects.Info{}, fmt.Errorf("objects s3: %q: %w", oi.Key, err)
	}
	var s stored
	if err := json.Unmarshal(j, &s); err != nil {
		return objects.Info{}, fmt.Errorf("objects s3: %q: %w", oi.Key, err)
	}
	return objects.Info{
		Key: key, Size: s.Size, ETag: s.ETag, Version: s.Version,
		Uploaded:     time.UnixMilli(s.Uploaded).UTC(),
		HTTPMetadata: s.HTTP, CustomMetadata: s.Custom,
	}, nil
}

// mark is how a key becomes an S3 name every service takes. Services
// that keep objects as files (SeaweedFS, MinIO) refuse a "." or ".."
// segment, drop empty ones ("a//b" is "a/b" there, "/a" is "a") and make
// a key ending in "/" a folder; AWS S3 and R2 take them all. Such a
// segment gets a mark after it ("a/./b" is "a/.\x01/b", "k/" is
// "k/\x01", "/a" is "\x01/a"). SeaweedFS also reads a "\" as a "/"
// ("a\b" would be "a/b") and refuses a NUL: those bytes are escaped as
// the mark and a byte after it ("\" is "\x01\x02", NUL "\x01\x03"),
// and a mark in a key is doubled. The mark
// is the least byte a key holds, so names sort as their keys do except
// where a marked segment meets a sibling that goes on with a byte below
// "/" ("./x" lists before ".."), and where a key holds an escaped byte
// (a "\" sorts as a byte below every other); no "/" is added or taken, so delimiters
// roll up the same. Other keys are their names.
const mark = "\x01"

// escaper escapes the mark, "\\" and NUL.
var escaper = strings.NewReplacer(mark, mark+mark, "\\", mark+"\x02", "\x00", mark+"\x03")

// encodeKey is a key's name; a list's prefix (whole false) leaves its
// last segment unmarked, since a key it prefixes may go on.
func encodeKey(k string, whole bool) string {
	if !strings.ContainsAny(k, mark+".\\\x00") && !strings.Contains(k, "//") && !strings.HasPrefix(k, "/") && !strings.HasSuffix(k, "/") {
		return k
	}
	segs := strings.Split(escaper.Replace(k), "/")
	for i, s := range segs {
		if i == len(segs)-1 && !whole {
			break
		}
		if s == "" || s == "." || s == ".." {
			segs[i] = s + mark
		}
	}
	return strings.Join(segs, "/")
}

// decodeKey undoes encodeKey.
func decodeKey(n string) string {
	if !strings.Contains(n, mark) {
		return n
	}
	var b strings.Builder
	for i := 0; i < len(n); i++ {
		if n[i] != mark[0] {
			b.WriteByte(n[i])
			continue
		}
		if i+1 < len(n) {
			switch n[i+1] {
			case mark[0]:
				b.WriteByte(mark[0])
				i++
			case 0x02:
				b.WriteByte('\\')
				i++
			case 0x03:
				b.WriteByte(0)
				i++
			}
		}
	}
	return b.String()
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

// bufs and smalls keep buffers between puts, so a busy gateway does not
// make PartSize of garbage per object.
var bufs, smalls sync.Pool

// smallSize is what a put reads before it takes a part buffer.
const smallSize = 64 << 10

func getBuf() []byte {
	if b, ok := bufs.Get().(*[]byte); ok {
		return *b
	}
	return make([]byte, PartSize)
}

func putBuf(b []byte) { bufs.Put(&b) }

func getSmall() []byte {
	if b, ok := smalls.Get().(*[]byte); ok {
		return *b
	}
	return make([]byte, smallSize)
}

func putSmall(b []byte) { smalls.Put(&b) }

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
