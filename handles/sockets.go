package handles

import (
	"context"
	"errors"
	"sync"
	"time"

	"github.com/retainer-gw/retainer/budgets"
	"github.com/retainer-gw/retainer/fault"
	"github.com/retainer-gw/retainer/program"
)

// WebSockets to a handle (docs/websockets.md): the data plane upgrades the
// visitor once the handler answered 101 (a Stream whose records are what
// the handler sends), counts the socket here against its handle's and its
// tenant's caps, and delivers each of the visitor's messages with
// SocketEvent. An open socket is an open stream: it keeps its handle from
// idling out and its worker from being recycled.

// socketCount is the open sockets of each handle and of each tenant, and
// the turns their events take to each handle's isolate.
type socketCount struct {
	byHandle, byTenant budgets.Counts

	mu    sync.Mutex // guards turns
	turns map[string]*socketTurns
}

// socketTurns is the order in which one handle's socket events go to its
// isolate: at most slots of them are under way or waiting in the handle's
// queue, and the rest wait here, first come first served. A socket's
// relay delivers one event at a time and reads the visitor's next frame
// only once it is delivered, so a socket waiting here is a visitor's
// connection not read: TCP slows the visitor (docs/websockets.md). First
// come first served keeps the order of events across a handle's sockets:
// a visitor's close that arrived before another's message is delivered
// before it, so a room has let the closed socket go before it broadcasts.
type socketTurns struct {
	mu      sync.Mutex // guards busy, waiters, users
	busy    int
	waiters []chan struct{}
	users   int // open sockets of the handle (the turns go with the last)
}

// acquire waits for a turn; ctx ends the wait.
func (t *socketTurns) acquire(ctx context.Context, slots int) error {
	t.mu.Lock()
	if len(t.waiters) == 0 && t.busy < slots {
		t.busy++
		t.mu.Unlock()
		return nil
	}
	ch := make(chan struct{}, 1)
	t.waiters = append(t.waiters, ch)
	t.mu.Unlock()
	select {
	case <-ch:
		return nil
	case <-ctx.Done():
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	for i, c := range t.waiters {
		if c == ch {
			t.waiters = append(t.waiters[:i], t.waiters[i+1:]...)
			return ctx.Err()
		}
	}
	// Handed a turn as it gave up: the turn goes to the next in line.
	t.handOff(slots, true)
	return ctx.Err()
}

// release ends a turn, handing it to the first waiter.
func (t *socketTurns) release(slots int) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.handOff(slots, true)
}

// handOff frees one turn (when free) and gives free turns to the first
// waiters; with t.mu held.
func (t *socketTurns) handOff(slots int, free bool) {
	if free {
		t.busy--
	}
	for len(t.waiters) > 0 && t.busy < slots {
		ch := t.waiters[0]
		t.waiters = t.waiters[1:]
		t.busy++
		ch <- struct{}{}
	}
}

// turnsFor is handle id's turns, made for a socket that opens (open) or
// looked up; with open false and no socket open, nil.
func (c *socketCount) turnsFor(id string, open bool) *socketTurns {
	c.mu.Lock()
	defer c.mu.Unlock()
	t := c.turns[id]
	if t == nil && open {
		if c.turns == nil {
			c.turns = map[string]*socketTurns{}
		}
		t = &socketTurns{}
		c.turns[id] = t
	}
	if t != nil && open {
		t.mu.Lock()
		t.users++
		t.mu.Unlock()
	}
	return t
}

// letTurnsGo uncounts a closed socket of handle id; the turns go with the
// handle's last socket.
func (c *socketCount) letTurnsGo(id string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	t := c.turns[id]
	if t == nil {
		return
	}
	t.mu.Lock()
	t.users--
	last := t.users <= 0
	t.mu.Unlock()
	if last {
		delete(c.turns, id)
	}
}

// socketEventSlots is how many of a handle's socket events may be under
// way or waiting in its queue at once: half the queue, so requests keep
// the other half however busy its sockets are.
func socketEventSlots(limits budgets.Limits, concurrency int) int {
	return max(1, (limits.HandleQueue+max(concurrency, 1)-1)/2)
}

// overloadedRetry is how long a socket event the handle's queue refused
// (it was full of requests) waits before it is offered again; it was not
// delivered, and the visitor's connection is not read meanwhile.
const overloadedRetry = 10 * time.Millisecond

