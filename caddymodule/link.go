package caddymodule

import (
	"bufio"
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"net/url"
	"os"
	goruntime "runtime"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// The link between members (docs/cluster.md, "The link between members"):
// a forwarded request crosses as a stream of frames on one persistent TCP
// connection per member, which carries every forward to that member at
// once. The frames of many forwards share the connection's reads and
// writes (a writer goroutine sends whatever is queued in one write), and
// neither side re-encodes a request or an answer beyond a length-prefixed
// list of its fields; a proxy hop over HTTP/1.1 (one connection per
// request in flight, two goroutines each side) cost the forwarder about
// what serving the request cost the owner, and HTTP/2 cleartext cost
// more still (measured: forwarded / owner 0.37-0.50 against 0.49-0.54).
//
// What a forward carries is what it carried over HTTP/1.1: the method,
// target, Host and headers, the Retainer-Forwarded header with its HMAC,
// nonce and timestamp, and the body (a chained body's sealed frames inside
// the link's data frames, forwardbody.go). The owner serves it with
// serveForwarded, which checks all of it as before, and a connection to
// the cluster listener that speaks the link without the secret gets what
// a forged HTTP request gets (403): the read loop checks each head's
// signature before anything is held for it, and the bounds below cap
// what a connection holds however its peer behaves. WebSocket upgrades go
// over HTTP/1.1 as before; the cluster listener tells the two apart by the
// link's first byte (0, which no HTTP request starts with).
//
// Frames: a 9-byte head (type, stream id, payload length) and the payload.
// Only the forwarder opens streams. Each direction of a stream has a
// window of linkWindow bytes: a side sends body bytes only while the
// other has room for them (credits), so one slow visitor or handler holds
// only its own stream, never the connection.

const (
	linkPreface = "\x00retainer-link/1\n"

	frameHead   = 1 // forwarder: the request's method, target, Host, length and headers
	frameData   = 2 // body bytes (either way)
	frameEnd    = 3 // the body's end (either way)
	frameReset  = 4 // the stream is abandoned (either way)
	frameWindow = 5 // room for 4-byte-count more body bytes (either way)
	frameAnswer = 6 // owner: the answer's status and headers

	frameHeadSize = 9
	// linkWindow is how many body bytes one direction of a stream may
	// have in flight; linkMaxData the most in one frame, linkMaxHead in a
	// request's or answer's head.
	linkWindow  = 256 << 10
	linkMaxData = 32 << 10
	linkMaxHead = 2 << 20
	// linkConnWindow is how many body bytes all the streams of one
	// connection may have in flight in one direction: what a receiver
	// holds for a connection, however many streams it carries.
	linkConnWindow = 16 << 20
	// linkMaxStreams is the most streams an owner serves on one
	// connection at once; past it a new one is reset (the forwarder
	// answers the retryable 503).
	linkMaxStreams = 4096
	// linkDialTimeout bounds connecting to a member.
	linkDialTimeout = 5 * time.Second

	// What one who reaches the cluster listener without the secret may
	// hold (docs/cluster.md, "The link between members"):
	//
	// linkMaxFields bounds a request head's header fields (and the
	// forwarder refuses to send more: 413); a head's map and strings are
	// made as it is read, never from the count it claims.
	linkMaxFields = 8192
	// linkMaxQueued is the most a connection's writer may hold unwritten
	// (the peer does not read): past it the connection ends.
	linkMaxQueued = 4 * linkConnWindow
	// linkMaxConnsPerHost and linkMaxConns bound the link connections an
	// owner serves at once from one address and in all.
	linkMaxConnsPerHost = 32
	linkMaxConns        = 512
)

// The owner's waits (variables: tests shorten them).
var (
	// linkIdle closes an owner's connection that carries no stream and
	// sent nothing for as long (the forwarder stops using its own after
	// half of it); linkFrameWait bounds the wait for the rest of a frame
	// once its first byte came, and for a connection's first frame.
	linkIdle      = 2 * time.Minute
	linkFrameWait = 10 * time.Second
	// linkStall resets an owner's stream whose answer waited as long
	// for the stream's window and the peer gave none back for it (its
	// visitor reads nothing), and closes the connection when an answer
	// waited as long for the connection's window and the peer gave none
	// back on any stream.
	linkStall = time.Minute
)

// errLinkStalled ends a connection whose peer gave no room back for
// linkStall while an answer waited for it.
var errLinkStalled = errors.New("the member gave no room back on the link")

// errLinkStreamStalled resets a stream whose peer gave no room back for
// it for linkStall while its answer waited (its visitor reads nothing).
var errLinkStreamStalled = errors.New("the member gave no room back for the answer")

// errLinkDown is a stream's error when its connection ended.
var errLinkDown = errors.New("the link to the member ended")

// errLinkReset is a stream's error when the other side abandoned it.
var errLinkReset = errors.New("the stream was abandoned")

// linkConn is one side of a link connection.
type linkConn struct {
	c  net.Conn
	br *bufio.Reader

	wmu     sync.Mutex
	queued  []byte
	wake    chan struct{}
	done    chan struct{}
	failErr error
	ending  bool // the writer ends the connection once the queue is written
	once    sync.Once

	mu      sync.Mutex
	streams map[uint32]*linkStream
	nextID  uint32

	// room is what this side may still send of bodies on the connection
	// (the other side's linkConnWindow); held what it holds of the other
	// side's, and freed what it freed of that since its last window
	// frame for the connection (stream 0).
	room  linkCredit
	held  atomic.Int64
	freed atomic.Int64

	// The owner's bounds (zero on the forwarder's side): idle, the
	// frame's wait and the room's stall (linkIdle, linkFrameWait,
	// linkStall); deadline is whether a read deadline is set.
	idle, frameWait, stall time.Duration
	deadline               bool
	// used is when the forwarder last opened a stream, windowed when a
	// window frame last came (unix ns).
	used, windowed atomic.Int64
}

func newLinkConn(c net.Conn, br *bufio.Reader) *linkConn {
	l := &linkConn{c: c, br: br, wake: make(chan struct{}, 1), done: make(chan struct{}), streams: map[uint32]*linkStream{}}
	l.room.init(linkConnWindow)
	l.used.Store(time.Now().UnixNano())
	go l.writeLoop()
	return l
}

// stale is whether the forwarder should dial again rather than use l: no
// stream open and none opened for half of idle (the owner's linkIdle).
func (l *linkConn) stale(idle time.Duration) bool {
	return time.Since(time.Unix(0, l.used.Load())) > idle/2 && l.streamsOpen() == 0
}

// received counts body bytes the other side sent; false when they are
// past the connection's window.
func (l *linkConn) received(n int) bool {
	return l.held.Add(int64(n)) <= linkConnWindow
}

// free gives back n received body bytes (read, or dropped), telling the
// other side once an eighth of the window is free again.
func (l *linkConn) free(n int) {
	if n <= 0 {
		return
	}
	l.held.Add(-int64(n))
	if f := l.freed.Add(int64(n)); f >= linkConnWindow/8 && l.freed.CompareAndSwap(f, 0) {
		var b [4]byte
		binary.BigEndian.PutUint32(b[:], uint32(f))
		l.send(appendFrame(nil, frameWindow, 0, b[:]))
	}
}

// window takes a window frame's room.
func (l *linkConn) window(id uint32, payload []byte) {
	if len(payload) != 4 {
		return
	}
	n := int(binary.BigEndian.Uint32(payload))
	now := time.Now().UnixNano()
	l.windowed.Store(now)
	if id == 0 {
		l.room.add(n)
	} else if s := l.stream(id); s != nil {
		s.windowed.Store(now)
		s.out.add(n)
	}
}

// data takes a data frame: the stream's, or dropped (and given back)
// when the stream is gone here. False when the sender went past a window.
func (l *linkConn) data(id uint32, payload []byte) bool {
	if !l.received(len(payload)) {
		return false
	}
	s := l.stream(id)
	if s == nil {
		l.free(len(payload))
		return true
	}
	return s.in.push(payload)
}

// send queues frames for the writer; it never blocks on the network
// (each stream's window bounds what is queued).
func (l *linkConn) send(frames []byte) {
	l.wmu.Lock()
	if l.failErr != nil {
		l.wmu.Unlock()
		return
	}
	if len(l.queued)+len(frames) > linkMaxQueued {
		// The other side reads nothing: the connection ends.
		l.wmu.Unlock()
		go l.fail(errors.New("the member reads nothing of the link"))
		return
	}
	l.queued = append(l.queued, frames...)
	l.wmu.Unlock()
	select {
	case l.wake <- struct{}{}:
	default:
	}
}

// writeLoop writes whatever is queued, all of it in one write.
func (l *linkConn) writeLoop() {
	var out []byte
	for {
		select {
		case <-l.wake:
		case <-l.done:
			return
		}
		// The other forwards that are ready to run queue their frames
		// first, and leave in the same write.
		goruntime.Gosched()
		l.wmu.Lock()
		out, l.queued = l.queued, out[:0]
		ending := l.ending && len(out) > 0
		l.wmu.Unlock()
		if len(out) == 0 {
			if l.ending {
				l.fail(errLinkDown)
				return
			}
			continue
		}
		if _, err := l.c.Write(out); err != nil {
			l.fail(err)
			return
		}
		if ending {
			select {
			case l.wake <- struct{}{}:
			default:
			}
		}
		if cap(out) > 1<<20 {
			out = nil
		}
	}
}

// fail ends the connection: every stream on it ends with errLinkDown.
func (l *linkConn) fail(err error) {
	l.once.Do(func() {
		l.wmu.Lock()
		l.failErr = err
		l.queued = nil
		l.wmu.Unlock()
		close(l.done)
		l.c.Close()
		l.mu.Lock()
		streams := l.streams
		l.streams = map[uint32]*linkStream{}
		l.mu.Unlock()
		for _, s := range streams {
			s.end(errLinkDown)
		}
		l.room.close(errLinkDown)
	})
}

func (l *linkConn) alive() bool {
	select {
	case <-l.done:
		return false
	default:
		return true
	}
}

// appendFrame appends a frame to b.
func appendFrame(b []byte, typ byte, id uint32, payload []byte) []byte {
	var h [frameHeadSize]byte
	h[0] = typ
	binary.BigEndian.PutUint32(h[1:5], id)
	binary.BigEndian.PutUint32(h[5:9], uint32(len(payload)))
	return append(append(b, h[:]...), payload...)
}

// readFrame reads one frame; its payload is valid until the next read.
func (l *linkConn) readFrame(buf []byte) (typ byte, id uint32, payload []byte, err error) {
	var h [frameHeadSize]byte
	if l.frameWait > 0 && l.br.Buffered() < frameHeadSize {
		// Waiting for the next frame: at most linkIdle when no stream
		// is open (a stream's handler may take its time).
		var d time.Time
		if l.idle > 0 && l.streamsOpen() == 0 {
			d = time.Now().Add(l.idle)
		}
		if !d.IsZero() || l.deadline {
			l.c.SetReadDeadline(d)
			l.deadline = !d.IsZero()
		}
	}
	if _, err = io.ReadFull(l.br, h[:]); err != nil {
		return
	}
	typ, id = h[0], binary.BigEndian.Uint32(h[1:5])
	n := binary.BigEndian.Uint32(h[5:9])
	limit := uint32(linkMaxData)
	if typ == frameHead || typ == frameAnswer {
		limit = linkMaxHead
	}
	if n > limit {
		return 0, 0, nil, fmt.Errorf("a link frame of %d bytes", n)
	}
	if l.frameWait > 0 && l.br.Buffered() < int(n) {
		l.c.SetReadDeadline(time.Now().Add(l.frameWait))
		l.deadline = true
	}
	if cap(buf) < int(n) && n > 64<<10 {
		// Grown as the bytes come, not from the length claimed.
		b := bytes.NewBuffer(buf[:0])
		_, err = io.CopyN(b, l.br, int64(n))
		return typ, id, b.Bytes(), err
	}
	if cap(buf) < int(n) {
		buf = make([]byte, n)
	}
	payload = buf[:n]
	_, err = io.ReadFull(l.br, payload)
	return
}

// streamsOpen answers how many streams are open on l.
func (l *linkConn) streamsOpen() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return len(l.streams)
}

