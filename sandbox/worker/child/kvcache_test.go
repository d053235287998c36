package child

import (
	"encoding/json"
	"testing"

	"github.com/retainer-gw/retainer/fault"
	"github.com/retainer-gw/retainer/sandbox/worker/wire"
)

// An answer held for its run's writes (whenSettled) is released by the
// flusher only once those writes are applied, and a refused write reaches
// it as its error; an id that owes nothing is answered at once.
func TestWhenSettledWaitsForTheWrites(t *testing.T) {
	c := newKVCache()
	release := make(chan struct{})
	c.send = func(writes []wire.KVBatchWrite) (int, error) {
		<-release
		for i, w := range writes {
			if w.Key == "refused" {
				return i, fault.New(fault.QuotaExceeded, "over the quota")
			}
		}
		return len(writes), nil
	}
	c.mu.Lock()
	c.spaceOf["a"], c.writable["a"] = "s", true
	c.spaceOf["b"], c.writable["b"] = "s", true
	c.mu.Unlock()
	if _, ok := c.writeNow("a", "kv.put", json.RawMessage(`{"key":"k","value":"1"}`)); !ok {
		t.Fatal("the write was not answered at once")
	}
	if _, ok := c.writeNow("b", "kv.put", json.RawMessage(`{"key":"refused","value":"1"}`)); !ok {
		t.Fatal("the write was not answered at once")
	}
	gotA, gotB := make(chan error, 1), make(chan error, 1)
	c.whenSettled("a", func(err error) { gotA <- err })
	c.whenSettled("b", func(err error) { gotB <- err })
	now := make(chan error, 1)
	c.whenSettled("nobody", func(err error) { now <- err })
	select {
	case err := <-now:
		if err != nil {
			t.Fatal(err)
		}
	default:
		t.Fatal("an id that owes nothing was not answered at once")
	}
	select {
	case <-gotA:
		t.Fatal("answered before its write was applied")
	case <-gotB:
		t.Fatal("answered before its write was applied")
	default:
	}
	close(release)
	if err := <-gotA; err != nil {
		t.Fatalf("a's write was applied, yet: %v", err)
	}
	if err := <-gotB; fault.CodeOf(err) != fault.QuotaExceeded {
		t.Fatalf("b's refused write answered %v", err)
	}
}
