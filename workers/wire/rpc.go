package wire

import (
	"bufio"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/retainer-gw/retainer/budgets"
)

// Conn is the protocol between the gateway and a worker: length-prefixed
// frames on the worker's link (Link: a socketpair each way), each a
// request or the response to one, matched by id, in both directions (the gateway calls run/invoke/close; the worker
// calls log/lost/host).
//
// Why not HTTP/2 (h2c), which the contract suggests (docs/decisions.md):
// measured on these machines,
// an empty h2c round trip between the two processes took 178 µs at p50
// (golang.org/x/net/http2: HEADERS and DATA frames with their flushes,
// window updates, and two goroutine hand-offs per side), more than the whole
// 100 µs goal of an invocation. These frames take one write and one read
// per message. What h2c would add (flow control, streaming bodies) is not
// used: bodies are bounded and buffered on both sides.
//
// Both sides encode JSON with wirejson (no HTML escaping) and every
// outward bound of a program is checked on those bytes inside the worker
// (README.md, Caddyfile); the frame caps below are the last word, never the first.
//
// A frame is: uint32 length of the rest, uint64 id, uint8 kind, uint16
// length of the path, the path, the payload (JSON). Frames from a worker are
// hostile: a length over the cap, an unknown kind or a short frame closes
// the connection and onBad names why (the gateway then kills the worker).
type Conn struct {
	conn     io.ReadWriteCloser
	r        *bufio.Reader
	MaxFrame int // the largest frame this side reads
	// PeerMax is the largest frame the peer reads: nothing bigger is ever
	// written (a call fails locally, an answer is replaced by TooLarge's),
	// so no program can make its side send a frame the other must refuse.
	PeerMax  atomic.Int64
	TooLarge func(path string, size int) []byte

	// Writes are grouped (write): whoever finds no write in progress
	// writes everything pending, again and again until nothing is, and
	// the others only append. Under load one system call carries many
	// frames, and the peer's read loop wakes once for them.
	wmu     sync.Mutex // guards pend, spare, writing, corked, werr
	pend    []byte     // frames appended and not yet written
	spare   []byte     // the last written buffer, reused
	writing bool
	// corked counts the callers holding writes back (cork): meanwhile
	// frames are only appended, and the last uncork writes them at once.
	corked int
	werr   error
	// held counts answers appended but held back for the next write
	// (replyLater); holdTimer writes them if none comes within holdFor.
	held      int
	holdTimer *time.Timer
	holdFor   time.Duration

	mu   sync.Mutex // guards next, waits, err, stops
	next uint64
	// waits holds the calls sent and not yet answered, by id; a call its
	// caller gave up on stays, with a nil channel, until its answer comes
	// (the peer serves it until then, and it keeps its place in calls).
	waits map[uint64]chan []byte
	// calls, when set (LimitCalls), holds a place for each request this
	// side has sent and whose answer has not come back: a call past it
	// waits for one, so this side never has more requests at once than
	// the peer serves (budgets.WireRequestsServing, past which the peer closes the
	// connection, and the gateway kills the worker).
	calls chan struct{}
	// stops cancels the requests this side serves on goroutines of their
	// own, by id: a cancel frame from the peer (its caller gave up) ends
	// the work it asked for.
	stops map[uint64]context.CancelFunc
	err   error

	handle func(ctx context.Context, path string, body []byte) ([]byte, error)
	onBad  func(reason string)
	// serving counts requests being handled; past budgets.WireRequestsServing the peer is
	// flooding (the gateway's calls and a worker's own are far fewer).
	serving atomic.Int64
	ctx     context.Context
	cancel  context.CancelFunc
	done    chan struct{}
	// Take, when set, may take a request on the read loop, in arrival
	// order, instead of a goroutine of its own (it must not block): it
	// answers true when it did, and the request is then answered with
	// reply, from wherever its answer is ready. The worker takes its
	// invocations this way (child's serve.go). payload may be the
	// reader's own buffer (read): it is valid while Take runs, and what
	// Take keeps of it past that it copies.
	Take func(id uint64, path string, payload []byte) bool
	// raw: frames are read by readRaw (ReadDrained).
	raw bool
}

const (
	kindRequest  = 1
	kindResponse = 2
	// kindCancel names a request of the sender's whose answer it no
	// longer waits for: the peer cancels the request's context (a run
	// whose caller left then ends in its worker, docs/architecture.md).
	kindCancel  = 3
	frameHeader = 8 + 1 + 2
)

func NewConn(conn io.ReadWriteCloser, maxFrame, peerMax int, handle func(context.Context, string, []byte) ([]byte, error), onBad func(string)) *Conn {
	ctx, cancel := context.WithCancel(context.Background())
	c := &Conn{
		conn: conn, r: bufio.NewReaderSize(conn, 64<<10),
		MaxFrame: maxFrame, waits: map[uint64]chan []byte{}, stops: map[uint64]context.CancelFunc{}, handle: handle, onBad: onBad, holdFor: holdFor,
		ctx: ctx, cancel: cancel, done: make(chan struct{}),
	}
	c.PeerMax.Store(int64(peerMax))
	return c
}

// start begins reading: the owner finishes wiring itself (the handler may
// use the connection) before the first request can arrive.
func (c *Conn) Start() *Conn {
	go c.readLoop()
	return c
}

// Done is closed when the connection ends.
func (c *Conn) Done() <-chan struct{} { return c.done }

// Close ends the connection.
func (c *Conn) Close() { c.conn.Close() }

