package caddymodule

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"time"

	"go.uber.org/zap"

	"github.com/retainer-gw/retainer/authz"
	"github.com/retainer-gw/retainer/fault"
	"github.com/retainer-gw/retainer/objects"
	"github.com/retainer-gw/retainer/objects/files"
)

// openObjectsBackend is where the tenants' objects are kept
// (docs/objects.md): on one machine, files in a folder beside the store
// (under Caddy's data directory by default), or with `objects s3 {...}` in
// an S3-compatible service, which a cluster needs. The bucket's rules
// (openBuckets) are the same whatever the backend.
func openObjectsBackend(a *App) (objects.Backend, error) {
	if a.ObjectsS3 != nil {
		// Opening checks the service and creates the bucket when missing: a
		// start that cannot reach it fails, as a store that cannot open does.
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		sb, err := a.objectsS3Backend(ctx)
		if err != nil {
			return nil, fmt.Errorf("objects s3: %w", err)
		}
		return sb, nil
	}
	return files.Open(a.Store + ".objects")
}

// openBuckets is the tenants' buckets on the configured backend, within
// max_object and objects_quota.
func openBuckets(a *App) (*objects.Buckets, error) {
	b, err := openObjectsBackend(a)
	if err != nil {
		return nil, err
	}
	logf := func(op string, err error) {
		if a.logger != nil {
			a.logger.Warn("objects: the store failed", zap.String("op", op), zap.Error(err))
		}
	}
	return objects.New(b, objects.Options{MaxObject: a.MaxObject, Quota: a.ObjectsQuota, Log: logf}), nil
}

// controlWait bounds a control-plane object call's wait on the store
// (the bytes of a body already streaming have their own deadlines).
var controlWait = 30 * time.Second

// The control plane's /objects (docs/objects.md): the caller's bucket in
// this registry, as its owner (scope retainer:deploy when scopes are
// required). Keys are the path after /objects/, unescaped; a key with
// "." or ".." segments or repeated slashes is reached only from a program
// (net/http cleans such paths).

func (h *API) objectsSpace(w http.ResponseWriter, r *http.Request) (*objects.Buckets, string, bool) {
	b, space, _, ok := h.objectsTenant(w, r)
	return b, space, ok
}

// objectsTenant is objectsSpace and the caller's tenant.
func (h *API) objectsTenant(w http.ResponseWriter, r *http.Request) (*objects.Buckets, string, string, bool) {
	c, ok := h.authorize(w, r, authz.ScopeDeploy)
	if !ok {
		return nil, "", "", false
	}
	return h.runtime().objects, objects.Space(h.Registry, c.tenant), c.tenant, true
}

// objectsCtx is r's context within controlWait.
func objectsCtx(r *http.Request) context.Context {
	return objects.WithWait(r.Context(), controlWait)
}

// listObjects is GET /objects?prefix=&cursor=&delimiter=&limit=.
func (h *API) listObjects(w http.ResponseWriter, r *http.Request) {
	b, space, ok := h.objectsSpace(w, r)
	if !ok {
		return
	}
	q := r.URL.Query()
	o := objects.ListOptions{Prefix: q.Get("prefix"), Cursor: q.Get("cursor"), Delimiter: q.Get("delimiter")}
	if l := q.Get("limit"); l != "" {
		n, err := strconv.Atoi(l)
		if err != nil || n < 1 {
			writeFault(w, fault.New(fault.BadRequest, "limit is 1 to %d.", objects.MaxListLimit), "")
			return
		}
		o.Limit = n
	}
	page, err := b.List(objectsCtx(r), space, o)
	if err != nil {
		writeFault(w, err, "")
		return
	}
	type entry struct {
		Key      string `json:"key"`
		Size     int64  `json:"size"`
		ETag     string `json:"etag"`
		Uploaded string `json:"uploaded"`
	}
	ans := struct {
		Objects   []entry  `json:"objects"`
		Truncated bool     `json:"truncated"`
		Cursor    string   `json:"cursor,omitempty"`
		Prefixes  []string `json:"delimitedPrefixes,omitempty"`
	}{Objects: []entry{}, Truncated: page.Truncated, Cursor: page.Cursor, Prefixes: page.DelimitedPrefixes}
	for _, i := range page.Objects {
		ans.Objects = append(ans.Objects, entry{i.Key, i.Size, i.ETag, i.Uploaded.UTC().Format(time.RFC3339Nano)})
	}
	writeJSON(w, http.StatusOK, ans)
}

// parseRange reads a Range header of one range ("bytes=a-b", "bytes=a-",
// "bytes=-n"); ok false for one this answer ignores (several ranges, or
// another unit), as RFC 9110 allows.
func parseRange(h string) (r *objects.Range, ok bool) {
	spec, found := strings.CutPrefix(h, "bytes=")
	if !found || strings.Contains(spec, ",") {
		return nil, false
	}
	first, last, found := strings.Cut(strings.TrimSpace(spec), "-")
	if !found {
		return nil, false
	}
	if first == "" {
		n, err := strconv.ParseInt(last, 10, 64)
		if err != nil || n <= 0 {
			return nil, false
		}
		return &objects.Range{Suffix: n}, true
	}
	off, err := strconv.ParseInt(first, 10, 64)
	if err != nil || off < 0 {
		return nil, false
	}
	if last == "" {
		return &objects.Range{Offset: off, Length: -1}, true
	}
	end, err := strconv.ParseInt(last, 10, 64)
	if err != nil || end < off {
		return nil, false
	}
	return &objects.Range{Offset: off, Length: end - off + 1}, true
}

