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
// A port is reserved by listening on :0, reading the port the kernel
// chose and closing it: between the close and the server's own listen
// another process could take it. The kernel chooses among its whole
// ephemeral range from a random start, so this is rare; it is not
// impossible, and a test that failed on "address already in use" may be
// run again.
package freeport

import (
	"fmt"
	"net"
	"sync"
)

// Pick answers a port free on every interface of this machine now.
func Pick() int {
	ln, err := net.Listen("tcp", ":0")
	if err != nil {
		panic(fmt.Sprintf("freeport: no free port: %v", err))
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port
}

// PickN answers n ports free now, all different (each is held until the
// last is picked).
func PickN(n int) []int {
	var ports []int
	for range n {
		ln, err := net.Listen("tcp", ":0")
		if err != nil {
			panic(fmt.Sprintf("freeport: no free port: %v", err))
		}
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