func (l *linkConn) stream(id uint32) *linkStream {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.streams[id]
}

func (l *linkConn) drop(id uint32) {
	l.mu.Lock()
	delete(l.streams, id)
	l.mu.Unlock()
}

// linkStream is one request on a link: the body bytes it receives (in)
// and the room it has to send (out).
type linkStream struct {
	id   uint32
	conn *linkConn
	in   linkInbox
	out  linkCredit
	// answer is the owner's answer head (forwarder's side).
	answer chan linkAnswer
	// cancel ends the handler's context (owner's side).
	cancel context.CancelFunc
	// ended is closed when the stream ends before its time (reset, or
	// the connection's end).
	ended   chan struct{}
	endOnce sync.Once
	// windowed is when a window frame last came for the stream (unix
	// ns).
	windowed atomic.Int64
}

// end ends both directions of the stream with err.
func (s *linkStream) end(err error) {
	s.in.close(err)
	s.out.close(err)
	if s.cancel != nil {
		s.cancel()
	}
	s.endOnce.Do(func() { close(s.ended) })
}

// reset abandons the stream: the other side is told, and it is forgotten.
func (s *linkStream) reset() {
	s.conn.drop(s.id)
	s.end(errLinkReset)
	s.conn.send(appendFrame(nil, frameReset, s.id, nil))
}

