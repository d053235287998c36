package s3

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"io"
	"os"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/minio/minio-go/v7"
	"github.com/minio/minio-go/v7/pkg/credentials"

	"github.com/retainer-gw/retainer/internal/s3test"
	"github.com/retainer-gw/retainer/objects"
	"github.com/retainer-gw/retainer/objects/objectstest"
)

var ctx = context.Background()

// server is one SeaweedFS for the package's tests (it takes seconds to
// start); each test works under a bucket or prefix of its own.
var server *s3test.Server

func TestMain(m *testing.M) {
	s, err := s3test.New()
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	server = s
	code := m.Run()
	s.Close()
	os.Exit(code)
}

func start(*testing.T) *s3test.Server { return server }

func config(s *s3test.Server, bucket, prefix string) Config {
	return Config{Endpoint: s.Endpoint, Bucket: bucket, Region: s.Region, AccessKey: s.AccessKey, SecretKey: s.SecretKey, Prefix: prefix}
}

func unique() string {
	var b [4]byte
	rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

func open(t *testing.T, c Config) objects.Backend {
	t.Helper()
	b, err := Open(ctx, c)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// raw is a client beside the backend, to look at what it left in the
// bucket.
func raw(t *testing.T, s *s3test.Server) *minio.Client {
	c, err := minio.New(strings.TrimPrefix(s.Endpoint, "http://"), &minio.Options{Creds: credentials.NewStaticV4(s.AccessKey, s.SecretKey, ""), Region: s.Region})
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func TestContract(t *testing.T) {
	s := start(t)
	c := config(s, "contract", "run-"+unique()+"/")
	objectstest.Run(t, func() objects.Backend { return open(t, c) })
	// Whatever the suite did (failed and cancelled multipart puts among
	// it), nothing is left staged or half uploaded.
	noStaging(t, s, c)
}

func noStaging(t *testing.T, s *s3test.Server, c Config) {
	t.Helper()
	r := raw(t, s)
	for o := range r.ListObjects(ctx, c.Bucket, minio.ListObjectsOptions{Prefix: c.Prefix + staging, Recursive: true}) {
		if o.Err != nil {
			t.Fatal(o.Err)
		}
		t.Errorf("left staged: %s", o.Key)
	}
	for u := range r.ListIncompleteUploads(ctx, c.Bucket, c.Prefix, true) {
		if u.Err != nil {
			t.Fatal(u.Err)
		}
		t.Errorf("left half uploaded: %s", u.Key)
	}
}

func TestOpenCreatesBucket(t *testing.T) {
	s := start(t)
	bucket := "made-" + unique()
	// Gateways of a cluster starting at once all find or make it.
	var wg sync.WaitGroup
	errs := make([]error, 4)
	for i := range errs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			_, errs[i] = Open(ctx, config(s, bucket, ""))
		}()
	}
	wg.Wait()
	for _, err := range errs {
		if err != nil {
			t.Fatal(err)
		}
	}
	if ok, err := raw(t, s).BucketExists(ctx, bucket); !ok || err != nil {
		t.Fatalf("the bucket is not there: %v %v", ok, err)
	}
	b := open(t, config(s, bucket, ""))
	if _, err := b.Put(ctx, "sp", "k", strings.NewReader("v"), objects.Info{}); err != nil {
		t.Fatal(err)
	}
	// The object's name is <prefix><space>/<key>.
	if _, err := raw(t, s).StatObject(ctx, bucket, "sp/k", minio.StatObjectOptions{}); err != nil {
		t.Errorf("sp/k: %v", err)
	}
}

func TestOpenRefuses(t *testing.T) {
	s := start(t)
	for name, c := range map[string]Config{
		"no bucket":    {Endpoint: s.Endpoint, AccessKey: s.AccessKey, SecretKey: s.SecretKey},
		"no endpoint":  {Bucket: "b", AccessKey: s.AccessKey, SecretKey: s.SecretKey},
		"a path":       {Endpoint: s.Endpoint + "/path", Bucket: "b", AccessKey: s.AccessKey, SecretKey: s.SecretKey},
		"a scheme":     {Endpoint: "ftp://127.0.0.1:1", Bucket: "b"},
		"a user":       {Endpoint: "http://u:p@127.0.0.1:1", Bucket: "b"},
		"a query":      {Endpoint: s.Endpoint + "?x=1", Bucket: "b"},
		"a wrong key":  {Endpoint: s.Endpoint, Bucket: "refuse", AccessKey: s.AccessKey, SecretKey: "wrong"},
		"no keys":      {Endpoint: s.Endpoint, Bucket: "refuse"},
		"nobody there": {Endpoint: "http://127.0.0.1:1", Bucket: "bbb"},
		"a bad bucket": {Endpoint: s.Endpoint, Bucket: "Not_A_Bucket!", AccessKey: s.AccessKey, SecretKey: s.SecretKey},
	} {
		c2, cancel := context.WithTimeout(ctx, 20*time.Second)
		_, err := Open(c2, c)
		cancel()
		if err == nil {
			t.Errorf("%s: opened", name)
		} else if strings.Contains(err.Error(), "wrong") || strings.Contains(err.Error(), "u:p") || strings.Contains(err.Error(), s.SecretKey) {
			t.Errorf("%s: the error shows a secret: %v", name, err)
		} else {
			t.Logf("%s: %v", name, err)
		}
	}
}

// TestPrefixesApart: two deployments sharing a bucket under prefixes
// see nothing of each other, whatever their spaces.
func TestPrefixesApart(t *testing.T) {
	s := start(t)
	run := unique()
	one := open(t, config(s, "shared", run+"/one/"))
	two := open(t, config(s, "shared", run+"/one"))
	three := open(t, config(s, "shared", run+"/"))
	for i, b := range []objects.Backend{one, two, three} {
		if _, err := b.Put(ctx, "sp", "k", strings.NewReader(string(rune('a'+i))), objects.Info{}); err != nil {
			t.Fatal(err)
		}
	}
	for i, b := range []objects.Backend{one, two, three} {
		_, rc, err := b.Get(ctx, "sp", "k", nil)
		if err != nil {
			t.Fatal(err)
		}
		got, _ := io.ReadAll(rc)
		rc.Close()
		if string(got) != string(rune('a'+i)) {
			t.Errorf("prefix %d reads %q", i, got)
		}
		p, err := b.List(ctx, "sp", objects.ListOptions{})
		if err != nil || len(p.Objects) != 1 {
			t.Errorf("prefix %d lists %+v %v", i, p, err)
		}
	}
}

// TestCancelMidUpload cancels a multipart put while its parts are on the
// wire (not between reads, as the contract suite does) and checks the old
// object and that the upload was aborted.
func TestCancelMidUpload(t *testing.T) {
	s := start(t)
	c := config(s, "cancel", "run-"+unique()+"/")
	b := open(t, c)
	old := bytes.Repeat([]byte("old"), 1000)
	if _, err := b.Put(ctx, "sp", "k", bytes.NewReader(old), objects.Info{}); err != nil {
		t.Fatal(err)
	}
	for _, after := range []time.Duration{0, time.Millisecond, 5 * time.Millisecond, 20 * time.Millisecond, 80 * time.Millisecond, 200 * time.Millisecond, 500 * time.Millisecond} {
		cx, cancel := context.WithCancel(ctx)
		time.AfterFunc(after, cancel)
		_, err := b.Put(cx, "sp", "k", io.LimitReader(zeros{}, 256<<20), objects.Info{})
		cancel()
		if err == nil {
			t.Fatalf("a put cancelled after %v succeeded", after)
		}
		_, rc, err := b.Get(ctx, "sp", "k", nil)
		if err != nil {
			t.Fatal(err)
		}
		got, _ := io.ReadAll(rc)
		rc.Close()
		if !bytes.Equal(got, old) {
			t.Fatalf("after a put cancelled at %v the object has %d bytes", after, len(got))
		}
	}
	noStaging(t, s, c)
}

type zeros struct{}

func (zeros) Read(p []byte) (int, error) { clear(p); return len(p), nil }

// Benchmark64MiB puts and gets a 64 MiB object on SeaweedFS and reports
// MB/s and the Go heap's peak growth during the put, beside one PUT of
// the same bytes through minio-go:
//
//	go test ./objects/s3 -run '^$' -bench 64MiB -benchtime 5x
func Benchmark64MiB(b *testing.B) {
	s := server
	back, err := Open(ctx, config(s, "bench", "run-"+unique()+"/"))
	if err != nil {
		b.Fatal(err)
	}
	const size = 64 << 20
	// The service's first writes to a bucket make its volumes (seconds
	// on SeaweedFS): not the backend's time.
	if _, err := back.Put(ctx, "sp", "warm", io.LimitReader(zeros{}, size), objects.Info{}); err != nil {
		b.Fatal(err)
	}
	var peakPut uint64
	b.Run("put", func(b *testing.B) {
		b.SetBytes(size)
		for b.Loop() {
			runtime.GC()
			var base runtime.MemStats
			runtime.ReadMemStats(&base)
			var peak atomic.Uint64
			done := make(chan struct{})
			go func() {
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
			if _, err := back.Put(ctx, "sp", "big", io.LimitReader(zeros{}, size), objects.Info{}); err != nil {
				b.Fatal(err)
			}
			close(done)
			if g := peak.Load() - min(peak.Load(), base.HeapInuse); g > peakPut {
				peakPut = g
			}
		}
		b.ReportMetric(float64(peakPut)/(1<<20), "peak-heap-MiB")
	})
	// The anchor: the same bytes in one PUT straight through minio-go,
	// their size known and no metadata.
	b.Run("raw-put", func(b *testing.B) {
		b.SetBytes(size)
		core := back.(*backend).core
		for b.Loop() {
			if _, err := core.PutObject(ctx, "bench", "raw", io.LimitReader(zeros{}, size), size, "", "", minio.PutObjectOptions{DisableContentSha256: true}); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("get", func(b *testing.B) {
		b.SetBytes(size)
		for b.Loop() {
			_, rc, err := back.Get(ctx, "sp", "big", nil)
			if err != nil {
				b.Fatal(err)
			}
			n, err := io.Copy(io.Discard, rc)
			rc.Close()
			if err != nil || n != size {
				b.Fatal(n, err)
			}
		}
	})
}
