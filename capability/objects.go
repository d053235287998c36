package capability

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"io"
	"strings"
	"sync"
	"time"

	"github.com/retainer-gw/retainer/budgets"
	"github.com/retainer-gw/retainer/fault"
	"github.com/retainer-gw/retainer/internal/wirejson"
	"github.com/retainer-gw/retainer/objects"
)

// Objects serves a program's bucket (docs/objects.md): objectsRead reads,
// objectsWrite writes. An object's body is not sent with its head unless
// it is small: it waits in the fetch stream table (fetchstream.go), read
// with fetch.read or, answered unread as a Response's body, relayed to the
// visitor by the gateway from storage. A put's body comes the cheapest way
// it can: a handler's unread request body, or an unread fetch answer, is
// read by the gateway itself (the bytes never enter the isolate); any
// other stream arrives in chunks (objects.write) through a pipe into the
// backend's put.
type Objects struct {
	Buckets *objects.Buckets
	Streams *FetchStreams

	mu      sync.Mutex // guards uploads and byTenant
	uploads map[string]*upload
	// byTenant counts uploads in progress per tenant.
	byTenant map[string]int
	// storing counts the chunked puts' goroutines still writing (an
	// abandoned one removes its temporary file after the call that
	// abandoned it answered).
	storing sync.WaitGroup
}

// Wait waits until every chunked put that has ended (finished, failed or
// abandoned) has left storage as it will stay: its temporary file gone.
// Puts still under way are waited for too.
func (o *Objects) Wait() { o.storing.Wait() }

// inlineObject is the largest object body answered with its head.
const inlineObject = 64 << 10

// uploadIdle ends a chunked upload that receives nothing for this long
// (its run ended without finishing it): the old object stays.
const uploadIdle = 30 * time.Second

// upload is a put whose body arrives in chunks.
type upload struct {
	owner, tenant string
	pw            *io.PipeWriter
	mu            sync.Mutex // one chunk at a time
	idle          *time.Timer
	result        chan putResult
	done          bool
}

type putResult struct {
	ans json.RawMessage
	err error
}

// objectInfo is an object's head as the runtime gets it.
type objectInfo struct {
	Key      string            `json:"key"`
	Size     int64             `json:"size"`
	ETag     string            `json:"etag"`
	Uploaded string            `json:"uploaded"`
	Version  string            `json:"version"`
	HTTP     map[string]string `json:"http,omitempty"`
	Custom   map[string]string `json:"custom,omitempty"`
}

func infoOf(i objects.Info, meta bool) objectInfo {
	o := objectInfo{Key: i.Key, Size: i.Size, ETag: i.ETag, Uploaded: i.Uploaded.UTC().Format("2006-01-02T15:04:05.000Z"), Version: i.Version}
	if meta {
		o.HTTP, o.Custom = i.HTTPMetadata, i.CustomMetadata
	}
	return o
}

// conditions are onlyIf as the runtime sends them (dates as ISO text).
type conditions struct {
	EtagMatches      string `json:"etagMatches"`
	EtagDoesNotMatch string `json:"etagDoesNotMatch"`
	UploadedBefore   string `json:"uploadedBefore"`
	UploadedAfter    string `json:"uploadedAfter"`
}

func (c *conditions) parse() (*objects.Conditions, error) {
	if c == nil {
		return nil, nil
	}
	out := &objects.Conditions{EtagMatches: c.EtagMatches, EtagDoesNotMatch: c.EtagDoesNotMatch}
	for _, d := range []struct {
		s   string
		t   *time.Time
		one string
	}{{c.UploadedBefore, &out.UploadedBefore, "uploadedBefore"}, {c.UploadedAfter, &out.UploadedAfter, "uploadedAfter"}} {
		if d.s == "" {
			continue
		}
		t, err := time.Parse(time.RFC3339Nano, d.s)
		if err != nil {
			return nil, bad("bucket: onlyIf.%s is not a date.", d.one)
		}
		*d.t = t
	}
	return out, nil
}

