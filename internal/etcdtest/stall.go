package etcdtest

import (
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// Stall relays TCP to a test's etcd and can stall every connection at
// once, as a SIGSTOPped etcd does (the embedded one cannot be stopped
// apart from the test): connections stay open, nothing is answered until
// Resume, then what was sent meanwhile is delivered. SetLatency delays
// what goes to etcd, each chunk by the same time, in order and without
// holding the chunks behind it (a slow network, or an etcd that answers
// late).
type Stall struct {
	// Endpoint is the proxy's client URL, http://127.0.0.1:<port>.
	Endpoint string
	gate     sync.RWMutex // held for writing while stalled
	latency  atomic.Int64 // added to each chunk to etcd, in nanoseconds
}

// SetLatency delays every chunk sent to etcd from now on by d (0: none).
func (p *Stall) SetLatency(d time.Duration) { p.latency.Store(int64(d)) }

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
	relay := func(dst, src net.Conn, delayed bool) {
		defer dst.Close()
		type chunk struct {
			data []byte
			due  time.Time
		}
		queue := make(chan chunk, 4096)
		done := make(chan struct{})
		go func() { // writes each chunk at its due, in order
			defer close(done)
			for c := range queue {
				time.Sleep(time.Until(c.due))
				p.gate.RLock()
				_, werr := dst.Write(c.data)
				p.gate.RUnlock()
				if werr != nil {
					dst.Close() // ends the other direction, then the reader
					for range queue {
					}
					return
				}
			}
		}()
		defer func() { close(queue); <-done }()
		for {
			buf := make([]byte, 32<<10)
			n, err := src.Read(buf)
			if n > 0 {
				due := time.Now()
				if delayed {
					due = due.Add(time.Duration(p.latency.Load()))
				}
				queue <- chunk{buf[:n], due}
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
			go relay(up, c, true)
			go relay(c, up, false)
		}
	}()
	return p
}

// Stall holds every byte in either direction until Resume.
func (p *Stall) Stall() { p.gate.Lock() }

// Resume delivers what waited and relays again.
func (p *Stall) Resume() { p.gate.Unlock() }
