//go:build linux

package caddymodule

import (
	"bufio"
	"context"
	"encoding/hex"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"golang.org/x/sys/unix"
)

// socket is a listening socket of this network namespace: a LISTEN one
// of /proc/net/tcp and tcp6, or a bound, unconnected one of /proc/net/udp
// and udp6 (an HTTP/3 listener's).
type socket struct {
	ip    net.IP
	port  int
	inode string
}

// sharedListeners refuses a start whose ports another process listens on
// beside this one (docs/decisions.md, "One gateway a store and a port"):
// Caddy binds with SO_REUSEPORT, which joins any two listeners of one
// user on an address, so a second gateway, or a plain Caddy, on the admin
// address (which Caddy binds before it provisions the apps and gives a
// module no way to read) or on a served port, takes part of the other's
// connections. ports are the served ports to check, to be listened on
// with network ("tcp", "udp" for HTTP/3, or either with 4 or 6) at host
// ("" for every address, or a name, which is resolved as Go's Listen
// will, servedAt); with none, the TCP ports this process listens on now
// (at a start, its admin endpoint), at the addresses it listens on. A
// listener of this process never refuses: a reload's old and new
// listeners are both its own.
func sharedListeners(ports []int, network, host string) error {
	own := ownSockets()
	udp := strings.HasPrefix(network, "udp")
	all := listeners(udp)
	check := map[int]bool{}
	for _, p := range ports {
		check[p] = true
	}
	mine := map[int][]net.IP{}
	for _, l := range all {
		if fd, ok := own[l.inode]; ok && len(ports) == 0 {
			mine[l.port] = append(mine[l.port], l.ip)
			// A socket on [::] that is not IPv6-only takes IPv4 too
			// (Go listens so on "tcp" at ":p" and at "0.0.0.0:p").
			if l.ip.Equal(net.IPv6unspecified) && !v6only(fd) {
				mine[l.port] = append(mine[l.port], net.IPv4zero)
			}
			check[l.port] = true
		}
	}
	if len(ports) > 0 {
		at := servedAt(network, host)
		if at == nil {
			return nil // a name with no address: Caddy's listen fails on its own
		}
		for _, p := range ports {
			mine[p] = at
		}
	}
	for _, l := range all {
		if _, ok := own[l.inode]; !check[l.port] || ok || !overlaps(l.ip, mine[l.port]) {
			continue
		}
		addr := net.JoinHostPort(l.ip.String(), strconv.Itoa(l.port))
		if udp {
			addr = "UDP " + addr
		}
		who := "another process"
		if pid := socketHolder(l.inode); pid > 0 {
			who = fmt.Sprintf("another process (pid %d)", pid)
		}
		return fmt.Errorf("%s is listened on by %s, which would take part of this gateway's connections (SO_REUSEPORT); stop it first, or give this gateway another port (or admin address)", addr, who)
	}
	return nil
}

// servedAt is where Caddy's listener of network ("tcp", "tcp4", "tcp6",
// "udp"...) at host will take connections, as Go's Listen binds it: at
// every address ("", 0.0.0.0 or ::), on [::] taking IPv4 too, so both
// families' (the IPv4 one alone for tcp4, the IPv6 one for tcp6); at an
// address, that address; at a name, the first IPv4 address the resolver
// answers (the first IPv6 one when it answers none, or for tcp6); nil if
// it answers none.
func servedAt(network, host string) []net.IP {
	family := byte('p')
	if network != "" {
		family = network[len(network)-1]
	}
	ip := net.ParseIP(host)
	if ip == nil && host != "" {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		addrs, _ := net.DefaultResolver.LookupIPAddr(ctx, host)
		cancel()
		for _, a := range addrs {
			v4 := a.IP.To4() != nil
			if family == '4' && !v4 || family == '6' && v4 {
				continue
			}
			if v4 { // Go's Listen takes the first IPv4 address
				ip = a.IP
				break
			}
			if ip == nil {
				ip = a.IP
			}
		}
		if ip == nil {
			return nil
		}
	}
	if host != "" && !ip.IsUnspecified() {
		return []net.IP{ip}
	}
	switch family {
	case '4':
		return []net.IP{net.IPv4zero}
	case '6':
		return []net.IP{net.IPv6unspecified}
	}
	return []net.IP{net.IPv4zero, net.IPv6unspecified}
}

