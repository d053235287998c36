package kv

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/retainer-gw/retainer/fault"
	"github.com/retainer-gw/retainer/internal/waitfor"
)

// Two tenants' writes in one group commit stay apart: alice's write over
// her quota is refused (her answer fails), bob's, pending beside hers in
// the same commit, is durable and his answer leaves; neither waits for or
// fails with the other's.
func TestGroupCommitKeepsTenantsApart(t *testing.T) {
	kv, release, commits := gatedKV(t, 64)
	bob := "1"
	if err := kv.Write("apps", "alice", "alice-run", "a", &bob); err != nil {
		t.Fatal(err)
	}
	// The first commit (alice's first write) is under way and held: the
	// writes below all go into the next one.
	waitfor.Until(t, 10*time.Second, "the first commit", func() bool { return commits.Load() == 1 })
	big := strings.Repeat("v", 100)
	if err := kv.Write("apps", "alice", "alice-run", "big", &big); fault.CodeOf(err) != fault.QuotaExceeded {
		t.Fatalf("alice over her quota: %v", err)
	}
	if err := kv.Write("apps", "bob", "bob-run", "b", &bob); err != nil {
		t.Fatalf("bob's write beside it: %v", err)
	}
	if err := kv.Write("apps", "alice", "alice-run", "a", &bob); err != nil {
		t.Fatalf("alice's write within her quota: %v", err)
	}
	done := make(chan error, 2)
	go func() { done <- kv.Barrier(context.Background(), "bob-run") }()
	go func() { done <- kv.Barrier(context.Background(), "alice-run") }()
	release <- nil // the first commit
	release <- nil // the one holding both tenants' writes
	for range 2 {
		if err := <-done; err != nil {
			t.Fatalf("a barrier after the shared commit: %v", err)
		}
	}
	if n := commits.Load(); n != 2 {
		t.Fatalf("%d commits, want the two", n)
	}
	if v, err := kvGet(kv, "bob", "b"); err != nil || v != `"1"` {
		t.Fatalf("bob's value: %s %v", v, err)
	}
	if v, err := kvGet(kv, "alice", "big"); err != nil || v != "null" {
		t.Fatalf("alice's refused value: %s %v", v, err)
	}
}

func kvGet(kv *KV, tenant, key string) (string, error) {
	res, err := kv.Serve("apps", tenant, "reader", "kv.get", []byte(`{"key":"`+key+`"}`))
	return string(res), err
}
