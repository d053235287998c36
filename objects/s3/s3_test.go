package s3

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/minio/minio-go/v7"
	"github.com/minio/minio-go/v7/pkg/credentials"

	"github.com/retainer-gw/retainer/fault"
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
	var peakPut int64
	b.Run("put", func(b *testing.B) {
		b.SetBytes(size)
		for b.Loop() {
			g := objectstest.HeapGrowth(func() {
				if _, err := back.Put(ctx, "sp", "big", io.LimitReader(zeros{}, size), objects.Info{}); err != nil {
					b.Fatal(err)
				}
			})
			peakPut = max(peakPut, g)
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

// stalled starts a put on b whose body sends n bytes and then waits;
// it answers once the put has read them. Closing the writer with an
// error ends the put.
func stalled(t *testing.T, b objects.Backend, space string, n int) (*io.PipeWriter, chan error) {
	t.Helper()
	pr, pw := io.Pipe()
	done := make(chan error, 1)
	go func() {
		_, err := b.Put(ctx, space, "k", pr, objects.Info{})
		pr.CloseWithError(errors.New("the put ended"))
		done <- err
	}()
	if _, err := pw.Write(make([]byte, n)); err != nil {
		t.Fatalf("the stalled put of %s ended early: %v", space, err)
	}
	return pw, done
}

// TestPartBuffersBounded: puts whose bodies stall past the small buffer
// hold a part buffer each (PartSize); past a space's share the space's
// next put is refused (ErrSpaceBusy), past the gateway's all are
// (ErrBusy), after waiting BufferWait; small puts need none, and a buffer
// given back is taken by the next put. (40 stalled control-plane puts grew
// a gateway by 214 MiB before.)
func TestPartBuffersBounded(t *testing.T) {
	s := start(t)
	c := config(s, "buffers", "run-"+unique()+"/")
	c.Buffers, c.BuffersPerSpace, c.BufferWait = 2, 1, 300*time.Millisecond
	b := open(t, c)
	big := func(space string) error {
		_, err := b.Put(ctx, space, "big", bytes.NewReader(make([]byte, 300<<10)), objects.Info{})
		return err
	}
	if err := big("c"); err != nil {
		t.Fatalf("a put with buffers free: %v", err)
	}
	aw, adone := stalled(t, b, "a", 200<<10)
	if err := big("a"); !errors.Is(err, objects.ErrSpaceBusy) {
		t.Fatalf("a's second put past its share: %v", err)
	}
	bw, bdone := stalled(t, b, "b", 200<<10)
	if err := big("c"); !errors.Is(err, objects.ErrBusy) {
		t.Fatalf("c's put past the gateway's buffers: %v", err)
	}
	if _, err := b.Put(ctx, "c", "small", strings.NewReader("fits the small buffer"), objects.Info{}); err != nil {
		t.Fatalf("a small put: %v", err)
	}
	// c waits for a buffer; a's is given back meanwhile.
	cdone := make(chan error, 1)
	go func() { cdone <- big("c") }()
	aw.CloseWithError(errors.New("the visitor went away"))
	if err := <-adone; err == nil {
		t.Fatal("a's stalled put succeeded")
	}
	if err := <-cdone; err != nil {
		t.Fatalf("c's put once a buffer was given back: %v", err)
	}
	bw.CloseWithError(errors.New("the visitor went away"))
	<-bdone
	if bb := b.(*backend).buffers; bb.held != 0 || len(bb.bySpace) != 0 {
		t.Fatalf("buffers still held: %d %v", bb.held, bb.bySpace)
	}
}

// TestServiceDownMidPut: the service killed in the middle of a multipart
// put fails it OVERLOADED (retryable), with a message that names none of
// the service's internals (its URL, bucket, prefix, staging name, upload
// id); the detail goes to the bucket's log.
func TestServiceDownMidPut(t *testing.T) {
	s := s3test.Start(t)
	c := config(s, "downbucket", "secretprefix/")
	var mu sync.Mutex
	var logged []string
	bk := objects.New(open(t, c), objects.Options{Log: func(op string, err error) {
		mu.Lock()
		logged = append(logged, op+": "+err.Error())
		mu.Unlock()
	}})
	if _, _, err := bk.Put(ctx, "sp", "warm", strings.NewReader("volumes made"), objects.PutOptions{Size: -1}); err != nil {
		t.Fatal(err)
	}
	pr, pw := io.Pipe()
	done := make(chan error, 1)
	go func() {
		_, _, err := bk.Put(ctx, "sp", "k", pr, objects.PutOptions{Size: -1})
		pr.CloseWithError(errors.New("the put ended"))
		done <- err
	}()
	// Two parts' worth: the multipart upload is under way.
	if _, err := pw.Write(make([]byte, 2*PartSize+1)); err != nil {
		t.Fatal(err)
	}
	s.Kill()
	go func() {
		pw.Write(make([]byte, PartSize))
		pw.Close()
	}()
	var err error
	select {
	case err = <-done:
	case <-time.After(90 * time.Second):
		t.Fatal("the put did not end after the service died")
	}
	f := fault.As(err)
	if f.Code != fault.Overloaded {
		t.Fatalf("the service down mid-put: %v, want OVERLOADED", err)
	}
	host := strings.TrimPrefix(s.Endpoint, "http://")
	for _, internal := range []string{host, "127.0.0.1", "downbucket", "secretprefix", "staging", "uploadId", "http://"} {
		if strings.Contains(f.Message, internal) {
			t.Errorf("the message names %q: %s", internal, f.Message)
		}
	}
	mu.Lock()
	defer mu.Unlock()
	if len(logged) == 0 {
		t.Error("the failure's detail was not logged")
	}
}
