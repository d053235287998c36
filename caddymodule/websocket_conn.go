package caddymodule

import (
	"bufio"
	"net"
	"net/http"
	"syscall"
)

// hijackRecorder is the ResponseWriter the WebSocket library upgrades
// through: it keeps the visitor's connection the library takes over, so
// the relay can tell when the visitor has gone while frames wait unread
// (visitorGone).
type hijackRecorder struct {
	http.ResponseWriter
	conn net.Conn
}

func (h *hijackRecorder) Hijack() (net.Conn, *bufio.ReadWriter, error) {
	c, brw, err := http.NewResponseController(h.ResponseWriter).Hijack()
	h.conn = c
	return c, brw, err
}

func (h *hijackRecorder) Unwrap() http.ResponseWriter { return h.ResponseWriter }

// tcpOf is the TCP connection under c (TLS and wrappers that name their
// connection unwrapped), or nil.
func tcpOf(c net.Conn) syscall.RawConn {
	for range 8 {
		switch t := c.(type) {
		case *net.TCPConn:
			rc, err := t.SyscallConn()
			if err != nil {
				return nil
			}
			return rc
		case interface{ NetConn() net.Conn }:
			c = t.NetConn()
		default:
			return nil
		}
	}
	return nil
}

// visitorGone says the visitor's side of the connection is closed (its FIN
// or reset arrived), whatever it sent before that still waits unread.
func (s *socketRelay) visitorGone() bool {
	if s.tcp == nil {
		return false
	}
	return tcpClosedByPeer(s.tcp)
}
