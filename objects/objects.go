package objects

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"io"
	"strings"
	"sync"
	"time"
	"unicode/utf8"

	"github.com/retainer-gw/retainer/budgets"
	"github.com/retainer-gw/retainer/fault"
)

// The bucket's rules (docs/objects.md), the same whatever the backend:
// keys, sizes, the tenant's quota, conditionals, metadata.

const (
	// MaxKey is the longest key, in bytes of UTF-8.
	MaxKey = 1024
	// MaxListLimit is the most one list page answers.
	MaxListLimit = 1000
	// maxDeleteKeys is the most keys one delete takes.
	maxDeleteKeys = 1000
)

// HTTPFields are the httpMetadata an object keeps (R2's).
var HTTPFields = []string{"contentType", "contentLanguage", "contentDisposition", "contentEncoding", "cacheControl", "cacheExpiry"}

// Options are a Buckets' bounds.
type Options struct {
	// MaxObject bounds one object, in bytes (max_object). Default 1 GiB.
	MaxObject int64
	// Quota bounds one space's objects together, in bytes
	// (objects_quota). Default 10 GiB.
	Quota int64
	// Log is told of each failure of the backend (its detail, which may
	// name the service's URL, bucket and upload ids); the caller is
	// answered OVERLOADED naming none of it.
	Log func(op string, err error)
}

// Buckets are the tenants' buckets on one backend. Safe for concurrent
// use.
type Buckets struct {
	backend Backend
	opts    Options
	mu      sync.Mutex // guards locks and usage
	locks   map[string]*keyLock
	usage   map[string]*usage
	// puts are the puts under way, a space's and all (guarded by mu):
	// every put holds its backend's resources (the S3 backend's part
	// buffer) while its body arrives, however it arrives.
	puts      budgets.Counts
	putsTotal int
}

// keyLock orders the writes of one key: a put's conditionals and its old
// object's size are read, and its commit made, under it.
type keyLock struct {
	mu   sync.Mutex
	refs int
}

// usage is one space's bytes: counted once from a listing when the space
// is first written, then kept up to date by every put and delete, so a
// put is checked against the quota without listing. pending is what puts
// under way have streamed so far.
type usage struct {
	mu      sync.Mutex
	loaded  bool
	used    int64
	pending int64
}

// New answers the buckets kept on b.
func New(b Backend, o Options) *Buckets {
	if o.MaxObject <= 0 {
		o.MaxObject = budgets.DefaultMaxObject
	}
	if o.Quota <= 0 {
		o.Quota = budgets.DefaultObjectsQuota
	}
	return &Buckets{backend: b, opts: o, locks: map[string]*keyLock{}, usage: map[string]*usage{}}
}

// Limits answers MaxObject and Quota, defaults applied.
func (b *Buckets) Limits() Options { return b.opts }

type waitKey struct{}

// WithWait bounds the bucket's calls made with ctx by d (d <= 0: no bound
// but ctx's own): a call the backend does not answer within it fails
// OVERLOADED, retryable. The bytes of a body already streaming (a get's
// body, a put's body arriving) are not bounded by it: their streams'
// deadlines are theirs.
func WithWait(ctx context.Context, d time.Duration) context.Context {
	if d <= 0 {
		return ctx
	}
	return context.WithValue(ctx, waitKey{}, d)
}

// bounded is ctx within its wait.
func bounded(ctx context.Context) (context.Context, context.CancelFunc) {
	if d, ok := ctx.Value(waitKey{}).(time.Duration); ok {
		return context.WithTimeout(ctx, d)
	}
	return context.WithCancel(ctx)
}