type objectArgs struct {
	Key    string            `json:"key"`
	Keys   []string          `json:"keys"`
	HTTP   map[string]string `json:"http"`
	Custom map[string]string `json:"custom"`
	OnlyIf *conditions       `json:"onlyIf"`
	Range  *struct {
		Offset *int64 `json:"offset"`
		Length *int64 `json:"length"`
		Suffix *int64 `json:"suffix"`
	} `json:"range"`
	// A put's body: one of these.
	Data   *string `json:"data"`   // Latin-1
	Text   *string `json:"text"`   // UTF-8
	Body   string  `json:"body"`   // the handler's request body, by token
	Fetch  string  `json:"fetch"`  // an unread fetch answer, by token
	Upload bool    `json:"upload"` // chunks follow (objects.write)
	// objects.write
	Stream string `json:"stream"`
	Done   bool   `json:"done"`
	Abort  bool   `json:"abort"`
	// objects.list
	Prefix    string `json:"prefix"`
	Delimiter string `json:"delimiter"`
	Cursor    string `json:"cursor"`
	Limit     int    `json:"limit"`
	Meta      bool   `json:"meta"`
}

// objectsCall serves the bucket's host calls. body opens the handler's
// request body by token (nil outside an invocation).
func (h *Host) objectsCall(ctx context.Context, c Call) (json.RawMessage, error) {
	write := c.Grants.Has(ObjectsWrite)
	if !write && !c.Grants.Has(ObjectsRead) {
		return nil, Denied(ObjectsRead, "bucket")
	}
	op := strings.TrimPrefix(c.Op, "objects.")
	switch op {
	case "put", "upload", "write":
		if !write {
			return nil, Denied(ObjectsWrite, "bucket.put")
		}
	case "delete":
		if !write {
			return nil, Denied(ObjectsWrite, "bucket.delete")
		}
	}
	o := h.Objects
	if o == nil || o.Buckets == nil {
		return nil, fault.New(fault.BadRequest, "This gateway keeps no objects.")
	}
	var a objectArgs
	if err := json.Unmarshal(c.Args, &a); err != nil {
		return nil, bad("bucket: malformed arguments.")
	}
	space := objects.Space(c.Registry, c.Tenant)
	ctx = objects.WithWait(ctx, c.Wait)
	switch op {
	case "head":
		info, found, err := o.Buckets.Head(ctx, space, a.Key)
		if err != nil || !found {
			return json.RawMessage("null"), err
		}
		return wirejson.Marshal(infoOf(info, true))
	case "get":
		return o.get(ctx, c, space, a)
	case "list":
		return o.list(ctx, space, a)
	case "delete":
		keys := a.Keys
		if keys == nil {
			keys = []string{a.Key}
		}
		return json.RawMessage("null"), o.Buckets.Delete(ctx, space, keys...)
	case "put", "upload":
		return o.put(ctx, c, space, a)
	case "write":
		return o.write(ctx, c, a)
	}
	return nil, fault.New(fault.BadRequest, "Unknown host call %q.", c.Op)
}

func (o *Objects) get(ctx context.Context, c Call, space string, a objectArgs) (json.RawMessage, error) {
	onlyIf, err := a.OnlyIf.parse()
	if err != nil {
		return nil, err
	}
	var r *objects.Range
	if a.Range != nil {
		r = &objects.Range{Length: -1}
		switch {
		case a.Range.Suffix != nil:
			if a.Range.Offset != nil || a.Range.Length != nil || *a.Range.Suffix <= 0 {
				return nil, bad("bucket.get: a range is {offset, length} or {suffix}, a suffix above 0.")
			}
			r.Suffix = *a.Range.Suffix
		default:
			if a.Range.Offset != nil {
				r.Offset = *a.Range.Offset
			}
			if a.Range.Length != nil {
				r.Length = *a.Range.Length
			}
			if r.Offset < 0 || a.Range.Length != nil && r.Length < 0 {
				return nil, bad("bucket.get: a range's offset and length are not negative.")
			}
		}
	}
	info, body, found, err := o.Buckets.Get(ctx, space, a.Key, objects.GetOptions{Range: r, OnlyIf: onlyIf})
	if errors.Is(err, objects.ErrRange) {
		return nil, bad("bucket.get: the range is not satisfiable (the object is %d bytes).", info.Size)
	}
	if err != nil || !found {
		return json.RawMessage("null"), err
	}
	ans := struct {
		objectInfo
		Range  [2]int64 `json:"range"`
		Body   bool     `json:"body"`
		Data   *string  `json:"data,omitempty"`
		Stream string   `json:"stream,omitempty"`
	}{objectInfo: infoOf(info, true)}
	if body == nil {
		return wirejson.Marshal(ans)
	}
	off, n := r.Resolve(info.Size)
	ans.Range, ans.Body = [2]int64{off, n}, true
	if n <= inlineObject {
		defer body.Close()
		buf, err := io.ReadAll(io.LimitReader(body, inlineObject))
		if err != nil {
			return nil, fault.New(fault.Internal, "bucket.get: reading the object failed.")
		}
		s := wirejson.Latin1(buf)
		ans.Data = &s
		return wirejson.Marshal(ans)
	}
	p, err := o.Streams.reserve(ctx, c.ExecutionID, c.Tenant)
	if err != nil {
		body.Close()
		return nil, err
	}
	defer p.done()
	ans.Stream = o.Streams.putObject(p, body)
	return wirejson.Marshal(ans)
}

