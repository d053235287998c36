package caddymodule

import (
	"syscall"

	"golang.org/x/sys/unix"
)

// tcpClosedByPeer reads the connection's TCP state: once the peer's FIN
// (or reset) arrives it is no longer ESTABLISHED, even while data it sent
// before waits to be read.
func tcpClosedByPeer(rc syscall.RawConn) bool {
	closed := false
	rc.Control(func(fd uintptr) {
		info, err := unix.GetsockoptTCPInfo(int(fd), unix.IPPROTO_TCP, unix.TCP_INFO)
		closed = err == nil && info.State != tcpEstablished
	})
	return closed
}

// tcpEstablished is TCP_ESTABLISHED (linux/tcp_states.h).
const tcpEstablished = 1
