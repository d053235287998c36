//go:build linux

package caddymodule

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"

	"github.com/caddyserver/caddy/v2"
	"github.com/caddyserver/caddy/v2/caddyconfig"
	"golang.org/x/sys/unix"
)

// A Unix socket's listen address spelt with Caddy's permission bits
// ("unix//path|0666") claims the socket's path, as the plain spelling
// does: it claimed a key of its own, and a second gateway so spelt
// started beside the first, unlinked its socket's file and took it.
// The first spelling's claim (a real lock, held by this process) refuses
// every other spelling of the path, and a gateway on another path starts.
func TestAUnixSocketsPermissionBitsClaimItsPath(t *testing.T) {
	dir := t.TempDir()
	sock := filepath.Join(dir, "gw.sock")
	keys, err := listenKeys("unix/" + sock)
	if err != nil || len(keys) != 1 {
		t.Fatalf("listenKeys: %v %v", keys, err)
	}
	held, err := lockListen(keys[0].key, keys[0].name)
	if err != nil {
		t.Fatal(err)
	}
	defer held.Destruct()
	for _, addr := range []string{"unix/" + sock + "|0666", "unix/" + sock + "|0222", "unixgram/" + sock + "|0660", "unix/" + filepath.Join(dir, ".", "gw.sock") + "|0200"} {
		others, err := listenKeys(addr)
		if err != nil || len(others) != 1 {
			t.Fatalf("listenKeys(%q): %v %v", addr, others, err)
		}
		if others[0].name != "socket "+sock {
			t.Errorf("%s is claimed as %q", addr, others[0].name)
		}
		lock, err := lockListen(others[0].key, others[0].name)
		if err == nil {
			lock.Destruct()
			t.Errorf("%s was claimed beside %s", addr, sock)
			continue
		}
		if !strings.Contains(err.Error(), "is served by another Retainer gateway") {
			t.Errorf("%s: %v", addr, err)
		}
	}
	other, err := listenKeys("unix/" + filepath.Join(dir, "other.sock") + "|0666")
	if err != nil {
		t.Fatal(err)
	}
	lock, err := lockListen(other[0].key, other[0].name)
	if err != nil {
		t.Fatalf("another socket's path: %v", err)
	}
	lock.Destruct()
}

// Another process's listener refuses a start only where it takes
// connections meant for this gateway: the same address of the same
// family, or any address of a family the gateway listens on at every
// address of. A listener at another address of the port (127.0.0.2
// beside 127.0.0.1, [::1]), or an IPv6-only [::] beside an IPv4 socket
// on 0.0.0.0 (Caddy's tcp4/0.0.0.0:p; its "tcp" 0.0.0.0:p is on [::],
// servedAt), takes none and the kernel lets it be: the red team's
// legitimate starts and reloads beside them were refused.
func TestOnlyAListenerThatSharesConnectionsRefuses(t *testing.T) {
	ip := net.ParseIP
	for _, c := range []struct {
		theirs string
		ours   []string
		shares bool
	}{
		{"127.0.0.1", []string{"127.0.0.1"}, true},
		{"127.0.0.1", []string{"0.0.0.0", "::"}, true},
		{"::1", []string{"0.0.0.0", "::"}, true},
		{"::", []string{"::"}, true},
		{"127.0.0.2", []string{"127.0.0.1"}, false},
		{"::1", []string{"127.0.0.1"}, false},
		{"::", []string{"0.0.0.0"}, false},
		{"0.0.0.0", []string{"127.0.0.1"}, false},
	} {
		var ours []net.IP
		for _, o := range c.ours {
			ours = append(ours, ip(o))
		}
		if got := overlaps(ip(c.theirs), ours); got != c.shares {
			t.Errorf("a listener at %s beside ours at %v: shares %v, want %v", c.theirs, c.ours, got, c.shares)
		}
	}
}

func init() { listenAsAnotherProcess = listenWithReusePort }

// listenWithReusePort listens on network's addr with SO_REUSEPORT, as a
// plain Caddy does, writes the port, and holds it until its stdin ends
// (the test binary run as another process, TestMain).
func listenWithReusePort(network, addr string) {
	lc := net.ListenConfig{Control: func(_, _ string, c syscall.RawConn) error {
		return c.Control(func(fd uintptr) { unix.SetsockoptInt(int(fd), unix.SOL_SOCKET, unix.SO_REUSEPORT, 1) })
	}}
	var port int
	if strings.HasPrefix(network, "udp") {
		pc, err := lc.ListenPacket(context.Background(), network, addr)
		if err != nil {
			fmt.Println("listen:", err)
			os.Exit(1)
		}
		defer pc.Close()
		port = pc.LocalAddr().(*net.UDPAddr).Port
	} else {
		ln, err := lc.Listen(context.Background(), network, addr)
		if err != nil {
			fmt.Println("listen:", err)
			os.Exit(1)
		}
		defer ln.Close()
		port = ln.Addr().(*net.TCPAddr).Port
	}
	fmt.Println(port)
	io.Copy(io.Discard, os.Stdin)
	os.Exit(0)
}

// anotherProcessListens starts a process that listens on network's addr
// (port 0: one the kernel picks) until the test ends, and answers its port.
func anotherProcessListens(t *testing.T, network, addr string) int {
	t.Helper()
	self, err := os.Executable() // os.Args[0] is "caddy" after a test of Caddy's commands
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(self, listenHelper, network, addr)
	stdin, err := cmd.StdinPipe()
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
	t.Cleanup(func() { stdin.Close(); cmd.Wait() })
	line, _ := bufio.NewReader(out).ReadString('\n')
	port, err := strconv.Atoi(strings.TrimSpace(line))
	if err != nil {
		t.Fatalf("another process listening on %s %s: %q", network, addr, line)
	}
	return port
}

