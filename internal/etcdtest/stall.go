package etcdtest

import (
	"net"
	"strings"
	"sync"
	"testing"
)

// Stall relays TCP to a test's etcd and can stall every connection at
// once, as a SIGSTOPped etcd does (the embedded one cannot be stopped
// apart from the test): connections stay open, nothing is answered until
// Resume, then what was sent meanwhile is delivered.
type Stall struct {
	// Endpoint is the proxy's client URL, http://127.0.0.1:<port>.
	Endpoint string
	gate     sync.RWMutex // held for writing while stalled
}

// StartStall starts a stalling proxy to srv, closed when t ends.
func StartStall(t testing.TB, srv *Server) *Stall {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	p := &Stall{Endpoint: "http://" + l.Addr().String()}
	to := strings.TrimPrefix(srv.Endpoint, "http://")
	relay := func(dst, src net.Conn) {
		defer dst.Close()
		buf := make([]byte, 32<<10)
		for {
			n, err := src.Read(buf)
			if n > 0 {
				p.gate.RLock()
				_, werr := dst.Write(buf[:n])
				p.gate.RUnlock()
				if werr != nil {
					return
				}
			}
			if err != nil {
				return
			}
		}
	}
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			up, err := net.Dial("tcp", to)
			if err != nil {
				c.Close()
				continue
			}
			go relay(up, c)
			go relay(c, up)
		}
	}()
	return p
}

// Stall holds every byte in either direction until Resume.
func (p *Stall) Stall() { p.gate.Lock() }

// Resume delivers what waited and relays again.
func (p *Stall) Resume() { p.gate.Unlock() }
