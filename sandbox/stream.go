package sandbox

import (
	"context"
	"errors"
	"sync"
	"time"

	v8 "rogchap.com/v8go"

	"github.com/retainer-gw/retainer/budgets"
	"github.com/retainer-gw/retainer/fault"
	"github.com/retainer-gw/retainer/internal/wirejson"
)

// Streamed responses (README.md, API). A handler that answers a Response whose
// body is a ReadableStream is answered with the head at once (its
// WireResponse.Stream names the stream); the runtime then pumps the stream
// into a buffer here, chunk by chunk, as the handler's callbacks enqueue
// them, and the reader (the gateway, over the worker protocol) takes the
// chunks out with ReadStream.
//
// Flow control is pull-based and bounded end to end: the buffer holds at
// most budgets.StreamWindow bytes; past it the runtime's pump awaits until a read
// has drained it, so a slow visitor slows the producer (its stream's
// desiredSize falls) and nothing buffers without bound outside the
// program's own heap. Every callback that produces chunks runs on the
// isolate's loop under the invocation timeout, like a timer callback.

// ErrStreamGone is the error of a read from a stream the engine does not
// hold (ended and read to its end, cancelled, or its isolate gone).
var ErrStreamGone = errors.New("the stream is gone")

// outStream is one streamed body in flight. The loop writes it; readers
// on other goroutines take from it.
type outStream struct {
	mu        sync.Mutex
	buf       []byte
	ended     bool
	err       string // the stream errored (or its isolate ended)
	waiting   bool   // the pump awaits a drain
	notify    chan struct{}
	cancelled bool
}

func (s *outStream) signal() {
	select {
	case s.notify <- struct{}{}:
	default:
	}
}

// streamSet is an isolate's streams and the loop work their readers ask
// for. mu guards all but wake, which the loop receives from
// (vm.runStreamWork, eventloop.go, takes the work).
type streamSet struct {
	mu      sync.Mutex
	open    map[int64]*outStream
	drained []int64 // streams whose pump may go on (loop work)
	cancels []int64 // streams the reader gave up (loop work)
	wake    chan struct{}
	// refused are streams opened past budgets.StreamsPerHandle: their pump writes into
	// nothing and their invocation answers QUOTA_EXCEEDED (refused).
	refused map[int64]bool
}

func newStreamSet() streamSet { return streamSet{wake: make(chan struct{}, 1)} }

// ready is signalled when readers asked for loop work (takeWork).
func (ss *streamSet) ready() chan struct{} { return ss.wake }

// hostOpen is host.streamOpen(id): it registers a stream the runtime is
// about to pump.
func (ss *streamSet) hostOpen(args []*v8.Value) error {
	ss.mu.Lock()
	defer ss.mu.Unlock()
	id := int64(args[0].Integer())
	if len(ss.open) >= budgets.StreamsPerHandle {
		// Not an exception: the handler has returned, and a throw here
		// answered the visitor 500 HANDLER_ERROR (17 visitor addresses
		// took a handle's 1,024 and everyone else got 500). The answer is
		// refused with QUOTA_EXCEEDED instead, a budget (docs/architecture.md,
		// "Budgets"); a refusal is forgotten when its answer is read.
		if len(ss.refused) >= budgets.StreamsPerHandle {
			return errors.New("too many open response streams")
		}
		if ss.refused == nil {
			ss.refused = map[int64]bool{}
		}
		ss.refused[id] = true
		return nil
	}
	if ss.open == nil {
		ss.open = map[int64]*outStream{}
	}
	ss.open[id] = &outStream{notify: make(chan struct{}, 1)}
	return nil
}

// refusedAnswer answers QUOTA_EXCEEDED for an answer whose stream was
// opened past the isolate's budgets.StreamsPerHandle (hostOpen), and
// cancels its pump; nil for any other answer.
func (ss *streamSet) refusedAnswer(stream int64) error {
	if stream == 0 {
		return nil
	}
	ss.mu.Lock()
	refused := ss.refused[stream]
	ss.mu.Unlock()
	if !refused {
		return nil
	}
	ss.drop(stream)
	return fault.New(fault.QuotaExceeded, "This handler holds %d streamed responses open, the most one handle may. Try again when some have ended.", budgets.StreamsPerHandle)
}