// failed answers err of the backend's op as the caller sees it: a fault,
// a sentinel the bucket's callers read, the caller's own end (ctx), or
// else OVERLOADED naming none of the service's internals (its detail
// goes to Log). bctx is the call's bounded context.
func (b *Buckets) failed(ctx, bctx context.Context, op string, err error) error {
	switch {
	case err == nil, errors.As(err, new(*fault.Fault)), errors.Is(err, ErrNotFound), errors.Is(err, ErrRange):
		return err
	case errors.Is(err, ErrBadCursor):
		return fault.New(fault.BadRequest, "list: the cursor is not one a list answered.")
	case errors.Is(err, ErrBadKey):
		return fault.New(fault.BadRequest, "The key is too long for this gateway's object store (its names are at most 1,024 bytes, a prefix of the gateway's included): nothing was written.")
	case errors.Is(err, ErrBusy):
		return fault.New(fault.Overloaded, "Too many puts are under way on this gateway's object store: nothing was written; try again.")
	case errors.Is(err, ErrSpaceBusy):
		return fault.New(fault.QuotaExceeded, "The tenant's puts hold their share of this gateway's object store buffers: nothing was written; try again when one ends.")
	case ctx.Err() != nil:
		return ctx.Err()
	case bctx != nil && bctx.Err() != nil:
		d, _ := ctx.Value(waitKey{}).(time.Duration)
		return fault.New(fault.Overloaded, "The object store did not answer %s within %v; try again.", op, d)
	}
	if b.opts.Log != nil {
		b.opts.Log(op, err)
	}
	return fault.New(fault.Overloaded, "The object store failed (%s); try again: a put that failed left the old object, if any, unchanged.", op)
}

// PutsUnderWay is how many puts are under way on the gateway.
func (b *Buckets) PutsUnderWay() int {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.putsTotal
}

// takePut counts one more put under way of space, or answers why not.
func (b *Buckets) takePut(space string) (func(), error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.putsTotal >= budgets.ObjectPuts {
		return nil, fault.New(fault.Overloaded, "%d bucket puts are under way on this gateway, the most it takes: nothing was written; try again.", budgets.ObjectPuts)
	}
	if !b.puts.Take(space, budgets.ObjectPutsPerTenant) {
		return nil, fault.New(fault.QuotaExceeded, "The tenant has %d bucket puts under way, the most it may: nothing was written.", budgets.ObjectPutsPerTenant)
	}
	b.putsTotal++
	return func() {
		b.mu.Lock()
		b.putsTotal--
		b.mu.Unlock()
		b.puts.Give(space)
	}, nil
}

// Space names a tenant's bucket in one registry for the backend.
func Space(registry, tenant string) string {
	sum := sha256.Sum256([]byte(registry + "\x00" + tenant))
	return hex.EncodeToString(sum[:16])
}

// CheckKey refuses a key that is not 1 to 1,024 bytes of UTF-8.
func CheckKey(key string) error {
	switch {
	case key == "":
		return fault.New(fault.BadRequest, "An object key is 1 to %d bytes of UTF-8: this one is empty.", MaxKey)
	case len(key) > MaxKey:
		return fault.New(fault.BadRequest, "An object key is 1 to %d bytes of UTF-8: this one is %d bytes.", MaxKey, len(key))
	case !utf8.ValidString(key):
		return fault.New(fault.BadRequest, "An object key is 1 to %d bytes of UTF-8: this one is not UTF-8.", MaxKey)
	}
	return nil
}

// Conditions are R2's onlyIf: the operation happens only when each given
// one holds. An etag may be given with or without its quotes; "*" matches
// any object.
type Conditions struct {
	EtagMatches      string
	EtagDoesNotMatch string
	UploadedBefore   time.Time
	UploadedAfter    time.Time
}

// Empty reports conditions that ask nothing.
func (c *Conditions) Empty() bool {
	return c == nil || c.EtagMatches == "" && c.EtagDoesNotMatch == "" && c.UploadedBefore.IsZero() && c.UploadedAfter.IsZero()
}

func unquote(etag string) string {
	etag = strings.TrimPrefix(strings.TrimSpace(etag), "W/")
	return strings.Trim(etag, `"`)
}

