package files

import (
	"context"
	"io"
	"testing"

	"github.com/retainer-gw/retainer/objects"
)

// zeros is n zero bytes, made as they are read.
type zeros struct{ n int64 }

func (z *zeros) Read(p []byte) (int, error) {
	if z.n <= 0 {
		return 0, io.EOF
	}
	n := int64(len(p))
	if n > z.n {
		n = z.n
	}
	clear(p[:n])
	z.n -= n
	return int(n), nil
}

// BenchmarkPut64MiB is the backend's own speed for one object: MD5, the
// write and the syncs (docs/objects.md, "Measured").
func BenchmarkPut64MiB(b *testing.B) {
	f, _ := Open(b.TempDir())
	b.SetBytes(64 << 20)
	for i := 0; i < b.N; i++ {
		if _, err := f.Put(context.Background(), "s", "k", &zeros{64 << 20}, objects.Info{}); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkGet64MiB reads it back (from the page cache).
func BenchmarkGet64MiB(b *testing.B) {
	f, _ := Open(b.TempDir())
	f.Put(context.Background(), "s", "k", &zeros{64 << 20}, objects.Info{})
	b.SetBytes(64 << 20)
	buf := make([]byte, 64<<10)
	for i := 0; i < b.N; i++ {
		_, rc, err := f.Get(context.Background(), "s", "k", nil)
		if err != nil {
			b.Fatal(err)
		}
		io.CopyBuffer(io.Discard, struct{ io.Reader }{rc}, buf)
		rc.Close()
	}
}
