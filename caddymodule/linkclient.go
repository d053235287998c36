package caddymodule

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"sync"
	"time"
)

// The forwarder's side of the link (link.go): one connection per member,
// its read loop, and a forward's round trip on it.

// linkClient is the forwarder's side: one connection per member address,
// dialled when first needed and again after it ended.
type linkClient struct {
	// headTimeout bounds the wait for an answer's head (the lease).
	headTimeout time.Duration
	// idle is linkIdle when the client was made.
	idle time.Duration
	// dial connects to a member's address (nil: TCP; a test's tap
	// otherwise).
	dial  func(network, addr string) (net.Conn, error)
	mu    sync.Mutex
	conns map[string]*linkDial
}

// linkDial is a member's connection, or its dial in progress.
type linkDial struct {
	ready chan struct{}
	conn  *linkConn
	err   error
}

func newLinkClient(headTimeout time.Duration) *linkClient {
	return &linkClient{headTimeout: headTimeout, idle: linkIdle, conns: map[string]*linkDial{}}
}

// get answers the connection to addr, dialling it when there is none
// alive. A dial's error (a *net.OpError "dial") is the caller's: the
// member cannot be reached.
func (c *linkClient) get(ctx context.Context, addr string, secret []byte) (*linkConn, error) {
	c.mu.Lock()
	d := c.conns[addr]
	if d != nil {
		select {
		case <-d.ready:
			if d.err != nil || !d.conn.alive() || d.conn.stale(c.idle) {
				// A connection unused for half of linkIdle is left
				// for the owner to close, before it does.
				d = nil
			}
		default:
		}
	}
	if d == nil {
		d = &linkDial{ready: make(chan struct{})}
		c.conns[addr] = d
		go func() {
			dial := c.dial
			if dial == nil {
				dial = (&net.Dialer{Timeout: linkDialTimeout}).Dial
			}
			conn, err := dial("tcp", addr)
			if err == nil {
				// The hello names the member dialled (linkhello.go).
				var hello []byte
				if hello, err = appendLinkHello(secret, addr, time.Now()); err == nil {
					_, err = conn.Write(hello)
				}
				if err != nil {
					conn.Close()
				}
			}
			if err == nil {
				d.conn = newLinkConn(conn, bufio.NewReaderSize(conn, 64<<10))
				go c.readLoop(d.conn)
			} else {
				c.mu.Lock()
				if c.conns[addr] == d {
					delete(c.conns, addr)
				}
				c.mu.Unlock()
			}
			d.err = err
			close(d.ready)
		}()
	}
	c.mu.Unlock()
	select {
	case <-d.ready:
		return d.conn, d.err
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

// forget closes the connection to addr (its member is gone): the
// streams on it end at once.
func (c *linkClient) forget(addr string) {
	if c == nil {
		return
	}
	c.mu.Lock()
	d := c.conns[addr]
	delete(c.conns, addr)
	c.mu.Unlock()
	if d != nil {
		go func() {
			<-d.ready
			if d.conn != nil {
				d.conn.fail(errLinkDown)
			}
		}()
	}
}

// close ends every connection.
func (c *linkClient) close() {
	if c == nil {
		return
	}
	c.mu.Lock()
	addrs := make([]string, 0, len(c.conns))
	for addr := range c.conns {
		addrs = append(addrs, addr)
	}
	c.mu.Unlock()
	for _, addr := range addrs {
		c.forget(addr)
	}
}

// readLoop is the forwarder's reader: answers, body bytes and room.
func (c *linkClient) readLoop(l *linkConn) {
	var buf []byte
	for {
		typ, id, payload, err := l.readFrame(buf)
		if err != nil {
			l.fail(err)
			return
		}
		if cap(payload) > cap(buf) {
			buf = payload[:0]
		}
		switch typ {
		case frameData:
			if !l.data(id, payload) {
				l.fail(errors.New("a member sent past a window"))
				return
			}
			continue
		case frameWindow:
			l.window(id, payload)
			continue
		}
		s := l.stream(id)
		if s == nil {
			continue // abandoned here
		}
		switch typ {
		case frameAnswer:
			hr := headReader{b: payload}
			a := linkAnswer{status: int(hr.uvarint()), header: hr.header(uint64(len(hr.b)))}
			if hr.err != nil || a.status < 200 || a.status > 999 {
				l.fail(errors.New("a malformed answer on the link"))
				return
			}
			select {
			case s.answer <- a:
			default:
				l.fail(errors.New("a second answer on the link"))
				return
			}
		case frameEnd:
			l.drop(id)
			s.in.close(io.EOF)
			s.out.close(errLinkReset) // the owner wants no more of the body
		case frameReset:
			l.drop(id)
			s.end(errLinkReset)
		}
	}
}

// open starts a stream for a request on l and sends its head, with the
// body held whole (or none) and its end when there is room for them at
// once; otherwise they are the caller's to send (pump).
func (l *linkConn) open(head []byte, held []byte, hasBody bool) (s *linkStream, sent bool) {
	l.used.Store(time.Now().UnixNano())
	l.mu.Lock()
	l.nextID++
	s = l.newStream(l.nextID)
	s.answer = make(chan linkAnswer, 1)
	l.streams[s.id] = s
	l.mu.Unlock()
	frames := appendFrame(make([]byte, 0, frameHeadSize*4+len(head)+len(held)), frameHead, s.id, head)
	if !hasBody && s.tryRoom(len(held)) {
		for len(held) > 0 {
			n := min(len(held), linkMaxData)
			frames = appendFrame(frames, frameData, s.id, held[:n])
			held = held[n:]
		}
		frames = appendFrame(frames, frameEnd, s.id, nil)
		sent = true
	}
	l.send(frames)
	return s, sent
}

// roundTrip sends r with its Retainer-Forwarded header to addr on the
// link and answers the owner's answer head; its body is the stream's to
// read (in), and the stream the caller's to reset if it stops reading
// early. body nil: the request has none, or held is all of it.
func (c *linkClient) roundTrip(ctx context.Context, addr string, secret []byte, r *http.Request, forwarded string, held []byte, body io.Reader, contentLength int64) (*linkStream, linkAnswer, error) {
	l, err := c.get(ctx, addr, secret)
	if err != nil {
		return nil, linkAnswer{}, err
	}
	s, sent := l.open(linkRequestHead(r, forwarded, contentLength), held, body != nil)
	if body == nil && !sent {
		body = bytes.NewReader(held)
	}
	if body != nil {
		go s.pump(body, ctx.Done())
	}
	t := time.NewTimer(c.headTimeout)
	defer t.Stop()
	select {
	case a := <-s.answer:
		return s, a, nil
	case <-s.ended:
		// The answer may have come just before.
		select {
		case a := <-s.answer:
			return s, a, nil
		default:
		}
		return nil, linkAnswer{}, fmt.Errorf("the member ended the forward before its answer: %w", errLinkReset)
	case <-s.conn.done:
		select {
		case a := <-s.answer:
			return s, a, nil
		default:
		}
		return nil, linkAnswer{}, errLinkDown
	case <-ctx.Done():
		s.reset()
		return nil, linkAnswer{}, ctx.Err()
	case <-t.C:
		s.reset()
		return nil, linkAnswer{}, fmt.Errorf("no answer from %s within %v", addr, c.headTimeout)
	}
}

// pump sends a streamed body: data frames within the stream's room, and
// its end. A body that fails to read abandons the stream.
func (s *linkStream) pump(body io.Reader, done <-chan struct{}) {
	buf := make([]byte, linkMaxData+64)
	for {
		n, err := body.Read(buf)
		if n > 0 {
			if s.sendBody(buf[:n], done) != nil {
				return // the stream ended
			}
		}
		if err == io.EOF {
			s.conn.send(appendFrame(nil, frameEnd, s.id, nil))
			return
		}
		if err != nil {
			s.reset()
			return
		}
	}
}