// getObject is GET /objects/{key}: the object's bytes, or with a Range
// header the part it names (206), streamed from storage.
func (h *API) getObject(w http.ResponseWriter, r *http.Request) {
	b, space, tenant, ok := h.objectsTenant(w, r)
	if !ok {
		return
	}
	key := r.PathValue("key")
	rng, partial := parseRange(r.Header.Get("Range"))
	info, body, found, err := b.Get(objectsCtx(r), space, key, objects.GetOptions{Range: rng})
	if errors.Is(err, objects.ErrRange) {
		head, _, _ := b.Head(objectsCtx(r), space, key)
		w.Header().Set("Content-Range", fmt.Sprintf("bytes */%d", head.Size))
		var env errorEnvelope
		env.Error.Code = fault.BadRequest
		env.Error.Message = fmt.Sprintf("The range is not satisfiable: the object is %d bytes.", head.Size)
		writeJSON(w, http.StatusRequestedRangeNotSatisfiable, env)
		return
	}
	if err == nil && !found {
		err = fault.New(fault.NotFound, "No object has this key.")
	}
	if err != nil {
		writeFault(w, err, "")
		return
	}
	defer body.Close()
	off, n := rng.Resolve(info.Size)
	hd := w.Header()
	// The tenant's bytes on the API's origin: never rendered there.
	hd.Set("Content-Type", "application/octet-stream")
	hd.Set("X-Content-Type-Options", "nosniff")
	hd.Set("Content-Security-Policy", "sandbox")
	hd.Set("Content-Disposition", "attachment")
	hd.Set("ETag", `"`+info.ETag+`"`)
	hd.Set("Last-Modified", info.Uploaded.UTC().Format(http.TimeFormat))
	hd.Set("Accept-Ranges", "bytes")
	hd.Set("Content-Length", strconv.FormatInt(n, 10))
	status := http.StatusOK
	if partial {
		status = http.StatusPartialContent
		hd.Set("Content-Range", fmt.Sprintf("bytes %d-%d/%d", off, off+n-1, info.Size))
	}
	w.WriteHeader(status)
	if r.Method != http.MethodHead {
		sent, _ := io.Copy(w, body)
		// The bytes are the tenant's egress (docs/usage.md).
		if u := h.runtime().usage.Load(); u != nil && sent > 0 {
			u.addEgress(logTenant(h.Registry, tenant), sent)
		}
	}
}

// putObject is PUT /objects/{key}: the request body streamed into the
// object, up to max_object; its Content-Type and the other httpMetadata
// headers are kept. 200 {key, size, etag}.
func (h *API) putObject(w http.ResponseWriter, r *http.Request) {
	b, space, ok := h.objectsSpace(w, r)
	if !ok {
		return
	}
	key := r.PathValue("key")
	meta := map[string]string{}
	for field, header := range map[string]string{"contentType": "Content-Type", "contentLanguage": "Content-Language", "contentDisposition": "Content-Disposition",
		"contentEncoding": "Content-Encoding", "cacheControl": "Cache-Control", "cacheExpiry": "Expires"} {
		if v := r.Header.Get(header); v != "" {
			meta[field] = v
		}
	}
	limit := b.Limits().MaxObject
	body := http.MaxBytesReader(w, r.Body, limit)
	info, _, err := b.Put(objectsCtx(r), space, key, body, objects.PutOptions{HTTPMetadata: meta, Size: r.ContentLength})
	var tooBig *http.MaxBytesError
	if errors.As(err, &tooBig) {
		err = fault.New(fault.TooLarge, "An object is at most max_object (%d bytes): nothing was written.", limit)
	}
	if err != nil {
		if fault.As(err) == nil || fault.As(err).Code == fault.Internal {
			err = fault.New(fault.BadRequest, "The upload failed (%v): the old object, if any, is unchanged.", err)
		}
		w.Header().Set("Connection", "close")
		writeFault(w, err, "")
		return
	}
	writeJSON(w, http.StatusOK, map[string]any{"key": info.Key, "size": info.Size, "etag": info.ETag})
}

// deleteObject is DELETE /objects/{key}: 204, whether or not it was there.
func (h *API) deleteObject(w http.ResponseWriter, r *http.Request) {
	b, space, ok := h.objectsSpace(w, r)
	if !ok {
		return
	}
	if err := b.Delete(objectsCtx(r), space, r.PathValue("key")); err != nil {
		writeFault(w, err, "")
		return
	}
	w.WriteHeader(http.StatusNoContent)
}
