package cache

import (
	"context"
	"encoding/json"
	"errors"
	"reflect"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/retainer-gw/retainer/budgets"
	"github.com/retainer-gw/retainer/internal/hostcache"
)

// peer is a worker as the gateway's side sees it, for the unit tests; a
// dead one fails every message.
type peer struct {
	mu   sync.Mutex
	told []drop
	dead bool
}

func (p *peer) Tell(_ context.Context, msg []byte) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.dead {
		return errors.New("gone")
	}
	var d drop
	if err := json.Unmarshal(msg, &d); err != nil {
		return err
	}
	p.told = append(p.told, d)
	return nil
}

func (p *peer) drops() []drop {
	p.mu.Lock()
	defer p.mu.Unlock()
	return append([]drop(nil), p.told...)
}
func (p *peer) Tenant() string       { return "" }
func (p *peer) Holds(id string) bool { return true }

// Past its bound in bytes, a space counts as wholly held: every key of it
// is told, as for a worker whose keys are not known. A key the gateway
// refuses is not noted at all, so a worker cannot make the gateway keep
// keys of any size.
func TestKVHeldKeysAreBounded(t *testing.T) {
	h := held{limit: 3 * (1 + heldKeyCost)}
	h.note("s", "a", "b")
	h.note("t", "x")
	if got := strings.Join(h.mayHold("s", []string{"a", "c", "b"}), ","); got != "a,b" {
		t.Fatalf("held of s: %s, want a,b", got)
	}
	if got := h.mayHold("u", []string{"a"}); got != nil {
		t.Fatalf("a space never noted holds %v", got)
	}
	h.note("s", "c") // the fourth key: s is now wholly held
	if got := strings.Join(h.mayHold("s", []string{"z", "y"}), ","); got != "z,y" {
		t.Fatalf("held of s past the bound: %s, want z,y", got)
	}
	if h.bytes != 1+heldKeyCost {
		t.Fatalf("%d bytes counted after s went whole, want %d (t's one key)", h.bytes, 1+heldKeyCost)
	}
	if got := strings.Join(h.mayHold("t", []string{"x", "y"}), ","); got != "x" {
		t.Fatalf("held of t: %s, want x", got)
	}
	// Keys the gateway refuses cost nothing: 10,000 of them over the key
	// bound, and an empty one, leave the budget as it was.
	var big held
	huge := strings.Repeat("k", budgets.KVKeyBytes+1)
	for i := 0; i < 10000; i++ {
		big.note("s", huge+strconv.Itoa(i), "")
	}
	if big.bytes != 0 || len(big.spaces["s"]) != 0 {
		t.Fatalf("refused keys were noted: %d bytes, %d keys", big.bytes, len(big.spaces["s"]))
	}
	// The default budget holds what it says: past it the space is whole,
	// and the bytes counted stay under the bound.
	for i := 0; i < 100000; i++ {
		big.note("s", strings.Repeat("k", 400)+strconv.Itoa(i))
	}
	if big.spaces["s"] != nil || big.bytes > budgets.KVHeldBytesPerWorker {
		t.Fatalf("past the budget: whole %v, %d bytes (bound %d)", big.spaces["s"] == nil, big.bytes, budgets.KVHeldBytesPerWorker)
	}
}

// A batch's keys are told to the other workers once each, per space and
// per worker whose own cache is current.
func TestKVDropsGatherEachKeyOnce(t *testing.T) {
	p, q := &peer{}, &peer{}
	var d drops
	d.add(p, "s", []string{"a", "b", "a"})
	d.add(p, "s", []string{"b", "c"})
	d.add(q, "s", []string{"a"})
	d.add(p, "t", []string{"a"})
	if len(d.list) != 3 {
		t.Fatalf("%d drops, want 3 (two spaces of p, one of q)", len(d.list))
	}
	for i, want := range []string{"a,b,c", "a", "a"} {
		if got := strings.Join(d.list[i].keys, ","); got != want {
			t.Fatalf("drop %d: keys %s, want %s", i, got, want)
		}
	}
}

