// Package objectstest is the objects backend contract as tests: every
// backend of package objects (files under a directory, an S3-compatible
// service started by its test) runs Run, so the bucket above them can
// rely on the same answers from each (docs/objects.md).
package objectstest

import (
	"bytes"
	"context"
	"crypto/md5"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	mrand "math/rand/v2"
	"reflect"
	"runtime"
	"slices"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/retainer-gw/retainer/objects"
)

// Run runs the contract against a backend. open answers a backend on the
// same data each time it is called (another handle, as another gateway
// of a cluster would hold): the suite uses two where it tests what one
// writer's put shows another. Each test works in spaces of its own, so
// open may answer handles on data other tests also use.
func Run(t *testing.T, open func() objects.Backend) {
	for _, c := range []struct {
		name string
		test func(*testing.T, func() objects.Backend)
	}{
		{"PutGetHead", testPutGetHead},
		{"Overwrite", testOverwrite},
		{"NotFound", testNotFound},
		{"Delete", testDelete},
		{"Metadata", testMetadata},
		{"Keys", testKeys},
		{"List", testList},
		{"ListDelimiter", testListDelimiter},
		{"ListPages", testListPages},
		{"ListBadCursor", testListBadCursor},
		{"Range", testRange},
		{"AtomicFailingBody", testAtomicFailingBody},
		{"AtomicCancelled", testAtomicCancelled},
		{"AtomicReaders", testAtomicReaders},
		{"Large", testLarge},
		{"ManySmallPuts", testManySmallPuts},
		{"SpacesApart", testSpacesApart},
		{"TwoHandles", testTwoHandles},
	} {
		t.Run(c.name, func(t *testing.T) { c.test(t, open) })
	}
}

var ctx = context.Background()

// space is a space name no other test (or earlier run on the same
// service) uses.
func space(t *testing.T) string {
	var b [4]byte
	rand.Read(b[:])
	return strings.ReplaceAll(t.Name(), "/", ".") + "-" + hex.EncodeToString(b[:])
}

func md5hex(b []byte) string {
	s := md5.Sum(b)
	return hex.EncodeToString(s[:])
}

func random(n int) []byte {
	b := make([]byte, n)
	rand.Read(b)
	return b
}

func put(t *testing.T, b objects.Backend, sp, key string, body []byte, meta objects.Info) objects.Info {
	t.Helper()
	i, err := b.Put(ctx, sp, key, bytes.NewReader(body), meta)
	if err != nil {
		t.Fatalf("put %q: %v", key, err)
	}
	return i
}

func get(t *testing.T, b objects.Backend, sp, key string, r *objects.Range) (objects.Info, []byte) {
	t.Helper()
	i, rc, err := b.Get(ctx, sp, key, r)
	if err != nil {
		t.Fatalf("get %q %+v: %v", key, r, err)
	}
	defer rc.Close()
	body, err := io.ReadAll(rc)
	if err != nil {
		t.Fatalf("reading %q: %v", key, err)
	}
	return i, body
}

// sameInfo compares what every backend must answer alike (empty and nil
// maps are the same).
func sameInfo(t *testing.T, what string, got, want objects.Info) {
	t.Helper()
	norm := func(m map[string]string) map[string]string {
		if len(m) == 0 {
			return nil
		}
		return m
	}
	if got.Key != want.Key || got.Size != want.Size || got.ETag != want.ETag || got.Version != want.Version ||
		!got.Uploaded.Equal(want.Uploaded) ||
		!reflect.DeepEqual(norm(got.HTTPMetadata), norm(want.HTTPMetadata)) ||
		!reflect.DeepEqual(norm(got.CustomMetadata), norm(want.CustomMetadata)) {
		t.Errorf("%s: got %+v, want %+v", what, got, want)
	}
}

