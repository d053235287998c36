package freeport

import (
	"net"
	"strconv"
	"testing"
)

func TestPickIsListenable(t *testing.T) {
	t.Parallel()
	p := Pick()
	ln, err := net.Listen("tcp", "127.0.0.1:"+strconv.Itoa(p))
	if err != nil {
		t.Fatalf("the port picked, %d, cannot be listened on: %v", p, err)
	}
	ln.Close()
}

func TestForIsStableAndDistinct(t *testing.T) {
	t.Parallel()
	a, b := For("a"), For("b")
	if a == b {
		t.Fatalf("two names share port %d", a)
	}
	if For("a") != a || For("b") != b {
		t.Fatal("a name's port changed")
	}
}

func TestPickNAreDistinct(t *testing.T) {
	t.Parallel()
	seen := map[int]bool{}
	for _, p := range PickN(16) {
		if seen[p] {
			t.Fatalf("port %d picked twice", p)
		}
		seen[p] = true
	}
}