// v6only reports whether this process's socket fd is IPv6-only.
func v6only(fd int) bool {
	v, err := unix.GetsockoptInt(fd, unix.IPPROTO_IPV6, unix.IPV6_V6ONLY)
	return err != nil || v == 1
}

// overlaps reports whether a listener on ip takes connections meant for
// this process's listeners on its port (ours): one of the same family at
// the same address, or at any address of the family ours listens on at
// every address of (the more specific listener takes its address's
// connections). ours on [::] taking IPv4 too is given as both 0.0.0.0
// and [::] (servedAt, sharedListeners): an IPv4 listener takes its
// address's connections from it (the kernel prefers an IPv4 socket to a
// dual-stack one: 200 of 200, either bound first), and an IPv6 one at
// [::] shares its IPv6 ones (the first bound took 50 of 50, whichever of
// them was IPv6-only). A listener at another address of the port, or of
// the other family (a [::], IPv6-only or not, beside an IPv4 socket on
// 0.0.0.0, which keeps every IPv4 connection), takes none of ours, and
// the kernel lets it be: it never refuses a start or a reload.
func overlaps(ip net.IP, ours []net.IP) bool {
	for _, o := range ours {
		if (ip.To4() != nil) == (o.To4() != nil) && (o.IsUnspecified() || ip.Equal(o)) {
			return true
		}
	}
	return false
}

// ownSockets are this process's sockets: inode → file descriptor.
func ownSockets() map[string]int { return fdSockets("/proc/self/fd") }

// fdSockets are the sockets open in a process's fd directory dir (a
// /proc/<pid>/fd): inode → file descriptor.
func fdSockets(dir string) map[string]int {
	socks := map[string]int{}
	fds, _ := os.ReadDir(dir)
	for _, fd := range fds {
		n, err := strconv.Atoi(fd.Name())
		if l, lerr := os.Readlink(filepath.Join(dir, fd.Name())); err == nil && lerr == nil && strings.HasPrefix(l, "socket:[") {
			socks[strings.TrimSuffix(strings.TrimPrefix(l, "socket:["), "]")] = n
		}
	}
	return socks
}

// listeners are the LISTEN sockets of /proc/net/tcp and tcp6, or with
// udp the bound, unconnected (07, "close") ones of /proc/net/udp and udp6.
func listeners(udp bool) []socket {
	var ls []socket
	files, state := []string{"/proc/net/tcp", "/proc/net/tcp6"}, "0A"
	if udp {
		files, state = []string{"/proc/net/udp", "/proc/net/udp6"}, "07"
	}
	for _, name := range files {
		f, err := os.Open(name)
		if err != nil {
			continue
		}
		sc := bufio.NewScanner(f)
		sc.Scan() // the header
		for sc.Scan() {
			// sl local_address rem_address st ... uid timeout inode
			fields := strings.Fields(sc.Text())
			if len(fields) < 10 || fields[3] != state {
				continue
			}
			host, port, ok := strings.Cut(fields[1], ":")
			p, err := strconv.ParseUint(port, 16, 16)
			raw, herr := hex.DecodeString(host)
			if !ok || err != nil || herr != nil || len(raw)%4 != 0 {
				continue
			}
			// Each 32-bit word is in the host's order (little-endian here).
			for i := 0; i < len(raw); i += 4 {
				raw[i], raw[i+1], raw[i+2], raw[i+3] = raw[i+3], raw[i+2], raw[i+1], raw[i]
			}
			ls = append(ls, socket{ip: net.IP(raw), port: int(p), inode: fields[9]})
		}
		f.Close()
	}
	return ls
}

// socketHolder is the pid of a process (not this one) with the socket
// inode open, 0 if none can be read (another user's).
func socketHolder(inode string) int {
	procs, _ := os.ReadDir("/proc")
	for _, p := range procs {
		pid, err := strconv.Atoi(p.Name())
		if err != nil || pid == os.Getpid() {
			continue
		}
		if _, ok := fdSockets(filepath.Join("/proc", p.Name(), "fd"))[inode]; ok {
			return pid
		}
	}
	return 0
}
