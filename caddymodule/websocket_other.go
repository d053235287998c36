//go:build !linux

package caddymodule

import "syscall"

// tcpClosedByPeer is not known here: a visitor's frames are delivered until
// its connection's end is read.
func tcpClosedByPeer(syscall.RawConn) bool { return false }
