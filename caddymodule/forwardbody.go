package caddymodule

import (
	"bufio"
	"bytes"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/retainer-gw/retainer/budgets"
	"github.com/retainer-gw/retainer/fault"
)

// What a forwarded request's HMAC says of its body, and the nonces an
// owner remembers (docs/cluster.md, "The forwarding header"). A body of
// known length up to budgets.ForwardDigestBody is read whole by the
// forwarder and covered by its SHA-256; any other (longer, or of unknown
// length) crosses in sealed frames, each carrying an HMAC chained from
// the header's signature through every frame before it, and a last empty
// frame that seals its end: the owner hands the handler a frame's bytes
// only once they checked, so it acts on no byte the HMAC does not cover,
// and a body cut short or reordered never reads as whole.

// forwardBody is a forwarded request's body as the HMAC covers it.
type forwardBody struct {
	// cover is what the header says: "none", "sha256 <length> <hex>", or
	// "chained <length>" (-1 when unknown).
	cover string
	// held is a body read whole (sha256), sent again as is when the
	// forwarder looks for the owner again; nil otherwise.
	held []byte
}

// chained is whether the body crosses in sealed frames.
func (b forwardBody) chained() bool { return strings.HasPrefix(b.cover, "chained ") }

// resendable is whether the request may be sent again (nothing of its
// body is lost by the first send).
func (b forwardBody) resendable() bool { return !b.chained() }

// readForwardBody answers what the HMAC will say of r's body, reading a
// small body of known length whole.
func readForwardBody(r *http.Request) (forwardBody, error) {
	switch {
	case r.Body == nil || r.Body == http.NoBody || r.ContentLength == 0:
		return forwardBody{cover: "none"}, nil
	case r.ContentLength > 0 && r.ContentLength <= budgets.ForwardDigestBody:
		body, err := io.ReadAll(io.LimitReader(r.Body, r.ContentLength+1))
		if err != nil {
			return forwardBody{}, err
		}
		if int64(len(body)) != r.ContentLength {
			return forwardBody{}, errors.New("the body is not as long as it says")
		}
		sum := sha256.Sum256(body)
		return forwardBody{cover: fmt.Sprintf("sha256 %d %s", len(body), hex.EncodeToString(sum[:])), held: body}, nil
	}
	return forwardBody{cover: "chained " + strconv.FormatInt(r.ContentLength, 10)}, nil
}

// errForwardBody is the owner's answer to a body that differs from what
// its forwarder signed.
var errForwardBody = fault.New(fault.Forbidden, "The forwarded request's body differs from what its gateway signed.")

// takeForwardBody puts on r, at the owner, a body that yields only what
// cover (signed under sig) vouches for: none at all, the digested bytes,
// or a chain's checked frames.
func takeForwardBody(secret []byte, sig []byte, cover string, r *http.Request) error {
	kind, rest, _ := strings.Cut(cover, " ")
	switch kind {
	case "none":
		if r.Body != nil {
			r.Body.Close()
		}
		r.Body, r.ContentLength = http.NoBody, 0
		r.Header.Del("Content-Length")
		return nil
	case "sha256":
		lenText, digest, _ := strings.Cut(rest, " ")
		n, err := strconv.ParseInt(lenText, 10, 64)
		if err != nil || n <= 0 || n > budgets.ForwardDigestBody || r.Body == nil {
			return errors.New("a bad body cover")
		}
		body, err := io.ReadAll(io.LimitReader(r.Body, n+1))
		if err != nil {
			return err
		}
		sum := sha256.Sum256(body)
		if int64(len(body)) != n || !hmac.Equal([]byte(digest), []byte(hex.EncodeToString(sum[:]))) {
			return errors.New("the body differs from its digest")
		}
		r.Body, r.ContentLength = io.NopCloser(bytes.NewReader(body)), n
		r.Header.Set("Content-Length", lenText)
		return nil
	case "chained":
		n, err := strconv.ParseInt(rest, 10, 64)
		if err != nil || n < -1 || r.Body == nil {
			return errors.New("a bad body cover")
		}
		r.Body = &chainReader{src: bufio.NewReaderSize(r.Body, 32<<10), body: r.Body, secret: secret, prev: sig, left: n}
		r.ContentLength = n
		r.TransferEncoding = nil
		if n >= 0 {
			r.Header.Set("Content-Length", rest)
		} else {
			r.Header.Del("Content-Length")
		}
		return nil
	}
	return errors.New("a bad body cover")
}

// chainFrame is the most body bytes the forwarder seals in one frame;
// chainMaxFrame the most the owner accepts.
const (
	chainFrame    = 32 << 10
	chainMaxFrame = 64 << 10
)

// chainMAC is a frame's HMAC: over the previous frame's (the header's
// signature for the first), the frame's length and its bytes.
func chainMAC(secret, prev, data []byte) []byte {
	m := hmac.New(sha256.New, secret)
	m.Write(prev)
	var n [4]byte
	binary.BigEndian.PutUint32(n[:], uint32(len(data)))
	m.Write(n[:])
	m.Write(data)
	return m.Sum(nil)
}

// sealReader is the forwarder's side: it reads the visitor's body and
// yields it as sealed frames (length, bytes, HMAC), one frame for each
// read of the body, so a streamed body keeps its pace, and an empty frame
// at its end.
type sealReader struct {
	src    io.ReadCloser
	secret []byte
	prev   []byte
	chunk  []byte
	out    []byte
	off    int
	done   bool
}

