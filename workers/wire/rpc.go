package wire

import (
	"bufio"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
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
	// invocations this way (child's serve.go).
	Take func(id uint64, path string, payload []byte) bool
}

// MaxCalls is the most requests a worker has sent the gateway at once
// (LimitCalls): its isolates' host calls past it wait in the worker, so
// ordinary JavaScript (thousands of awaited calls across spawned runs)
// never makes its worker break the protocol (docs/architecture.md).
const MaxCalls = budgets.WireRequestsServing / 2

// LimitCalls bounds the requests this side has sent and not seen answered
// to n: a call past them waits for a place (within its context). Set it
// before Start.
func (c *Conn) LimitCalls(n int) { c.calls = make(chan struct{}, n) }

// release gives back a call's place (LimitCalls).
func (c *Conn) release() {
	if c.calls != nil {
		select {
		case <-c.calls:
		default:
		}
	}
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

var errConnClosed = errors.New("connection closed")

// ErrNotSent is a call refused because the connection had closed before
// its frame was written: the peer never saw it.
var ErrNotSent = errors.New("connection closed before the call was sent")

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
	var lenBuf [4]byte
	for {
		if _, err := io.ReadFull(c.r, lenBuf[:]); err != nil {
			return err
		}
		n := int(binary.BigEndian.Uint32(lenBuf[:]))
		if n < frameHeader || n > c.MaxFrame {
			c.bad(fmt.Sprintf("a frame of %d bytes", n))
			return errors.New("bad frame length")
		}
		frame := make([]byte, n)
		if _, err := io.ReadFull(c.r, frame); err != nil {
			return err
		}
		id := binary.BigEndian.Uint64(frame[:8])
		kind := frame[8]
		pathLen := int(binary.BigEndian.Uint16(frame[9:11]))
		if frameHeader+pathLen > n {
			c.bad("a frame whose path overruns it")
			return errors.New("bad path length")
		}
		path := string(frame[frameHeader : frameHeader+pathLen])
		payload := frame[frameHeader+pathLen:]
		switch kind {
		case kindResponse:
			c.Deliver(id, payload)
		case kindRequest:
			if c.serving.Add(1) > budgets.WireRequestsServing {
				c.bad(fmt.Sprintf("more than %d requests at once", budgets.WireRequestsServing))
				return errors.New("request flood")
			}
			if c.Take != nil && c.Take(id, path, payload) {
				continue
			}
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
	}
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

// reply answers request id (of path) with res: a request served on its own
// goroutine, or one that take took.
func (c *Conn) reply(id uint64, path string, res []byte) {
	c.ReplyLater(id, path, res, false)
}

// replyLater is reply for an answer that has more answers right behind it
// (more: its isolate has further invocations queued). The frame is held
// back for the next write, which carries it along, so under load one
// system call carries several answers and the peer's read loop wakes once
// for them; at most maxHeld frames wait, and none longer than holdFor
// (the next invocation may be slow). Measured (round 8,
// docs/history/performance-log.md): the worker's writes 4.2× fewer,
// gateway + worker CPU a request ~5% lower.
func (c *Conn) ReplyLater(id uint64, path string, res []byte, more bool) {
	defer c.serving.Add(-1)
	if size := 4 + frameHeader + len(res); size > int(c.PeerMax.Load()) && c.TooLarge != nil {
		res = c.TooLarge(path, size)
	}
	c.write(id, kindResponse, "", res, nil, more)
}

// maxHeld and holdFor bound what replyLater holds back.
const (
	maxHeld = 8
	holdFor = 500 * time.Microsecond
)

// flushHeld writes held answers that no write has carried yet.
func (c *Conn) flushHeld() {
	c.wmu.Lock()
	lead := c.held > 0 && !c.writing && c.corked == 0
	if lead {
		c.writing = true
	}
	c.wmu.Unlock()
	if lead {
		c.writePending()
	}
}

// ErrFrameTooLarge is a frame the peer would refuse; it is never written.
var ErrFrameTooLarge = errors.New("frame over the peer's cap")

// write sends a frame. It returns once the frame is queued behind every
// frame written before it: written by this call, or by the call already
// writing, which writes what was appended during its system call too, or
// by the uncork that ends a cork holding writes back. Frames therefore
// leave in the order write was called, with no added delay but a cork's;
// queued, when set, runs as soon as the frame's place is taken
// (before the system call), so the next frame of an ordered line can join
// the same write. A write that fails closes the connection (the read loop
// then fails every waiting call); later writes fail at once. hold lets the
// frame wait for the next write instead (replyLater).
func (c *Conn) write(id uint64, kind byte, path string, payload []byte, queued func(), hold bool) error {
	if queued == nil {
		queued = func() {}
	}
	if 4+frameHeader+len(path)+len(payload) > int(c.PeerMax.Load()) {
		queued()
		return ErrFrameTooLarge
	}
	var head [4 + frameHeader]byte
	binary.BigEndian.PutUint32(head[:4], uint32(frameHeader+len(path)+len(payload)))
	binary.BigEndian.PutUint64(head[4:12], id)
	head[12] = kind
	binary.BigEndian.PutUint16(head[13:15], uint16(len(path)))
	c.wmu.Lock()
	if err := c.werr; err != nil {
		c.wmu.Unlock()
		queued()
		return err
	}
	c.pend = append(append(append(c.pend, head[:]...), path...), payload...)
	lead := !c.writing && c.corked == 0
	if lead && hold && c.held < maxHeld {
		lead = false
		if c.held++; c.held == 1 {
			if c.holdTimer == nil {
				c.holdTimer = time.AfterFunc(c.holdFor, c.flushHeld)
			} else {
				c.holdTimer.Reset(c.holdFor)
			}
		}
	}
	if lead {
		c.writing = true
	}
	c.wmu.Unlock()
	queued()
	if !lead {
		return nil // the call already writing writes this frame too
	}
	return c.writePending()
}

// cork holds this side's writes back until the matching uncork: a caller
// about to write several frames (the kv flusher answering the invocations
// its batch settled) sends them in one system call, and the peer's read
// loop wakes once for them.
func (c *Conn) Cork() {
	c.wmu.Lock()
	c.corked++
	c.wmu.Unlock()
}

// uncork ends a cork; the last one writes what was held back.
func (c *Conn) Uncork() {
	c.wmu.Lock()
	c.corked--
	lead := c.corked == 0 && !c.writing && len(c.pend) > 0
	if lead {
		c.writing = true
	}
	c.wmu.Unlock()
	if lead {
		c.writePending()
	}
}

// writePending writes what is pending until nothing is; only the call that
// set c.writing runs it.
func (c *Conn) writePending() error {
	c.wmu.Lock()
	for len(c.pend) > 0 && c.werr == nil {
		buf := c.pend
		c.pend = c.spare[:0]
		if c.held > 0 { // this write carries them
			c.held = 0
			c.holdTimer.Stop()
		}
		c.wmu.Unlock()
		_, err := c.conn.Write(buf)
		c.wmu.Lock()
		if cap(buf) <= maxSpare { // a large answer's buffer is not kept
			c.spare = buf[:0]
		} else {
			c.spare = nil
		}
		if err != nil {
			c.werr = err
			c.pend = nil
		}
	}
	c.writing = false
	err := c.werr
	c.wmu.Unlock()
	if err != nil {
		c.conn.Close()
	}
	return err
}

// maxSpare is the largest write buffer kept for reuse.
const maxSpare = 256 << 10

// Call sends a request and waits for its response.
func (c *Conn) Call(ctx context.Context, path string, payload []byte) ([]byte, error) {
	return c.CallOrdered(ctx, path, payload, nil, nil, false)
}

// CallOrdered is Call with a turn around the write: before returns when
// the frame may be written, after runs once its place in the stream is
// taken (or it could not be written). hold lets the frame wait for the
// next write, as replyLater's answers do (up to maxHeld frames, holdFor):
// for a call whose peer has enough work ahead of it that the wait costs
// it nothing.
func (c *Conn) CallOrdered(ctx context.Context, path string, payload []byte, before, after func(), hold bool) ([]byte, error) {
	defer func() { // on the paths that end before the write
		if after != nil {
			after()
		}
	}()
	if 4+frameHeader+len(path)+len(payload) > int(c.PeerMax.Load()) {
		return nil, ErrFrameTooLarge
	}
	if c.calls != nil {
		select {
		case c.calls <- struct{}{}:
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-c.done:
			return nil, ErrNotSent
		}
	}
	ch := make(chan []byte, 1)
	c.mu.Lock()
	if c.err != nil {
		c.mu.Unlock()
		c.release()
		return nil, ErrNotSent
	}
	c.next++
	id := c.next
	c.waits[id] = ch
	c.mu.Unlock()
	if before != nil {
		before()
	}
	err := c.write(id, kindRequest, path, payload, after, hold)
	after = nil
	if err != nil {
		c.forget(id)
		c.release()
		if errors.Is(err, ErrFrameTooLarge) {
			return nil, err
		}
		return nil, errConnClosed
	}
	select {
	case res, ok := <-ch:
		if !ok {
			return nil, errConnClosed
		}
		return res, nil
	case <-ctx.Done():
		c.abandon(id)
		// The peer stops what it does for the call (best effort: a frame
		// that cannot be written means the connection is going anyway).
		go c.write(id, kindCancel, "", nil, nil, false)
		return nil, ctx.Err()
	}
}

func (c *Conn) forget(id uint64) {
	c.mu.Lock()
	delete(c.waits, id)
	c.mu.Unlock()
}

// abandon stops waiting for call id's answer; the call keeps its place
// (LimitCalls) until the answer comes, as the peer serves it until then.
func (c *Conn) abandon(id uint64) {
	c.mu.Lock()
	if _, ok := c.waits[id]; ok {
		c.waits[id] = nil
	}
	c.mu.Unlock()
}

// Link is the connection between the gateway and one worker: two
// socketpairs, one for each direction. Over a single socket each answer
// woke the worker twice: once for the next request and once for nothing,
// when the gateway read the answer and the kernel told the worker's side,
// registered edge-triggered for both readiness kinds by Go's poller, that
// it could write again (strace: an EPOLLOUT-only wake per invocation; a
// context switch apiece for fifty sleeping workers, docs/history/performance-log.md).
// So the worker reads one socket through the poller and writes the other,
// a blocking descriptor the poller never sees: nothing wakes it but work.
// The gateway keeps both of its ends in its poller, where a worker that
// stops reading parks a goroutine, never a thread.
type Link struct {
	in  io.ReadCloser
	out io.WriteCloser
}

func (l *Link) Read(p []byte) (int, error)  { return l.in.Read(p) }
func (l *Link) Write(p []byte) (int, error) { return l.out.Write(p) }

// Close closes both directions.
func (l *Link) Close() error {
	err := l.in.Close()
	if werr := l.out.Close(); err == nil {
		err = werr
	}
	return err
}

// NewLink makes the two socketpairs of a new worker: the gateway's link
// and the two ends the worker inherits, in the order of FdIn and FdOut
// (exec.Cmd's ExtraFiles); the caller closes those once the worker has
// started.
func NewLink() (gateway *Link, child []*os.File, err error) {
	var ends [2][2]int
	for i := range ends {
		if ends[i], err = syscall.Socketpair(syscall.AF_UNIX, syscall.SOCK_STREAM|syscall.SOCK_CLOEXEC, 0); err != nil {
			for _, e := range ends[:i] {
				syscall.Close(e[0])
				syscall.Close(e[1])
			}
			return nil, nil, fmt.Errorf("socketpair: %w", err)
		}
	}
	// ends[0] carries the gateway's frames, ends[1] the worker's.
	toWorker, err := fileConn(ends[0][0], "to-worker")
	if err == nil {
		var fromWorker net.Conn
		if fromWorker, err = fileConn(ends[1][0], "from-worker"); err == nil {
			return &Link{in: fromWorker, out: toWorker}, []*os.File{os.NewFile(uintptr(ends[0][1]), "worker-in"), os.NewFile(uintptr(ends[1][1]), "worker-out")}, nil
		}
		toWorker.Close()
	} else {
		syscall.Close(ends[1][0])
	}
	syscall.Close(ends[0][1])
	syscall.Close(ends[1][1])
	return nil, nil, err
}

// WorkerLink is a worker's link to the gateway, from the two descriptors
// it inherited (FdIn, FdOut).
func WorkerLink() (*Link, error) { return FileLink(FdIn, FdOut) }

// FileLink is the worker's side of a link: it reads descriptor in and
// writes descriptor out, and owns both from then on.
func FileLink(in, out int) (*Link, error) {
	r, err := fileConn(in, "gateway-in")
	if err != nil {
		syscall.Close(out)
		return nil, err
	}
	// Blocking, so that os.NewFile leaves it out of the poller: a write
	// is one system call, and the gateway always reads.
	if err := syscall.SetNonblock(out, false); err != nil {
		r.Close()
		return nil, fmt.Errorf("fd %d is not open: %w", out, err)
	}
	return &Link{in: r, out: os.NewFile(uintptr(out), "gateway-out")}, nil
}

// LinkPair is both sides of a new link in this process, the worker's side
// owning descriptors of its own as across an exec: for tests of the
// protocol on either side.
func LinkPair() (gateway, worker *Link, err error) {
	gateway, child, err := NewLink()
	if err != nil {
		return nil, nil, err
	}
	defer func() {
		for _, f := range child {
			f.Close()
		}
	}()
	var fds [2]int
	for i, f := range child {
		if fds[i], err = syscall.Dup(int(f.Fd())); err != nil {
			for _, fd := range fds[:i] {
				syscall.Close(fd)
			}
			gateway.Close()
			return nil, nil, err
		}
	}
	if worker, err = FileLink(fds[0], fds[1]); err != nil {
		gateway.Close()
		return nil, nil, err
	}
	return gateway, worker, nil
}

// fileConn makes descriptor fd a net.Conn in the poller; fd itself is
// closed (net.FileConn works on a copy).
func fileConn(fd int, name string) (net.Conn, error) {
	f := os.NewFile(uintptr(fd), name)
	if f == nil {
		return nil, fmt.Errorf("fd %d is not open", fd)
	}
	defer f.Close()
	return net.FileConn(f)
}