// linkInbox holds the body bytes a stream received and not yet read: at
// most linkWindow, since the sender waits for room (linkCredit).
type linkInbox struct {
	mu       sync.Mutex
	data     []byte
	off      int
	err      error // io.EOF at the end
	notify   chan struct{}
	deadline time.Time
	unacked  int // read since the last window frame
	// grant tells the sender of room made by reading; free gives bytes
	// back to the connection's window (read, or dropped).
	grant func(n int)
	free  func(n int)
}

func (b *linkInbox) init(grant, free func(int)) {
	b.notify = make(chan struct{}, 1)
	b.grant, b.free = grant, free
}

func (b *linkInbox) poke() {
	select {
	case b.notify <- struct{}{}:
	default:
	}
}

// push adds received bytes; false when the sender went past its window.
func (b *linkInbox) push(p []byte) bool {
	b.mu.Lock()
	if b.err != nil && b.err != io.EOF {
		b.mu.Unlock()
		b.free(len(p))
		return true // abandoned on this side: dropped
	}
	if b.err != nil || len(b.data)-b.off+len(p) > linkWindow {
		b.mu.Unlock()
		return false // past the end, or past the window
	}
	if b.off > 0 && len(b.data)+len(p) > cap(b.data) {
		b.data = b.data[:copy(b.data, b.data[b.off:])]
		b.off = 0
	}
	b.data = append(b.data, p...)
	b.mu.Unlock()
	b.poke()
	return true
}

// close ends the bytes to come with err: io.EOF or errLinkDown (what is
// held is still read first), or errLinkReset, which drops what is held.
func (b *linkInbox) close(err error) {
	b.mu.Lock()
	dropped := 0
	switch {
	case err == errLinkReset:
		// Abandoned: what is held is dropped, and the body never reads
		// as whole.
		b.err = err
		dropped = len(b.data) - b.off
		b.data, b.off = nil, 0
	case b.err == nil:
		b.err = err // io.EOF, or the link's end: what is held is read first
	}
	b.mu.Unlock()
	b.free(dropped)
	b.poke()
}

func (b *linkInbox) setDeadline(t time.Time) {
	b.mu.Lock()
	b.deadline = t
	b.mu.Unlock()
	b.poke()
}

func (b *linkInbox) Read(p []byte) (int, error) { return b.read(p, nil) }

// read reads, or answers context.Canceled once done is closed.
func (b *linkInbox) read(p []byte, done <-chan struct{}) (int, error) {
	for {
		b.mu.Lock()
		if b.off < len(b.data) {
			n := copy(p, b.data[b.off:])
			b.off += n
			b.unacked += n
			var grant int
			if b.unacked >= linkWindow/4 && b.err == nil {
				grant, b.unacked = b.unacked, 0
			}
			b.mu.Unlock()
			b.free(n)
			if grant > 0 {
				b.grant(grant)
			}
			return n, nil
		}
		if b.err != nil {
			err := b.err
			b.mu.Unlock()
			return 0, err
		}
		deadline := b.deadline
		b.mu.Unlock()
		if err := waitNotify(b.notify, deadline, done); err != nil {
			return 0, err
		}
	}
}

// waitNotify waits for a poke, the deadline (os.ErrDeadlineExceeded) or
// done.
func waitNotify(notify chan struct{}, deadline time.Time, done <-chan struct{}) error {
	if deadline.IsZero() {
		select {
		case <-notify:
			return nil
		case <-done:
			return context.Canceled
		}
	}
	left := time.Until(deadline)
	if left <= 0 {
		return os.ErrDeadlineExceeded
	}
	t := time.NewTimer(left)
	defer t.Stop()
	select {
	case <-notify:
		return nil
	case <-t.C:
		return os.ErrDeadlineExceeded
	case <-done:
		return context.Canceled
	}
}

// linkCredit is the room a stream has to send body bytes.
type linkCredit struct {
	mu   sync.Mutex
	room int
	err  error
	// wake, made by the first waiter, is closed at every change: every
	// waiter looks again (a connection's room has many).
	wake     chan struct{}
	deadline time.Time
}

func (c *linkCredit) init(room int) {
	c.room = room
}

