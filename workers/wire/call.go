package wire

import (
	"context"
	"errors"
	"sync"

	"github.com/retainer-gw/retainer/budgets"
)

// MaxCalls is the most requests a worker has sent the gateway at once
// (LimitCalls): its isolates' host calls past it wait in the worker, so
// ordinary JavaScript (thousands of awaited calls across spawned runs)
// never makes its worker break the protocol (docs/architecture.md).
const MaxCalls = budgets.WireRequestsServing / 2

// LimitCalls bounds the requests this side has sent and not seen answered
// to n: a call past them waits for a place (within its context). Set it
// before Start.
func (c *Conn) LimitCalls(n int) { c.calls = make(chan struct{}, n) }

// release gives back a call's place (LimitCalls).
func (c *Conn) release() {
	if c.calls != nil {
		select {
		case <-c.calls:
		default:
		}
	}
}

var errConnClosed = errors.New("connection closed")

// ErrNotSent is a call refused because the connection had closed before
// its frame was written: the peer never saw it.
var ErrNotSent = errors.New("connection closed before the call was sent")

// Call sends a request and waits for its response.
func (c *Conn) Call(ctx context.Context, path string, payload []byte) ([]byte, error) {
	return c.CallOrdered(ctx, path, payload, nil, nil, false)
}

// CallOrdered is Call with a turn around the write: before returns when
// the frame may be written, after runs once its place in the stream is
// taken (or it could not be written). hold lets the frame wait for the
// next write, as replyLater's answers do (up to maxHeld frames, holdFor):
// for a call whose peer has enough work ahead of it that the wait costs
// it nothing.
func (c *Conn) CallOrdered(ctx context.Context, path string, payload []byte, before, after func(), hold bool) ([]byte, error) {
	defer func() { // on the paths that end before the write
		if after != nil {
			after()
		}
	}()
	if 4+frameHeader+len(path)+len(payload) > int(c.PeerMax.Load()) {
		return nil, ErrFrameTooLarge
	}
	if c.calls != nil {
		select {
		case c.calls <- struct{}{}:
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-c.done:
			return nil, ErrNotSent
		}
	}
	ch := answers.Get().(chan []byte)
	c.mu.Lock()
	if c.err != nil {
		c.mu.Unlock()
		c.release()
		answers.Put(ch)
		return nil, ErrNotSent
	}
	c.next++
	id := c.next
	c.waits[id] = ch
	c.mu.Unlock()
	if before != nil {
		before()
	}
	err := c.write(id, kindRequest, path, payload, after, hold)
	after = nil
	if err != nil {
		c.forget(id)
		c.release()
		if errors.Is(err, ErrFrameTooLarge) {
			return nil, err
		}
		return nil, errConnClosed
	}
	select {
	case res, ok := <-ch:
		if !ok {
			return nil, errConnClosed
		}
		answers.Put(ch) // emptied, and no longer in waits
		return res, nil
	case <-ctx.Done():
		c.abandon(id)
		// The peer stops what it does for the call (best effort: a frame
		// that cannot be written means the connection is going anyway).
		go c.write(id, kindCancel, "", nil, nil, false)
		return nil, ctx.Err()
	}
}

// answers holds the channels calls wait on for their answers (each with
// room for one): a call that received its answer gives its channel back,
// as nothing else can send on it any more; one whose caller gave up, or
// that the connection's end closed, does not.
var answers = sync.Pool{New: func() any { return make(chan []byte, 1) }}

func (c *Conn) forget(id uint64) {
	c.mu.Lock()
	delete(c.waits, id)
	c.mu.Unlock()
}

// abandon stops waiting for call id's answer; the call keeps its place
// (LimitCalls) until the answer comes, as the peer serves it until then.
func (c *Conn) abandon(id uint64) {
	c.mu.Lock()
	if _, ok := c.waits[id]; ok {
		c.waits[id] = nil
	}
	c.mu.Unlock()
}
