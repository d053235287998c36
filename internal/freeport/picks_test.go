package freeport

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

// picks takes n ports the ways the tests do, mixed: Pick, PickN and For
// (under names of its own, prefix), in that order.
func picks(n int, prefix string) []int {
	var ports []int
	for i := 0; len(ports) < n; i++ {
		switch i % 3 {
		case 0:
			ports = append(ports, Pick())
		case 1:
			ports = append(ports, PickN(4)...)
		case 2:
			ports = append(ports, For(fmt.Sprintf("%s-%d", prefix, i)))
		}
	}
	return ports
}

// A port handed out once is never handed out again in the process: a
// cluster member's port held by name (For) is not given to an etcd
// (Pick) or a SeaweedFS (PickN) started later by the same test binary.
func TestPicksInOneProcessAreDistinct(t *testing.T) {
	t.Parallel()
	seen := map[int]bool{}
	ports := picks(600, "distinct")
	for _, p := range ports {
		if seen[p] {
			t.Errorf("port %d handed out twice", p)
		}
		seen[p] = true
	}
	if t.Failed() {
		t.Fatalf("of %d ports, %d distinct", len(ports), len(seen))
	}
}

// childEnv makes TestPickerChild pick: the number of ports, then wait for
// its standard input to close before it exits (and so lets its ports go).
const childEnv = "RETAINER_FREEPORT_TEST_CHILD"

// TestPickerChild is a second process of TestProcessesPickingAtOnce:
// it prints the ports it picks, "done", and holds them until told.
func TestPickerChild(t *testing.T) {
	n, err := strconv.Atoi(os.Getenv(childEnv))
	if err != nil {
		t.Skip("run by TestProcessesPickingAtOnceShareNoPort")
	}
	w := bufio.NewWriter(os.Stdout)
	for _, p := range picks(n, "child") {
		fmt.Fprintf(w, "port %d\n", p)
	}
	fmt.Fprintln(w, "done")
	w.Flush()
	io.Copy(io.Discard, os.Stdin)
}

// Two test binaries of one go test ./..., or two runs at once on one
// machine, never hold the same port: children of this test binary and
// the test itself pick hundreds each at the same time, all still alive
// when the sets are compared.
func TestProcessesPickingAtOnceShareNoPort(t *testing.T) {
	t.Parallel()
	const children, each, parent = 3, 400, 200
	owner := map[int]string{}
	var mu sync.Mutex
	var wg sync.WaitGroup
	claim := func(who string, ports []int) {
		mu.Lock()
		defer mu.Unlock()
		for _, p := range ports {
			if prev, ok := owner[p]; ok {
				t.Errorf("port %d handed to %s and to %s", p, prev, who)
			}
			owner[p] = who
		}
	}
	var stdins []io.Closer
	for c := range children {
		who := fmt.Sprintf("child %d", c)
		cmd := exec.Command(os.Args[0], "-test.run=^TestPickerChild$", "-test.count=1")
		cmd.Env = append(os.Environ(), childEnv+"="+strconv.Itoa(each))
		cmd.Stderr = os.Stderr
		in, err := cmd.StdinPipe()
		if err != nil {
			t.Fatal(err)
		}
		out, err := cmd.StdoutPipe()
		if err != nil {
			t.Fatal(err)
		}
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		stdins = append(stdins, in)
		t.Cleanup(func() { in.Close(); cmd.Wait() })
		wg.Add(1)
		go func() {
			defer wg.Done()
			var ports []int
			done := false
			s := bufio.NewScanner(out)
			for s.Scan() {
				line := s.Text()
				if line == "done" {
					done = true
					break
				}
				if p, ok := strings.CutPrefix(line, "port "); ok {
					n, err := strconv.Atoi(p)
					if err != nil {
						t.Errorf("%s printed %q", who, line)
						continue
					}
					ports = append(ports, n)
				}
			}
			if !done {
				t.Errorf("%s ended before it had picked its ports", who)
			}
			claim(who, ports)
			go io.Copy(io.Discard, out)
		}()
	}
	claim("the test", picks(parent, "parent"))
	finished := make(chan struct{})
	go func() { wg.Wait(); close(finished) }()
	select {
	case <-finished:
	case <-time.After(2 * time.Minute):
		t.Fatal("the children did not pick their ports in 2 minutes")
	}
	for _, in := range stdins {
		in.Close()
	}
	if len(owner) < children*each+parent && !t.Failed() {
		t.Fatalf("%d ports picked, want %d", len(owner), children*each+parent)
	}
}

// ephemeral is the kernel's range of source ports for outgoing
// connections, as /proc says.
func ephemeral(t *testing.T) (low, high int) {
	data, err := os.ReadFile("/proc/sys/net/ipv4/ip_local_port_range")
	if err != nil {
		t.Skipf("the ephemeral range is unknown here: %v", err)
	}
	f := strings.Fields(string(data))
	if len(f) != 2 {
		t.Fatalf("ip_local_port_range: %q", data)
	}
	low, err1 := strconv.Atoi(f[0])
	high, err2 := strconv.Atoi(f[1])
	if err1 != nil || err2 != nil {
		t.Fatalf("ip_local_port_range: %q", data)
	}
	return low, high
}

// A port handed out is below the ephemeral range whenever the range
// leaves room there: no outgoing connection of this machine takes it as
// its source while the server it is for is stopped between two starts.
func TestPicksAreBelowTheEphemeralRange(t *testing.T) {
	t.Parallel()
	low, _ := ephemeral(t)
	if low < 10000+2048 {
		t.Skipf("the ephemeral range starts at %d: no room below it", low)
	}
	for _, p := range picks(60, "below") {
		if p >= low {
			t.Errorf("port %d handed out in the ephemeral range (from %d)", p, low)
		}
	}
}

// A port something outside this package listens on, TCP or UDP, is not
// free.
func TestAPortListenedOnIsNotFree(t *testing.T) {
	t.Parallel()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	if p := ln.Addr().(*net.TCPAddr).Port; free(p) {
		t.Errorf("port %d, listened on over TCP, is free", p)
	}
	pc, err := net.ListenPacket("udp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer pc.Close()
	if p := pc.LocalAddr().(*net.UDPAddr).Port; free(p) {
		t.Errorf("port %d, bound over UDP, is free", p)
	}
}

// The pool is below the ephemeral range when it leaves room there (from
// floor up), above it when not, and empty (the kernel's choice) when
// neither has room.
func TestPoolFor(t *testing.T) {
	t.Parallel()
	for _, c := range []struct{ low, high, lo, hi int }{
		{32768, 60999, 16384, 32768}, // Linux's default
		{49152, 65535, 32768, 49152}, // IANA's
		{15000, 60999, 10000, 15000},
		{11000, 60999, 61000, 65536},
		{1024, 65535, 0, 0},
		{1024, 60000, 60001, 65536},
		{1024, 64000, 0, 0},
	} {
		if lo, hi := poolFor(c.low, c.high); lo != c.lo || hi != c.hi {
			t.Errorf("ephemeral %d-%d: pool [%d, %d), want [%d, %d)", c.low, c.high, lo, hi, c.lo, c.hi)
		}
	}
}
