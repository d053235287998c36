package client_test

import (
	"bytes"
	"context"
	"errors"
	"io"
	"strings"
	"testing"
	"time"

	"github.com/retainer-gw/retainer/client"
)

// The bucket through the control plane: a streamed put of unknown length
// and one of known length, a whole get and a range, pages of a listing, a
// delete; another tenant's bucket is its own.
func TestObjects(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	b := &client.Objects{API: apiURL, Token: token("objects-client")}
	big := bytes.Repeat([]byte("0123456789abcdef"), 20000) // 320,000 bytes
	info, err := b.Put(ctx, "reports/2026 q1.bin", io.MultiReader(bytes.NewReader(big[:1000]), bytes.NewReader(big[1000:])), -1)
	if err != nil || info.Key != "reports/2026 q1.bin" || info.Size != int64(len(big)) || info.ETag == "" {
		t.Fatalf("chunked put: %+v %v", info, err)
	}
	if _, err := b.Put(ctx, "reports/notes.txt", strings.NewReader("hello"), 5); err != nil {
		t.Fatal(err)
	}
	read := func(key string, off, n int64) string {
		t.Helper()
		rc, err := b.Get(ctx, key, off, n)
		if err != nil {
			t.Fatalf("get %s: %v", key, err)
		}
		defer rc.Close()
		data, _ := io.ReadAll(rc)
		return string(data)
	}
	if got := read("reports/2026 q1.bin", 0, -1); got != string(big) {
		t.Fatalf("whole get: %d bytes", len(got))
	}
	if got := read("reports/2026 q1.bin", 16, 4); got != "0123" {
		t.Fatalf("range: %q", got)
	}
	if got := read("reports/notes.txt", 1, -1); got != "ello" {
		t.Fatalf("from an offset: %q", got)
	}
	page, err := b.List(ctx, "reports/", "")
	if err != nil || len(page.Objects) != 2 || page.Objects[0].Key != "reports/2026 q1.bin" || page.Objects[1].Size != 5 {
		t.Fatalf("list: %+v %v", page, err)
	}
	other := &client.Objects{API: apiURL, Token: token("objects-client-other")}
	if page, err := other.List(ctx, "", ""); err != nil || len(page.Objects) != 0 {
		t.Fatalf("another tenant lists: %+v %v", page, err)
	}
	var fault *client.Error
	if _, err := other.Get(ctx, "reports/notes.txt", 0, -1); !errors.As(err, &fault) || fault.Code != "NOT_FOUND" {
		t.Fatalf("another tenant reads: %v", err)
	}
	if err := b.Delete(ctx, "reports/notes.txt"); err != nil {
		t.Fatal(err)
	}
	if _, err := b.Get(ctx, "reports/notes.txt", 0, -1); !errors.As(err, &fault) || fault.Code != "NOT_FOUND" {
		t.Fatalf("after the delete: %v", err)
	}
}
