package caddymodule

import (
	"context"
	"encoding/binary"
	"errors"
	"io"
	"os"
	"sync"
	"sync/atomic"
	"time"
)

// A stream of the link (link.go): the body bytes it received and not yet
// read (linkInbox), the room it has to send (linkCredit), and the waits
// for both.

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

// ready is whether a read would not wait: bytes are held, or the end.
func (b *linkInbox) ready() bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.off < len(b.data) || b.err != nil
}
