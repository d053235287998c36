//go:build linux

package caddymodule

import (
	"errors"
	"fmt"
	"net"
	"os"
	"strings"
	"syscall"

	"github.com/caddyserver/caddy/v2"
	"golang.org/x/sys/unix"
)

// lockListen takes the claim named key: an abstract Unix socket bound to
// its name. The kernel refuses a second bind of the name while the first
// socket is open and closes it with its process, however that ends (a
// gateway killed with -9 leaves no stale claim). Abstract names belong to
// the network namespace, as ports do: gateways in two containers claim
// the same port apart. They carry no permissions, so a name held by a
// process of another user does not refuse the start: SO_REUSEPORT joins
// only listeners of one effective user, so that process cannot share
// this gateway's port (the kernel refuses this gateway's listen if it
// listens there itself), and another user cannot keep a gateway from
// starting by taking the name first.
func lockListen(key, name string) (caddy.Destructor, error) {
	addr := &net.UnixAddr{Name: "@retainer-gateway/" + key, Net: "unix"}
	ln, err := net.ListenUnix("unix", addr)
	if errors.Is(err, syscall.EADDRINUSE) {
		cred := holder(addr)
		if cred == nil || int(cred.Uid) != os.Geteuid() {
			return listenLock{}, nil
		}
		if strings.HasPrefix(key, "store/") {
			return nil, fmt.Errorf("%s is held by another Retainer gateway (pid %d): another gateway runs on this store; stop it first, or give this one a store of its own", name, cred.Pid)
		}
		return nil, fmt.Errorf("%s is served by another Retainer gateway (pid %d); stop it first, or give this gateway another port", name, cred.Pid)
	}
	if err != nil {
		return nil, fmt.Errorf("claiming %s: %w", name, err)
	}
	// The claim is asked who holds it (holder) and answers nothing.
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			c.Close()
		}
	}()
	return listenLock{ln}, nil
}

// holder is the credentials of the process whose socket holds addr, nil
// if it cannot be asked (it does not listen: not a gateway's claim).
func holder(addr *net.UnixAddr) *unix.Ucred {
	c, err := net.DialUnix("unix", nil, addr)
	if err != nil {
		return nil
	}
	defer c.Close()
	raw, err := c.SyscallConn()
	if err != nil {
		return nil
	}
	var cred *unix.Ucred
	raw.Control(func(fd uintptr) {
		cred, err = unix.GetsockoptUcred(int(fd), unix.SOL_SOCKET, unix.SO_PEERCRED)
	})
	if err != nil {
		return nil
	}
	return cred
}

// listenLock is a claim held (its socket; none when another user's
// process held the name).
type listenLock struct{ ln *net.UnixListener }

func (l listenLock) Destruct() error {
	if l.ln == nil {
		return nil
	}
	return l.ln.Close()
}
