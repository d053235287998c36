package caddymodule

import (
	"bufio"
	"context"
	"encoding/binary"
	"errors"
	"io"
	"log"
	"net"
	"net/http"
	"net/url"
	goruntime "runtime"
	"sync"
	"time"
)

// The owner's side of the link (link.go): the link connections the
// cluster listener accepted, their read loop and its bounds, the
// ResponseWriter a forwarded request is served with, and the listener
// that tells a link connection from an HTTP/1.1 one.

// linkServer is the owner's side of the link connections the cluster
// listener accepted.
type linkServer struct {
	handler http.Handler
	// admit, when set, checks a head before anything is held or run for
	// it (the forward's signature, age and nonce); a refused head is
	// answered with what admit wrote, by the read loop. What it answers
	// for an admitted head is the value of linkAdmitted{} in the
	// request's context.
	admit func(w http.ResponseWriter, r *http.Request) (any, bool)
	// hello, when set, checks a link connection's hello before the
	// connection is served (linkhello.go); its error closes it.
	hello  func(h linkHello) error
	ctx    context.Context
	stop   context.CancelFunc
	mu     sync.Mutex
	conns  map[*linkConn]bool
	hosts  map[string]int
	closed bool
	// idle, frameWait and stall are linkIdle, linkFrameWait and
	// linkStall when the server was made.
	idle, frameWait, stall time.Duration
}

func newLinkServer(h http.Handler) *linkServer {
	ctx, stop := context.WithCancel(context.Background())
	return &linkServer{handler: h, ctx: ctx, stop: stop, conns: map[*linkConn]bool{}, hosts: map[string]int{},
		idle: linkIdle, frameWait: linkFrameWait, stall: linkStall}
}

// remoteHost is c's peer's address without its port.
func remoteHost(c net.Conn) string {
	addr := c.RemoteAddr().String()
	if host, _, err := net.SplitHostPort(addr); err == nil {
		return host
	}
	return addr
}

// close ends every link connection and the requests on them.
func (ls *linkServer) close() {
	ls.mu.Lock()
	ls.closed = true
	conns := ls.conns
	ls.conns = map[*linkConn]bool{}
	ls.mu.Unlock()
	// The connections close before the handlers' context ends: a handler
	// that returns when its context ends would otherwise have its answer
	// (an empty 200) written on a connection still open, and the
	// forwarding member would relay it to its visitor instead of the
	// retryable fault a closing owner owes it (TestLinkOwnerDiesMidStream
	// failed 5 in 900 runs on a loaded machine).
	for l := range conns {
		l.fail(errLinkDown)
	}
	ls.stop()
}

// serve reads a link connection's frames (the preface read) and serves
// each request on it with the handler, in a goroutine of its own.
func (ls *linkServer) serve(c net.Conn, br *bufio.Reader) {
	host := remoteHost(c)
	ls.mu.Lock()
	if ls.closed || len(ls.conns) >= linkMaxConns || ls.hosts[host] >= linkMaxConnsPerHost {
		ls.mu.Unlock()
		c.Close()
		return
	}
	l := newLinkConn(c, br)
	l.idle, l.frameWait, l.stall = ls.frameWait, ls.frameWait, ls.stall
	ls.conns[l] = true
	ls.hosts[host]++
	ls.mu.Unlock()
	defer func() {
		ls.mu.Lock()
		delete(ls.conns, l)
		if ls.hosts[host]--; ls.hosts[host] <= 0 {
			delete(ls.hosts, host)
		}
		ls.mu.Unlock()
		l.fail(errLinkDown)
	}()
	// Until a head's signature checks, the connection holds nothing: its
	// first frame must be a head, which must check.
	authed := ls.admit == nil
	if authed {
		l.idle = ls.idle
	}
	var buf []byte
	for {
		typ, id, payload, err := l.readFrame(buf)
		if err != nil {
			return
		}
		if cap(payload) > cap(buf) && cap(payload) <= 64<<10 {
			buf = payload[:0]
		}
		if typ == frameHead {
			r, err := ls.request(l, payload)
			if err != nil {
				return // a protocol error: the connection ends
			}
			ctx := ls.ctx
			if ls.admit != nil {
				w := &heldWriter{header: http.Header{}}
				admitted, ok := ls.admit(w, r)
				if !ok {
					// Answered here: it holds nothing (not even room,
					// past the window). A connection whose first head
					// does not check is closed; on a member's, one
					// visitor's refused forward must not end the others.
					ls.refuse(l, id, w)
					if !authed {
						l.closeWritten()
						return
					}
					continue
				}
				if !authed {
					authed = true
					l.idle = ls.idle
				}
				ctx = context.WithValue(ctx, linkAdmitted{}, admitted)
			}
			s := l.newStream(id)
			ctx, cancel := context.WithCancel(ctx)
			s.cancel = cancel
			l.mu.Lock()
			_, dup := l.streams[id]
			full := len(l.streams) >= linkMaxStreams
			if !dup && !full {
				l.streams[id] = s
			}
			l.mu.Unlock()
			if dup || full {
				cancel()
			}
			if dup {
				return // a protocol error: the connection ends
			}
			if full {
				l.send(appendFrame(nil, frameReset, id, nil))
				continue
			}
			r = r.WithContext(ctx)
			r.Body = linkBody{s}
			go ls.run(l, s, r)
			continue
		}
		if !authed {
			return
		}
		switch typ {
		case frameData:
			if !l.data(id, payload) {
				return
			}
			continue
		case frameWindow:
			l.window(id, payload)
			continue
		}
		s := l.stream(id)
		if s == nil {
			continue
		}
		switch typ {
		case frameEnd:
			s.in.close(io.EOF)
		case frameReset:
			l.drop(id)
			s.end(errLinkReset)
		}
	}
}

