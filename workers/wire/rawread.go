package wire

import (
	"encoding/binary"
	"io"
	"syscall"
)

// ReadDrained makes the read loop wait for the peer's next frames right
// after a read that drained the socket, instead of reading once more to
// find it empty: set it before Start, on a connection whose reading end
// is in Go's poller (a Link). With a worker a tenant each answer came
// alone and cost two reads, the second finding nothing before the read
// loop parked (docs/performance.md, "The gateway's CPU with many
// workers"). A plain read cannot skip it: Go's poller forgets a
// descriptor's readiness when a read starts, so a reader that waited
// first could sleep on data already there. One syscall.RawConn.Read
// forgets it once, at its start, and keeps every readiness that comes
// during its own loop, so the whole read loop runs inside one.
func (c *Conn) ReadDrained() {
	if sc, ok := c.conn.(syscall.Conn); ok {
		if _, err := sc.SyscallConn(); err == nil {
			c.raw = true
			c.r = nil // its buffer is readRaw's own
		}
	}
}

// rawReadSize is the read loop's buffer, grown for a frame larger than it
// and shrunk back once that frame is read.
const rawReadSize = 64 << 10

// readRaw reads frames inside one rc.Read until the connection fails or a
// frame is refused (read's errors).
func (c *Conn) readRaw(rc syscall.RawConn) error {
	buf := make([]byte, rawReadSize)
	start, end := 0, 0 // the bytes read and not yet handled
	var ferr error
	err := rc.Read(func(fd uintptr) bool {
		for {
			if start == end {
				start, end = 0, 0
				if len(buf) > rawReadSize {
					buf = make([]byte, rawReadSize)
				}
			}
			// Room for the frame in progress: to the buffer's front, or a
			// buffer of its size.
			need := 4
			if end-start >= 4 {
				need = 4 + int(binary.BigEndian.Uint32(buf[start:]))
			}
			if start+need > len(buf) {
				if need > len(buf) {
					grown := make([]byte, need)
					copy(grown, buf[start:end])
					buf = grown
				} else {
					copy(buf, buf[start:end])
				}
				start, end = 0, end-start
			}
			n, err := syscall.Read(int(fd), buf[end:])
			if err == syscall.EINTR {
				continue
			}
			if err == syscall.EAGAIN {
				return false // nothing after all: wait for the next
			}
			if err != nil {
				ferr = err
				return true
			}
			if n == 0 {
				ferr = io.EOF
				if end > start {
					ferr = io.ErrUnexpectedEOF // the peer died mid-frame
				}
				return true
			}
			full := end+n == len(buf)
			end += n
			for end-start >= 4 {
				size := int(binary.BigEndian.Uint32(buf[start:]))
				if err := c.checkLength(size); err != nil {
					ferr = err
					return true
				}
				if end-start < 4+size {
					break
				}
				frame := make([]byte, size)
				copy(frame, buf[start+4:start+4+size])
				start += 4 + size
				if err := c.handleFrame(frame, false); err != nil {
					ferr = err
					return true
				}
			}
			if !full {
				// A short read drained the socket: anything later comes
				// with a readiness of its own, which this rc.Read keeps.
				return false
			}
		}
	})
	if ferr != nil {
		return ferr
	}
	return err
}