func testPutGetHead(t *testing.T, open func() objects.Backend) {
	b, sp := open(), space(t)
	body := random(1000)
	before := time.Now().Add(-time.Second)
	p := put(t, b, sp, "a.txt", body, objects.Info{})
	after := time.Now().Add(time.Second)
	if p.Key != "a.txt" || p.Size != 1000 || p.ETag != md5hex(body) || p.Version == "" {
		t.Errorf("put answered %+v", p)
	}
	if p.Uploaded.Before(before) || p.Uploaded.After(after) {
		t.Errorf("uploaded %v is not between %v and %v", p.Uploaded, before, after)
	}
	h, err := b.Head(ctx, sp, "a.txt")
	if err != nil {
		t.Fatal(err)
	}
	sameInfo(t, "head", h, p)
	g, got := get(t, b, sp, "a.txt", nil)
	sameInfo(t, "get", g, p)
	if !bytes.Equal(got, body) {
		t.Error("get answered other bytes")
	}
	// The empty object is an object.
	e := put(t, b, sp, "empty", nil, objects.Info{})
	if e.Size != 0 || e.ETag != md5hex(nil) {
		t.Errorf("empty object: %+v", e)
	}
	if _, got := get(t, b, sp, "empty", nil); len(got) != 0 {
		t.Errorf("empty object read %d bytes", len(got))
	}
}

func testOverwrite(t *testing.T, open func() objects.Backend) {
	b, sp := open(), space(t)
	first := put(t, b, sp, "k", []byte("first"), objects.Info{CustomMetadata: map[string]string{"n": "1"}})
	second := put(t, b, sp, "k", []byte("second!"), objects.Info{})
	if second.Version == first.Version || second.ETag == first.ETag {
		t.Errorf("an overwrite kept the version or etag: %+v then %+v", first, second)
	}
	i, got := get(t, b, sp, "k", nil)
	if string(got) != "second!" {
		t.Errorf("read %q after an overwrite", got)
	}
	sameInfo(t, "overwritten", i, second)
}

func testNotFound(t *testing.T, open func() objects.Backend) {
	b, sp := open(), space(t)
	if _, err := b.Head(ctx, sp, "nothing"); !errors.Is(err, objects.ErrNotFound) {
		t.Errorf("head of a missing key: %v", err)
	}
	if _, rc, err := b.Get(ctx, sp, "nothing", nil); !errors.Is(err, objects.ErrNotFound) {
		if rc != nil {
			rc.Close()
		}
		t.Errorf("get of a missing key: %v", err)
	}
	if _, rc, err := b.Get(ctx, sp, "nothing", &objects.Range{Offset: 2, Length: 3}); !errors.Is(err, objects.ErrNotFound) {
		if rc != nil {
			rc.Close()
		}
		t.Errorf("ranged get of a missing key: %v", err)
	}
	if err := b.Delete(ctx, sp, "nothing"); err != nil {
		t.Errorf("deleting a missing key: %v", err)
	}
	p, err := b.List(ctx, sp, objects.ListOptions{})
	if err != nil || len(p.Objects) != 0 || len(p.DelimitedPrefixes) != 0 || p.Truncated {
		t.Errorf("listing an empty space: %+v, %v", p, err)
	}
}

func testDelete(t *testing.T, open func() objects.Backend) {
	b, sp := open(), space(t)
	for _, k := range []string{"a", "b", "c", "d"} {
		put(t, b, sp, k, []byte(k), objects.Info{})
	}
	if err := b.Delete(ctx, sp, "a"); err != nil {
		t.Fatal(err)
	}
	if err := b.Delete(ctx, sp, "b", "c", "missing"); err != nil {
		t.Fatal(err)
	}
	for _, k := range []string{"a", "b", "c"} {
		if _, err := b.Head(ctx, sp, k); !errors.Is(err, objects.ErrNotFound) {
			t.Errorf("%q after delete: %v", k, err)
		}
	}
	if _, got := get(t, b, sp, "d", nil); string(got) != "d" {
		t.Errorf("the bystander key reads %q", got)
	}
	if keys := listAll(t, b, sp, objects.ListOptions{}); !slices.Equal(keys, []string{"d"}) {
		t.Errorf("list after deletes: %q", keys)
	}
}