// Caddy listens on "tcp" at every address, ":p" and "0.0.0.0:p" alike, on
// [::]:p taking IPv4 too (Go's Listen), so another process's listener
// of either family takes some of its connections: an IPv4 one at
// 127.0.0.1:p (the kernel gives an IPv4 socket its address's connections
// before a dual-stack one), or an IPv6 one at [::1]:p, beside a gateway
// served at 0.0.0.0, or whose admin endpoint listens so; both were let
// be (the check took 0.0.0.0 for IPv4 only and read this process's [::]
// as IPv6 only). A served host name is where Go's Listen binds it (the
// first IPv4 address the resolver answers): it was not checked. An
// HTTP/3 port is checked among UDP sockets. A listener that takes none
// of the gateway's connections (the other family beside tcp4/0.0.0.0,
// an address of the port the gateway does not listen on, a UDP socket
// beside TCP) still refuses nothing.
func TestADualStackOrNamedListenAddressIsChecked(t *testing.T) {
	refused := func(err error) bool {
		return err != nil && strings.Contains(err.Error(), "which would take part of this gateway's connections")
	}
	v4 := anotherProcessListens(t, "tcp4", "127.0.0.1:0")
	v6 := 0 // no IPv6 here: its cases are left out
	if probe, err := net.Listen("tcp6", "[::1]:0"); err == nil {
		probe.Close()
		v6 = anotherProcessListens(t, "tcp6", "[::1]:0")
	}
	udp := anotherProcessListens(t, "udp4", "127.0.0.1:0")
	for _, c := range []struct {
		port          int
		network, host string
		refuses       bool
	}{
		{v6, "tcp", "0.0.0.0", true},
		{v4, "tcp", "::", true},
		{v4, "tcp", "localhost", true},
		{v4, "tcp", "", true},
		{udp, "udp", "", true},
		{udp, "udp", "0.0.0.0", true},
		{v6, "tcp4", "0.0.0.0", false},
		{v4, "tcp6", "", false},
		{v4, "tcp", "127.0.0.2", false},
		{udp, "tcp", "", false},
		{v4, "udp", "", false},
	} {
		if c.port == 0 {
			continue
		}
		if err := sharedListeners([]int{c.port}, c.network, c.host); refused(err) != c.refuses {
			t.Errorf("a gateway served at %s %s beside another process's listener on its port: %v (refuses: %v)", c.network, net.JoinHostPort(c.host, strconv.Itoa(c.port)), err, c.refuses)
		}
	}
	// This process listening at ":p" (its admin endpoint, say) is on
	// [::]:p, taking IPv4 too: another process's 127.0.0.1:p refuses it.
	lc := net.ListenConfig{Control: func(_, _ string, c syscall.RawConn) error {
		return c.Control(func(fd uintptr) { unix.SetsockoptInt(int(fd), unix.SOL_SOCKET, unix.SO_REUSEPORT, 1) })
	}}
	ln, err := lc.Listen(context.Background(), "tcp", "0.0.0.0:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	p := ln.Addr().(*net.TCPAddr).Port
	anotherProcessListens(t, "tcp4", fmt.Sprintf("127.0.0.1:%d", p))
	if err := sharedListeners(nil, "tcp", ""); !refused(err) || !strings.Contains(err.Error(), fmt.Sprintf("127.0.0.1:%d", p)) {
		t.Errorf("this process on 0.0.0.0:%d (dual-stack), another's on 127.0.0.1:%[1]d: %v", p, err)
	}
	if got := servedAt("tcp", "localhost"); len(got) != 1 || !got[0].IsLoopback() || got[0].To4() == nil {
		t.Errorf("localhost is served at %v, want Go's Listen's IPv4 loopback", got)
	}
}

// Two gateways started at the same instant on one store: the first's
// claim of the store, taken while its config provisions (this test holds
// it, as a gateway that has not yet opened the store: its bbolt lock not
// yet taken), refuses the second's start at once, naming the holder; both
// passed store.CheckBolt's look at the lock, and the second waited 5 s in
// Start. Once the claim ends, the same config starts.
func TestTwoStartsOnOneStoreAtOnceRefuseTheLater(t *testing.T) {
	store := filepath.Join(t.TempDir(), "registry.db")
	cfg, _, err := caddyconfig.GetAdapter("caddyfile").Adapt([]byte(gatewayConfig(store, "")), nil)
	if err != nil {
		t.Fatal(err)
	}
	// Another spelling of the path (a linked folder) is the same claim.
	link := filepath.Join(t.TempDir(), "linked")
	if err := os.Symlink(filepath.Dir(store), link); err != nil {
		t.Fatal(err)
	}
	first, err := lockListen(storeClaim(filepath.Join(link, "registry.db")), "store")
	if err != nil {
		t.Fatal(err)
	}
	err = caddy.Load(cfg, true)
	if err == nil || !strings.Contains(err.Error(), fmt.Sprintf("is held by another Retainer gateway (pid %d): another gateway runs on this store", os.Getpid())) {
		first.Destruct()
		t.Fatalf("a start on a store another gateway has claimed: %v", err)
	}
	first.Destruct()
	if err := caddy.Load(cfg, true); err != nil {
		t.Fatalf("the same start once the claim ended: %v", err)
	}
}
