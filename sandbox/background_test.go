//go:build linux

package sandbox

import (
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// idleThreads counts the process's threads in SCHED_IDLE (the policy is
// field 41 of /proc/self/task/<tid>/stat).
func idleThreads(t *testing.T) int {
	t.Helper()
	tasks, err := os.ReadDir("/proc/self/task")
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, task := range tasks {
		b, err := os.ReadFile("/proc/self/task/" + task.Name() + "/stat")
		if err != nil {
			continue // the thread ended meanwhile
		}
		s := string(b)
		fields := strings.Fields(s[strings.LastIndexByte(s, ')')+1:])
		// fields[0] is field 3 (state), so field 41 is fields[38].
		if p, _ := strconv.Atoi(fields[38]); p == schedIdle {
			n++
		}
	}
	return n
}

func waitIdleThreads(t *testing.T, want int) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for idleThreads(t) != want {
		if time.Now().After(deadline) {
			t.Fatalf("%d threads in SCHED_IDLE, want %d", idleThreads(t), want)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// The refill and the teardown run on SCHED_IDLE threads of their own, the
// isolates they make are served at the normal class, and the class never
// outlives the goroutines that asked for it: no other goroutine ever runs
// on such a thread.
func TestBackgroundWorkRunsIdle(t *testing.T) {
	// The shared engine's refillers, and the disposer once a run has ended.
	for i := 0; i < 3; i++ {
		mustRun(t, "async () => 1 + 1")
	}
	// The disposer's goroutine may not have lowered its thread yet, and the
	// threads of engines other tests shut down may still be ending: the
	// count is taken once it holds still for 100 ms.
	before := idleThreads(t)
	for deadline, still := time.Now().Add(10*time.Second), 0; still < 10 && time.Now().Before(deadline); {
		time.Sleep(10 * time.Millisecond)
		if n := idleThreads(t); n != before || n < 3 {
			before, still = n, 0
		} else {
			still++
		}
	}
	if before < 3 {
		t.Fatalf("%d threads in SCHED_IDLE beside the shared engine, want its two refillers and the disposer", before)
	}

	e := New(Config{Prewarm: 2})
	a, b := <-e.warm, <-e.warm
	waitIdleThreads(t, before+2)
	for _, m := range []*vm{a, b} {
		policy := make(chan uint32, 1)
		if err := m.submit(func() {
			attr, err := unix.SchedGetAttr(0, 0)
			if err != nil {
				t.Error(err)
				policy <- schedIdle
				return
			}
			policy <- attr.Policy
		}); err != nil {
			t.Fatal(err)
		}
		if p := <-policy; p != unix.SCHED_NORMAL {
			t.Fatalf("a prewarmed isolate's loop ran in policy %d, want SCHED_OTHER", p)
		}
		if err := m.submit(m.kill); err != nil {
			t.Fatal(err)
		}
		<-m.done
	}
	e.Shutdown()
	waitIdleThreads(t, before)

	// Many runs later, still only the refillers and the disposer.
	for i := 0; i < 30; i++ {
		mustRun(t, "async () => 1 + 1")
	}
	if n := idleThreads(t); n != before {
		t.Fatalf("%d threads in SCHED_IDLE after 30 runs, want %d", n, before)
	}
}
