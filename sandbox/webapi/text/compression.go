package text

import (
	"bufio"
	"bytes"
	"compress/flate"
	"compress/gzip"
	"compress/zlib"
	"errors"
	"fmt"
	"io"
	"sync"

	"github.com/retainer-gw/retainer/budgets"
	"github.com/retainer-gw/retainer/internal/wirejson"
	"github.com/retainer-gw/retainer/sandbox/webapi"
)

// CompressionStream and DecompressionStream (gzip, deflate, deflate-raw)
// are TransformStreams in the runtime whose chunks go through Go's
// compress packages behind three host functions. A compressor is a writer
// into a buffer, drained after each chunk. A decompressor is a reader on
// a pipe, fed chunk by chunk by the runtime and read by a goroutine of its
// own into a buffer, bounded so that a decompression bomb errors instead
// of growing the worker. At most budgets.CompressionStreamsPerIsolate
// streams live per isolate; another is closed first, and all when the
// isolate ends.

// codec is one stream's state.
type codec struct {
	// compressing
	w   io.WriteCloser
	out bytes.Buffer
	// decompressing
	in      *feeder
	waiting bool       // the reader goroutine waits for input (it said so on in.idle)
	closed  bool       // its input was ended
	mu      sync.Mutex // guards dout, derr (the reader goroutine writes them)
	dout    bytes.Buffer
	derr    error
	done    chan struct{}
}

// codecInit is codecInit(id, format, compress): stream id begins; past
// budgets.CompressionStreamsPerIsolate another of the isolate's ends first.
func (s *session) codecInit(args []webapi.Arg) (string, error) {
	id, format, compress := int32(args[0].Integer()), args[1].String(), args[2].Boolean()
	if s.codecs == nil {
		s.codecs = map[int32]*codec{}
	}
	if len(s.codecs) >= budgets.CompressionStreamsPerIsolate {
		for k, c := range s.codecs {
			c.close()
			delete(s.codecs, k)
			break
		}
	}
	c := &codec{}
	if compress {
		switch format {
		case "gzip":
			c.w = gzip.NewWriter(&c.out)
		case "deflate":
			c.w = zlib.NewWriter(&c.out)
		case "deflate-raw":
			c.w, _ = flate.NewWriter(&c.out, flate.DefaultCompression)
		default:
			return "", fmt.Errorf("unsupported format %q", format)
		}
	} else {
		c.in = &feeder{feed: make(chan []byte), idle: make(chan struct{})}
		c.done = make(chan struct{})
		go c.decompress(format, c.in)
	}
	s.codecs[id] = c
	return "", nil
}

// decompress runs on its own goroutine until the input ends or is bad.
func (c *codec) decompress(format string, pr *feeder) {
	defer close(c.done)
	var r io.Reader
	var err error
	// The stream must end where the format ends: bytes after it are an
	// error. A bufio.Reader is an io.ByteReader, so the decompressors read
	// no further than they need, and what it holds after the end is junk.
	src := bufio.NewReaderSize(pr, 32<<10)
	switch format {
	case "gzip":
		var g *gzip.Reader
		if g, err = gzip.NewReader(src); err == nil {
			g.Multistream(false)
			r = g
		}
	case "deflate":
		r, err = zlib.NewReader(src)
	case "deflate-raw":
		r = flate.NewReader(src)
	default:
		err = fmt.Errorf("unsupported format %q", format)
	}
	if err == nil {
		buf := make([]byte, 32<<10)
		for {
			n, rerr := r.Read(buf)
			c.mu.Lock()
			c.dout.Write(buf[:n])
			over := c.dout.Len() > budgets.DecompressChunkBytes
			c.mu.Unlock()
			if over {
				err = errors.New("the decompressed data is over its bound")
				break
			}
			if rerr == io.EOF {
				// Anything after the end of the compressed data is junk.
				if extra, _ := io.Copy(io.Discard, src); extra > 0 {
					err = errors.New("junk after the end of the compressed data")
				}
				break
			}
			if rerr != nil {
				err = rerr
				break
			}
		}
	}
	if err != nil {
		c.mu.Lock()
		c.derr = err
		c.mu.Unlock()
	}
}

// feeder hands the runtime's chunks to the decompressing goroutine. Before
// it blocks for more input it says so on idle: the runtime then knows the
// chunk it sent has been decompressed as far as it can be.
type feeder struct {
	feed  chan []byte // closed at the end of input
	idle  chan struct{}
	cur   []byte
	ended bool
}

func (f *feeder) Read(p []byte) (int, error) {
	for len(f.cur) == 0 {
		if f.ended {
			return 0, io.EOF
		}
		f.idle <- struct{}{}
		b, ok := <-f.feed
		if !ok {
			f.ended = true
			return 0, io.EOF
		}
		f.cur = b
	}
	n := copy(p, f.cur)
	f.cur = f.cur[n:]
	return n, nil
}

// send gives the goroutine a chunk (nil: the end) and waits until it has
// taken it all in or finished.
func (c *codec) send(chunk []byte, last bool) {
	if !c.waiting {
		select {
		case <-c.in.idle:
		case <-c.done:
			return
		}
	}
	c.waiting = false
	if last {
		c.closed = true
		close(c.in.feed)
		<-c.done
		return
	}
	select {
	case c.in.feed <- chunk:
	case <-c.done:
		return
	}
	select {
	case <-c.in.idle:
		c.waiting = true
	case <-c.done:
	}
}

// close ends a decompressing goroutine (an abandoned stream, or the
// isolate's end): its input ends, and it finishes on its own.
func (c *codec) close() {
	if c.in == nil || c.closed {
		return
	}
	c.closed = true
	waiting := c.waiting
	go func() {
		if !waiting {
			select {
			case <-c.in.idle:
			case <-c.done:
				return
			}
		}
		close(c.in.feed)
		<-c.done
	}()
}

// codecChunk is codecChunk(id, bytesLatin1, last) → the output so
// far (Latin-1); last ends the stream. A bad stream throws.
func (s *session) codecChunk(args []webapi.Arg) (string, error) {
	id, last := int32(args[0].Integer()), args[2].Boolean()
	c := s.codecs[id]
	if c == nil {
		return "", errors.New("the stream is closed")
	}
	in := wirejson.Latin1Bytes(args[1].String())
	var out []byte
	var err error
	if c.w != nil {
		if _, err = c.w.Write(in); err == nil && last {
			err = c.w.Close()
		}
		out = append([]byte(nil), c.out.Bytes()...)
		c.out.Reset()
	} else {
		if len(in) > 0 {
			c.send(in, false)
		}
		if last {
			c.send(nil, true)
		}
		c.mu.Lock()
		out = append([]byte(nil), c.dout.Bytes()...)
		c.dout.Reset()
		if c.derr != nil {
			err = c.derr
		}
		c.mu.Unlock()
		if err == nil && last {
			c.mu.Lock()
			err = c.derr
			c.mu.Unlock()
		}
	}
	if last || err != nil {
		c.close()
		delete(s.codecs, id)
	}
	if err != nil {
		return "", fmt.Errorf("the data is not valid: %v", err)
	}
	return wirejson.Latin1(out), nil
}

// closeCodecs ends every stream of the isolate (it is ending).
func (s *session) closeCodecs() {
	for id, c := range s.codecs {
		c.close()
		delete(s.codecs, id)
	}
}
