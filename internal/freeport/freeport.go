// Package freeport gives a test a TCP port no listener of this machine
// holds, so that two test runs at once (two helpers, a developer and CI)
// do not collide on a port the source named.
//
// Where the server can report its bound address back (httptest, a
// net.Listen of the test's own), a test listens on :0 and reads the
// address instead; this package is for ports a server must be told in
// advance: Caddy's admin endpoint, http_port and https_port, a cluster
// member's listen address, etcd's client and peer ports, PostgreSQL's,
// SeaweedFS's, the ports in a Caddyfile a gateway process reads. Such a
// port is often listened on, closed and listened on again (a member or
// an etcd restarted by a test comes back at the address its peers know),
// so it must stay free between the server's stop and its start too.
//
// A port handed out is, for the rest of the process's life:
//
//   - below the kernel's ephemeral range (ip_local_port_range), where
//     the kernel never takes a source port for an outgoing connection.
//     Listening on :0 picks inside that range, and a cluster member's
//     port, free when picked, was taken that way (some connection's
//     source) between the member's stop and its restart: its listen
//     failed with "address already in use" in a fresh-clone CI run.
//   - never handed out again by this process: Pick, PickN and For share
//     one registry. Random picks that did not (a reverted attempt) gave
//     two servers of one test binary the same port.
//   - locked against every other process using this package on the
//     machine (the test binaries of one go test ./..., and two runs at
//     once): a write lock on the port's byte of one file under
//     os.TempDir(), an open file description lock (fcntl F_OFD_SETLK)
//     that the kernel drops when the process ends, however it ends. A
//     port another process holds is skipped. One file rather than a file
//     per port: nothing piles up in the temporary directory.
//   - free now: it is listened on (TCP and UDP, every interface) and
//     closed before it is handed out, so a server outside this package
//     that holds it is skipped.
//
// The search starts at a cursor the processes of the machine share (the
// lock file's first bytes, read and moved under a lock of its own, which
// a process waits for 2 s at most before it goes on at a cursor of its
// own), so ports are handed out round the range: a port comes back only
// after the rest of the range has been handed out, and a client or
// server left over from a killed test process (one that still dials its
// etcd's old port) does not meet the next process's server there. The
// range is the 16384 ports under the ephemeral range (16384-32767 with
// Linux's default), never under 10000, where the usual fixed ports of
// services and of the bench scripts are. Where the ephemeral range
// leaves no room below it, ports above it are used; where neither has
// room, or every port there is taken (a message on standard error says
// so), the kernel's choice on :0, registered and locked the same way.
// Where the lock file cannot be opened, ports are coordinated within the
// process only (from a random start), as the listen check allows.
package freeport

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"

	"golang.org/x/sys/unix"
)

// Pick answers a port free on every interface of this machine now, and
// never handed out before by this process nor held by another.
func Pick() int {
	mu.Lock()
	defer mu.Unlock()
	return pick()
}

// PickN answers n ports as Pick does, all different.
func PickN(n int) []int {
	mu.Lock()
	defer mu.Unlock()
	ports := make([]int, n)
	for i := range ports {
		ports[i] = pick()
	}
	return ports
}

// For answers the port of name, picked on its first call and the same for
// the rest of the process: a server stopped and started again (a gateway
// restarted by a test) comes back at the address its peers and the test
// already know. Two names never share a port.
func For(name string) int {
	mu.Lock()
	defer mu.Unlock()
	if p, ok := named[name]; ok {
		return p
	}
	p := pick()
	named[name] = p
	return p
}

var (
	// mu guards everything below.
	mu sync.Mutex
	// named are the ports For handed out, by name.
	named = map[string]int{}
	// given are all the ports handed out or found taken, so none is
	// handed out twice; a port found taken by a listener outside this
	// package is not tried again either.
	given = map[int]bool{}
	// pool is the range ports are picked from, [lo, hi); next is where
	// this process's search goes on where there is no lock file (with
	// one, the machine's cursor in it).
	lo, hi, next int
	// locks is the file whose bytes are the ports' locks, and whose first
	// bytes are the machine's cursor; nil when it cannot be opened. It
	// stays open for the process's life: closing it would let every port
	// go.
	locks *os.File
	// ofd is false on a kernel without open file description locks
	// (before 3.15): a process's own record locks then, released as well
	// when it ends (and only then: the file is never closed).
	ofd = true
	// ownCursor is set once the machine's cursor could not be had: the
	// search goes on at next.
	ownCursor bool
	// started is set once start has run.
	started bool
)

// The range searched: from floor up to the ephemeral range's start, at
// most span ports wide.
const (
	floor = 10000
	span  = 16384
	// room is the least range worth searching.
	room = 2048
)

// start reads the ephemeral range, chooses the pool and opens the lock
// file, once.
func start() {
	if started {
		return
	}
	started = true
	low, high := 32768, 60999 // Linux's default
	if data, err := os.ReadFile("/proc/sys/net/ipv4/ip_local_port_range"); err == nil {
		if f := strings.Fields(string(data)); len(f) == 2 {
			l, err1 := strconv.Atoi(f[0])
			h, err2 := strconv.Atoi(f[1])
			if err1 == nil && err2 == nil && 0 < l && l <= h && h <= 65535 {
				low, high = l, h
			}
		}
	}
	lo, hi = poolFor(low, high)
	next = lo + rand.IntN(max(1, hi-lo))
	locks = openLocks()
}

// poolFor is the range picked from for the ephemeral range [low, high]:
// below it if there is room, else above it, else none (lo == hi).
func poolFor(low, high int) (int, int) {
	if low-floor >= room {
		return max(floor, low-span), low
	}
	if 65536-(high+1) >= room {
		return high + 1, min(65536, high+1+span)
	}
	return 0, 0
}

