package workers

import (
	"context"
	"os"
	"os/exec"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"

	"github.com/retainer-gw/retainer/workers/wire"
)

// ownSlacks answers the timer slack of n threads of this process, each read
// by prctl on the thread itself (another thread's needs CAP_SYS_NICE).
func ownSlacks(n int) []int64 {
	out := make([]int64, n)
	var wg sync.WaitGroup
	for i := range out {
		wg.Add(1)
		go func() {
			defer wg.Done()
			runtime.LockOSThread() // the thread ends with the goroutine
			r, _, _ := syscall.RawSyscall(syscall.SYS_PRCTL, syscall.PR_GET_TIMERSLACK, 0, 0)
			out[i] = int64(r)
		}()
	}
	wg.Wait()
	return out
}

// A worker's threads sleep with the timer slack of its gateway's (it
// inherits it across the fork), and RETAINER_TIMER_SLACK_NS in the
// gateway's environment sets the slack of every thread of the gateway
// before Go's runtime starts (sysmon's included), and so of its workers'.
// This test runs itself again in a gateway started with it.
func TestGatewayAndWorkersSleepWithTheTimerSlack(t *testing.T) {
	own := ownSlacks(8)
	want := own[0]
	if v := os.Getenv("RETAINER_TIMER_SLACK_NS"); v != "" {
		n, err := strconv.ParseInt(v, 10, 64)
		if err != nil || n <= 0 {
			t.Fatalf("RETAINER_TIMER_SLACK_NS=%q", v)
		}
		want = n
	}
	for i, s := range own {
		if s != want {
			t.Fatalf("thread %d of the gateway sleeps with a slack of %d ns, want %d", i, s, want)
		}
	}
	// The worker's, as it reads its own (the probe: another process's
	// needs CAP_SYS_NICE).
	pool := startPool(t, Config{Workers: 1, Probe: true})
	if _, err := pool.Run(context.Background(), job("async () => 1")); err != nil {
		t.Fatal(err)
	}
	var rep wire.ProbeReport
	if err := pool.workers[0].post(context.Background(), wire.PathProbe, struct{}{}, &rep); err != nil {
		t.Fatal(err)
	}
	if rep.TimerSlack != want {
		t.Fatalf("the worker sleeps with a slack of %d ns, want its gateway's %d", rep.TimerSlack, want)
	}
	if os.Getenv("RETAINER_SLACK_TEST_CHILD") != "" {
		return
	}
	cmd := exec.Command(os.Args[0], "-test.run=^TestGatewayAndWorkersSleepWithTheTimerSlack$", "-test.count=1", "-test.v")
	cmd.Env = append(os.Environ(), "RETAINER_TIMER_SLACK_NS=300000", "RETAINER_SLACK_TEST_CHILD=1")
	out, err := cmd.CombinedOutput()
	if err != nil || !strings.Contains(string(out), "--- PASS") {
		t.Fatalf("a gateway started with RETAINER_TIMER_SLACK_NS=300000: %v\n%s", err, out)
	}
}