// expired is whether the deadline set passed.
func (c *linkCredit) expired() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return !c.deadline.IsZero() && !time.Now().Before(c.deadline)
}

// tryTake takes n bytes of room if there are as many, at once.
func (c *linkCredit) tryTake(n int) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.err != nil || c.room < n {
		return false
	}
	c.room -= n
	return true
}

func (c *linkCredit) add(n int) {
	c.mu.Lock()
	c.room += n
	c.changed()
	c.mu.Unlock()
}

func (c *linkCredit) close(err error) {
	c.mu.Lock()
	if c.err == nil {
		c.err = err
	}
	c.changed()
	c.mu.Unlock()
}

func (c *linkCredit) setDeadline(t time.Time) {
	c.mu.Lock()
	c.deadline = t
	c.changed()
	c.mu.Unlock()
}

// changed wakes every waiter; c.mu is held.
func (c *linkCredit) changed() {
	if c.wake != nil {
		close(c.wake)
		c.wake = nil
	}
}

// take waits for room and takes up to n bytes of it.
func (c *linkCredit) take(n int, done <-chan struct{}) (int, error) {
	return c.takeBy(n, done, time.Time{})
}

// takeBy is take, waiting at most until by (zero: no bound but the
// deadline set).
func (c *linkCredit) takeBy(n int, done <-chan struct{}, by time.Time) (int, error) {
	for {
		c.mu.Lock()
		if c.err != nil {
			err := c.err
			c.mu.Unlock()
			return 0, err
		}
		if c.room > 0 {
			n = min(n, c.room)
			c.room -= n
			c.mu.Unlock()
			return n, nil
		}
		if c.wake == nil {
			c.wake = make(chan struct{})
		}
		deadline, wake := c.deadline, c.wake
		if !by.IsZero() && (deadline.IsZero() || by.Before(deadline)) {
			deadline = by
		}
		c.mu.Unlock()
		if err := waitNotify(wake, deadline, done); err != nil {
			return 0, err
		}
	}
}

// sendBody sends p as data frames, within the stream's room and the
// connection's.
func (s *linkStream) sendBody(p []byte, done <-chan struct{}) error {
	for len(p) > 0 {
		n, err := s.conn.takeRoom(&s.out, &s.windowed, min(len(p), linkMaxData), done)
		if err != nil {
			return err
		}
		m, err := s.conn.takeRoom(&s.conn.room, &s.conn.windowed, n, done)
		if err != nil {
			s.out.add(n)
			return err
		}
		if m < n {
			s.out.add(n - m)
		}
		s.conn.send(appendFrame(nil, frameData, s.id, p[:m]))
		p = p[m:]
	}
	return nil
}

// takeRoom takes up to n bytes of c's room (a stream's or the
// connection's: windowed is when a window frame last gave it room). On
// an owner's connection, a wait of linkStall during which the peer gave
// no room back for it ends the stream when it is a stream's room (that
// stream's visitor reads nothing: only it is reset, and the forwards
// beside it go on), and ends the connection when it is the connection's
// (the peer reads nothing: the answers waiting would wait forever).
func (l *linkConn) takeRoom(c *linkCredit, windowed *atomic.Int64, n int, done <-chan struct{}) (int, error) {
	if l.stall <= 0 {
		return c.take(n, done)
	}
	since := time.Now().UnixNano()
	for {
		m, err := c.takeBy(n, done, time.Now().Add(l.stall))
		if !errors.Is(err, os.ErrDeadlineExceeded) || c.expired() {
			return m, err
		}
		if time.Since(time.Unix(0, max(since, windowed.Load()))) < l.stall {
			continue
		}
		if windowed != &l.windowed {
			return 0, errLinkStreamStalled
		}
		l.fail(errLinkStalled)
		return 0, errLinkStalled
	}
}

// tryRoom takes room for n bytes on the stream and the connection at
// once, or none.
func (s *linkStream) tryRoom(n int) bool {
	if !s.out.tryTake(n) {
		return false
	}
	if !s.conn.room.tryTake(n) {
		s.out.add(n)
		return false
	}
	return true
}

// newStream registers a stream on l.
func (l *linkConn) newStream(id uint32) *linkStream {
	s := &linkStream{id: id, conn: l, ended: make(chan struct{})}
	s.in.init(func(n int) {
		var b [4]byte
		binary.BigEndian.PutUint32(b[:], uint32(n))
		l.send(appendFrame(nil, frameWindow, id, b[:]))
	}, l.free)
	s.out.init(linkWindow)
	return s
}

// The heads: a list of strings, each a uvarint length and its bytes.

func appendString(b []byte, s string) []byte {
	b = binary.AppendUvarint(b, uint64(len(s)))
	return append(b, s...)
}

// headerFields answers how many fields h has.
func headerFields(h http.Header) int {
	n := 0
	for _, vs := range h {
		n += len(vs)
	}
	return n
}

func appendHeader(b []byte, h http.Header) []byte {
	n := 0
	for _, vs := range h {
		n += len(vs)
	}
	b = binary.AppendUvarint(b, uint64(n))
	for name, vs := range h {
		for _, v := range vs {
			b = appendString(appendString(b, name), v)
		}
	}
	return b
}

type headReader struct {
	b   []byte
	err error
}

func (r *headReader) string() string {
	n, k := binary.Uvarint(r.b)
	if k <= 0 || n > uint64(len(r.b)-k) {
		r.err = errors.New("a malformed link head")
		r.b = nil
		return ""
	}
	s := string(r.b[k : k+int(n)])
	r.b = r.b[k+int(n):]
	return s
}

func (r *headReader) uvarint() uint64 {
	n, k := binary.Uvarint(r.b)
	if k <= 0 {
		r.err = errors.New("a malformed link head")
		r.b = nil
		return 0
	}
	r.b = r.b[k:]
	return n
}

