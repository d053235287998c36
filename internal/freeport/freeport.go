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
// Every process searches from the bottom of the same range, the first
// port free and unlocked: the locks alone keep processes apart. The
// range is the 16384 ports under the ephemeral range (16384-32767 with
// Linux's default), never under 10000, where the usual fixed ports of
// services and of the bench scripts are. Where the ephemeral range
// leaves no room below it, ports above it are used; where neither has
// room, or every port there is taken (a message on standard error says
// so), the kernel's choice on :0, registered and locked the same way.
// Where the lock file cannot be opened, ports are coordinated within the
// process only, as the listen check allows.
package freeport

import (
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"

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
	// pool is the range ports are picked from, [lo, hi); next is where the
	// search goes on. Every process starts at lo: the locks alone keep
	// processes apart, and a test of them fails at once without them.
	lo, hi, next int
	// locks is the file whose bytes are the ports' locks; nil when it
	// cannot be opened. It stays open for the process's life: closing
	// it would let every port go.
	locks *os.File
	// lockCmd is F_OFD_SETLK, or F_SETLK on a kernel without it.
	lockCmd = unix.F_OFD_SETLK
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
	next = lo
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

// pick hands out the next port of the pool that is free, or the kernel's
// choice when none is. mu is held.
func pick() int {
	start()
	for range hi - lo {
		p := next
		next++
		if next == hi {
			next = lo
		}
		if given[p] {
			continue
		}
		given[p] = true
		if lock(p) && free(p) {
			return p
		}
	}
	// The pool is spent or empty: the kernel's choice, which it may take
	// as a source port later, but still never twice. Every port of the
	// pool is given now (a port found taken is not tried again), so the
	// search above is not made again.
	if hi > lo {
		fmt.Fprintf(os.Stderr, "freeport: every port in [%d, %d) is taken; ports are now the kernel's choice, in its ephemeral range\n", lo, hi)
		lo, hi = 0, 0
	}
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
	for {
		lk := unix.Flock_t{Type: unix.F_WRLCK, Whence: 0, Start: int64(p), Len: 1}
		err := unix.FcntlFlock(f.Fd(), lockCmd, &lk)
		switch {
		case err == nil:
			return true, nil
		case errors.Is(err, unix.EINTR):
		case errors.Is(err, unix.EINVAL) && lockCmd == unix.F_OFD_SETLK:
			// A kernel before 3.15: a process's own record locks, which
			// are released as well when it ends (and only then: the file
			// is never closed).
			lockCmd = unix.F_SETLK
		case errors.Is(err, unix.EAGAIN) || errors.Is(err, unix.EACCES):
			return false, nil
		default:
			return false, err
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