// openLocks opens the shared lock file, readable and writable by every
// user (two users' test runs coordinate too), or one of this user's own
// when another user's file refuses it.
func openLocks() *os.File {
	names := []string{"retainer-freeport.lock", fmt.Sprintf("retainer-freeport-%d.lock", os.Getuid())}
	for _, name := range names {
		path := filepath.Join(os.TempDir(), name)
		// Opened without O_CREATE first: a world-writable sticky directory
		// refuses O_CREATE on another user's file (fs.protected_regular).
		if f, err := os.OpenFile(path, os.O_RDWR, 0); err == nil {
			return f
		}
		if f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o666); err == nil {
			f.Chmod(0o666) // past the umask, so that another user can open it
			return f
		}
	}
	return nil
}

// pick hands out the first port of the pool from the cursor on that is
// free, or the kernel's choice when none is. mu is held.
func pick() int {
	start()
	if p, ok := search(); ok {
		return p
	}
	// The pool is spent or empty: the kernel's choice, which it may take
	// as a source port later, but still never twice.
	for {
		ln, err := net.Listen("tcp", ":0")
		if err != nil {
			panic(fmt.Sprintf("freeport: no free port: %v", err))
		}
		p := ln.Addr().(*net.TCPAddr).Port
		ln.Close()
		if !given[p] {
			given[p] = true
			if lock(p) {
				return p
			}
		}
	}
}

// cursorAt and cursorLen place the machine's cursor in the lock file,
// below every port's byte: the port where the next search starts, as 4
// bytes little-endian, read and written under a lock of those bytes.
const cursorAt, cursorLen = 0, 4

// search hands out the first port of the pool, from the machine's
// cursor on, that nobody holds and nothing listens on, and moves the
// cursor past it.
func search() (int, bool) {
	if hi <= lo {
		return 0, false
	}
	from := next
	if f := locks; f != nil && !ownCursor && lockCursor(f) {
		defer setLock(f, unix.F_UNLCK, cursorAt, cursorLen)
		var b [cursorLen]byte
		if n, _ := f.ReadAt(b[:], cursorAt); n == cursorLen {
			if c := int(binary.LittleEndian.Uint32(b[:])); lo <= c && c < hi {
				from = c
			}
		}
		defer func() {
			binary.LittleEndian.PutUint32(b[:], uint32(next))
			f.WriteAt(b[:], cursorAt)
		}()
	}
	for i := range hi - lo {
		p := lo + (from-lo+i)%(hi-lo)
		if given[p] {
			continue
		}
		given[p] = true
		if lock(p) && free(p) {
			next = p + 1
			if next == hi {
				next = lo
			}
			return p, true
		}
	}
	// Every port of the pool is given now (a port found taken is not
	// tried again), so the search is not made again.
	fmt.Fprintf(os.Stderr, "freeport: every port in [%d, %d) is taken; ports are now the kernel's choice, in its ephemeral range\n", lo, hi)
	lo, hi = 0, 0
	return 0, false
}

// lockCursor takes the cursor's lock, waiting 2 s at most: a process
// stopped while it held it (SIGSTOP, by a test that pauses a process
// group) must not stop every other's search. Without it the search
// starts at this process's own cursor, from then on (ownCursor); the
// ports' locks still keep processes apart.
func lockCursor(f *os.File) bool {
	deadline := time.Now().Add(2 * time.Second)
	for {
		err := setLock(f, unix.F_WRLCK, cursorAt, cursorLen)
		if err == nil {
			return true
		}
		if !errors.Is(err, unix.EAGAIN) && !errors.Is(err, unix.EACCES) || time.Now().After(deadline) {
			ownCursor = true
			return false
		}
		time.Sleep(time.Millisecond)
	}
}

// lock takes the port's byte of the lock file for the process's life,
// and answers false when another process holds it. Without a lock file
// every port is this process's to take.
func lock(p int) bool {
	if locks == nil {
		return true
	}
	ok, err := lockIn(locks, p)
	if err != nil {
		// Locks do not work on this file system: coordinate within the
		// process only.
		locks = nil
		return true
	}
	return ok
}

// lockIn takes byte p of f, and answers false when another process holds
// it.
func lockIn(f *os.File, p int) (bool, error) {
	err := setLock(f, unix.F_WRLCK, int64(p), 1)
	switch {
	case err == nil:
		return true, nil
	case errors.Is(err, unix.EAGAIN) || errors.Is(err, unix.EACCES):
		return false, nil
	default:
		return false, err
	}
}

// setLock sets a lock of type typ (or unlocks) on n bytes of f from at,
// without waiting for another process's.
func setLock(f *os.File, typ int16, at, n int64) error {
	for {
		cmd := unix.F_OFD_SETLK
		if !ofd {
			cmd = unix.F_SETLK
		}
		lk := unix.Flock_t{Type: typ, Whence: 0, Start: at, Len: n}
		err := unix.FcntlFlock(f.Fd(), cmd, &lk)
		switch {
		case errors.Is(err, unix.EINTR):
		case errors.Is(err, unix.EINVAL) && ofd:
			ofd = false
		default:
			return err
		}
	}
}

// free answers whether nothing listens on p now, for TCP or UDP (HTTP/3
// takes https_port's UDP twin), on any interface.
func free(p int) bool {
	addr := ":" + strconv.Itoa(p)
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return false
	}
	defer ln.Close()
	pc, err := net.ListenPacket("udp", addr)
	if err != nil {
		return false
	}
	pc.Close()
	return true
}