func (o *Objects) list(ctx context.Context, space string, a objectArgs) (json.RawMessage, error) {
	page, err := o.Buckets.List(ctx, space, objects.ListOptions{Prefix: a.Prefix, Delimiter: a.Delimiter, Cursor: a.Cursor, Limit: a.Limit})
	if err != nil {
		return nil, err
	}
	ans := struct {
		Objects   []objectInfo `json:"objects"`
		Truncated bool         `json:"truncated"`
		Cursor    string       `json:"cursor,omitempty"`
		Prefixes  []string     `json:"delimitedPrefixes"`
	}{Objects: []objectInfo{}, Truncated: page.Truncated, Cursor: page.Cursor, Prefixes: page.DelimitedPrefixes}
	if ans.Prefixes == nil {
		ans.Prefixes = []string{}
	}
	for _, i := range page.Objects {
		ans.Objects = append(ans.Objects, infoOf(i, a.Meta))
	}
	return wirejson.Marshal(ans)
}

// put stores a body given whole (data or text), the handler's request
// body (objects.upload: the visitor's time), an unread fetch answer, or
// begins a chunked upload.
func (o *Objects) put(ctx context.Context, c Call, space string, a objectArgs) (json.RawMessage, error) {
	onlyIf, err := a.OnlyIf.parse()
	if err != nil {
		return nil, err
	}
	opts := objects.PutOptions{HTTPMetadata: a.HTTP, CustomMetadata: a.Custom, OnlyIf: onlyIf, Size: -1}
	var body io.Reader
	switch {
	case a.Upload:
		return o.begin(c, space, a.Key, opts)
	case a.Body != "":
		if c.RequestBody == nil {
			return nil, bad("bucket.put: the request body is no longer readable (its invocation has ended).")
		}
		rc, err := c.RequestBody(a.Body)
		if err != nil {
			return nil, err
		}
		defer rc.Close()
		body = rc
	case a.Fetch != "":
		rc, err := o.Streams.Take(a.Fetch, c.ExecutionID)
		if err != nil {
			return nil, bad("bucket.put: the fetch body is no longer readable.")
		}
		defer rc.Close()
		body = rc
	case a.Text != nil:
		body = strings.NewReader(*a.Text)
		opts.Size, opts.Buffered = int64(len(*a.Text)), true
	case a.Data != nil:
		b := wirejson.Latin1Bytes(*a.Data)
		body = strings.NewReader(string(b))
		opts.Size, opts.Buffered = int64(len(b)), true
	default:
		body = strings.NewReader("")
		opts.Size, opts.Buffered = 0, true
	}
	return o.store(ctx, space, a.Key, body, opts)
}

func (o *Objects) store(ctx context.Context, space, key string, body io.Reader, opts objects.PutOptions) (json.RawMessage, error) {
	info, ok, err := o.Buckets.Put(ctx, space, key, body, opts)
	if err != nil {
		if f := fault.As(err); f != nil && f.Code != fault.Internal {
			return nil, err
		}
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		return nil, bad("bucket.put failed: %v; the old object, if any, is unchanged.", err)
	}
	if !ok {
		return json.RawMessage("null"), nil
	}
	return wirejson.Marshal(infoOf(info, true))
}