// header reads a header of at most max fields; its map grows as they
// are read (a head claims any count it likes).
func (r *headReader) header(max uint64) http.Header {
	n := r.uvarint()
	if n > uint64(len(r.b)) || n > max {
		r.err = errors.New("a malformed link head")
		return nil
	}
	h := make(http.Header, min(n, 16))
	for i := uint64(0); i < n && r.err == nil; i++ {
		name := r.string()
		h[name] = append(h[name], r.string())
	}
	return h
}

// hopHeaders are the headers of one connection, which a proxy hop does
// not pass on (RFC 9110, 7.6.1).
var hopHeaders = []string{"Connection", "Proxy-Connection", "Keep-Alive", "Proxy-Authenticate",
	"Proxy-Authorization", "Te", "Trailer", "Transfer-Encoding", "Upgrade"}

// withoutHopHeaders answers h without the hop-by-hop headers (those
// named in Connection included); h itself is not changed.
func withoutHopHeaders(h http.Header) http.Header {
	drop := false
	for _, name := range hopHeaders {
		if _, ok := h[name]; ok {
			drop = true
			break
		}
	}
	if !drop {
		return h
	}
	out := h.Clone()
	for _, v := range out["Connection"] {
		for _, name := range strings.Split(v, ",") {
			if name = strings.TrimSpace(name); name != "" {
				out.Del(name)
			}
		}
	}
	for _, name := range hopHeaders {
		out.Del(name)
	}
	return out
}

// linkAnswer is an owner's answer head.
type linkAnswer struct {
	status int
	header http.Header
}

// linkClient is the forwarder's side: one connection per member address,
// dialled when first needed and again after it ended.
type linkClient struct {
	// headTimeout bounds the wait for an answer's head (the lease).
	headTimeout time.Duration
	// idle is linkIdle when the client was made.
	idle  time.Duration
	mu    sync.Mutex
	conns map[string]*linkDial
}

// linkDial is a member's connection, or its dial in progress.
type linkDial struct {
	ready chan struct{}
	conn  *linkConn
	err   error
}

func newLinkClient(headTimeout time.Duration) *linkClient {
	return &linkClient{headTimeout: headTimeout, idle: linkIdle, conns: map[string]*linkDial{}}
}

