package files

import (
	"context"
	"crypto/md5"
	"encoding/hex"
	"errors"
	"io"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/retainer-gw/retainer/objects"
)

func put(t *testing.T, f *Files, space, key, body string) objects.Info {
	t.Helper()
	info, err := f.Put(context.Background(), space, key, strings.NewReader(body), objects.Info{Version: "v", CustomMetadata: map[string]string{"k": "v"}})
	if err != nil {
		t.Fatalf("put %s: %v", key, err)
	}
	return info
}

func read(t *testing.T, f *Files, space, key string, r *objects.Range) string {
	t.Helper()
	_, rc, err := f.Get(context.Background(), space, key, r)
	if err != nil {
		t.Fatalf("get %s: %v", key, err)
	}
	defer rc.Close()
	b, _ := io.ReadAll(rc)
	return string(b)
}

func TestPutGetRangeDelete(t *testing.T) {
	f, err := Open(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	info := put(t, f, "a", "dir/ü key", "hello world")
	sum := md5.Sum([]byte("hello world"))
	if info.Size != 11 || info.ETag != hex.EncodeToString(sum[:]) || info.Key != "dir/ü key" || info.Uploaded.IsZero() || info.Version != "v" {
		t.Fatalf("info: %+v", info)
	}
	if got := read(t, f, "a", "dir/ü key", nil); got != "hello world" {
		t.Fatalf("get: %q", got)
	}
	for _, c := range []struct {
		r    objects.Range
		want string
	}{{objects.Range{Offset: 6, Length: -1}, "world"}, {objects.Range{Offset: 0, Length: 5}, "hello"}, {objects.Range{Offset: 6, Length: 100}, "world"}, {objects.Range{Suffix: 3}, "rld"}, {objects.Range{Suffix: 100}, "hello world"}} {
		if got := read(t, f, "a", "dir/ü key", &c.r); got != c.want {
			t.Errorf("range %+v: %q, want %q", c.r, got, c.want)
		}
	}
	if got := read(t, f, "a", "dir/ü key", &objects.Range{Offset: 11, Length: 5}); got != "" {
		t.Fatalf("a range past the end: %q", got)
	}
	h, err := f.Head(context.Background(), "a", "dir/ü key")
	if err != nil || h.CustomMetadata["k"] != "v" || h.ETag != info.ETag {
		t.Fatalf("head: %+v %v", h, err)
	}
	if _, err := f.Head(context.Background(), "b", "dir/ü key"); !errors.Is(err, objects.ErrNotFound) {
		t.Fatalf("another space sees the key: %v", err)
	}
	if err := f.Delete(context.Background(), "a", "dir/ü key", "never"); err != nil {
		t.Fatal(err)
	}
	if _, err := f.Head(context.Background(), "a", "dir/ü key"); !errors.Is(err, objects.ErrNotFound) {
		t.Fatalf("after delete: %v", err)
	}
	// A space name with a path in it stays a folder of the root.
	put(t, f, "../x", "k", "in the root")
	if _, err := os.Stat(filepath.Join(filepath.Dir(f.root), "x")); err == nil {
		t.Fatal("a space name reached outside the root")
	}
	if _, err := f.Head(context.Background(), "x", "k"); !errors.Is(err, objects.ErrNotFound) {
		t.Fatalf("../x and x are one space: %v", err)
	}
}

type failing struct {
	n int
}

func (r *failing) Read(p []byte) (int, error) {
	if r.n <= 0 {
		return 0, errors.New("the visitor went away")
	}
	n := min(len(p), r.n)
	for i := range p[:n] {
		p[i] = 'x'
	}
	r.n -= n
	return n, nil
}

// TestPutIsAtomic: a put whose body fails or whose context ends leaves
// the old object whole and no temporary file; a reader that opened the
// old object reads it whole while a new one replaces it.
func TestPutIsAtomic(t *testing.T) {
	dir := t.TempDir()
	f, _ := Open(dir)
	put(t, f, "s", "k", "old")
	if _, err := f.Put(context.Background(), "s", "k", &failing{n: 1 << 20}, objects.Info{}); err == nil {
		t.Fatal("a failing body was stored")
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := f.Put(ctx, "s", "k", strings.NewReader("new"), objects.Info{}); err == nil {
		t.Fatal("a cancelled put was stored")
	}
	if got := read(t, f, "s", "k", nil); got != "old" {
		t.Fatalf("after failed puts: %q", got)
	}
	tmps, _ := os.ReadDir(filepath.Join(dir, "s", "tmp"))
	if len(tmps) != 0 {
		t.Fatalf("temporary files left: %d", len(tmps))
	}
	_, rc, _ := f.Get(context.Background(), "s", "k", nil)
	put(t, f, "s", "k", "brand new")
	b, _ := io.ReadAll(rc)
	rc.Close()
	if string(b) != "old" {
		t.Fatalf("an open reader saw the new object: %q", b)
	}
	// Readers during many puts see one whole object or another.
	var wg sync.WaitGroup
	stop := make(chan struct{})
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			select {
			case <-stop:
				return
			default:
			}
			_, rc, err := f.Get(context.Background(), "s", "k", nil)
			if err != nil {
				t.Error(err)
				return
			}
			b, _ := io.ReadAll(rc)
			rc.Close()
			if s := string(b); s != strings.Repeat("a", 100000) && s != strings.Repeat("b", 100000) && s != "brand new" {
				t.Errorf("a torn read: %d bytes", len(s))
				return
			}
		}
	}()
	for i := 0; i < 20; i++ {
		put(t, f, "s", "k", strings.Repeat(string(rune('a'+i%2)), 100000))
	}
	close(stop)
	wg.Wait()
	// A new Files on the same folder finds the keys again.
	g, _ := Open(dir)
	if got := read(t, g, "s", "k", nil); len(got) != 100000 {
		t.Fatalf("reopened: %d bytes", len(got))
	}
	page, err := g.List(context.Background(), "s", objects.ListOptions{})
	if err != nil || len(page.Objects) != 1 || page.Objects[0].Key != "k" {
		t.Fatalf("reopened list: %+v %v", page, err)
	}
}