// hold reports whether c holds for info (nil: no object).
func (c *Conditions) hold(info *Info) bool {
	if c.Empty() {
		return true
	}
	if c.EtagMatches != "" {
		m := unquote(c.EtagMatches)
		if info == nil || m != "*" && m != info.ETag {
			return false
		}
	}
	if c.EtagDoesNotMatch != "" && info != nil {
		m := unquote(c.EtagDoesNotMatch)
		if m == "*" || m == info.ETag {
			return false
		}
	}
	if info != nil && !c.UploadedBefore.IsZero() && !info.Uploaded.Before(c.UploadedBefore) {
		return false
	}
	if info != nil && !c.UploadedAfter.IsZero() && !info.Uploaded.After(c.UploadedAfter) {
		return false
	}
	return true
}

// PutOptions are a put's metadata and conditions. Size, when not -1, is
// the body's length announced ahead (a Content-Length): a put past a bound
// is then refused before a byte is read.
type PutOptions struct {
	HTTPMetadata   map[string]string
	CustomMetadata map[string]string
	OnlyIf         *Conditions
	Size           int64
	// Buffered is a body already in memory: the whole put is within the
	// caller's wait (WithWait), not only its first steps.
	Buffered bool
}

func checkMetadata(http, custom map[string]string) error {
	n := 0
	for k, v := range http {
		ok := false
		for _, f := range HTTPFields {
			ok = ok || f == k
		}
		if !ok {
			return fault.New(fault.BadRequest, "httpMetadata has no field %q: its fields are %s.", k, strings.Join(HTTPFields, ", "))
		}
		if strings.ContainsAny(v, "\r\n\x00") {
			return fault.New(fault.BadRequest, "httpMetadata.%s may not hold a line break.", k)
		}
		n += len(k) + len(v)
	}
	for k, v := range custom {
		n += len(k) + len(v)
	}
	if n > budgets.ObjectMetadataBytes {
		return fault.New(fault.BadRequest, "An object's httpMetadata and customMetadata are at most %d bytes together: these are %d.", budgets.ObjectMetadataBytes, n)
	}
	return nil
}

func (b *Buckets) lock(space, key string) func() {
	name := space + "\x00" + key
	b.mu.Lock()
	l := b.locks[name]
	if l == nil {
		l = &keyLock{}
		b.locks[name] = l
	}
	l.refs++
	b.mu.Unlock()
	l.mu.Lock()
	return func() {
		l.mu.Unlock()
		b.mu.Lock()
		if l.refs--; l.refs == 0 {
			delete(b.locks, name)
		}
		b.mu.Unlock()
	}
}

// usageOf answers space's usage, counted from a listing the first time.
func (b *Buckets) usageOf(ctx context.Context, space string) (*usage, error) {
	b.mu.Lock()
	u := b.usage[space]
	if u == nil {
		u = &usage{}
		b.usage[space] = u
	}
	b.mu.Unlock()
	u.mu.Lock()
	defer u.mu.Unlock()
	if u.loaded {
		return u, nil
	}
	total, cursor := int64(0), ""
	for {
		page, err := b.backend.List(ctx, space, ListOptions{Cursor: cursor, Limit: MaxListLimit})
		if err != nil {
			return nil, err
		}
		for _, o := range page.Objects {
			total += o.Size
		}
		if !page.Truncated {
			break
		}
		cursor = page.Cursor
	}
	u.used, u.loaded = total, true
	return u, nil
}

// Used answers space's bytes (the control plane, tests).
func (b *Buckets) Used(ctx context.Context, space string) (int64, error) {
	u, err := b.usageOf(ctx, space)
	if err != nil {
		return 0, err
	}
	u.mu.Lock()
	defer u.mu.Unlock()
	return u.used, nil
}

func (b *Buckets) quotaFault() error {
	return fault.New(fault.QuotaExceeded, "The tenant's objects would pass objects_quota (%d bytes): nothing was written.", b.opts.Quota)
}

func (b *Buckets) tooLarge() error {
	return fault.New(fault.TooLarge, "An object is at most max_object (%d bytes): nothing was written.", b.opts.MaxObject)
}

// metered counts a put's bytes against max_object and the quota as they
// stream: each read is charged to the space's pending bytes first, so two
// puts at once cannot pass the quota together.
type metered struct {
	b       *Buckets
	u       *usage
	r       io.Reader
	freed   int64 // the old object's size, which the put replaces
	n       int64
	err     error
	bodyErr error // the body's own failure (not its end)
	charged int64
}