func testMetadata(t *testing.T, open func() objects.Backend) {
	b, sp := open(), space(t)
	meta := objects.Info{
		HTTPMetadata: map[string]string{"contentType": "text/plain; charset=utf-8", "contentDisposition": `attachment; filename="ü.txt"`, "cacheControl": "max-age=60"},
		CustomMetadata: map[string]string{
			"Owner": "ada", "owner": "lovelace", "emoji": "🦀 ünïcödé\nnewline", "empty": "",
			"spaces in key": "  padded  ", "quote\"": "\"'<>&",
		},
	}
	p := put(t, b, sp, "m", []byte("x"), meta)
	if !reflect.DeepEqual(p.HTTPMetadata, meta.HTTPMetadata) || !reflect.DeepEqual(p.CustomMetadata, meta.CustomMetadata) {
		t.Errorf("put answered metadata %+v", p)
	}
	h, err := b.Head(ctx, sp, "m")
	if err != nil {
		t.Fatal(err)
	}
	sameInfo(t, "head", h, p)
	g, _ := get(t, b, sp, "m", &objects.Range{Suffix: 1})
	sameInfo(t, "get", g, p)
	l, err := b.List(ctx, sp, objects.ListOptions{})
	if err != nil || len(l.Objects) != 1 {
		t.Fatalf("list: %+v, %v", l, err)
	}
	sameInfo(t, "list", l.Objects[0], p)
	// An overwrite without metadata has none.
	put(t, b, sp, "m", []byte("y"), objects.Info{})
	if h, _ := b.Head(ctx, sp, "m"); len(h.HTTPMetadata)+len(h.CustomMetadata) != 0 {
		t.Errorf("metadata survived an overwrite: %+v", h)
	}
}

// keys are keys an R2 bucket takes: any UTF-8, slashes and dots
// anywhere. (The longest is 900 bytes, with no slash: an S3 backend's
// names are at most 1,024 bytes, its prefix and the space included.)
var keys = []string{
	"plain", "with space", "ünïcödé/ключ", "emoji 🦀", "a+b=c&d?e#f", "percent%2Fslash", "x/y/z.txt",
	"trailing/", "trailing/x", "trailing", "dots/../up", "dot/./here", ".", "..", "...", "./x", "x/..", "x/../",
	"double//slash", "/leading", "//", "/", "tab\there", "ctl\x01\x01.", "ctl\x01/./", strings.Repeat("long", 225),
	// A service may read a backslash as a "/" or refuse a NUL or a line break:
	// each is a key of its own.
	"docs/report", "docs\\report", "\\", "\\/", "a\\\\b", "\\\x01", "nul\x00byte", "nul", "\x00", "cr\rlf\n", "\x02\x03",
}

func testKeys(t *testing.T, open func() objects.Backend) {
	b, sp := open(), space(t)
	for i, k := range keys {
		put(t, b, sp, k, []byte(fmt.Sprint(i)), objects.Info{})
	}
	for n, k := range keys {
		if i, got := get(t, b, sp, k, nil); string(got) != fmt.Sprint(n) || i.Key != k {
			t.Errorf("%q reads %q as %+v, want %q", k, got, i, fmt.Sprint(n))
		}
	}
	// Listed once each. (Byte order is List's test: a backend on a
	// service that keeps files may store these keys marked, and list one
	// with a "." segment before a sibling that goes on with a byte below
	// "/".)
	want := slices.Clone(keys)
	sort.Strings(want)
	got := listAll(t, b, sp, objects.ListOptions{})
	sort.Strings(got)
	if !slices.Equal(got, want) {
		t.Errorf("list: %q\nwant %q", got, want)
	}
	// A prefix or a delimiter that ends inside such a segment.
	if got := listAll(t, b, sp, objects.ListOptions{Prefix: "dot/."}); !slices.Equal(got, []string{"dot/./here"}) {
		t.Errorf("prefix dot/.: %q", got)
	}
	if got := listAll(t, b, sp, objects.ListOptions{Prefix: "trailing/"}); !slices.Equal(got, []string{"trailing/", "trailing/x"}) {
		t.Errorf("prefix trailing/: %q", got)
	}
	got = listAll(t, b, sp, objects.ListOptions{Prefix: "x/", Delimiter: "/"})
	sort.Strings(got)
	if !slices.Equal(got, []string{"x/..", "x/../", "x/y/"}) {
		t.Errorf("prefix x/ delimiter /: %q", got)
	}
	got = listAll(t, b, sp, objects.ListOptions{Prefix: "/", Delimiter: "/"})
	sort.Strings(got)
	if !slices.Equal(got, []string{"/", "//", "/leading"}) {
		t.Errorf("prefix / delimiter /: %q", got)
	}
}

