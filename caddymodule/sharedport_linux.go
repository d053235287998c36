//go:build linux

package caddymodule

import (
	"bufio"
	"encoding/hex"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
)

// tcpListener is a LISTEN socket of this network namespace
// (/proc/net/tcp, tcp6).
type tcpListener struct {
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
// connections. ports are the served ports to check, to be listened on at
// host ("" for every address); with none, the ports this process listens
// on now (at a start, its admin endpoint), at the addresses it listens
// on. A listener of this process never refuses: a reload's old and new
// listeners are both its own.
func sharedListeners(ports []int, host string) error {
	own := ownSockets()
	all := tcpListeners()
	check := map[int]bool{}
	for _, p := range ports {
		check[p] = true
	}
	mine := map[int][]net.IP{}
	for _, l := range all {
		if own[l.inode] && len(ports) == 0 {
			mine[l.port] = append(mine[l.port], l.ip)
			check[l.port] = true
		}
	}
	if len(ports) > 0 {
		var at []net.IP
		switch ip := net.ParseIP(host); {
		case host == "":
			at = []net.IP{net.IPv4zero, net.IPv6unspecified}
		case ip != nil:
			at = []net.IP{ip}
		default:
			return nil // a name: its addresses are the resolver's
		}
		for _, p := range ports {
			mine[p] = at
		}
	}
	for _, l := range all {
		if !check[l.port] || own[l.inode] || !overlaps(l.ip, mine[l.port]) {
			continue
		}
		addr := net.JoinHostPort(l.ip.String(), strconv.Itoa(l.port))
		who := "another process"
		if pid := socketHolder(l.inode); pid > 0 {
			who = fmt.Sprintf("another process (pid %d)", pid)
		}
		return fmt.Errorf("%s is listened on by %s, which would take part of this gateway's connections (SO_REUSEPORT); stop it first, or give this gateway another port (or admin address)", addr, who)
	}
	return nil
}

// overlaps reports whether a listener on ip takes connections meant for
// this process's listeners on its port (ours): one of the same family at
// the same address, or at any address of the family ours listens on at
// every address of (the more specific listener takes its address's
// connections). A listener at another address of the port, or of the
// other family (an IPv6-only [::] beside 0.0.0.0), takes none of ours,
// and the kernel lets it be: it never refuses a start or a reload.
func overlaps(ip net.IP, ours []net.IP) bool {
	for _, o := range ours {
		if (ip.To4() != nil) == (o.To4() != nil) && (o.IsUnspecified() || ip.Equal(o)) {
			return true
		}
	}
	return false
}

// ownSockets are the inodes of this process's sockets.
func ownSockets() map[string]bool {
	own := map[string]bool{}
	fds, _ := os.ReadDir("/proc/self/fd")
	for _, fd := range fds {
		if l, err := os.Readlink(filepath.Join("/proc/self/fd", fd.Name())); err == nil && strings.HasPrefix(l, "socket:[") {
			own[strings.TrimSuffix(strings.TrimPrefix(l, "socket:["), "]")] = true
		}
	}
	return own
}

// tcpListeners are the LISTEN sockets of /proc/net/tcp and tcp6.
func tcpListeners() []tcpListener {
	var ls []tcpListener
	for _, name := range []string{"/proc/net/tcp", "/proc/net/tcp6"} {
		f, err := os.Open(name)
		if err != nil {
			continue
		}
		sc := bufio.NewScanner(f)
		sc.Scan() // the header
		for sc.Scan() {
			// sl local_address rem_address st ... uid timeout inode
			fields := strings.Fields(sc.Text())
			if len(fields) < 10 || fields[3] != "0A" {
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
			ls = append(ls, tcpListener{ip: net.IP(raw), port: int(p), inode: fields[9]})
		}
		f.Close()
	}
	return ls
}

// socketHolder is the pid of a process (not this one) with the socket
// inode open, 0 if none can be read (another user's).
func socketHolder(inode string) int {
	want := "socket:[" + inode + "]"
	procs, _ := os.ReadDir("/proc")
	for _, p := range procs {
		pid, err := strconv.Atoi(p.Name())
		if err != nil || pid == os.Getpid() {
			continue
		}
		dir := filepath.Join("/proc", p.Name(), "fd")
		fds, _ := os.ReadDir(dir)
		for _, fd := range fds {
			if l, _ := os.Readlink(filepath.Join(dir, fd.Name())); l == want {
				return pid
			}
		}
	}
	return 0
}
