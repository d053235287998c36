package budgets

import (
	"testing"
	"time"

	"github.com/retainer-gw/retainer/fault"
)

func TestBytes(t *testing.T) {
	b := NewBytes(100, 60)
	if err := b.Take("a", 60); err != nil {
		t.Fatal(err)
	}
	if err := b.Take("a", 1); fault.CodeOf(err) != fault.QuotaExceeded {
		t.Fatalf("past a tenant's share: %v", err)
	}
	if err := b.Take("b", 40); err != nil {
		t.Fatalf("another tenant within the cap: %v", err)
	}
	if err := b.Take("c", 1); fault.CodeOf(err) != fault.Overloaded {
		t.Fatalf("past the gateway's cap: %v", err)
	}
	b.Give("a", 60)
	if err := b.Take("c", 50); err != nil {
		t.Fatalf("after a release: %v", err)
	}
	if tb, total := b.Held("a"); tb != 0 || total != 90 {
		t.Fatalf("held %d %d", tb, total)
	}
}

func TestCounts(t *testing.T) {
	var c Counts
	if !c.Take("a", 2) || !c.Take("a", 2) || c.Take("a", 2) {
		t.Fatal("a cap of 2")
	}
	if !c.Take("b", 2) {
		t.Fatal("another key is charged to itself")
	}
	c.Give("a")
	if c.Held("a") != 1 || !c.Take("a", 2) {
		t.Fatal("a place given back")
	}
}

// TestLimitsDefaults: an unset limit takes its default, a set one is kept,
// and a negative one counts as unset.
func TestLimitsDefaults(t *testing.T) {
	got := Limits{}.WithDefaults()
	want := Limits{Timeout: RunTimeout, MemoryMiB: RunMemoryMiB, RequestBody: RequestBodyBytes, ResponseBody: ResponseBodyBytes, HandleQueue: HandleQueue}
	if got != want {
		t.Fatalf("defaults: %+v, want %+v", got, want)
	}
	set := Limits{Timeout: 2 * time.Second, MemoryMiB: 128, RequestBody: 10, ResponseBody: 20, HandleQueue: 3}
	if got := set.WithDefaults(); got != set {
		t.Fatalf("set limits changed: %+v, want %+v", got, set)
	}
	if got := (Limits{MemoryMiB: -1, HandleQueue: 5}).WithDefaults(); got.MemoryMiB != RunMemoryMiB || got.HandleQueue != 5 {
		t.Fatalf("a negative field: %+v", got)
	}
}
