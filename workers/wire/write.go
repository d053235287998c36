package wire

import (
	"encoding/binary"
	"errors"
	"time"
)

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
