package caddymodule

import (
	"encoding/binary"
	"errors"
	"net/http"
	"strings"
)

// The link's heads (link.go): a request's and an answer's fields as
// length-prefixed strings, and the hop-by-hop headers no hop passes on.

// The heads: a list of strings, each a uvarint length and its bytes.

func appendString(b []byte, s string) []byte {
	b = binary.AppendUvarint(b, uint64(len(s)))
	return append(b, s...)
}

// headerFields answers how many fields h has.
func headerFields(h http.Header) int {
	n := 0
	for _, vs := range h {
		n += len(vs)
	}
	return n
}

func appendHeader(b []byte, h http.Header) []byte {
	n := 0
	for _, vs := range h {
		n += len(vs)
	}
	b = binary.AppendUvarint(b, uint64(n))
	for name, vs := range h {
		for _, v := range vs {
			b = appendString(appendString(b, name), v)
		}
	}
	return b
}

type headReader struct {
	b   []byte
	err error
}

func (r *headReader) string() string {
	n, k := binary.Uvarint(r.b)
	if k <= 0 || n > uint64(len(r.b)-k) {
		r.err = errors.New("a malformed link head")
		r.b = nil
		return ""
	}
	s := string(r.b[k : k+int(n)])
	r.b = r.b[k+int(n):]
	return s
}

func (r *headReader) uvarint() uint64 {
	n, k := binary.Uvarint(r.b)
	if k <= 0 {
		r.err = errors.New("a malformed link head")
		r.b = nil
		return 0
	}
	r.b = r.b[k:]
	return n
}

// header reads a header of at most max fields; its map grows as they
// are read (a head claims any count it likes).
func (r *headReader) header(max uint64) http.Header {
	n := r.uvarint()
	if n > uint64(len(r.b)) || n > max {
		r.err = errors.New("a malformed link head")
		return nil
	}
	h := make(http.Header, min(n, 16))
	for i := uint64(0); i < n && r.err == nil; i++ {
		name := r.string()
		h[name] = append(h[name], r.string())
	}
	return h
}

// hopHeaders are the headers of one connection, which a proxy hop does
// not pass on (RFC 9110, 7.6.1).
var hopHeaders = []string{"Connection", "Proxy-Connection", "Keep-Alive", "Proxy-Authenticate",
	"Proxy-Authorization", "Te", "Trailer", "Transfer-Encoding", "Upgrade"}

// withoutHopHeaders answers h without the hop-by-hop headers (those
// named in Connection included); h itself is not changed.
func withoutHopHeaders(h http.Header) http.Header {
	drop := false
	for _, name := range hopHeaders {
		if _, ok := h[name]; ok {
			drop = true
			break
		}
	}
	if !drop {
		return h
	}
	out := h.Clone()
	for _, v := range out["Connection"] {
		for _, name := range strings.Split(v, ",") {
			if name = strings.TrimSpace(name); name != "" {
				out.Del(name)
			}
		}
	}
	for _, name := range hopHeaders {
		out.Del(name)
	}
	return out
}

// linkAnswer is an owner's answer head.
type linkAnswer struct {
	status int
	header http.Header
}

// linkRequestHead encodes what the owner rebuilds a request from: r's
// method, target, Host and headers, but for the hop-by-hop ones and any
// Retainer-Forwarded, which is given (signed for this request).
func linkRequestHead(r *http.Request, forwarded string, contentLength int64) []byte {
	b := make([]byte, 0, 512)
	b = appendString(b, r.Method)
	b = appendString(b, r.URL.RequestURI())
	b = appendString(b, r.Host)
	b = binary.AppendVarint(b, contentLength)
	h := withoutHopHeaders(r.Header)
	n := 1
	for name, vs := range h {
		if name != forwardHeader {
			n += len(vs)
		}
	}
	b = binary.AppendUvarint(b, uint64(n))
	for name, vs := range h {
		if name == forwardHeader {
			continue
		}
		for _, v := range vs {
			b = appendString(appendString(b, name), v)
		}
	}
	return appendString(appendString(b, forwardHeader), forwarded)
}