// listAll reads every page (of o.Limit keys) and answers the keys and
// delimited prefixes in the order given, checking that no page repeats
// an entry.
func listAll(t *testing.T, b objects.Backend, sp string, o objects.ListOptions) []string {
	t.Helper()
	var out []string
	seen := map[string]bool{}
	for pages := 0; ; pages++ {
		if pages > 10000 {
			t.Fatal("list never ends")
		}
		p, err := b.List(ctx, sp, o)
		if err != nil {
			t.Fatalf("list %+v: %v", o, err)
		}
		if o.Limit > 0 && len(p.Objects)+len(p.DelimitedPrefixes) > o.Limit {
			t.Errorf("a page of %d entries past the limit %d", len(p.Objects)+len(p.DelimitedPrefixes), o.Limit)
		}
		var page []string
		for _, i := range p.Objects {
			page = append(page, i.Key)
		}
		page = append(page, p.DelimitedPrefixes...)
		sort.Strings(page)
		for _, k := range page {
			if seen[k] {
				t.Errorf("%q listed twice", k)
			}
			seen[k] = true
		}
		out = append(out, page...)
		if !p.Truncated {
			if p.Cursor != "" {
				t.Errorf("the last page has a cursor %q", p.Cursor)
			}
			return out
		}
		if p.Cursor == "" {
			t.Fatal("a truncated page without a cursor")
		}
		o.Cursor = p.Cursor
	}
}