// hostWrite is host.streamWrite(id, chunk): it appends a chunk (a Latin-1
// string) and answers false when the buffer is past the window: the pump
// then awaits a drain.
func (ss *streamSet) hostWrite(args []*v8.Value) (bool, error) {
	if len(args) < 2 {
		return false, errors.New("streamWrite needs an id and a chunk")
	}
	ss.mu.Lock()
	s := ss.open[int64(args[0].Integer())]
	ss.mu.Unlock()
	if s == nil {
		return false, nil
	}
	chunk, ok := wirejson.Latin1BytesChecked(args[1].String())
	if !ok {
		return false, errors.New("a stream chunk must be bytes")
	}
	s.mu.Lock()
	more := !s.cancelled
	if more {
		s.buf = append(s.buf, chunk...)
		more = len(s.buf) < budgets.StreamWindow
		s.waiting = !more
	}
	s.mu.Unlock()
	s.signal()
	return more, nil
}

// hostEnd is host.streamEnd(id, error): it ends a stream, at its end (no
// text) or with an error, which it answers.
func (ss *streamSet) hostEnd(args []*v8.Value) string {
	ss.mu.Lock()
	s := ss.open[int64(args[0].Integer())]
	ss.mu.Unlock()
	if s == nil {
		return ""
	}
	msg := ""
	if len(args) > 1 {
		msg = args[1].String()
	}
	s.mu.Lock()
	s.ended = true
	s.err = msg
	s.mu.Unlock()
	s.signal()
	return msg
}

// read is ReadStream of the isolate whose end closes gone.
func (ss *streamSet) read(ctx context.Context, stream int64, wait time.Duration, gone <-chan struct{}) ([]byte, bool, error) {
	ss.mu.Lock()
	s := ss.open[stream]
	ss.mu.Unlock()
	if s == nil {
		return nil, true, fault.Wrap(fault.BadResponse, ErrStreamGone, "No such response stream.")
	}
	timer := time.NewTimer(wait)
	defer timer.Stop()
	for {
		s.mu.Lock()
		if len(s.buf) > 0 {
			n := min(len(s.buf), budgets.StreamWindow)
			chunk := append([]byte(nil), s.buf[:n]...)
			s.buf = s.buf[n:]
			resume := s.waiting && len(s.buf) < budgets.StreamWindow
			if resume {
				s.waiting = false
			}
			s.mu.Unlock()
			if resume {
				ss.work(stream, false)
			}
			return chunk, false, nil
		}
		if s.ended {
			msg := s.err
			s.mu.Unlock()
			ss.mu.Lock()
			delete(ss.open, stream)
			ss.mu.Unlock()
			if msg != "" {
				return nil, true, fault.New(fault.HandlerError, "The response stream failed: %s", msg)
			}
			return nil, true, nil
		}
		s.mu.Unlock()
		select {
		case <-s.notify:
		case <-timer.C:
			return nil, false, nil
		case <-ctx.Done():
			return nil, false, ctx.Err()
		case <-gone:
			s.mu.Lock()
			ended := len(s.buf) == 0 && !s.ended
			s.mu.Unlock()
			if ended {
				return nil, true, fault.Wrap(fault.HandlesClosed, ErrStreamGone, "The handle's isolate ended during its response stream.")
			}
		}
	}
}

// drop cancels one of the isolate's streams: an answer refused after its
// stream was opened (one over the body bound) leaves none behind.
func (ss *streamSet) drop(stream int64) {
	ss.mu.Lock()
	s := ss.open[stream]
	delete(ss.open, stream)
	refused := ss.refused[stream]
	delete(ss.refused, stream)
	ss.mu.Unlock()
	if refused {
		ss.work(stream, true) // its pump waits on a write nobody took
		return
	}
	if s == nil {
		return
	}
	s.mu.Lock()
	s.cancelled = true
	s.buf = nil
	s.mu.Unlock()
	ss.work(stream, true)
}

// work asks the loop to resume a stream's pump or to cancel it.
func (ss *streamSet) work(stream int64, cancel bool) {
	ss.mu.Lock()
	if cancel {
		ss.cancels = append(ss.cancels, stream)
	} else {
		ss.drained = append(ss.drained, stream)
	}
	ss.mu.Unlock()
	select {
	case ss.wake <- struct{}{}:
	default:
	}
}

// takeWork answers, and forgets, what readers asked the loop for: the
// streams to resume and those to cancel.
func (ss *streamSet) takeWork() (drained, cancels []int64) {
	ss.mu.Lock()
	drained, cancels = ss.drained, ss.cancels
	ss.drained, ss.cancels = nil, nil
	ss.mu.Unlock()
	return drained, cancels
}

// endAll fails every open stream when the isolate ends.
func (ss *streamSet) endAll() {
	ss.mu.Lock()
	open := ss.open
	ss.open = nil
	ss.mu.Unlock()
	for _, s := range open {
		s.mu.Lock()
		if !s.ended {
			s.ended = true
			s.err = "the isolate ended"
		}
		s.mu.Unlock()
		s.signal()
	}
}
