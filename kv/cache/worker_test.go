package cache

import (
	"encoding/json"
	"testing"
	"time"

	"github.com/retainer-gw/retainer/fault"
	"github.com/retainer-gw/retainer/internal/hostcache"
)

// An answer held for its run's writes (whenSettled) is released by the
// flusher only once those writes are applied, and a refused write reaches
// it as its error; an id that owes nothing is answered at once.
func TestWhenSettledWaitsForTheWrites(t *testing.T) {
	release := make(chan struct{})
	c := NewWorker(func(frame []byte, _ []hostcache.Answer) ([]byte, error) {
		<-release
		var b batch
		if err := b.decode(frame); err != nil {
			t.Error(err)
			return nil, err
		}
		for i, w := range b.Writes {
			if w.Key == "refused" {
				return encodeJSON(refused(i, fault.New(fault.QuotaExceeded, "over the quota"))), nil
			}
		}
		return encodeJSON(batchReply{Applied: len(b.Writes)}), nil
	}, nil)
	c.mu.Lock()
	c.spaceOf["a"], c.writable["a"] = "s", true
	c.spaceOf["b"], c.writable["b"] = "s", true
	c.mu.Unlock()
	if _, ok := c.writeNow("a", "kv.put", json.RawMessage(`{"key":"k","value":"1"}`), time.Time{}); !ok {
		t.Fatal("the write was not answered at once")
	}
	if _, ok := c.writeNow("b", "kv.put", json.RawMessage(`{"key":"refused","value":"1"}`), time.Time{}); !ok {
		t.Fatal("the write was not answered at once")
	}
	gotA, gotB := make(chan error, 1), make(chan error, 1)
	c.WhenSettled("a", nil, func(err error) { gotA <- err })
	c.WhenSettled("b", nil, func(err error) { gotB <- err })
	now := make(chan error, 1)
	c.WhenSettled("nobody", nil, func(err error) { now <- err })
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