func testList(t *testing.T, open func() objects.Backend) {
	b, sp := open(), space(t)
	// Byte order: upper case before lower, ASCII before UTF-8's multibyte.
	all := []string{"B", "a", "a/1", "a/2", "ab", "b", "z", "é"}
	for _, k := range []string{"z", "é", "b", "ab", "a/2", "a/1", "a", "B"} {
		put(t, b, sp, k, []byte(k), objects.Info{})
	}
	p, err := b.List(ctx, sp, objects.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, i := range p.Objects {
		got = append(got, i.Key)
		if i.Size != int64(len(i.Key)) || i.ETag != md5hex([]byte(i.Key)) || i.Uploaded.IsZero() {
			t.Errorf("listed %+v", i)
		}
	}
	if !slices.Equal(got, all) || p.Truncated || p.Cursor != "" {
		t.Errorf("list: %q (truncated %v, cursor %q), want %q", got, p.Truncated, p.Cursor, all)
	}
	if got := listAll(t, b, sp, objects.ListOptions{Prefix: "a"}); !slices.Equal(got, []string{"a", "a/1", "a/2", "ab"}) {
		t.Errorf("prefix a: %q", got)
	}
	if got := listAll(t, b, sp, objects.ListOptions{Prefix: "a/"}); !slices.Equal(got, []string{"a/1", "a/2"}) {
		t.Errorf("prefix a/: %q", got)
	}
	if got := listAll(t, b, sp, objects.ListOptions{Prefix: "nothing"}); len(got) != 0 {
		t.Errorf("prefix nothing: %q", got)
	}
}

func testListDelimiter(t *testing.T, open func() objects.Backend) {
	b, sp := open(), space(t)
	for _, k := range []string{"photos/2024/a.jpg", "photos/2024/b.jpg", "photos/2025/c.jpg", "photos/top.jpg", "readme", "videos/v.mp4", "photos/"} {
		put(t, b, sp, k, []byte(k), objects.Info{})
	}
	p, err := b.List(ctx, sp, objects.ListOptions{Delimiter: "/"})
	if err != nil {
		t.Fatal(err)
	}
	var objs []string
	for _, i := range p.Objects {
		objs = append(objs, i.Key)
	}
	if !slices.Equal(objs, []string{"readme"}) || !slices.Equal(p.DelimitedPrefixes, []string{"photos/", "videos/"}) {
		t.Errorf("delimiter /: objects %q prefixes %q", objs, p.DelimitedPrefixes)
	}
	p, err = b.List(ctx, sp, objects.ListOptions{Prefix: "photos/", Delimiter: "/"})
	if err != nil {
		t.Fatal(err)
	}
	objs = nil
	for _, i := range p.Objects {
		objs = append(objs, i.Key)
	}
	if !slices.Equal(objs, []string{"photos/", "photos/top.jpg"}) || !slices.Equal(p.DelimitedPrefixes, []string{"photos/2024/", "photos/2025/"}) {
		t.Errorf("prefix photos/ delimiter /: objects %q prefixes %q", objs, p.DelimitedPrefixes)
	}
	// Pages of one entry: each delimited prefix once, however many keys
	// it rolls up.
	got := listAll(t, b, sp, objects.ListOptions{Delimiter: "/", Limit: 1})
	if !slices.Equal(got, []string{"photos/", "readme", "videos/"}) {
		t.Errorf("delimiter / by pages of 1: %q", got)
	}
	got = listAll(t, b, sp, objects.ListOptions{Prefix: "photos/", Delimiter: "/", Limit: 1})
	if !slices.Equal(got, []string{"photos/", "photos/2024/", "photos/2025/", "photos/top.jpg"}) {
		t.Errorf("prefix photos/ delimiter / by pages of 1: %q", got)
	}
	// Another delimiter than "/".
	got = listAll(t, b, sp, objects.ListOptions{Delimiter: "2"})
	if !slices.Equal(got, []string{"photos/", "photos/2", "photos/top.jpg", "readme", "videos/v.mp4"}) {
		t.Errorf("delimiter 2: %q", got)
	}
}

func testListPages(t *testing.T, open func() objects.Backend) {
	b, sp := open(), space(t)
	var want []string
	for i := range 23 {
		k := fmt.Sprintf("k%03d", i)
		if i%5 == 0 {
			k = fmt.Sprintf("dir%d/k", i)
		}
		want = append(want, k)
		put(t, b, sp, k, []byte(k), objects.Info{})
	}
	sort.Strings(want)
	for _, limit := range []int{1, 2, 5, 22, 23, 24, 1000} {
		if got := listAll(t, b, sp, objects.ListOptions{Limit: limit}); !slices.Equal(got, want) {
			t.Errorf("limit %d: %q", limit, got)
		}
	}
	p, err := b.List(ctx, sp, objects.ListOptions{Limit: 23})
	if err != nil || p.Truncated || len(p.Objects) != 23 {
		t.Errorf("a page exactly the size of the space: %d objects, truncated %v, %v", len(p.Objects), p.Truncated, err)
	}
	// A cursor from a page, then the rest after a key is added behind it
	// and one ahead of it.
	p, err = b.List(ctx, sp, objects.ListOptions{Limit: 10})
	if err != nil || !p.Truncated {
		t.Fatalf("first page: %+v %v", p, err)
	}
	put(t, b, sp, "a-before", nil, objects.Info{})
	put(t, b, sp, "zz-after", nil, objects.Info{})
	rest := listAll(t, b, sp, objects.ListOptions{Limit: 7, Cursor: p.Cursor})
	if !slices.Equal(rest, append(slices.Clone(want[10:]), "zz-after")) {
		t.Errorf("the pages after the cursor: %q", rest)
	}
}

// A cursor no page gave is ErrBadCursor, which the bucket answers as
// BAD_REQUEST (not a failure of the service).
func testListBadCursor(t *testing.T, open func() objects.Backend) {
	b, sp := open(), space(t)
	put(t, b, sp, "k", []byte("v"), objects.Info{})
	for _, c := range []string{"!!!", "%", "not base64 *"} {
		if _, err := b.List(ctx, sp, objects.ListOptions{Cursor: c}); !errors.Is(err, objects.ErrBadCursor) {
			t.Errorf("cursor %q: %v, want ErrBadCursor", c, err)
		}
	}
}

func testRange(t *testing.T, open func() objects.Backend) {
	b, sp := open(), space(t)
	body := []byte("0123456789abcdefghij")
	p := put(t, b, sp, "r", body, objects.Info{})
	for _, c := range []struct {
		r    objects.Range
		want string
	}{
		{objects.Range{Offset: 0, Length: 5}, "01234"},
		{objects.Range{Offset: 5, Length: 5}, "56789"},
		{objects.Range{Offset: 15, Length: -1}, "fghij"},
		{objects.Range{Offset: 0, Length: -1}, string(body)},
		{objects.Range{Offset: 18, Length: 10}, "ij"},
		{objects.Range{Offset: 19, Length: 1}, "j"},
		{objects.Range{Offset: 20, Length: 5}, ""},
		{objects.Range{Offset: 100, Length: -1}, ""},
		{objects.Range{Offset: 3, Length: 0}, ""},
		{objects.Range{Suffix: 3}, "hij"},
		{objects.Range{Suffix: 20}, string(body)},
		{objects.Range{Suffix: 50}, string(body)},
	} {
		i, got := get(t, b, sp, "r", &c.r)
		if string(got) != c.want {
			t.Errorf("range %+v: %q, want %q", c.r, got, c.want)
		}
		// The Info is the whole object's, whatever part is read.
		sameInfo(t, fmt.Sprintf("range %+v", c.r), i, p)
	}
}

// failing gives n bytes, then fails.
type failing struct {
	n   int
	err error
}

func (f *failing) Read(p []byte) (int, error) {
	if f.n == 0 {
		return 0, f.err
	}
	n := min(len(p), f.n)
	for i := range p[:n] {
		p[i] = 'x'
	}
	f.n -= n
	return n, nil
}

func testAtomicFailingBody(t *testing.T, open func() objects.Backend) {
	b, sp := open(), space(t)
	old := random(3000)
	p := put(t, b, sp, "k", old, objects.Info{CustomMetadata: map[string]string{"v": "old"}})
	boom := errors.New("the visitor went away")
	// Short and long bodies: a backend may take them different ways.
	for _, n := range []int{0, 100, 7 << 20, 13 << 20} {
		if _, err := b.Put(ctx, sp, "k", &failing{n: n, err: boom}, objects.Info{}); err == nil {
			t.Errorf("a body failing after %d bytes was put", n)
		}
		i, got := get(t, b, sp, "k", nil)
		if !bytes.Equal(got, old) {
			t.Fatalf("after a body failing at %d bytes the object has %d bytes", n, len(got))
		}
		sameInfo(t, fmt.Sprintf("after a body failing at %d bytes", n), i, p)
		// A failed first put creates nothing.
		if _, err := b.Put(ctx, sp, "new", &failing{n: n, err: boom}, objects.Info{}); err == nil {
			t.Errorf("a new key's body failing after %d bytes was put", n)
		}
		if _, err := b.Head(ctx, sp, "new"); !errors.Is(err, objects.ErrNotFound) {
			t.Errorf("a failed put of a new key left %v", err)
		}
	}
}

// cancelling gives bytes and ends the context once it has given n.
type cancelling struct {
	n, given int
	cancel   func()
}

func (c *cancelling) Read(p []byte) (int, error) {
	if c.given >= c.n {
		c.cancel()
		time.Sleep(time.Millisecond)
	}
	for i := range p {
		p[i] = 'y'
	}
	c.given += len(p)
	return len(p), nil
}

func testAtomicCancelled(t *testing.T, open func() objects.Backend) {
	b, sp := open(), space(t)
	old := random(5000)
	p := put(t, b, sp, "k", old, objects.Info{})
	for _, n := range []int{1000, 6 << 20, 17 << 20} {
		c, cancel := context.WithCancel(ctx)
		_, err := b.Put(c, sp, "k", io.LimitReader(&cancelling{n: n, cancel: cancel}, 64<<20), objects.Info{})
		cancel()
		if err == nil {
			t.Errorf("a put cancelled after %d bytes succeeded", n)
		}
		i, got := get(t, b, sp, "k", nil)
		if !bytes.Equal(got, old) {
			t.Fatalf("after a put cancelled at %d bytes the object has %d bytes", n, len(got))
		}
		sameInfo(t, fmt.Sprintf("after a put cancelled at %d bytes", n), i, p)
	}
}

// testAtomicReaders reads while writers replace: every read is one
// written object whole, with its own Info.
func testAtomicReaders(t *testing.T, open func() objects.Backend) {
	b, sp := open(), space(t)
	var bodies [4][]byte
	written := map[string]bool{}
	for i := range bodies {
		bodies[i] = bytes.Repeat([]byte{byte('a' + i)}, 200<<10+i)
		written[md5hex(bodies[i])] = true
	}
	put(t, b, sp, "k", bodies[0], objects.Info{})
	var stop atomic.Bool
	var wg sync.WaitGroup
	for w := range 2 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; !stop.Load(); i++ {
				if _, err := b.Put(ctx, sp, "k", bytes.NewReader(bodies[(w+i)%4]), objects.Info{}); err != nil {
					t.Errorf("put: %v", err)
					return
				}
			}
		}()
	}
	reads := 0
	for deadline := time.Now().Add(2 * time.Second); time.Now().Before(deadline); reads++ {
		i, rc, err := b.Get(ctx, sp, "k", nil)
		if err != nil {
			t.Fatalf("get while replaced: %v", err)
		}
		got, err := io.ReadAll(rc)
		rc.Close()
		if err != nil {
			// A backend may end a read whose object was replaced; it
			// must not hand out a mix.
			continue
		}
		if h := md5hex(got); !written[h] || h != i.ETag || int64(len(got)) != i.Size {
			t.Fatalf("read %d bytes with md5 %s as %+v: not one written object", len(got), h, i)
		}
	}
	stop.Store(true)
	wg.Wait()
	t.Logf("%d reads", reads)
}