func newSealReader(src io.ReadCloser, secret, sig []byte) *sealReader {
	return &sealReader{src: src, secret: secret, prev: sig, chunk: make([]byte, chainFrame)}
}

func (s *sealReader) seal(data []byte) {
	mac := chainMAC(s.secret, s.prev, data)
	s.prev = mac
	var n [4]byte
	binary.BigEndian.PutUint32(n[:], uint32(len(data)))
	s.out = append(append(append(s.out, n[:]...), data...), mac...)
}

func (s *sealReader) Read(p []byte) (int, error) {
	for s.off == len(s.out) {
		if s.done {
			return 0, io.EOF
		}
		s.out, s.off = s.out[:0], 0
		n, err := s.src.Read(s.chunk)
		if n > 0 {
			s.seal(s.chunk[:n])
		}
		if err == io.EOF {
			s.seal(nil)
			s.done = true
		} else if err != nil {
			return 0, err
		}
	}
	n := copy(p, s.out[s.off:])
	s.off += n
	return n, nil
}

func (s *sealReader) Close() error { return s.src.Close() }

// chainReader is the owner's side: it yields a frame's bytes only after
// their HMAC checked, and the end only after the sealed last frame (and,
// for a declared length, exactly that many bytes).
type chainReader struct {
	src      *bufio.Reader
	body     io.Closer
	secret   []byte
	prev     []byte
	left     int64 // -1: unknown
	pending  []byte
	buf      []byte
	err      error
	tampered atomic.Bool
}

func (c *chainReader) Read(p []byte) (int, error) {
	for len(c.pending) == 0 {
		if c.err != nil {
			return 0, c.err
		}
		c.err = c.next()
	}
	n := copy(p, c.pending)
	c.pending = c.pending[n:]
	return n, nil
}

// next reads and checks one frame.
func (c *chainReader) next() error {
	var head [4]byte
	if _, err := io.ReadFull(c.src, head[:]); err != nil {
		return io.ErrUnexpectedEOF
	}
	n := binary.BigEndian.Uint32(head[:])
	if n > chainMaxFrame {
		return c.refuse()
	}
	if cap(c.buf) < int(n) {
		c.buf = make([]byte, n)
	}
	data := c.buf[:n]
	var mac [sha256.Size]byte
	if _, err := io.ReadFull(c.src, data); err != nil {
		return io.ErrUnexpectedEOF
	}
	if _, err := io.ReadFull(c.src, mac[:]); err != nil {
		return io.ErrUnexpectedEOF
	}
	want := chainMAC(c.secret, c.prev, data)
	if !hmac.Equal(mac[:], want) {
		return c.refuse()
	}
	c.prev = want
	if c.left >= 0 {
		if int64(n) > c.left || n == 0 && c.left != 0 {
			return c.refuse()
		}
		c.left -= int64(n)
	}
	if n == 0 {
		return io.EOF
	}
	c.pending = data
	return nil
}

func (c *chainReader) refuse() error {
	c.tampered.Store(true)
	// The rest of the body is read and dropped (up to refusedDrain) before
	// the 403 goes: a connection closed with the forwarder still sending
	// resets, and the forwarder would see no answer at all (503) instead
	// of the refusal.
	io.CopyN(io.Discard, c.src, refusedDrain)
	return errForwardBody
}

// refusedDrain bounds what an owner reads and drops of a forwarded body
// after a frame failed its HMAC.
const refusedDrain = 8 << 20

func (c *chainReader) Close() error { return c.body.Close() }

// bodyTampered is whether the forwarded body of r (at the owner) failed
// its HMAC: whatever the handler answered from what came before is not
// sent.
func bodyTampered(r *http.Request) bool {
	c, ok := r.Context().Value(chainKey{}).(*chainReader)
	return ok && c.tampered.Load()
}

type chainKey struct{}

// forwardSkew is how far in the future a forwarded request's timestamp
// may be (the gateways' clocks differ a little).
const forwardSkew = 2 * time.Second

// nonceSet is what an owner remembers of the nonces it took: each for at
// least forwardMaxAge + forwardSkew, past which its request is refused
// for its age anyway. Two generations, the older dropped at each turn,
// each at most budgets.ForwardNonces.
type nonceSet struct {
	mu        sync.Mutex
	cur, prev map[[16]byte]struct{}
	turned    time.Time
}

// errNoncesFull: too many forwarded requests in one generation to
// remember; the request is refused as retryable.
var errNoncesFull = fault.New(fault.Overloaded, "This gateway takes more forwarded requests than it can remember; try again.")

// first answers nil the first time it is given nonce, errForwardReplay
// after.
func (s *nonceSet) first(nonce [16]byte, now time.Time) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if every := forwardMaxAge + forwardSkew; s.cur == nil || now.Sub(s.turned) >= every {
		if s.cur == nil || now.Sub(s.turned) >= 2*every {
			s.prev = map[[16]byte]struct{}{}
		} else {
			s.prev = s.cur
		}
		s.cur, s.turned = map[[16]byte]struct{}{}, now
	}
	if _, ok := s.cur[nonce]; ok {
		return errForwardReplay
	}
	if _, ok := s.prev[nonce]; ok {
		return errForwardReplay
	}
	if len(s.cur) >= budgets.ForwardNonces {
		return errNoncesFull
	}
	s.cur[nonce] = struct{}{}
	return nil
}

var errForwardReplay = errors.New("this forwarded request was taken before")
