package handles

import (
	"context"
	"errors"
	"io"

	"github.com/retainer-gw/retainer/fault"
	"github.com/retainer-gw/retainer/internal/readsome"
	"github.com/retainer-gw/retainer/program"
)

// Stream is the streamed body of a handle's response (README.md, API): the
// invocation was answered with its head, and the chunks come as the
// handler's stream yields them. The reader pulls; nothing is read ahead of
// it beyond the worker's window, so a slow visitor slows the producer.
type Stream struct {
	registry *Registry
	id       string
	stream   int64
	detach   func()        // ends the request body's attachment, if any
	relay    io.ReadCloser // a fetch answer relayed as it is (res.Relay)
	relayErr error
	relayBuf []byte
	relayed  bool // its first chunk was sent
}

// ObjectBody reports a relayed object's body (docs/objects.md), which is
// bounded by max_object rather than max_response_body.
func (st *Stream) ObjectBody() bool {
	o, ok := st.relay.(interface{ ObjectBody() bool })
	return ok && o.ObjectBody()
}

// OpenStream is the stream a response names (res.Stream != 0).
func (r *Registry) OpenStream(id string, res program.WireResponse) *Stream {
	s := r.store
	s.mu.Lock()
	ls := s.live[id]
	s.mu.Unlock()
	if ls != nil {
		ls.streams.Add(1)
	}
	st := &Stream{registry: r, id: id, stream: res.Stream}
	if res.Relay != "" {
		// An upstream answer the handler returned unread: the gateway
		// sends it on itself; the isolate is not involved any more.
		host := s.opts.Host
		if host == nil || host.Fetcher == nil || host.Fetcher.Streams == nil {
			st.relayErr = fault.New(fault.BadResponse, "The handler answered a fetch body this gateway does not hold.")
		} else {
			st.relay, st.relayErr = host.Fetcher.Streams.Take(res.Relay, id)
		}
	}
	return st
}

// nextRelayed reads what has arrived of a relayed answer.
func (st *Stream) nextRelayed(ctx context.Context) ([]byte, bool, error) {
	if st.relayErr != nil {
		return nil, true, st.relayErr
	}
	// One buffer for the relay: a chunk is written to the visitor before
	// the next is read.
	if st.relayBuf == nil {
		st.relayBuf = make([]byte, 64<<10)
	}
	buf := st.relayBuf
	n, err := readsome.Read(ctx, st.relay, buf)
	switch {
	case n > 0:
		return buf[:n], false, nil
	case errors.Is(err, io.EOF):
		return nil, true, nil
	case ctx.Err() != nil:
		st.relay.Close() // ends the read still under way
		return nil, true, ctx.Err()
	case err != nil:
		return nil, true, fault.New(fault.BadResponse, "The relayed upstream answer failed: %v.", err)
	}
	return nil, false, nil
}

// Next answers the next chunk, or done at the stream's end. A chunk is
// answered only once the kv writes the handle made before it are durable
// (the output gate holds stream chunks as it holds responses).
func (st *Stream) Next(ctx context.Context) ([]byte, bool, error) {
	s := st.registry.store
	for {
		var data []byte
		var done bool
		var err error
		if st.relay != nil || st.relayErr != nil {
			data, done, err = st.nextRelayed(ctx)
		} else {
			data, done, err = s.opts.Executor.ReadStream(ctx, st.id, st.stream)
		}
		if err != nil {
			return nil, true, err
		}
		if len(data) > 0 {
			// A relayed body's chunks are no invocations, and the writes
			// before it are durable once its first is sent.
			if st.relay == nil || !st.relayed {
				if err := s.outputGate(ctx, st.id); err != nil {
					return nil, true, err
				}
			}
			if st.relay != nil {
				st.relayed = true
				return data, false, nil
			}
			s.touch(st.id, true)
			return data, false, nil
		}
		if done {
			return nil, true, nil
		}
		if ctx.Err() != nil {
			return nil, true, ctx.Err()
		}
	}
}

// Close ends the reader's part: a stream not read to its end is cancelled
// (its source's cancel runs in the isolate).
func (st *Stream) Close(cancel bool) {
	s := st.registry.store
	if st.relay != nil {
		st.relay.Close()
	} else if cancel && st.stream != 0 {
		s.opts.Executor.CancelStream(st.id, st.stream)
	}
	if st.detach != nil {
		st.detach()
	}
	s.mu.Lock()
	ls := s.live[st.id]
	s.mu.Unlock()
	if ls != nil {
		ls.streams.Add(-1)
	}
}

// readWhole reads a stream to its end within max bytes, for the API's
// invoke, whose answer is one JSON document. What it holds is charged to
// the handle's tenant in the store's body budget (budgets.BodyBytes) until
// the caller has answered: release gives it back.
func (st *Stream) readWhole(ctx context.Context, max int) (body []byte, release func(), err error) {
	s := st.registry.store
	tenant := s.tenantOf(st.id)
	held := int64(0)
	release = func() { s.held.Give(tenant, held); held = 0 }
	for {
		chunk, done, err := st.Next(ctx)
		if err != nil {
			st.Close(true)
			release()
			return nil, func() {}, err
		}
		if done {
			st.Close(false)
			return body, release, nil
		}
		if err := s.held.Take(tenant, int64(len(chunk))); err != nil {
			st.Close(true)
			release()
			return nil, func() {}, err
		}
		held += int64(len(chunk))
		body = append(body, chunk...)
		if max > 0 && len(body) > max {
			st.Close(true)
			release()
			return nil, func() {}, fault.New(fault.BadResponse, "The fetch handle streamed a body over the %d byte response bound.", max)
		}
	}
}

// Owner answers the registry and tenant of the stream's handle (tenant ""
// once the handle has ended): whom its bytes are metered to (docs/usage.md).
func (st *Stream) Owner() (registry, tenant string) {
	return st.registry.name, st.registry.store.tenantOf(st.id)
}
