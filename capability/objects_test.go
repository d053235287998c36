package capability

import (
	"context"
	"encoding/json"
	"io/fs"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/retainer-gw/retainer/fault"
	"github.com/retainer-gw/retainer/internal/waitfor"
	"github.com/retainer-gw/retainer/internal/wirejson"
	"github.com/retainer-gw/retainer/objects"
	"github.com/retainer-gw/retainer/objects/files"
)

func objectsHost(t *testing.T) *Host {
	dir := t.TempDir()
	fb, err := files.Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	// An abandoned put ends on its own goroutine, which removes its
	// temporary file after the call that abandoned it answered: wait for
	// them before the folder goes (cleanups run last registered first).
	var buckets *objects.Buckets
	t.Cleanup(func() {
		waitfor.Until(t, 10*time.Second, "abandoned puts' temporary files removed", func() bool {
			if buckets.PutsUnderWay() != 0 {
				return false
			}
			left := 0
			filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
				if err == nil && !d.IsDir() && filepath.Base(filepath.Dir(path)) == "tmp" {
					left++
				}
				return nil
			})
			return left == 0
		})
	})
	fs := &FetchStreams{}
	buckets = objects.New(fb, objects.Options{MaxObject: 1 << 20, Quota: 4 << 20})
	return &Host{Fetcher: &Fetcher{Streams: fs}, Objects: &Objects{Buckets: buckets, Streams: fs}}
}

func objectsCallOf(h *Host, owner, op string, args any, caps ...string) (json.RawMessage, error) {
	raw, _ := json.Marshal(args)
	return h.Serve(context.Background(), Call{Tenant: "t", Registry: "r", ExecutionID: owner, Op: "objects." + op, Args: raw, Grants: Grants{Capabilities: caps}})
}

// TestChunkedPuts: a put in chunks is written only at its last; a
// failing condition ends it at its first chunk; an abort, a run's end and
// another owner's chunks leave the old object.
func TestChunkedPuts(t *testing.T) {
	h := objectsHost(t)
	w := []string{"objectsWrite"}
	if _, err := objectsCallOf(h, "run", "put", map[string]any{"key": "k", "text": "old"}, w...); err != nil {
		t.Fatal(err)
	}
	begin := func(owner string, extra map[string]any) string {
		t.Helper()
		args := map[string]any{"key": "k", "upload": true}
		for k, v := range extra {
			args[k] = v
		}
		res, err := objectsCallOf(h, owner, "put", args, w...)
		if err != nil {
			t.Fatal(err)
		}
		var a struct{ Upload string }
		json.Unmarshal(res, &a)
		return a.Upload
	}
	head := func() string {
		t.Helper()
		res, _ := objectsCallOf(h, "run", "get", map[string]any{"key": "k"}, w...)
		var a struct{ Data string }
		json.Unmarshal(res, &a)
		return string(wirejson.Latin1Bytes(a.Data))
	}
	chunk := wirejson.Latin1([]byte(strings.Repeat("x", 1000)))

	up := begin("run", nil)
	if _, err := objectsCallOf(h, "other", "write", map[string]any{"stream": up, "data": chunk}, w...); err == nil {
		t.Fatal("another owner wrote to the upload")
	}
	for i := 0; i < 3; i++ {
		if res, err := objectsCallOf(h, "run", "write", map[string]any{"stream": up, "data": chunk}, w...); err != nil || string(res) != "{}" {
			t.Fatalf("chunk %d: %s %v", i, res, err)
		}
		if got := head(); got != "old" {
			t.Fatalf("the object changed before the last chunk: %q", got)
		}
	}
	res, err := objectsCallOf(h, "run", "write", map[string]any{"stream": up, "done": true}, w...)
	if err != nil || !strings.Contains(string(res), `"done":true,"object":{"key":"k","size":3000`) {
		t.Fatalf("the last chunk: %s %v", res, err)
	}
	// A condition that fails ends the put at its first chunk.
	up = begin("run", map[string]any{"onlyIf": map[string]any{"etagMatches": "nope"}})
	if res, err := objectsCallOf(h, "run", "write", map[string]any{"stream": up, "data": chunk}, w...); err != nil || string(res) != `{"done":true,"object":null}` {
		t.Fatalf("a failed condition: %s %v", res, err)
	}
	// Past max_object (1 MiB): the chunk that passes it fails.
	up = begin("run", nil)
	big := wirejson.Latin1(make([]byte, 600<<10))
	objectsCallOf(h, "run", "write", map[string]any{"stream": up, "data": big}, w...)
	if _, err := objectsCallOf(h, "run", "write", map[string]any{"stream": up, "data": big}, w...); fault.CodeOf(err) != fault.TooLarge {
		t.Fatalf("past max_object: %v", err)
	}
	// An abort, and a run's end, leave the old object and free its key.
	up = begin("run", nil)
	objectsCallOf(h, "run", "write", map[string]any{"stream": up, "data": chunk}, w...)
	objectsCallOf(h, "run", "write", map[string]any{"stream": up, "abort": true}, w...)
	for _, owner := range []string{"a", "b", "c"} {
		begin(owner, nil)
		h.Objects.DropOwner(owner)
	}
	if got := head(); len(got) != 3000 {
		t.Fatalf("after aborted puts: %d bytes", len(got))
	}
	if _, err := objectsCallOf(h, "run", "put", map[string]any{"key": "k", "text": "new"}, w...); err != nil {
		t.Fatalf("the key after the aborted puts: %v", err)
	}
	// Grants: reads under objectsRead, writes refused naming objectsWrite.
	if _, err := objectsCallOf(h, "run", "get", map[string]any{"key": "k"}); !IsDenial(err) {
		t.Fatalf("a get without a grant: %v", err)
	}
	if _, err := objectsCallOf(h, "run", "put", map[string]any{"key": "k", "text": "x"}, "objectsRead"); !IsDenial(err) || !strings.Contains(err.Error(), "objectsWrite") {
		t.Fatalf("a put under objectsRead: %v", err)
	}
	if len(h.Objects.uploads) != 0 {
		t.Fatalf("uploads left: %d", len(h.Objects.uploads))
	}
}
