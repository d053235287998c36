// Package freeport gives a test a TCP port no listener of this machine
// holds, so that two test runs at once (two helpers, a developer and CI)
// do not collide on a port the source named.
//
// Where the server can report its bound address back (httptest, a
// net.Listen of the test's own), a test listens on :0 and reads the
// address instead; this package is for ports a server must be told in
// advance: Caddy's admin endpoint, http_port and https_port, a cluster
// member's listen address, the ports in a Caddyfile a gateway process
// reads.
//
// A port is reserved by listening on it and closing it: between the
// close and the server's own listen another process could take it. Ports
// are picked at random below the kernel's ephemeral range, never in it:
// a port the kernel hands out as the source of an outgoing connection
// (thousands a second while other packages' tests run beside) was taken
// that way between a cluster member's stop and its start again, and its
// listen failed with "address already in use" in a fresh-clone CI run.
// Below the range only another test's listener can take it, and each
// picks at random among thousands.
package freeport

import (
	"fmt"
	"math/rand/v2"
	"net"
	"os"
	"strconv"
	"strings"
	"sync"
)

// below is where the ports picked end: the low end of the kernel's
// ephemeral range (ip_local_port_range), 32768 when it cannot be read.
func below() int {
	data, err := os.ReadFile("/proc/sys/net/ipv4/ip_local_port_range")
	if err == nil {
		if f := strings.Fields(string(data)); len(f) == 2 {
			if low, err := strconv.Atoi(f[0]); err == nil && low > 2048 {
				return low
			}
		}
	}
	return 32768
}

// listen holds a port picked at random below the ephemeral range, or
// one the kernel chooses when none is free there.
func listen() net.Listener {
	top := below()
	bottom := max(1024, top-12000)
	for range 200 {
		ln, err := net.Listen("tcp", ":"+strconv.Itoa(bottom+rand.IntN(top-bottom)))
		if err == nil {
			return ln
		}
	}
	ln, err := net.Listen("tcp", ":0")
	if err != nil {
		panic(fmt.Sprintf("freeport: no free port: %v", err))
	}
	return ln
}

// Pick answers a port free on every interface of this machine now.
func Pick() int {
	ln := listen()
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port
}

// PickN answers n ports free now, all different (each is held until the
// last is picked).
func PickN(n int) []int {
	var ports []int
	for range n {
		ln := listen()
		defer ln.Close()
		ports = append(ports, ln.Addr().(*net.TCPAddr).Port)
	}
	return ports
}

var (
	mu sync.Mutex
	// named are the ports For handed out, by name, for this process's life.
	named = map[string]int{}
	// given are all the ports handed out, so no two names share one.
	given = map[int]bool{}
)

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
	for {
		p := Pick()
		if !given[p] {
			named[name], given[p] = p, true
			return p
		}
	}
}