// linkAdmitted is the key, in a request's context, of what the link
// server's admit answered for its head.
type linkAdmitted struct{}

// heldWriter holds a short answer (a refusal) whole.
type heldWriter struct {
	header http.Header
	status int
	body   []byte
}

func (w *heldWriter) Header() http.Header { return w.header }

func (w *heldWriter) WriteHeader(status int) {
	if w.status == 0 {
		w.status = status
	}
}

func (w *heldWriter) Write(p []byte) (int, error) {
	if w.status == 0 {
		w.status = http.StatusOK
	}
	w.body = append(w.body, p[:min(len(p), linkMaxData-len(w.body))]...)
	return len(p), nil
}

// refuse answers a head admit refused, from the read loop: its head, its
// body when the connection has room for it now (it is dropped
// otherwise: nothing waits for a peer that reads nothing), and its end.
func (ls *linkServer) refuse(l *linkConn, id uint32, w *heldWriter) {
	if w.status == 0 {
		w.status = http.StatusForbidden
	}
	head := binary.AppendUvarint(make([]byte, 0, 256), uint64(w.status))
	frames := appendFrame(nil, frameAnswer, id, appendHeader(head, w.header))
	if len(w.body) > 0 && l.room.tryTake(len(w.body)) {
		frames = appendFrame(frames, frameData, id, w.body)
	}
	l.send(appendFrame(frames, frameEnd, id, nil))
}

// request rebuilds a forwarded request from its head (its context and
// body are the caller's to set).
func (ls *linkServer) request(l *linkConn, head []byte) (*http.Request, error) {
	hr := headReader{b: head}
	method, target, host := hr.string(), hr.string(), hr.string()
	n, k := binary.Varint(hr.b)
	if k <= 0 {
		return nil, errors.New("a malformed link head")
	}
	hr.b = hr.b[k:]
	h := hr.header(linkMaxFields)
	if hr.err != nil {
		return nil, hr.err
	}
	u, err := url.ParseRequestURI(target)
	if err != nil {
		return nil, err
	}
	r := &http.Request{
		Method: method, URL: u, Proto: "HTTP/1.1", ProtoMajor: 1, ProtoMinor: 1,
		Header: h, Host: host, RequestURI: target, RemoteAddr: l.c.RemoteAddr().String(),
		ContentLength: n, Body: http.NoBody,
	}
	return r, nil
}

// linkBody is a forwarded request's body at the owner.
type linkBody struct{ s *linkStream }

func (b linkBody) Read(p []byte) (int, error) { return b.s.in.Read(p) }
func (b linkBody) Close() error               { return nil }

// run serves one request and ends its stream.
func (ls *linkServer) run(l *linkConn, s *linkStream, r *http.Request) {
	w := &linkWriter{s: s, header: http.Header{}, done: r.Context().Done()}
	defer func() {
		p := recover()
		if p != nil || w.failed {
			s.reset()
		} else {
			w.finish()
			l.drop(s.id)
		}
		s.in.close(errLinkReset) // what the handler left unread is dropped
		s.cancel()
		if p != nil && p != http.ErrAbortHandler {
			// As net/http's server does: the request ends, the gateway
			// goes on.
			buf := make([]byte, 64<<10)
			log.Printf("link: panic serving a forwarded %s %s: %v\n%s", r.Method, r.URL.Path, p, buf[:goruntime.Stack(buf, false)])
		}
	}()
	ls.handler.ServeHTTP(w, r)
}

// linkWriter is the owner's ResponseWriter for a forwarded request: the
// head and small writes are held until a flush or the end, so a short
// answer crosses as one write of the connection.
type linkWriter struct {
	s      *linkStream
	header http.Header
	status int
	sent   bool // the head went
	held   []byte
	failed bool
	done   <-chan struct{}
}

func (w *linkWriter) Header() http.Header { return w.header }

func (w *linkWriter) WriteHeader(status int) {
	if w.status != 0 || status < 200 {
		return // a second head, or an informational one: not relayed
	}
	w.status = status
}

