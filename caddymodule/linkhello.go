package caddymodule

import (
	"bufio"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"sync"
	"time"
)

// The link's hello (docs/cluster.md, "The link between members"): what a
// forwarder sends first on a link connection, and what the owner checks
// before it holds anything for the connection. After the preface: the
// addressee (the owner's advertised address: a byte of length and the
// address), the time (8 bytes, Unix ms), 16 random bytes, and the HMAC
// under the cluster's secret of all of that. The owner reads at most
// linkHelloMax bytes within linkHelloWait, and takes a hello once, only
// when it names this member, is fresh (forwardMaxAge, forwardSkew) and
// its MAC checks; otherwise the connection is closed unanswered.

const (
	// linkHelloMax is the most a hello is: the preface, the addressee
	// (at most 255 bytes), the time, the random bytes and the MAC.
	linkHelloMax = len(linkPreface) + 1 + 255 + 8 + 16 + sha256.Size
	// linkMaxPendingPerHost and linkMaxPending bound the connections the
	// cluster listener holds before they said what they are (a checked
	// hello, or HTTP/1.1's first byte), from one address and in all; a
	// new one past either bound closes the oldest held when that was
	// held linkPendingGrace or longer, and is closed itself otherwise (a
	// member's hello comes with its connection: it is not pushed out by
	// a stream of new connections from its address). Members' link
	// connections, checked, are bounded apart from these
	// (linkMaxConnsPerHost, linkMaxConns), so connections without the
	// secret never crowd them out.
	linkMaxPendingPerHost = 8
	linkMaxPending        = 64
	linkPendingGrace      = 100 * time.Millisecond
)

// linkHelloWait bounds how long a link connection may take to send its
// hello once its first byte came (a variable: tests shorten it).
var linkHelloWait = 2 * time.Second

// linkHello is a link connection's hello, read.
type linkHello struct {
	to     string
	at     time.Time
	nonce  [16]byte
	signed []byte // the preface to the random bytes
	mac    []byte
}

// helloMAC is the MAC of a hello's signed part under secret.
func helloMAC(secret, signed []byte) []byte {
	mac := hmac.New(sha256.New, secret)
	mac.Write([]byte("retainer link hello\n"))
	mac.Write(signed)
	return mac.Sum(nil)
}

// appendLinkHello answers the hello a forwarder sends to the member
// whose advertised address is to.
func appendLinkHello(secret []byte, to string, at time.Time) ([]byte, error) {
	if len(to) > 255 {
		return nil, fmt.Errorf("a member's address of %d bytes", len(to))
	}
	b := make([]byte, 0, linkHelloMax)
	b = append(b, linkPreface...)
	b = append(b, byte(len(to)))
	b = append(b, to...)
	b = binary.BigEndian.AppendUint64(b, uint64(at.UnixMilli()))
	var nonce [16]byte
	rand.Read(nonce[:])
	b = append(b, nonce[:]...)
	return append(b, helloMAC(secret, b)...), nil
}

// readLinkHello reads a hello from br (its preface included): at most
// linkHelloMax bytes.
func readLinkHello(br *bufio.Reader) (linkHello, error) {
	fixed := make([]byte, len(linkPreface)+1, linkHelloMax)
	if _, err := io.ReadFull(br, fixed); err != nil {
		return linkHello{}, err
	}
	if string(fixed[:len(linkPreface)]) != linkPreface {
		return linkHello{}, errors.New("not the link's preface")
	}
	n := int(fixed[len(linkPreface)])
	b := fixed[:len(fixed)+n+8+16+sha256.Size]
	if _, err := io.ReadFull(br, b[len(fixed):]); err != nil {
		return linkHello{}, err
	}
	h := linkHello{to: string(b[len(fixed) : len(fixed)+n])}
	rest := b[len(fixed)+n:]
	h.at = time.UnixMilli(int64(binary.BigEndian.Uint64(rest[:8])))
	copy(h.nonce[:], rest[8:24])
	h.signed, h.mac = b[:len(b)-sha256.Size], rest[24:]
	return h, nil
}

// checkLinkHello answers why the owner whose advertised address is self
// refuses h: its MAC, its addressee, its age (or a time before the owner
// started); nil when it checks. Whether its nonce was taken is the
// caller's to check.
func checkLinkHello(secret []byte, self string, started time.Time, h linkHello, now time.Time) error {
	if !hmac.Equal(h.mac, helloMAC(secret, h.signed)) {
		return errors.New("a bad signature")
	}
	if h.to != self {
		return fmt.Errorf("addressed to %q, not this member", h.to)
	}
	if d := now.Sub(h.at); d > forwardMaxAge || d < -forwardSkew || h.at.Before(started) {
		return errors.New("too old, or stamped in the future")
	}
	return nil
}

// pendingConns are the connections the cluster listener holds before
// they said what they are, oldest first.
type pendingConns struct {
	mu    sync.Mutex
	conns []pendingConn
}

type pendingConn struct {
	c    net.Conn
	host string
	at   time.Time
}

// hold counts c when there is room for it, closing the oldest held from
// its address, or in all, when c is past linkMaxPendingPerHost or
// linkMaxPending and that one was held linkPendingGrace; false when c
// is not held (it is closed).
func (p *pendingConns) hold(c net.Conn, host string) bool {
	now := time.Now()
	var evict []net.Conn
	p.mu.Lock()
	same, oldest := 0, -1
	for i, q := range p.conns {
		if q.host == host {
			if same++; oldest < 0 {
				oldest = i
			}
		}
	}
	if same >= linkMaxPendingPerHost {
		if now.Sub(p.conns[oldest].at) < linkPendingGrace {
			p.mu.Unlock()
			c.Close()
			return false
		}
		evict = append(evict, p.conns[oldest].c)
		p.conns = append(p.conns[:oldest], p.conns[oldest+1:]...)
	}
	if len(p.conns) >= linkMaxPending {
		if now.Sub(p.conns[0].at) < linkPendingGrace {
			p.mu.Unlock()
			c.Close()
			for _, c := range evict {
				c.Close()
			}
			return false
		}
		evict = append(evict, p.conns[0].c)
		p.conns = p.conns[1:]
	}
	p.conns = append(p.conns, pendingConn{c: c, host: host, at: now})
	p.mu.Unlock()
	for _, c := range evict {
		c.Close()
	}
	return true
}

// release stops counting c.
func (p *pendingConns) release(c net.Conn) {
	p.mu.Lock()
	defer p.mu.Unlock()
	for i, q := range p.conns {
		if q.c == c {
			p.conns = append(p.conns[:i], p.conns[i+1:]...)
			return
		}
	}
}
