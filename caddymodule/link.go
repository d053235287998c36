package caddymodule

import (
	"bufio"
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	goruntime "runtime"
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
// the link's data frames, forwardbody.go). The owner's read loop admits
// each head (its HMAC over the whole head, its age and its nonce, taken
// then: forwardheader.go) before anything is held or run for it, so a
// head sent without the secret, changed, or sent again gets 403 from the
// read loop and never reaches a handler; serveForwarded then serves an
// admitted one, checking its body's cover. The bounds below cap what a
// connection holds however its peer behaves. WebSocket upgrades go
// over HTTP/1.1 as before; the cluster listener tells the two apart by the
// link's first byte (0, which no HTTP request starts with).
//
// Frames: a 9-byte head (type, stream id, payload length) and the payload.
// Only the forwarder opens streams. Each direction of a stream has a
// window of linkWindow bytes: a side sends body bytes only while the
// other has room for them (credits), so one slow visitor or handler holds
// only its own stream, never the connection.

const (
	linkPreface = "\x00retainer-link/2\n"

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