func (w *linkWriter) Write(p []byte) (int, error) {
	if w.failed {
		return 0, errLinkDown
	}
	if w.status == 0 {
		w.WriteHeader(http.StatusOK)
	}
	if len(w.held)+len(p) <= linkMaxData {
		w.held = append(w.held, p...)
		return len(p), nil
	}
	if err := w.FlushError(); err != nil {
		return 0, err
	}
	if err := w.s.sendBody(p, w.done); err != nil {
		w.failed = true
		return 0, err
	}
	return len(p), nil
}

// headFrame answers the answer head's frame, once.
func (w *linkWriter) headFrame(b []byte) []byte {
	if w.sent {
		return b
	}
	w.sent = true
	if w.status == 0 {
		w.status = http.StatusOK
	}
	head := binary.AppendUvarint(make([]byte, 0, 256), uint64(w.status))
	head = appendHeader(head, w.header)
	return appendFrame(b, frameAnswer, w.s.id, head)
}

// FlushError sends the head and what is held.
func (w *linkWriter) FlushError() error {
	if w.failed {
		return errLinkDown
	}
	if !w.sent {
		w.s.conn.send(w.headFrame(nil))
	}
	held := w.held
	w.held = w.held[:0]
	if err := w.s.sendBody(held, w.done); err != nil {
		w.failed = true
		return err
	}
	return nil
}

func (w *linkWriter) Flush() { w.FlushError() }

// SetReadDeadline bounds the reads of the request's body.
func (w *linkWriter) SetReadDeadline(t time.Time) error {
	w.s.in.setDeadline(t)
	return nil
}

// SetWriteDeadline bounds the waits for room to send the answer's body.
func (w *linkWriter) SetWriteDeadline(t time.Time) error {
	w.s.out.setDeadline(t)
	return nil
}

// finish sends what is left of the answer and its end, in one write
// when the room allows.
func (w *linkWriter) finish() {
	if w.failed {
		return
	}
	frames := w.headFrame(nil)
	if len(w.held) > 0 {
		if w.s.tryRoom(len(w.held)) {
			frames = appendFrame(frames, frameData, w.s.id, w.held)
		} else {
			w.s.conn.send(frames)
			frames = nil
			if w.s.sendBody(w.held, w.done) != nil {
				w.s.reset()
				return
			}
		}
	}
	w.s.conn.send(appendFrame(frames, frameEnd, w.s.id, nil))
}

// splitListener is the cluster listener: a connection whose first byte is
// the link preface's is served by the link server, any other (HTTP/1.1: a
// forwarded WebSocket upgrade) is accepted by the HTTP server.
type splitListener struct {
	net.Listener
	link    *linkServer
	pending pendingConns
	conns   chan net.Conn
	done    chan struct{}
	once    sync.Once
}

func newSplitListener(ln net.Listener, link *linkServer) *splitListener {
	s := &splitListener{Listener: ln, link: link, conns: make(chan net.Conn), done: make(chan struct{})}
	go s.acceptLoop()
	return s
}

// linkPrefaceWait bounds how long an accepted connection may take to say
// what it speaks.
const linkPrefaceWait = 10 * time.Second

func (s *splitListener) acceptLoop() {
	for {
		c, err := s.Listener.Accept()
		if err != nil {
			if errors.Is(err, net.ErrClosed) {
				s.Close()
				return
			}
			select {
			case <-s.done:
				return
			case <-time.After(5 * time.Millisecond):
			}
			continue
		}
		go s.sort(c)
	}
}

// sort hands c to the link server, once its hello checks, or to the
// HTTP server. Until then it is held as pending (pendingConns), with at
// most the reader's buffer, and the link's hello is read within
// linkHelloWait.
func (s *splitListener) sort(c net.Conn) {
	if !s.pending.hold(c, remoteHost(c)) {
		return
	}
	defer s.pending.release(c)
	c.SetReadDeadline(time.Now().Add(linkPrefaceWait))
	br := bufio.NewReaderSize(c, 64<<10)
	first, err := br.Peek(1)
	if err != nil {
		c.Close()
		return
	}
	if first[0] == linkPreface[0] {
		c.SetReadDeadline(time.Now().Add(linkHelloWait))
		hello, err := readLinkHello(br)
		if err == nil && s.link.hello != nil {
			err = s.link.hello(hello)
		}
		if err != nil {
			c.Close()
			return
		}
		c.SetReadDeadline(time.Time{})
		s.pending.release(c)
		s.link.serve(c, br)
		return
	}
	c.SetReadDeadline(time.Time{})
	s.pending.release(c)
	select {
	case s.conns <- &peekedConn{Conn: c, br: br}:
	case <-s.done:
		c.Close()
	}
}

func (s *splitListener) Accept() (net.Conn, error) {
	select {
	case c := <-s.conns:
		return c, nil
	case <-s.done:
		return nil, net.ErrClosed
	}
}

func (s *splitListener) Close() error {
	var err error
	s.once.Do(func() {
		close(s.done)
		err = s.Listener.Close()
		s.link.close()
	})
	return err
}

// peekedConn is a connection whose first bytes were read into br.
type peekedConn struct {
	net.Conn
	br *bufio.Reader
}

func (c *peekedConn) Read(p []byte) (int, error) { return c.br.Read(p) }