// testLarge puts an object many times larger than any buffer a backend
// should hold, from a reader that makes it as it goes, and checks that
// the Go heap did not hold it.
func testLarge(t *testing.T, open func() objects.Backend) {
	b, sp := open(), space(t)
	const size = 96 << 20
	src := func() io.Reader { return io.LimitReader(&pseudo{r: mrand.NewChaCha8([32]byte{7})}, size) }
	h := md5.New()
	io.Copy(h, src())
	want := hex.EncodeToString(h.Sum(nil))
	var p objects.Info
	var err error
	grew := HeapGrowth(func() { p, err = b.Put(ctx, sp, "big", src(), objects.Info{}) })
	if err != nil {
		t.Fatal(err)
	}
	if p.Size != size || p.ETag != want {
		t.Errorf("put answered %+v, want etag %s", p, want)
	}
	t.Logf("heap in use grew by %d MiB at most during a %d MiB put", grew>>20, size>>20)
	if grew > size/2 {
		t.Errorf("the heap grew by %d MiB during a %d MiB put", grew>>20, size>>20)
	}
	i, rc, err := b.Get(ctx, sp, "big", nil)
	if err != nil {
		t.Fatal(err)
	}
	h.Reset()
	n, err := io.Copy(h, rc)
	rc.Close()
	if err != nil || n != size || hex.EncodeToString(h.Sum(nil)) != want || i.ETag != want {
		t.Errorf("read back %d bytes (%v), md5 %x, info %+v", n, err, h.Sum(nil), i)
	}
	// A range deep inside.
	_, got := get(t, b, sp, "big", &objects.Range{Offset: size - (7 << 20), Length: 10})
	all, _ := io.ReadAll(io.LimitReader(src(), size-(7<<20)+10))
	if !bytes.Equal(got, all[len(all)-10:]) {
		t.Errorf("a range deep inside reads %x, want %x", got, all[len(all)-10:])
	}
}

