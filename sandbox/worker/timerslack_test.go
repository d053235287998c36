package worker

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

	"github.com/retainer-gw/retainer/sandbox/worker/wire"
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

// The gateway's threads start with timerSlack (a C constructor sets it
// before Go's runtime makes its first thread, so Go's sysmon has it), and
// a worker's threads carry the gateway's across the fork; another value
// from RETAINER_TIMER_SLACK_NS travels the same way. This test runs itself
// again in a gateway started with one.
func TestGatewayAndWorkersSleepWithTheTimerSlack(t *testing.T) {
	want := int64(timerSlack)
	if v := os.Getenv("RETAINER_TIMER_SLACK_NS"); v != "" {
		n, err := strconv.ParseInt(v, 10, 64)
		if err != nil || n <= 0 {
			t.Skipf("RETAINER_TIMER_SLACK_NS=%q leaves the slack as it was started", v)
		}
		want = n
	}
	for i, s := range ownSlacks(8) {
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