func (m *metered) Read(p []byte) (int, error) {
	if m.err != nil {
		return 0, m.err
	}
	n, err := m.r.Read(p)
	if err != nil && err != io.EOF {
		m.bodyErr = err
	}
	if n > 0 {
		m.n += int64(n)
		if m.n > m.b.opts.MaxObject {
			m.err = m.b.tooLarge()
			return 0, m.err
		}
		m.u.mu.Lock()
		over := m.u.used+m.u.pending+int64(n)-m.freed > m.b.opts.Quota
		if !over {
			m.u.pending += int64(n)
			m.charged += int64(n)
		}
		m.u.mu.Unlock()
		if over {
			m.err = m.b.quotaFault()
			return 0, m.err
		}
	}
	return n, err
}

// Put stores body under key, or answers ok false (nothing read) when
// o.OnlyIf does not hold. Past max_object or the quota it fails and
// nothing is written; a body that fails, or ctx ending, leaves the old
// object.
func (b *Buckets) Put(ctx context.Context, space, key string, body io.Reader, o PutOptions) (info Info, ok bool, err error) {
	if err := CheckKey(key); err != nil {
		return Info{}, false, err
	}
	if err := checkMetadata(o.HTTPMetadata, o.CustomMetadata); err != nil {
		return Info{}, false, err
	}
	if o.Size > b.opts.MaxObject {
		return Info{}, false, b.tooLarge()
	}
	release, err := b.takePut(space)
	if err != nil {
		return Info{}, false, err
	}
	defer release()
	bctx, cancel := bounded(ctx)
	defer cancel()
	u, err := b.usageOf(bctx, space)
	if err != nil {
		return Info{}, false, b.failed(ctx, bctx, "put", err)
	}
	unlock := b.lock(space, key)
	defer unlock()
	var old *Info
	if h, err := b.backend.Head(bctx, space, key); err == nil {
		old = &h
	} else if !errors.Is(err, ErrNotFound) {
		return Info{}, false, b.failed(ctx, bctx, "put", err)
	}
	if !o.OnlyIf.hold(old) {
		return Info{}, false, nil
	}
	freed := int64(0)
	if old != nil {
		freed = old.Size
	}
	if o.Size > 0 {
		u.mu.Lock()
		over := u.used+u.pending+o.Size-freed > b.opts.Quota
		u.mu.Unlock()
		if over {
			return Info{}, false, b.quotaFault()
		}
	}
	m := &metered{b: b, u: u, r: body, freed: freed}
	var ver [16]byte
	rand.Read(ver[:])
	// A body in memory is written within the wait; one that streams is
	// bounded by its stream's deadlines.
	pctx, pbound := ctx, context.Context(nil)
	if o.Buffered {
		pctx, pbound = bctx, bctx
	}
	info, err = b.backend.Put(pctx, space, key, m, Info{Version: hex.EncodeToString(ver[:]), HTTPMetadata: o.HTTPMetadata, CustomMetadata: o.CustomMetadata})
	u.mu.Lock()
	u.pending -= m.charged
	if err == nil {
		u.used += info.Size - freed
	}
	u.mu.Unlock()
	if err != nil {
		if m.err != nil {
			return Info{}, false, m.err
		}
		if m.bodyErr != nil {
			return Info{}, false, m.bodyErr
		}
		return Info{}, false, b.failed(ctx, pbound, "put", err)
	}
	return info, true, nil
}

// GetOptions are a get's range and conditions.
type GetOptions struct {
	Range  *Range
	OnlyIf *Conditions
}