func (c *Conn) readLoop() {
	defer close(c.done)
	defer c.cancel()
	err := c.read()
	c.conn.Close()
	c.mu.Lock()
	c.err = err
	for id, ch := range c.waits {
		if ch != nil {
			close(ch)
		}
		delete(c.waits, id)
	}
	c.mu.Unlock()
}

func (c *Conn) read() error {
	if c.raw { // ReadDrained
		rc, err := c.conn.(syscall.Conn).SyscallConn()
		if err != nil {
			return err
		}
		return c.readRaw(rc)
	}
	var lenBuf [4]byte
	for {
		if _, err := io.ReadFull(c.r, lenBuf[:]); err != nil {
			return err
		}
		n := int(binary.BigEndian.Uint32(lenBuf[:]))
		if err := c.checkLength(n); err != nil {
			return err
		}
		// A frame that fits the reader's buffer is read in place (Peek)
		// and dropped from it once handled (Discard): what outlives its
		// turn of this loop is copied (own), and what Take takes does not
		// (a worker's invocation: its fields are copied into the isolate's
		// own string as it is queued, docs/performance.md, "A worker's
		// bytes a request"). A frame and its path were two allocations a
		// request, each a fresh cache line of the heap.
		var frame []byte
		inPlace := n <= c.r.Size()
		if inPlace {
			var err error
			if frame, err = c.r.Peek(n); err != nil {
				return err
			}
		} else {
			frame = make([]byte, n)
			if _, err := io.ReadFull(c.r, frame); err != nil {
				return err
			}
		}
		if err := c.handleFrame(frame, inPlace); err != nil {
			return err
		}
		if inPlace {
			c.r.Discard(n)
		}
	}
}

// checkLength refuses a frame length the peer may not send.
func (c *Conn) checkLength(n int) error {
	if n < frameHeader || n > c.MaxFrame {
		c.bad(fmt.Sprintf("a frame of %d bytes", n))
		return errors.New("bad frame length")
	}
	return nil
}

// handleFrame handles one frame read whole; inPlace: frame is the
// reader's buffer, valid until handleFrame returns.
func (c *Conn) handleFrame(frame []byte, inPlace bool) error {
	n := len(frame)
	own := func(b []byte) []byte {
		if inPlace {
			return append(make([]byte, 0, len(b)), b...)
		}
		return b
	}
	id := binary.BigEndian.Uint64(frame[:8])
	kind := frame[8]
	pathLen := int(binary.BigEndian.Uint16(frame[9:11]))
	if frameHeader+pathLen > n {
		c.bad("a frame whose path overruns it")
		return errors.New("bad path length")
	}
	pathBytes := frame[frameHeader : frameHeader+pathLen]
	payload := frame[frameHeader+pathLen:]
	switch kind {
	case kindResponse:
		c.Deliver(id, own(payload))
	case kindRequest:
		if c.serving.Add(1) > budgets.WireRequestsServing {
			c.bad(fmt.Sprintf("more than %d requests at once", budgets.WireRequestsServing))
			return errors.New("request flood")
		}
		path := pathOf(pathBytes)
		if c.Take != nil && c.Take(id, path, payload) {
			return nil
		}
		payload = own(payload)
		ctx, stop := context.WithCancel(c.ctx)
		c.mu.Lock()
		c.stops[id] = stop
		c.mu.Unlock()
		go c.serve(ctx, id, path, payload)
	case kindCancel:
		c.mu.Lock()
		stop := c.stops[id]
		c.mu.Unlock()
		if stop != nil { // an unknown id was answered already
			stop()
		}
	default:
		c.bad(fmt.Sprintf("a frame of unknown kind %d", kind))
		return errors.New("bad frame kind")
	}
	return nil
}

// pathOf is a frame's path: one of the paths the hot frames carry is
// answered without an allocation (the comparison of string(b) makes
// none), any other is copied.
func pathOf(b []byte) string {
	switch string(b) {
	case PathInvoke:
		return PathInvoke
	case PathHost:
		return PathHost
	case PathCacheBatch:
		return PathCacheBatch
	case PathCacheAnswers:
		return PathCacheAnswers
	case PathLog:
		return PathLog
	case PathStreamRead:
		return PathStreamRead
	}
	return string(b)
}

// Deliver answers this side's call id with payload, as a response frame
// of the peer's would: an answer that came inside another frame
// (PathCacheAnswers). An id not waiting (answered already, or never sent)
// is ignored, as its frame would be.
func (c *Conn) Deliver(id uint64, payload []byte) {
	c.mu.Lock()
	ch, sent := c.waits[id]
	delete(c.waits, id)
	c.mu.Unlock()
	if sent {
		c.release()
	}
	if ch != nil { // nil: a call its caller gave up on
		ch <- payload
	}
}

// Answered ends the peer's request that Take took and whose answer left
// inside another frame (PathCacheAnswers), as ReplyLater would.
func (c *Conn) Answered() { c.serving.Add(-1) }

func (c *Conn) bad(reason string) {
	if c.onBad != nil {
		c.onBad(reason)
	}
}

func (c *Conn) serve(ctx context.Context, id uint64, path string, payload []byte) {
	defer func() {
		c.mu.Lock()
		stop := c.stops[id]
		delete(c.stops, id)
		c.mu.Unlock()
		if stop != nil {
			stop()
		}
	}()
	defer func() {
		if r := recover(); r != nil {
			c.serving.Add(-1)
			c.bad(fmt.Sprintf("a request for %s that failed: %v", path, r))
			c.conn.Close()
		}
	}()
	res, err := c.handle(ctx, path, payload)
	if err != nil {
		c.serving.Add(-1)
		c.bad(fmt.Sprintf("a request for %s: %v", path, err))
		c.conn.Close()
		return
	}
	c.reply(id, path, res)
}