// A write is dropped from the caches of the workers that may hold its key
// (they read it) before it is answered, never from the writer's own, nor
// from a worker that never read it; a failed commit drops every cache a
// worker may have; a worker that does not take a drop is forgotten.
func TestGatewayTellsOnlyWhoMayHold(t *testing.T) {
	stored := map[string]string{}
	var mu sync.Mutex
	g := NewGateway(GatewayConfig{
		Apply: func(_ context.Context, _, _ string, _ time.Time, writes []Write) error {
			mu.Lock()
			defer mu.Unlock()
			for _, w := range writes {
				stored[w.Key] = *w.Value
			}
			return nil
		},
		SpaceOf: func(id string) (string, bool, bool) { return "s", true, true },
	})
	serve := func(res string) func() (json.RawMessage, error) {
		return func() (json.RawMessage, error) { return json.RawMessage(res), nil }
	}
	writer, reader, stranger := &peer{}, &peer{}, &peer{}
	// The reader reads k; the stranger reads another key.
	res, note, err := g.Call(reader, "r", opGet, json.RawMessage(`{"key":"k"}`), serve(`"0"`))
	if err != nil || string(res) != `"0"` {
		t.Fatalf("get: %s %v", res, err)
	}
	var h hint
	if json.Unmarshal(note, &h) != nil || h != (hint{Space: "s", Write: true}) {
		t.Fatalf("the hint of a get: %s", note)
	}
	g.Call(stranger, "x", opGet, json.RawMessage(`{"key":"other"}`), serve("null"))
	// The writer's batch writes k: only the reader is told.
	v := "1"
	reply, err := g.Batch(context.Background(), writer, batch{Writes: []BatchWrite{{ID: "w", Write: Write{Op: opPut, Key: "k", Value: &v}}}}.encode())
	if err != nil || string(reply) != `{"applied":1}` {
		t.Fatalf("batch: %s %v", reply, err)
	}
	if got := reader.drops(); !reflect.DeepEqual(got, []drop{{Space: "s", Keys: []string{"k"}}}) {
		t.Fatalf("the reader was told %+v", got)
	}
	if len(writer.drops()) != 0 || len(stranger.drops()) != 0 {
		t.Fatalf("told the writer %+v and the stranger %+v", writer.drops(), stranger.drops())
	}
	// A failed commit reaches every worker that may cache anything.
	g.DropAll()
	for name, p := range map[string]*peer{"writer": writer, "reader": reader, "stranger": stranger} {
		if d := p.drops(); len(d) == 0 || !d[len(d)-1].All {
			t.Fatalf("the %s missed the whole drop: %+v", name, d)
		}
	}
	// A worker that cannot take a drop is forgotten.
	reader.mu.Lock()
	reader.dead = true
	reader.mu.Unlock()
	g.Call(writer, "w", opPut, json.RawMessage(`{"key":"k","value":"2"}`), serve("null"))
	if g.Told(reader) != 0 {
		t.Fatal("a dead worker is still known")
	}
	// A malformed batch is the worker's fault, for its transport to end it.
	if _, err := g.Batch(context.Background(), writer, []byte{batchVersion, 9}); err == nil {
		t.Fatal("a malformed batch was taken")
	}
}

// A worker's batched writes carry what was left of their invocations'
// bounds, and each run's writes are applied within the earliest of its
// own (docs/cluster.md, "Failures"): Apply is given it, per run; a write
// with none known gives none. The worker's cache takes the due from the
// call that made the write (Now).
func TestBatchedWritesCarryTheirBound(t *testing.T) {
	type applied struct {
		id  string
		due time.Time
	}
	var got []applied
	g := NewGateway(GatewayConfig{
		Apply: func(_ context.Context, _, id string, due time.Time, _ []Write) error {
			got = append(got, applied{id, due})
			return nil
		},
		SpaceOf: func(id string) (string, bool, bool) { return "s", true, true },
	})
	p := &peer{}
	c := NewWorker(func(frame []byte, carried []hostcache.Answer) ([]byte, error) {
		return g.Batch(context.Background(), p, frame)
	}, nil)
	for _, id := range []string{"a", "b", "c"} {
		c.spaceOf[id], c.writable[id] = "s", true
	}
	now := time.Now()
	dues := map[string][]time.Time{
		"a": {now.Add(2 * time.Second), now.Add(800 * time.Millisecond)},
		"b": {now.Add(5 * time.Second)},
		"c": {{}},
	}
	for _, id := range []string{"a", "b", "c"} {
		for i, due := range dues[id] {
			args := json.RawMessage(`{"key":"k` + strconv.Itoa(i) + `","value":"1"}`)
			if _, ok := c.Now(id, opPut, args, func() time.Time { return due }); !ok {
				t.Fatalf("%s's write was not answered at once", id)
			}
		}
	}
	for _, id := range []string{"a", "b", "c"} {
		if err := c.Settle(id); err != nil {
			t.Fatal(err)
		}
	}
	if len(got) != 3 {
		t.Fatalf("applied %+v, want one call a run", got)
	}
	for i, want := range []struct {
		id   string
		left time.Duration
	}{{"a", 800 * time.Millisecond}, {"b", 5 * time.Second}, {"c", 0}} {
		g := got[i]
		left := time.Duration(0)
		if !g.due.IsZero() {
			left = g.due.Sub(now)
		}
		if g.id != want.id || left > want.left+time.Millisecond || left < want.left-200*time.Millisecond {
			t.Fatalf("apply %d: %s with %v left, want %s with %v", i, g.id, left, want.id, want.left)
		}
	}
}