// get answers the connection to addr, dialling it when there is none
// alive. A dial's error (a *net.OpError "dial") is the caller's: the
// member cannot be reached.
func (c *linkClient) get(ctx context.Context, addr string) (*linkConn, error) {
	c.mu.Lock()
	d := c.conns[addr]
	if d != nil {
		select {
		case <-d.ready:
			if d.err != nil || !d.conn.alive() || d.conn.stale(c.idle) {
				// A connection unused for half of linkIdle is left
				// for the owner to close, before it does.
				d = nil
			}
		default:
		}
	}
	if d == nil {
		d = &linkDial{ready: make(chan struct{})}
		c.conns[addr] = d
		go func() {
			conn, err := (&net.Dialer{Timeout: linkDialTimeout}).Dial("tcp", addr)
			if err == nil {
				if _, err = io.WriteString(conn, linkPreface); err != nil {
					conn.Close()
				}
			}
			if err == nil {
				d.conn = newLinkConn(conn, bufio.NewReaderSize(conn, 64<<10))
				go c.readLoop(d.conn)
			} else {
				c.mu.Lock()
				if c.conns[addr] == d {
					delete(c.conns, addr)
				}
				c.mu.Unlock()
			}
			d.err = err
			close(d.ready)
		}()
	}
	c.mu.Unlock()
	select {
	case <-d.ready:
		return d.conn, d.err
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

// forget closes the connection to addr (its member is gone): the
// streams on it end at once.
func (c *linkClient) forget(addr string) {
	if c == nil {
		return
	}
	c.mu.Lock()
	d := c.conns[addr]
	delete(c.conns, addr)
	c.mu.Unlock()
	if d != nil {
		go func() {
			<-d.ready
			if d.conn != nil {
				d.conn.fail(errLinkDown)
			}
		}()
	}
}

// close ends every connection.
func (c *linkClient) close() {
	if c == nil {
		return
	}
	c.mu.Lock()
	addrs := make([]string, 0, len(c.conns))
	for addr := range c.conns {
		addrs = append(addrs, addr)
	}
	c.mu.Unlock()
	for _, addr := range addrs {
		c.forget(addr)
	}
}

// readLoop is the forwarder's reader: answers, body bytes and room.
func (c *linkClient) readLoop(l *linkConn) {
	var buf []byte
	for {
		typ, id, payload, err := l.readFrame(buf)
		if err != nil {
			l.fail(err)
			return
		}
		if cap(payload) > cap(buf) {
			buf = payload[:0]
		}
		switch typ {
		case frameData:
			if !l.data(id, payload) {
				l.fail(errors.New("a member sent past a window"))
				return
			}
			continue
		case frameWindow:
			l.window(id, payload)
			continue
		}
		s := l.stream(id)
		if s == nil {
			continue // abandoned here
		}
		switch typ {
		case frameAnswer:
			hr := headReader{b: payload}
			a := linkAnswer{status: int(hr.uvarint()), header: hr.header(uint64(len(hr.b)))}
			if hr.err != nil || a.status < 200 || a.status > 999 {
				l.fail(errors.New("a malformed answer on the link"))
				return
			}
			select {
			case s.answer <- a:
			default:
				l.fail(errors.New("a second answer on the link"))
				return
			}
		case frameEnd:
			l.drop(id)
			s.in.close(io.EOF)
			s.out.close(errLinkReset) // the owner wants no more of the body
		case frameReset:
			l.drop(id)
			s.end(errLinkReset)
		}
	}
}

// open starts a stream for a request on l and sends its head, with the
// body held whole (or none) and its end when there is room for them at
// once; otherwise they are the caller's to send (pump).
func (l *linkConn) open(head []byte, held []byte, hasBody bool) (s *linkStream, sent bool) {
	l.used.Store(time.Now().UnixNano())
	l.mu.Lock()
	l.nextID++
	s = l.newStream(l.nextID)
	s.answer = make(chan linkAnswer, 1)
	l.streams[s.id] = s
	l.mu.Unlock()
	frames := appendFrame(make([]byte, 0, frameHeadSize*4+len(head)+len(held)), frameHead, s.id, head)
	if !hasBody && s.tryRoom(len(held)) {
		for len(held) > 0 {
			n := min(len(held), linkMaxData)
			frames = appendFrame(frames, frameData, s.id, held[:n])
			held = held[n:]
		}
		frames = appendFrame(frames, frameEnd, s.id, nil)
		sent = true
	}
	l.send(frames)
	return s, sent
}

// linkRequestHead encodes what the owner rebuilds a request from: r's
// method, target, Host and headers, but for the hop-by-hop ones and any
// Retainer-Forwarded, which is given (signed for this request).
func linkRequestHead(r *http.Request, forwarded string, contentLength int64) []byte {
	b := make([]byte, 0, 512)
	b = appendString(b, r.Method)
	b = appendString(b, r.URL.RequestURI())
	b = appendString(b, r.Host)
	b = binary.AppendVarint(b, contentLength)
	h := withoutHopHeaders(r.Header)
	n := 1
	for name, vs := range h {
		if name != forwardHeader {
			n += len(vs)
		}
	}
	b = binary.AppendUvarint(b, uint64(n))
	for name, vs := range h {
		if name == forwardHeader {
			continue
		}
		for _, v := range vs {
			b = appendString(appendString(b, name), v)
		}
	}
	return appendString(appendString(b, forwardHeader), forwarded)
}

// roundTrip sends r with its Retainer-Forwarded header to addr on the
// link and answers the owner's answer head; its body is the stream's to
// read (in), and the stream the caller's to reset if it stops reading
// early. body nil: the request has none, or held is all of it.
func (c *linkClient) roundTrip(ctx context.Context, addr string, r *http.Request, forwarded string, held []byte, body io.Reader, contentLength int64) (*linkStream, linkAnswer, error) {
	l, err := c.get(ctx, addr)
	if err != nil {
		return nil, linkAnswer{}, err
	}
	s, sent := l.open(linkRequestHead(r, forwarded, contentLength), held, body != nil)
	if body == nil && !sent {
		body = bytes.NewReader(held)
	}
	if body != nil {
		go s.pump(body, ctx.Done())
	}
	t := time.NewTimer(c.headTimeout)
	defer t.Stop()
	select {
	case a := <-s.answer:
		return s, a, nil
	case <-s.ended:
		// The answer may have come just before.
		select {
		case a := <-s.answer:
			return s, a, nil
		default:
		}
		return nil, linkAnswer{}, fmt.Errorf("the member ended the forward before its answer: %w", errLinkReset)
	case <-s.conn.done:
		select {
		case a := <-s.answer:
			return s, a, nil
		default:
		}
		return nil, linkAnswer{}, errLinkDown
	case <-ctx.Done():
		s.reset()
		return nil, linkAnswer{}, ctx.Err()
	case <-t.C:
		s.reset()
		return nil, linkAnswer{}, fmt.Errorf("no answer from %s within %v", addr, c.headTimeout)
	}
}

// pump sends a streamed body: data frames within the stream's room, and
// its end. A body that fails to read abandons the stream.
func (s *linkStream) pump(body io.Reader, done <-chan struct{}) {
	buf := make([]byte, linkMaxData+64)
	for {
		n, err := body.Read(buf)
		if n > 0 {
			if s.sendBody(buf[:n], done) != nil {
				return // the stream ended
			}
		}
		if err == io.EOF {
			s.conn.send(appendFrame(nil, frameEnd, s.id, nil))
			return
		}
		if err != nil {
			s.reset()
			return
		}
	}
}

// linkServer is the owner's side of the link connections the cluster
// listener accepted.
type linkServer struct {
	handler http.Handler
	// admit, when set, checks a head before anything is held or run for
	// it (the forward's signature, age and nonce); a refused head is
	// answered with what admit wrote, by the read loop. What it answers
	// for an admitted head is the value of linkAdmitted{} in the
	// request's context.
	admit  func(w http.ResponseWriter, r *http.Request) (any, bool)
	ctx    context.Context
	stop   context.CancelFunc
	mu     sync.Mutex
	conns  map[*linkConn]bool
	hosts  map[string]int
	closed bool
	// idle, frameWait and stall are linkIdle, linkFrameWait and
	// linkStall when the server was made.
	idle, frameWait, stall time.Duration
}

func newLinkServer(h http.Handler) *linkServer {
	ctx, stop := context.WithCancel(context.Background())
	return &linkServer{handler: h, ctx: ctx, stop: stop, conns: map[*linkConn]bool{}, hosts: map[string]int{},
		idle: linkIdle, frameWait: linkFrameWait, stall: linkStall}
}

// remoteHost is c's peer's address without its port.
func remoteHost(c net.Conn) string {
	addr := c.RemoteAddr().String()
	if host, _, err := net.SplitHostPort(addr); err == nil {
		return host
	}
	return addr
}

// close ends every link connection and the requests on them.
func (ls *linkServer) close() {
	ls.mu.Lock()
	ls.closed = true
	conns := ls.conns
	ls.conns = map[*linkConn]bool{}
	ls.mu.Unlock()
	ls.stop()
	for l := range conns {
		l.fail(errLinkDown)
	}
}

// serve reads a link connection's frames (the preface read) and serves
// each request on it with the handler, in a goroutine of its own.
func (ls *linkServer) serve(c net.Conn, br *bufio.Reader) {
	host := remoteHost(c)
	ls.mu.Lock()
	if ls.closed || len(ls.conns) >= linkMaxConns || ls.hosts[host] >= linkMaxConnsPerHost {
		ls.mu.Unlock()
		c.Close()
		return
	}
	l := newLinkConn(c, br)
	l.idle, l.frameWait, l.stall = ls.frameWait, ls.frameWait, ls.stall
	ls.conns[l] = true
	ls.hosts[host]++
	ls.mu.Unlock()
	defer func() {
		ls.mu.Lock()
		delete(ls.conns, l)
		if ls.hosts[host]--; ls.hosts[host] <= 0 {
			delete(ls.hosts, host)
		}
		ls.mu.Unlock()
		l.fail(errLinkDown)
	}()
	// Until a head's signature checks, the connection holds nothing: its
	// first frame must be a head, which must check.
	authed := ls.admit == nil
	if authed {
		l.idle = ls.idle
	}
	var buf []byte
	for {
		typ, id, payload, err := l.readFrame(buf)
		if err != nil {
			return
		}
		if cap(payload) > cap(buf) && cap(payload) <= 64<<10 {
			buf = payload[:0]
		}
		if typ == frameHead {
			r, err := ls.request(l, payload)
			if err != nil {
				return // a protocol error: the connection ends
			}
			ctx := ls.ctx
			if ls.admit != nil {
				w := &heldWriter{header: http.Header{}}
				admitted, ok := ls.admit(w, r)
				if !ok {
					// Answered here: it holds nothing (not even room,
					// past the window). A connection whose first head
					// does not check is closed; on a member's, one
					// visitor's refused forward must not end the others.
					ls.refuse(l, id, w)
					if !authed {
						l.closeWritten()
						return
					}
					continue
				}
				if !authed {
					authed = true
					l.idle = ls.idle
				}
				ctx = context.WithValue(ctx, linkAdmitted{}, admitted)
			}
			s := l.newStream(id)
			ctx, cancel := context.WithCancel(ctx)
			s.cancel = cancel
			l.mu.Lock()
			_, dup := l.streams[id]
			full := len(l.streams) >= linkMaxStreams
			if !dup && !full {
				l.streams[id] = s
			}
			l.mu.Unlock()
			if dup || full {
				cancel()
			}
			if dup {
				return // a protocol error: the connection ends
			}
			if full {
				l.send(appendFrame(nil, frameReset, id, nil))
				continue
			}
			r = r.WithContext(ctx)
			r.Body = linkBody{s}
			go ls.run(l, s, r)
			continue
		}
		if !authed {
			return
		}
		switch typ {
		case frameData:
			if !l.data(id, payload) {
				return
			}
			continue
		case frameWindow:
			l.window(id, payload)
			continue
		}
		s := l.stream(id)
		if s == nil {
			continue
		}
		switch typ {
		case frameEnd:
			s.in.close(io.EOF)
		case frameReset:
			l.drop(id)
			s.end(errLinkReset)
		}
	}
}

// linkAdmitted is the key, in a request's context, of what the link
// server's admit answered for its head.
type linkAdmitted struct{}

// heldWriter holds a short answer (a refusal) whole.
type heldWriter struct {
	header http.Header
	status int
	body   []byte
}

func (w *heldWriter) Header() http.Header { return w.header }

func (w *heldWriter) WriteHeader(status int) {
	if w.status == 0 {
		w.status = status
	}
}

func (w *heldWriter) Write(p []byte) (int, error) {
	if w.status == 0 {
		w.status = http.StatusOK
	}
	w.body = append(w.body, p[:min(len(p), linkMaxData-len(w.body))]...)
	return len(p), nil
}

// refuse answers a head admit refused, from the read loop: its head, its
// body when the connection has room for it now (it is dropped
// otherwise: nothing waits for a peer that reads nothing), and its end.
func (ls *linkServer) refuse(l *linkConn, id uint32, w *heldWriter) {
	if w.status == 0 {
		w.status = http.StatusForbidden
	}
	head := binary.AppendUvarint(make([]byte, 0, 256), uint64(w.status))
	frames := appendFrame(nil, frameAnswer, id, appendHeader(head, w.header))
	if len(w.body) > 0 && l.room.tryTake(len(w.body)) {
		frames = appendFrame(frames, frameData, id, w.body)
	}
	l.send(appendFrame(frames, frameEnd, id, nil))
}

// closeWritten ends the connection once the writer wrote what is
// queued (a refusal's answer), or after linkFrameWait.
func (l *linkConn) closeWritten() {
	l.wmu.Lock()
	l.ending = true
	l.wmu.Unlock()
	select {
	case l.wake <- struct{}{}:
	default:
	}
	t := time.NewTimer(l.frameWait)
	defer t.Stop()
	select {
	case <-l.done:
	case <-t.C:
	}
	l.fail(errLinkDown)
}

// request rebuilds a forwarded request from its head (its context and
// body are the caller's to set).
func (ls *linkServer) request(l *linkConn, head []byte) (*http.Request, error) {
	hr := headReader{b: head}
	method, target, host := hr.string(), hr.string(), hr.string()
	n, k := binary.Varint(hr.b)
	if k <= 0 {
		return nil, errors.New("a malformed link head")
	}
	hr.b = hr.b[k:]
	h := hr.header(linkMaxFields)
	if hr.err != nil {
		return nil, hr.err
	}
	u, err := url.ParseRequestURI(target)
	if err != nil {
		return nil, err
	}
	r := &http.Request{
		Method: method, URL: u, Proto: "HTTP/1.1", ProtoMajor: 1, ProtoMinor: 1,
		Header: h, Host: host, RequestURI: target, RemoteAddr: l.c.RemoteAddr().String(),
		ContentLength: n, Body: http.NoBody,
	}
	return r, nil
}

// linkBody is a forwarded request's body at the owner.
type linkBody struct{ s *linkStream }

func (b linkBody) Read(p []byte) (int, error) { return b.s.in.Read(p) }
func (b linkBody) Close() error               { return nil }

// run serves one request and ends its stream.
func (ls *linkServer) run(l *linkConn, s *linkStream, r *http.Request) {
	w := &linkWriter{s: s, header: http.Header{}, done: r.Context().Done()}
	defer func() {
		p := recover()
		if p != nil || w.failed {
			s.reset()
		} else {
			w.finish()
			l.drop(s.id)
		}
		s.in.close(errLinkReset) // what the handler left unread is dropped
		s.cancel()
		if p != nil && p != http.ErrAbortHandler {
			// As net/http's server does: the request ends, the gateway
			// goes on.
			buf := make([]byte, 64<<10)
			log.Printf("link: panic serving a forwarded %s %s: %v\n%s", r.Method, r.URL.Path, p, buf[:goruntime.Stack(buf, false)])
		}
	}()
	ls.handler.ServeHTTP(w, r)
}

// linkWriter is the owner's ResponseWriter for a forwarded request: the
// head and small writes are held until a flush or the end, so a short
// answer crosses as one write of the connection.
type linkWriter struct {
	s      *linkStream
	header http.Header
	status int
	sent   bool // the head went
	held   []byte
	failed bool
	done   <-chan struct{}
}

func (w *linkWriter) Header() http.Header { return w.header }

func (w *linkWriter) WriteHeader(status int) {
	if w.status != 0 || status < 200 {
		return // a second head, or an informational one: not relayed
	}
	w.status = status
}

func (w *linkWriter) Write(p []byte) (int, error) {
	if w.failed {
		return 0, errLinkDown
	}
	if w.status == 0 {
		w.WriteHeader(http.StatusOK)
	}
	if len(w.held)+len(p) <= linkMaxData {
		w.held = append(w.held, p...)
		return len(p), nil
	}
	if err := w.FlushError(); err != nil {
		return 0, err
	}
	if err := w.s.sendBody(p, w.done); err != nil {
		w.failed = true
		return 0, err
	}
	return len(p), nil
}

// headFrame answers the answer head's frame, once.
func (w *linkWriter) headFrame(b []byte) []byte {
	if w.sent {
		return b
	}
	w.sent = true
	if w.status == 0 {
		w.status = http.StatusOK
	}
	head := binary.AppendUvarint(make([]byte, 0, 256), uint64(w.status))
	head = appendHeader(head, w.header)
	return appendFrame(b, frameAnswer, w.s.id, head)
}

// ready is whether a read would not wait: bytes are held, or the end.
func (b *linkInbox) ready() bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.off < len(b.data) || b.err != nil
}

// FlushError sends the head and what is held.
func (w *linkWriter) FlushError() error {
	if w.failed {
		return errLinkDown
	}
	if !w.sent {
		w.s.conn.send(w.headFrame(nil))
	}
	held := w.held
	w.held = w.held[:0]
	if err := w.s.sendBody(held, w.done); err != nil {
		w.failed = true
		return err
	}
	return nil
}

func (w *linkWriter) Flush() { w.FlushError() }

// SetReadDeadline bounds the reads of the request's body.
func (w *linkWriter) SetReadDeadline(t time.Time) error {
	w.s.in.setDeadline(t)
	return nil
}

// SetWriteDeadline bounds the waits for room to send the answer's body.
func (w *linkWriter) SetWriteDeadline(t time.Time) error {
	w.s.out.setDeadline(t)
	return nil
}

// finish sends what is left of the answer and its end, in one write
// when the room allows.
func (w *linkWriter) finish() {
	if w.failed {
		return
	}
	frames := w.headFrame(nil)
	if len(w.held) > 0 {
		if w.s.tryRoom(len(w.held)) {
			frames = appendFrame(frames, frameData, w.s.id, w.held)
		} else {
			w.s.conn.send(frames)
			frames = nil
			if w.s.sendBody(w.held, w.done) != nil {
				w.s.reset()
				return
			}
		}
	}
	w.s.conn.send(appendFrame(frames, frameEnd, w.s.id, nil))
}

// splitListener is the cluster listener: a connection whose first byte is
// the link preface's is served by the link server, any other (HTTP/1.1: a
// forwarded WebSocket upgrade) is accepted by the HTTP server.
type splitListener struct {
	net.Listener
	link  *linkServer
	conns chan net.Conn
	done  chan struct{}
	once  sync.Once
}

func newSplitListener(ln net.Listener, link *linkServer) *splitListener {
	s := &splitListener{Listener: ln, link: link, conns: make(chan net.Conn), done: make(chan struct{})}
	go s.acceptLoop()
	return s
}

// linkPrefaceWait bounds how long an accepted connection may take to say
// what it speaks.
const linkPrefaceWait = 10 * time.Second

func (s *splitListener) acceptLoop() {
	for {
		c, err := s.Listener.Accept()
		if err != nil {
			if errors.Is(err, net.ErrClosed) {
				s.Close()
				return
			}
			select {
			case <-s.done:
				return
			case <-time.After(5 * time.Millisecond):
			}
			continue
		}
		go s.sort(c)
	}
}

// sort hands c to the link server or the HTTP server.
func (s *splitListener) sort(c net.Conn) {
	c.SetReadDeadline(time.Now().Add(linkPrefaceWait))
	br := bufio.NewReaderSize(c, 64<<10)
	first, err := br.Peek(1)
	if err != nil {
		c.Close()
		return
	}
	if first[0] == linkPreface[0] {
		preface := make([]byte, len(linkPreface))
		if _, err := io.ReadFull(br, preface); err != nil || string(preface) != linkPreface {
			c.Close()
			return
		}
		c.SetReadDeadline(time.Time{})
		s.link.serve(c, br)
		return
	}
	c.SetReadDeadline(time.Time{})
	select {
	case s.conns <- &peekedConn{Conn: c, br: br}:
	case <-s.done:
		c.Close()
	}
}

func (s *splitListener) Accept() (net.Conn, error) {
	select {
	case c := <-s.conns:
		return c, nil
	case <-s.done:
		return nil, net.ErrClosed
	}
}

func (s *splitListener) Close() error {
	var err error
	s.once.Do(func() {
		close(s.done)
		err = s.Listener.Close()
		s.link.close()
	})
	return err
}

// peekedConn is a connection whose first bytes were read into br.
type peekedConn struct {
	net.Conn
	br *bufio.Reader
}

func (c *peekedConn) Read(p []byte) (int, error) { return c.br.Read(p) }