// HandleID is the handle a stream belongs to.
func (st *Stream) HandleID() string { return st.id }

// AcquireSocket counts an accepted socket of handle id against
// websockets_per_handle and websockets_per_tenant; release uncounts it.
func (r *Registry) AcquireSocket(id string) (release func(), err error) {
	s := r.store
	cfg := r.config()
	tenant := s.tenantOf(id)
	if tenant == "" {
		return nil, fault.Closed(id)
	}
	if !s.sockets.byHandle.Take(id, cfg.WebsocketsPerHandle) {
		return nil, fault.New(fault.QuotaExceeded, "This handler holds %d WebSockets, the most one handler may (websockets_per_handle).", cfg.WebsocketsPerHandle)
	}
	if !s.sockets.byTenant.Take(tenant, cfg.WebsocketsPerTenant) {
		s.sockets.byHandle.Give(id)
		return nil, fault.New(fault.QuotaExceeded, "This tenant's handlers hold %d WebSockets, the most one tenant may (websockets_per_tenant).", cfg.WebsocketsPerTenant)
	}
	s.sockets.turnsFor(id, true)
	var once sync.Once
	return func() {
		once.Do(func() {
			s.sockets.byHandle.Give(id)
			s.sockets.byTenant.Give(tenant)
			s.sockets.letTurnsGo(id)
		})
	}, nil
}

// ErrSocketGone is an event for a socket its isolate no longer has.
var ErrSocketGone = fault.New(fault.HandlesClosed, "The handler's WebSocket is gone.")

// SocketEvent delivers a visitor's message (webapi/websocket's Text or
// Binary) or close (Close, with code, data the reason) to the
// handler's socket opened as stream st. It runs as an invocation does, in
// order and under the handle's bounds, but never rebuilds the isolate: a
// rebuilt isolate has no sockets (the visitor reconnects). It waits for
// the event's turn (socketTurns) and, when the handle's queue is full,
// for room in it, never answering OVERLOADED: ctx ends the wait, and the
// event is then not delivered. An event that has started runs to its
// answer whatever becomes of ctx.
func (r *Registry) SocketEvent(ctx context.Context, st *Stream, kind byte, code int, data []byte) error {
	s := r.store
	ls := s.liveFor(st.id)
	if ls == nil {
		return fault.Closed(st.id)
	}
	turns := s.sockets.turnsFor(st.id, false)
	if turns != nil {
		slots := socketEventSlots(r.config().Limits, s.concurrencyOf(st.id))
		if err := turns.acquire(ctx, slots); err != nil {
			return err
		}
		defer turns.release(slots)
	}
	for {
		if !s.opts.Executor.Holds(st.id) {
			return ErrSocketGone
		}
		ls.inflight.Add(1)
		start := time.Now()
		res, err := s.opts.Executor.Invoke(context.WithoutCancel(ctx), st.id, program.SocketEvent, program.SocketEventRequest(st.stream, kind, code, data))
		ls.inflight.Add(-1)
		if s.opts.OnSocketEvent != nil && fault.CodeOf(err) != fault.Overloaded {
			s.opts.OnSocketEvent(r.name, st.id, s.tenantOf(st.id), min(max(time.Duration(res.CPUNs), 0), time.Since(start)))
		}
		switch fault.CodeOf(err) {
		case "":
			s.touch(st.id, true)
			if res.Status == 410 {
				return ErrSocketGone
			}
			return nil
		case fault.Overloaded:
			// Requests filled the queue: the event was not sent.
			t := time.NewTimer(overloadedRetry)
			select {
			case <-t.C:
				continue
			case <-ctx.Done():
				t.Stop()
				return ctx.Err()
			}
		case fault.Timeout, fault.Memory:
			s.touch(st.id, false)
			r.strikeIfCharged(st.id, "", err)
		}
		if errors.Is(err, fault.ErrNotStarted) {
			return ErrSocketGone // its worker died: the isolate is lost
		}
		return err
	}
}

// Ended reports that handle id has ended (its sockets then close with
// 1001, not 1011).
func (r *Registry) Ended(id string) bool { return !r.store.exists(id) }

// concurrencyOf is handle id's concurrency (1 once it ended).
func (s *Store) concurrencyOf(id string) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	if rec := s.records[id]; rec != nil {
		return max(rec.Concurrency, 1)
	}
	return 1
}
