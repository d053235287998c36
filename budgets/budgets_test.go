package budgets

import (
	"testing"

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
