package cache

import (
	"context"
	"encoding/json"
	"reflect"
	"testing"
	"time"

	"github.com/retainer-gw/retainer/fault"
	"github.com/retainer-gw/retainer/internal/hostcache"
)

// sentFrame is one frame a worker's cache sent: its writes and the answers
// carried along.
type sentFrame struct {
	writes  []BatchWrite
	carried []hostcache.Answer
}

// carryingWorker is a worker's cache whose frames reach a gateway's side
// in memory (Gateway.Carry, Batch) with a store that refuses the key
// "refused"; each frame is also sent on frames, and then waits until next
// allows it on.
func carryingWorker(t *testing.T, next chan struct{}) (*Worker, chan sentFrame) {
	frames := make(chan sentFrame, 16)
	g := NewGateway(GatewayConfig{
		Apply: func(_ context.Context, _, _ string, _ time.Time, writes []Write) error {
			for _, w := range writes {
				if w.Key == "refused" {
					return fault.New(fault.QuotaExceeded, "over the quota")
				}
			}
			return nil
		},
		SpaceOf: func(string) (string, bool, bool) { return "s", true, true },
	})
	p := &peer{}
	c := NewWorker(func(frame []byte, carried []hostcache.Answer) ([]byte, error) {
		var b batch
		if err := b.decode(frame); err != nil {
			t.Error(err)
			return nil, err
		}
		frames <- sentFrame{b.Writes, carried}
		if next != nil {
			<-next
		}
		if len(carried) == 0 {
			return g.Batch(context.Background(), p, frame)
		}
		ids := make([]string, len(carried))
		for i, a := range carried {
			ids[i] = a.ID
		}
		reply, release, err := g.Carry(context.Background(), p, frame, ids)
		if err != nil {
			t.Error(err)
		}
		// What the gateway released is what the worker's cache counts as
		// sent (the two sides decide alike).
		for i, a := range carried {
			if release[i] != (a.Sent == nil) {
				// Sent is set by the test only on answers it expects released.
				continue
			}
			t.Errorf("answer %s released %v", a.ID, release[i])
		}
		return reply, err
	}, nil)
	c.mu.Lock()
	for _, id := range []string{"a", "b", "c"} {
		c.spaceOf[id], c.writable[id] = "s", true
	}
	c.mu.Unlock()
	return c, frames
}

func put(t *testing.T, c *Worker, id, key string) {
	t.Helper()
	if _, ok := c.writeNow(id, "kv.put", json.RawMessage(`{"key":"`+key+`","value":"1"}`), time.Time{}); !ok {
		t.Fatal("the write was not answered at once")
	}
}

// An answer waiting for its run's writes rides with them in one frame (no
// round trip of their own before it): the frame holds the writes and the
// answer, the answer is never written on its own, and its Sent runs once
// the gateway released it.
func TestAnswerRidesWithItsWrites(t *testing.T) {
	c, frames := carryingWorker(t, nil)
	put(t, c, "a", "k")
	sent := make(chan struct{}, 1)
	c.WhenSettled("a", func() *hostcache.Answer {
		return &hostcache.Answer{Tag: 7, Reply: []byte("the answer"), Sent: func() { sent <- struct{}{} }}
	}, func(err error) { t.Errorf("the answer was written on its own (%v)", err) })
	f := <-frames
	if len(f.writes) != 1 || f.writes[0].Key != "k" || len(f.carried) != 1 ||
		f.carried[0].ID != "a" || f.carried[0].Tag != 7 || string(f.carried[0].Reply) != "the answer" {
		t.Fatalf("the frame: %+v", f)
	}
	<-sent
	if err := c.Settle("a"); err != nil {
		t.Fatal(err)
	}
}