func keys(p objects.ListPage) string {
	var out []string
	for _, o := range p.Objects {
		out = append(out, o.Key)
	}
	return strings.Join(out, ",") + "|" + strings.Join(p.DelimitedPrefixes, ",")
}

func TestListOrderCursorDelimiter(t *testing.T) {
	f, _ := Open(t.TempDir())
	for _, k := range []string{"b", "a/2", "a/1", "a/sub/x", "c", "a", "B", "é", "a/sub/y", "ab"} {
		put(t, f, "s", k, k)
	}
	all, err := f.List(context.Background(), "s", objects.ListOptions{})
	if err != nil || keys(all) != "B,a,a/1,a/2,a/sub/x,a/sub/y,ab,b,c,é|" || all.Truncated {
		t.Fatalf("byte order: %s %v", keys(all), err)
	}
	var got []string
	cursor := ""
	for pages := 0; ; pages++ {
		p, err := f.List(context.Background(), "s", objects.ListOptions{Limit: 3, Cursor: cursor})
		if err != nil || pages > 5 {
			t.Fatalf("paging: %v", err)
		}
		got = append(got, keys(p))
		if !p.Truncated {
			break
		}
		cursor = p.Cursor
	}
	if strings.Join(got, " ") != "B,a,a/1| a/2,a/sub/x,a/sub/y| ab,b,c| é|" {
		t.Fatalf("pages: %v", got)
	}
	p, _ := f.List(context.Background(), "s", objects.ListOptions{Prefix: "a/", Delimiter: "/"})
	if keys(p) != "a/1,a/2|a/sub/" {
		t.Fatalf("delimiter: %s", keys(p))
	}
	p, _ = f.List(context.Background(), "s", objects.ListOptions{Delimiter: "/", Limit: 2})
	if keys(p) != "B,a|" || !p.Truncated {
		t.Fatalf("delimiter page 1: %s", keys(p))
	}
	p, _ = f.List(context.Background(), "s", objects.ListOptions{Delimiter: "/", Limit: 2, Cursor: p.Cursor})
	if keys(p) != "ab|a/" || !p.Truncated {
		t.Fatalf("delimiter page 2: %s", keys(p))
	}
	p, _ = f.List(context.Background(), "s", objects.ListOptions{Delimiter: "/", Limit: 2, Cursor: p.Cursor})
	if keys(p) != "b,c|" || !p.Truncated {
		t.Fatalf("delimiter page 3 (past every a/ key): %s", keys(p))
	}
	if _, err := f.List(context.Background(), "s", objects.ListOptions{Cursor: "!!"}); !errors.Is(err, objects.ErrBadCursor) {
		t.Fatalf("a bad cursor: %v", err)
	}
	p, _ = f.List(context.Background(), "s", objects.ListOptions{Prefix: "zz"})
	if keys(p) != "|" {
		t.Fatalf("no match: %s", keys(p))
	}
	f.Delete(context.Background(), "s", "a/1")
	p, _ = f.List(context.Background(), "s", objects.ListOptions{Prefix: "a/", Delimiter: "/"})
	if keys(p) != "a/2|a/sub/" {
		t.Fatalf("after delete: %s", keys(p))
	}
}

type truncated struct{ n int }

func (r *truncated) Read(p []byte) (int, error) {
	if r.n <= 0 {
		return 0, io.ErrUnexpectedEOF
	}
	n := min(len(p), r.n)
	r.n -= n
	return n, nil
}

// TestPutOfATruncatedBody: a body that ends in io.ErrUnexpectedEOF (an
// upstream's answer shorter than its Content-Length) is a failed body,
// not an end.
func TestPutOfATruncatedBody(t *testing.T) {
	f, _ := Open(t.TempDir())
	put(t, f, "s", "k", "old")
	for _, n := range []int{0, 1000, 300 << 10} {
		if _, err := f.Put(context.Background(), "s", "k", &truncated{n: n}, objects.Info{}); !errors.Is(err, io.ErrUnexpectedEOF) {
			t.Fatalf("a body of %d bytes cut: %v", n, err)
		}
	}
	if got := read(t, f, "s", "k", nil); got != "old" {
		t.Fatalf("after cut bodies: %q", got)
	}
}