// Get answers key's object: found false when there is none; body nil when
// o.OnlyIf does not hold (R2 answers the object without its body). The
// caller closes body. A range that selects nothing is ErrRange, with the
// object's Info.
func (b *Buckets) Get(ctx context.Context, space, key string, o GetOptions) (info Info, body io.ReadCloser, found bool, err error) {
	if err := CheckKey(key); err != nil {
		return Info{}, nil, false, err
	}
	// The conditions are checked against the object the backend opened,
	// so they and the bytes answered are of the same object. The wait
	// bounds the opening; the body streams under ctx alone.
	sctx, scancel := context.WithCancel(ctx)
	bctx, cancel := bounded(ctx)
	defer cancel()
	stop := context.AfterFunc(bctx, scancel)
	info, body, err = b.backend.Get(sctx, space, key, o.Range)
	if !stop() {
		if err == nil {
			body.Close()
			err = bctx.Err()
		}
		scancel()
		return Info{}, nil, false, b.failed(ctx, bctx, "get", err)
	}
	if errors.Is(err, ErrNotFound) {
		scancel()
		return Info{}, nil, false, nil
	}
	if err != nil {
		scancel()
		return Info{}, nil, false, b.failed(ctx, bctx, "get", err)
	}
	body = &cancelCloser{ReadCloser: body, cancel: scancel}
	if !o.Range.Satisfiable(info.Size) {
		// ErrRange answers the object's Info (its size) with it.
		body.Close()
		return info, nil, false, ErrRange
	}
	if !o.OnlyIf.hold(&info) {
		body.Close()
		return info, nil, true, nil
	}
	return info, body, true, nil
}

// cancelCloser ends a get's context when its body is closed.
type cancelCloser struct {
	io.ReadCloser
	cancel context.CancelFunc
}

func (c *cancelCloser) Close() error {
	err := c.ReadCloser.Close()
	c.cancel()
	return err
}

// Head answers key's metadata, found false when there is none.
func (b *Buckets) Head(ctx context.Context, space, key string) (Info, bool, error) {
	if err := CheckKey(key); err != nil {
		return Info{}, false, err
	}
	bctx, cancel := bounded(ctx)
	defer cancel()
	info, err := b.backend.Head(bctx, space, key)
	if errors.Is(err, ErrNotFound) {
		return Info{}, false, nil
	}
	return info, err == nil, b.failed(ctx, bctx, "head", err)
}

// Delete removes keys (those not there are no error).
func (b *Buckets) Delete(ctx context.Context, space string, keys ...string) error {
	if len(keys) > maxDeleteKeys {
		return fault.New(fault.BadRequest, "A delete takes at most %d keys: this one has %d.", maxDeleteKeys, len(keys))
	}
	for _, k := range keys {
		if err := CheckKey(k); err != nil {
			return err
		}
	}
	bctx, cancel := bounded(ctx)
	defer cancel()
	u, err := b.usageOf(bctx, space)
	if err != nil {
		return b.failed(ctx, bctx, "delete", err)
	}
	for _, k := range keys {
		unlock := b.lock(space, k)
		h, err := b.backend.Head(bctx, space, k)
		if errors.Is(err, ErrNotFound) {
			unlock()
			continue
		}
		if err == nil {
			err = b.backend.Delete(bctx, space, k)
		}
		if err == nil {
			u.mu.Lock()
			u.used -= h.Size
			u.mu.Unlock()
		}
		unlock()
		if err != nil {
			return b.failed(ctx, bctx, "delete", err)
		}
	}
	return nil
}

// List answers a page of the space's keys (o.Limit 0: 1,000).
func (b *Buckets) List(ctx context.Context, space string, o ListOptions) (ListPage, error) {
	if o.Limit < 0 || o.Limit > MaxListLimit {
		return ListPage{}, fault.New(fault.BadRequest, "list: limit is 1 to %d.", MaxListLimit)
	}
	if len(o.Prefix) > MaxKey || len(o.Delimiter) > MaxKey || !utf8.ValidString(o.Prefix) || !utf8.ValidString(o.Delimiter) {
		return ListPage{}, fault.New(fault.BadRequest, "list: prefix and delimiter are at most %d bytes of UTF-8.", MaxKey)
	}
	if o.Limit == 0 {
		o.Limit = MaxListLimit
	}
	bctx, cancel := bounded(ctx)
	defer cancel()
	page, err := b.backend.List(bctx, space, o)
	return page, b.failed(ctx, bctx, "list", err)
}