// In one frame, a run's refused write keeps that run's answer (it fails, in
// the worker, with the refusal) and the answer of the run whose writes came
// after it (not applied: they are sent again, and that answer is released
// after them, unharmed): no answer leaves before its writes are applied,
// and one run's refusal fails no other.
func TestCarriedAnswersOfARefusedWriteStayBehind(t *testing.T) {
	next := make(chan struct{})
	c, frames := carryingWorker(t, next)
	put(t, c, "c", "first")
	c0 := make(chan error, 1)
	c.WhenSettled("c", nil, func(err error) { c0 <- err })
	if f := <-frames; len(f.writes) != 1 || len(f.carried) != 0 {
		t.Fatalf("the first frame: %+v", f)
	}
	// While the first frame is on its way, both answers come to wait in
	// the worker for writes still queued.
	put(t, c, "a", "refused")
	put(t, c, "b", "k")
	gotA, gotB := make(chan error, 1), make(chan error, 1)
	answer := func(id string) func() *hostcache.Answer {
		return func() *hostcache.Answer { return &hostcache.Answer{Tag: 1, Reply: []byte(id)} }
	}
	c.WhenSettled("a", answer("a"), func(err error) { gotA <- err })
	c.WhenSettled("b", answer("b"), func(err error) { gotB <- err })
	next <- struct{}{}
	if err := <-c0; err != nil {
		t.Fatal(err)
	}
	f := <-frames
	if len(f.writes) != 2 || len(f.carried) != 2 {
		t.Fatalf("the frame: %+v", f)
	}
	next <- struct{}{}
	f = <-frames // b's write, sent again, alone
	if len(f.writes) != 1 || f.writes[0].ID != "b" || len(f.carried) != 0 {
		t.Fatalf("the frame after the refusal: %+v", f)
	}
	next <- struct{}{}
	if err := <-gotA; fault.CodeOf(err) != fault.QuotaExceeded {
		t.Fatalf("a's refused write answered %v", err)
	}
	if err := <-gotB; err != nil {
		t.Fatalf("b's write was applied, yet: %v", err)
	}
}

// A write no answer or caller waits for (a ctx.waitUntil's) is sent on its
// own once the hold passes.
func TestWriteAloneIsSentAfterTheHold(t *testing.T) {
	c, frames := carryingWorker(t, nil)
	put(t, c, "a", "k")
	select {
	case f := <-frames:
		if len(f.writes) != 1 || len(f.carried) != 0 {
			t.Fatalf("the frame: %+v", f)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("a write alone was never sent")
	}
}

// The gateway releases a carried answer only when every write of its id in
// the batch was applied.
func TestGatewayCarryReleasesOnlyApplied(t *testing.T) {
	g := NewGateway(GatewayConfig{Apply: func(_ context.Context, _, _ string, _ time.Time, writes []Write) error {
		for _, w := range writes {
			if w.Key == "refused" {
				return fault.New(fault.QuotaExceeded, "over the quota")
			}
		}
		return nil
	}})
	v := "1"
	body := batch{Writes: []BatchWrite{
		{ID: "a", Write: Write{Op: opPut, Key: "k", Value: &v}},
		{ID: "b", Write: Write{Op: opPut, Key: "refused", Value: &v}},
		{ID: "c", Write: Write{Op: opPut, Key: "k", Value: &v}},
	}}.encode()
	reply, release, err := g.Carry(context.Background(), &peer{}, body, []string{"a", "b", "c", ""})
	if err != nil {
		t.Fatal(err)
	}
	var rep batchReply
	json.Unmarshal(reply, &rep)
	if rep.Applied != 1 || rep.Code != fault.QuotaExceeded || !reflect.DeepEqual(release, []bool{true, false, false, false}) {
		t.Fatalf("reply %+v, release %v", rep, release)
	}
	if _, _, err := g.Carry(context.Background(), &peer{}, body[:len(body)-1], []string{"a"}); err == nil {
		t.Fatal("a cut batch was applied")
	}
}

// An answer waits for its own writes, not for its handle's later ones: a
// handle under load always has a write on the way, and its answers must
// not wait until it has none.
func TestAnswerWaitsOnlyForItsOwnWrites(t *testing.T) {
	next := make(chan struct{})
	c, frames := carryingWorker(t, next)
	put(t, c, "a", "k1")
	first, second := make(chan error, 1), make(chan error, 1)
	c.WhenSettled("a", nil, func(err error) { first <- err })
	<-frames // the first write on its way
	put(t, c, "a", "k2")
	c.WhenSettled("a", nil, func(err error) { second <- err })
	next <- struct{}{}
	if err := <-first; err != nil {
		t.Fatal(err)
	}
	select {
	case <-second:
		t.Fatal("the second answer left before its write was applied")
	default:
	}
	<-frames
	next <- struct{}{}
	if err := <-second; err != nil {
		t.Fatal(err)
	}
}
