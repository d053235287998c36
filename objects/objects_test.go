package objects_test

import (
	"context"
	"fmt"
	"io"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/retainer-gw/retainer/budgets"
	"github.com/retainer-gw/retainer/fault"
	"github.com/retainer-gw/retainer/internal/waitfor"
	"github.com/retainer-gw/retainer/objects"
	"github.com/retainer-gw/retainer/objects/files"
)

func code(err error) fault.Code {
	if f := fault.As(err); f != nil {
		return f.Code
	}
	return ""
}

func TestBucketRules(t *testing.T) {
	ctx := context.Background()
	fb, _ := files.Open(t.TempDir())
	b := objects.New(fb, objects.Options{MaxObject: 100, Quota: 250})
	sp := objects.Space("apps", "alice")
	put := func(key, body string, o objects.PutOptions) (objects.Info, bool, error) {
		o.Size = -1
		return b.Put(ctx, sp, key, strings.NewReader(body), o)
	}
	for _, k := range []string{"", strings.Repeat("k", 1025), "\xff"} {
		if _, _, err := put(k, "x", objects.PutOptions{}); code(err) != fault.BadRequest {
			t.Errorf("key %q: %v", k, err)
		}
	}
	if _, ok, err := put(strings.Repeat("é", 512), "x", objects.PutOptions{}); !ok || err != nil {
		t.Fatalf("a 1,024-byte key: %v", err)
	}
	if _, _, err := put("big", strings.Repeat("x", 101), objects.PutOptions{}); code(err) != fault.TooLarge {
		t.Fatalf("past max_object: %v", err)
	}
	if _, _, err := put("h", "x", objects.PutOptions{HTTPMetadata: map[string]string{"contentTyp": "x"}}); code(err) != fault.BadRequest {
		t.Fatalf("an unknown httpMetadata field: %v", err)
	}
	a, ok, err := put("a", strings.Repeat("a", 100), objects.PutOptions{})
	if !ok || err != nil || a.ETag == "" {
		t.Fatalf("put: %v", err)
	}
	// Conditionals.
	if _, ok, _ := put("a", "no", objects.PutOptions{OnlyIf: &objects.Conditions{EtagMatches: "nope"}}); ok {
		t.Fatal("etagMatches of another etag put")
	}
	if _, ok, _ := put("a", "no", objects.PutOptions{OnlyIf: &objects.Conditions{EtagDoesNotMatch: `"` + a.ETag + `"`}}); ok {
		t.Fatal("etagDoesNotMatch of its etag put")
	}
	if _, ok, _ := put("new", "x", objects.PutOptions{OnlyIf: &objects.Conditions{EtagMatches: "*"}}); ok {
		t.Fatal("etagMatches * put a new key")
	}
	if _, ok, _ := put("a", "no", objects.PutOptions{OnlyIf: &objects.Conditions{UploadedBefore: a.Uploaded}}); ok {
		t.Fatal("uploadedBefore its own time put")
	}
	_, body, found, _ := b.Get(ctx, sp, "a", objects.GetOptions{OnlyIf: &objects.Conditions{UploadedAfter: a.Uploaded.Add(time.Hour)}})
	if !found || body != nil {
		t.Fatal("a get whose condition fails answers the object without its body")
	}
	// The quota: 250 bytes; 1 + 100 used.
	if _, _, err := put("b", strings.Repeat("b", 100), objects.PutOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, _, err := put("c", strings.Repeat("c", 50), objects.PutOptions{}); code(err) != fault.QuotaExceeded {
		t.Fatalf("past the quota: %v", err)
	}
	if _, found, _ := b.Head(ctx, sp, "c"); found {
		t.Fatal("a put past the quota was written")
	}
	// Replacing an object counts only the difference.
	if _, _, err := put("b", strings.Repeat("B", 100), objects.PutOptions{}); err != nil {
		t.Fatalf("replacing within the quota: %v", err)
	}
	// Another tenant has its own quota.
	if _, _, err := b.Put(ctx, objects.Space("apps", "bob"), "c", strings.NewReader(strings.Repeat("c", 100)), objects.PutOptions{Size: -1}); err != nil {
		t.Fatalf("bob charged for alice: %v", err)
	}
	b.Delete(ctx, sp, "b")
	if used, _ := b.Used(ctx, sp); used != 101 {
		t.Fatalf("used after delete: %d", used)
	}
	// Puts at once cannot pass the quota together.
	var wg sync.WaitGroup
	for i := 0; i < 8; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			put("p"+string(rune('0'+i)), strings.Repeat("p", 60), objects.PutOptions{})
		}()
	}
	wg.Wait()
	if used, _ := b.Used(ctx, sp); used > 250 {
		t.Fatalf("concurrent puts passed the quota: %d", used)
	}
	// A fresh Buckets on the same files counts the usage again.
	b2 := objects.New(fb, objects.Options{MaxObject: 100, Quota: 250})
	used1, _ := b.Used(ctx, sp)
	if used2, _ := b2.Used(ctx, sp); used1 != used2 {
		t.Fatalf("recounted %d, kept %d", used2, used1)
	}
	_, body, _, _ = b.Get(ctx, sp, "a", objects.GetOptions{Range: &objects.Range{Suffix: 2}})
	got, _ := io.ReadAll(body)
	body.Close()
	if string(got) != "aa" {
		t.Fatalf("suffix: %q", got)
	}
}

// TestPutsUnderWayCounted: every put under way counts, however its body
// arrives, against a tenant's share (QUOTA_EXCEEDED) and the gateway's
// (OVERLOADED): bodies that stall cannot pile up the backend's buffers
// without end. A put that ends gives its place back.
func TestPutsUnderWayCounted(t *testing.T) {
	ctx := context.Background()
	fb, _ := files.Open(t.TempDir())
	b := objects.New(fb, objects.Options{})
	var writers []*io.PipeWriter
	var wg sync.WaitGroup
	stall := func(space string) {
		pr, pw := io.Pipe()
		key := fmt.Sprint("k", len(writers))
		writers = append(writers, pw)
		wg.Add(1)
		go func() {
			defer wg.Done()
			b.Put(ctx, space, key, pr, objects.PutOptions{Size: -1})
			pr.Close()
		}()
		pw.Write([]byte("x")) // the put is reading
	}
	defer func() {
		for _, w := range writers {
			w.CloseWithError(io.ErrUnexpectedEOF)
		}
		wg.Wait()
	}()
	small := func(space string) error {
		_, _, err := b.Put(ctx, space, "small", strings.NewReader("v"), objects.PutOptions{Size: -1})
		return err
	}
	for range budgets.ObjectPutsPerTenant {
		stall("mallory")
	}
	if err := small("mallory"); code(err) != fault.QuotaExceeded {
		t.Fatalf("mallory's put past its share: %v", err)
	}
	if err := small("bob"); err != nil {
		t.Fatalf("the bystander's put: %v", err)
	}
	for i := 1; b.PutsUnderWay() < budgets.ObjectPuts; i++ {
		stall(fmt.Sprint("tenant", i/budgets.ObjectPutsPerTenant))
	}
	if err := small("bob"); code(err) != fault.Overloaded {
		t.Fatalf("a put past the gateway's puts: %v", err)
	}
	writers[0].CloseWithError(io.ErrUnexpectedEOF)
	waitfor.Until(t, 30*time.Second, "a put's place given back", func() bool { return b.PutsUnderWay() < budgets.ObjectPuts })
	if err := small("bob"); err != nil {
		t.Fatalf("the bystander's put once one ended: %v", err)
	}
}