type pseudo struct{ r *mrand.ChaCha8 }

func (p *pseudo) Read(b []byte) (int, error) { return p.r.Read(b) }

func testSpacesApart(t *testing.T, open func() objects.Backend) {
	b := open()
	base := space(t)
	// Spaces that share prefixes, slashes and other bytes.
	spaces := []string{base, base + "/x", base + "x", base + " x", base + "%2Fx", base + "/"}
	for i, sp := range spaces {
		put(t, b, sp, "k", []byte(fmt.Sprint(i)), objects.Info{})
		put(t, b, sp, "x/k", []byte(fmt.Sprint(i)), objects.Info{})
	}
	for i, sp := range spaces {
		if _, got := get(t, b, sp, "k", nil); string(got) != fmt.Sprint(i) {
			t.Errorf("space %q reads %q", sp, got)
		}
		if got := listAll(t, b, sp, objects.ListOptions{}); !slices.Equal(got, []string{"k", "x/k"}) {
			t.Errorf("space %q lists %q", sp, got)
		}
	}
	// Keys that climb out of their space on a file system reach nothing
	// of another.
	for _, k := range []string{"../" + spaces[2] + "/k", "/../" + spaces[2] + "/k", "../../" + spaces[2] + "/k", "..%2F" + spaces[2] + "%2Fk"} {
		put(t, b, spaces[0], k, []byte("climber"), objects.Info{})
		if _, got := get(t, b, spaces[2], "k", nil); string(got) != "2" {
			t.Errorf("a put of %q in %q made %q read %q", k, spaces[0], spaces[2], got)
		}
		if _, got := get(t, b, spaces[0], k, nil); string(got) != "climber" {
			t.Errorf("%q reads %q", k, got)
		}
		if err := b.Delete(ctx, spaces[0], k); err != nil {
			t.Fatal(err)
		}
	}
	if err := b.Delete(ctx, spaces[0], "k", "x/k"); err != nil {
		t.Fatal(err)
	}
	for i, sp := range spaces[1:] {
		if _, got := get(t, b, sp, "x/k", nil); string(got) != fmt.Sprint(i+1) {
			t.Errorf("after a delete in another space, %q reads %q", sp, got)
		}
	}
}

