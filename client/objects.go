package client

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
)

// Objects reaches a tenant's bucket through the control plane (the
// gateway's docs/objects.md, "Control plane"): GET /objects, and GET, PUT
// and DELETE /objects/{key}, as the token's tenant, in the registry of the
// API at API (e.g. https://api.example.com).
type Objects struct {
	API   string
	Token string
	// HTTP sends the requests; nil is http.DefaultClient.
	HTTP *http.Client
}

// ObjectInfo is an object as the control plane lists it.
type ObjectInfo struct {
	Key      string `json:"key"`
	Size     int64  `json:"size"`
	ETag     string `json:"etag"`
	Uploaded string `json:"uploaded,omitempty"`
}

// ObjectPage is one page of a listing; Cursor asks for the next when
// Truncated.
type ObjectPage struct {
	Objects   []ObjectInfo `json:"objects"`
	Truncated bool         `json:"truncated"`
	Cursor    string       `json:"cursor,omitempty"`
}

// Put stores body under key, streamed (up to the gateway's max_object); a
// put that fails leaves the old object. size is the body's length, or -1
// when it is not known (the body is then sent chunked).
func (o *Objects) Put(ctx context.Context, key string, body io.Reader, size int64) (ObjectInfo, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodPut, strings.TrimSuffix(o.API, "/")+o.path(key), body)
	if err != nil {
		return ObjectInfo{}, err
	}
	req.ContentLength = size
	res, err := finish(o.HTTP, o.Token, req)
	if err != nil {
		return ObjectInfo{}, err
	}
	defer res.Body.Close()
	var info ObjectInfo
	return info, json.NewDecoder(res.Body).Decode(&info)
}

// Get answers the object's bytes from offset on (length < 0: to its end;
// offset 0 and length < 0: the whole object); close it. A key that holds
// no object is an *Error of code NOT_FOUND.
func (o *Objects) Get(ctx context.Context, key string, offset, length int64) (io.ReadCloser, error) {
	h := http.Header{}
	switch {
	case length == 0:
		return io.NopCloser(strings.NewReader("")), nil
	case length > 0:
		h.Set("Range", fmt.Sprintf("bytes=%d-%d", offset, offset+length-1))
	case offset > 0:
		h.Set("Range", fmt.Sprintf("bytes=%d-", offset))
	}
	res, err := send(ctx, o.HTTP, o.API, o.Token, http.MethodGet, o.path(key), nil, h)
	if err != nil {
		return nil, err
	}
	return res.Body, nil
}

// List answers a page of the keys under prefix in byte order, from cursor
// ("" for the first page).
func (o *Objects) List(ctx context.Context, prefix, cursor string) (ObjectPage, error) {
	q := url.Values{"prefix": {prefix}}
	if cursor != "" {
		q.Set("cursor", cursor)
	}
	res, err := send(ctx, o.HTTP, o.API, o.Token, http.MethodGet, "/objects?"+q.Encode(), nil, nil)
	if err != nil {
		return ObjectPage{}, err
	}
	defer res.Body.Close()
	var page ObjectPage
	return page, json.NewDecoder(res.Body).Decode(&page)
}

// Delete removes the object under key (none there is no error).
func (o *Objects) Delete(ctx context.Context, key string) error {
	res, err := send(ctx, o.HTTP, o.API, o.Token, http.MethodDelete, o.path(key), nil, nil)
	if err != nil {
		return err
	}
	return res.Body.Close()
}

// path is a key's path, each segment escaped (a key's slashes stay
// slashes, as the control plane reads them).
func (o *Objects) path(key string) string {
	parts := strings.Split(key, "/")
	for i, p := range parts {
		parts[i] = url.PathEscape(p)
	}
	return "/objects/" + strings.Join(parts, "/")
}