// begin starts a chunked upload: the put runs on its own goroutine,
// reading a pipe the chunks are written to.
func (o *Objects) begin(c Call, space, key string, opts objects.PutOptions) (json.RawMessage, error) {
	if err := objects.CheckKey(key); err != nil {
		return nil, err
	}
	o.mu.Lock()
	if o.uploads == nil {
		o.uploads, o.byTenant = map[string]*upload{}, map[string]int{}
	}
	switch {
	case o.byTenant[c.Tenant] >= budgets.ObjectUploadsPerTenant:
		o.mu.Unlock()
		return nil, fault.New(fault.QuotaExceeded, "The tenant has %d bucket.put streams under way, the most it may.", budgets.ObjectUploadsPerTenant)
	case len(o.uploads) >= budgets.ObjectUploads:
		o.mu.Unlock()
		return nil, fault.New(fault.Overloaded, "Too many bucket.put streams are under way on this gateway.")
	}
	var b [16]byte
	rand.Read(b[:])
	token := hex.EncodeToString(b[:])
	pr, pw := io.Pipe()
	up := &upload{owner: c.ExecutionID, tenant: c.Tenant, pw: pw, result: make(chan putResult, 1)}
	o.uploads[token] = up
	o.byTenant[c.Tenant]++
	o.mu.Unlock()
	ctx, cancel := context.WithCancel(context.Background())
	up.idle = time.AfterFunc(uploadIdle, func() {
		pw.CloseWithError(errors.New("the upload received nothing for 30s"))
		o.drop(token)
	})
	o.storing.Add(1)
	go func() {
		defer o.storing.Done()
		defer cancel()
		ans, err := o.store(ctx, space, key, pr, opts)
		// A put that ends before the body does (a failed condition, a
		// bound) fails the chunks still to come.
		pr.CloseWithError(errPutEnded)
		up.result <- putResult{ans, err}
	}()
	return wirejson.Marshal(map[string]string{"upload": token})
}

var errPutEnded = errors.New("the put has ended")

// DropOwner abandons the chunked puts run owner left unfinished (its run
// ended): each old object stays. A handle's, whose invocations share its
// id, end by their idle bound instead.
func (o *Objects) DropOwner(owner string) {
	o.mu.Lock()
	var ups []*upload
	for token, up := range o.uploads {
		if up.owner == owner {
			ups = append(ups, up)
			delete(o.uploads, token)
			if o.byTenant[up.tenant]--; o.byTenant[up.tenant] <= 0 {
				delete(o.byTenant, up.tenant)
			}
		}
	}
	o.mu.Unlock()
	for _, up := range ups {
		up.idle.Stop()
		up.pw.CloseWithError(errors.New("the run ended before its put did"))
	}
}

func (o *Objects) drop(token string) {
	o.mu.Lock()
	if up := o.uploads[token]; up != nil {
		delete(o.uploads, token)
		if o.byTenant[up.tenant]--; o.byTenant[up.tenant] <= 0 {
			delete(o.byTenant, up.tenant)
		}
	}
	o.mu.Unlock()
}

// write takes one chunk of an upload; the last (done) answers the put.
func (o *Objects) write(ctx context.Context, c Call, a objectArgs) (json.RawMessage, error) {
	o.mu.Lock()
	up := o.uploads[a.Stream]
	o.mu.Unlock()
	if up == nil || up.owner != c.ExecutionID {
		return nil, bad("bucket.put: the upload is gone (finished, failed, or idle for %v).", uploadIdle)
	}
	up.mu.Lock()
	defer up.mu.Unlock()
	if up.done {
		return nil, bad("bucket.put: the upload is finished.")
	}
	up.idle.Reset(uploadIdle)
	if a.Abort {
		up.pw.CloseWithError(errors.New("the program's stream failed"))
	}
	finish := func() (json.RawMessage, error) {
		up.done = true
		up.idle.Stop()
		o.drop(a.Stream)
		select {
		case r := <-up.result:
			if r.err != nil {
				return nil, r.err
			}
			return wirejson.Marshal(map[string]any{"done": true, "object": r.ans})
		case <-ctx.Done():
			up.pw.CloseWithError(ctx.Err())
			return nil, ctx.Err()
		}
	}
	if a.Abort {
		finish()
		return json.RawMessage("null"), nil
	}
	if a.Data != nil && len(*a.Data) > 0 {
		// The run's end (ctx) abandons the upload: the old object stays.
		stop := context.AfterFunc(ctx, func() { up.pw.CloseWithError(ctx.Err()) })
		_, err := up.pw.Write(wirejson.Latin1Bytes(*a.Data))
		stop()
		if err != nil {
			return finish()
		}
	}
	if !a.Done {
		return json.RawMessage("{}"), nil
	}
	up.pw.Close()
	return finish()
}
