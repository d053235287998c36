// Package dnstest is a DNS server for tests: it answers TXT queries on
// loopback from a table the test edits (what a tenant publishes to prove
// it controls a domain, docs/domains.md).
package dnstest

import (
	"net"
	"strings"
	"sync"
	"testing"

	"github.com/miekg/dns"
)

// Server answers TXT queries from its table; other names answer NXDOMAIN.
type Server struct {
	// Addr is the host:port it listens on (UDP).
	Addr    string
	mu      sync.Mutex
	records map[string][]string // fqdn → TXT values
}

// Start starts a server on a free loopback port, stopped when t ends.
func Start(t testing.TB) *Server {
	t.Helper()
	pc, err := net.ListenPacket("udp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	s := &Server{records: map[string][]string{}, Addr: pc.LocalAddr().String()}
	srv := &dns.Server{PacketConn: pc, Handler: dns.HandlerFunc(func(w dns.ResponseWriter, q *dns.Msg) {
		m := new(dns.Msg)
		m.SetReply(q)
		s.mu.Lock()
		for _, question := range q.Question {
			vals, ok := s.records[strings.ToLower(question.Name)]
			if !ok {
				m.Rcode = dns.RcodeNameError
				continue
			}
			if question.Qtype == dns.TypeTXT {
				for _, v := range vals {
					m.Answer = append(m.Answer, &dns.TXT{Hdr: dns.RR_Header{Name: question.Name, Rrtype: dns.TypeTXT, Class: dns.ClassINET, Ttl: 1}, Txt: []string{v}})
				}
			}
		}
		s.mu.Unlock()
		w.WriteMsg(m)
	})}
	go srv.ActivateAndServe()
	t.Cleanup(func() { srv.Shutdown() })
	return s
}

// Set publishes name's TXT values (none: the name has no TXT record).
func (s *Server) Set(name string, vals ...string) {
	s.mu.Lock()
	s.records[dns.Fqdn(strings.ToLower(name))] = vals
	s.mu.Unlock()
}
