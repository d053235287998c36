package sandbox

import (
	"context"
	"runtime"
	"testing"

	"github.com/retainer-gw/retainer/program"
)

// TestThreadStackAnsweredFromTheFirstCall: a thread's later
// pthread_getattr_np calls are answered without glibc's (stackattr_linux.go),
// with the stack glibc gives; another thread gets its own stack, not this
// one's; and an isolate whose loop takes its Locker turn after turn (each
// asking V8's stack guard where the stack is) still runs and answers.
func TestThreadStackAnsweredFromTheFirstCall(t *testing.T) {
	type stack struct{ addr, size uintptr }
	ask := func() (wrapped, real stack, realCalls uint64) {
		runtime.LockOSThread()
		defer runtime.UnlockOSThread()
		a, s, ok := threadStack(false)
		if !ok {
			t.Error("the wrapped pthread_getattr_np failed")
		}
		before := stackRealCalls()
		for range 3 {
			if a2, s2, ok := threadStack(false); !ok || a2 != a || s2 != s {
				t.Errorf("a later call answered %#x+%d (ok %v), the first %#x+%d", a2, s2, ok, a, s)
			}
		}
		realCalls = stackRealCalls() - before
		ra, rs, ok := threadStack(true)
		if !ok {
			t.Error("glibc's pthread_getattr_np failed")
		}
		return stack{a, s}, stack{ra, rs}, realCalls
	}
	got, real, calls := ask()
	if got != real {
		t.Fatalf("the wrapper answered %#x+%d, glibc %#x+%d", got.addr, got.size, real.addr, real.size)
	}
	if calls != 0 {
		t.Fatalf("the thread's later calls ran glibc's function %d times, want 0", calls)
	}
	if got.size == 0 {
		t.Fatal("an empty stack")
	}

	// Another thread: a goroutine pinned to its thread while this one is
	// pinned to this one's, so the two cannot share a thread.
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	mine, _, _ := threadStack(false)
	other := make(chan [2]stack)
	go func() {
		w, r, _ := ask()
		other <- [2]stack{w, r}
	}()
	o := <-other
	if o[0] != o[1] {
		t.Fatalf("another thread: the wrapper answered %#x+%d, glibc %#x+%d", o[0].addr, o[0].size, o[1].addr, o[1].size)
	}
	if o[0].addr == mine {
		t.Fatalf("another thread was answered this thread's stack (%#x)", mine)
	}

	e := New(Config{})
	defer e.Shutdown()
	for i := range 20 {
		out, err := e.Run(context.Background(), program.Job{Program: program.Program{Code: "() => 40 + 2"}})
		if err != nil || string(out.Result) != "42" {
			t.Fatalf("run %d: %s, %v", i, out.Result, err)
		}
	}
}