func testTwoHandles(t *testing.T, open func() objects.Backend) {
	one, two, sp := open(), open(), space(t)
	p := put(t, one, sp, "shared", []byte("written by one"), objects.Info{CustomMetadata: map[string]string{"by": "one"}})
	i, got := get(t, two, sp, "shared", nil)
	if string(got) != "written by one" {
		t.Errorf("the other handle reads %q", got)
	}
	sameInfo(t, "the other handle", i, p)
	if err := two.Delete(ctx, sp, "shared"); err != nil {
		t.Fatal(err)
	}
	if _, err := one.Head(ctx, sp, "shared"); !errors.Is(err, objects.ErrNotFound) {
		t.Errorf("deleted by the other handle: %v", err)
	}
}

// gate gives 1 KiB, then waits for open to close, then ends.
type gate struct {
	given  bool
	opened chan struct{}
	read   *sync.WaitGroup
}

func (g *gate) Read(p []byte) (int, error) {
	if !g.given {
		g.given = true
		n := min(len(p), 1024)
		clear(p[:n])
		return n, nil
	}
	g.read.Done()
	<-g.opened
	return 0, io.EOF
}

// testManySmallPuts holds 200 small puts in flight at once: a put holds
// memory for what it has read, not for the largest body it could take.
func testManySmallPuts(t *testing.T, open func() objects.Backend) {
	b, sp := open(), space(t)
	const n = 200
	runtime.GC()
	var base, held runtime.MemStats
	runtime.ReadMemStats(&base)
	opened := make(chan struct{})
	var read, done sync.WaitGroup
	read.Add(n)
	errs := make(chan error, n)
	for i := range n {
		done.Add(1)
		go func() {
			defer done.Done()
			_, err := b.Put(ctx, sp, fmt.Sprint("k", i), &gate{opened: opened, read: &read}, objects.Info{})
			errs <- err
		}()
	}
	read.Wait()
	runtime.ReadMemStats(&held)
	close(opened)
	done.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Fatal(err)
		}
	}
	grew := int64(held.HeapInuse) - int64(base.HeapInuse)
	t.Logf("%d puts in flight held %d MiB of heap", n, grew>>20)
	if grew > 64<<20 {
		t.Errorf("%d small puts in flight held %d MiB", n, grew>>20)
	}
	if got := listAll(t, b, sp, objects.ListOptions{}); len(got) != n {
		t.Errorf("%d objects listed", len(got))
	}
}

// HeapGrowth runs run and answers the most the Go heap in use grew above
// what it held before (sampled every 5 ms, after a GC): what a backend
// held of a body it streamed.
func HeapGrowth(run func()) int64 {
	runtime.GC()
	var base runtime.MemStats
	runtime.ReadMemStats(&base)
	var peak atomic.Uint64
	done := make(chan struct{})
	sampled := make(chan struct{})
	go func() {
		defer close(sampled)
		var m runtime.MemStats
		for {
			select {
			case <-done:
				return
			case <-time.After(5 * time.Millisecond):
			}
			runtime.ReadMemStats(&m)
			if m.HeapInuse > peak.Load() {
				peak.Store(m.HeapInuse)
			}
		}
	}()
	func() {
		defer close(done) // run may end its goroutine (t.Fatal)
		run()
	}()
	<-sampled
	return int64(peak.Load()) - int64(base.HeapInuse)
}
