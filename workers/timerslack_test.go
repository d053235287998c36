package workers

import (
	"context"
	"encoding/binary"
	"fmt"
	"os"
	"os/exec"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

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

// Go's sysmon alone sleeps with RETAINER_SYSMON_SLACK_NS's slack (1 ms by
// default), and the thread that got it is sysmon: caught in the nap only
// sysmon takes, nanosleep for 20 µs times a power of two (a spinning M's
// nap is 3 µs; every other M sleeps on a futex or in epoll). Other threads
// keep the process's slack (ownSlacks). Reading another thread's slack
// needs CAP_SYS_NICE: that part is checked only where the test may.
func TestOnlySysmonNapsWithItsSlack(t *testing.T) {
	if v := os.Getenv("RETAINER_SYSMON_SLACK_NS"); v != "" {
		t.Skipf("RETAINER_SYSMON_SLACK_NS=%s is set", v)
	}
	if got := sysmonSlack(); got != 1_000_000 {
		t.Fatalf("sysmon's slack is %d ns, want the default 1 ms", got)
	}
	tid := sysmonThread()
	if tid == 0 || tid == os.Getpid() {
		t.Fatalf("the slack went to thread %d (the process is %d)", tid, os.Getpid())
	}
	for i, s := range ownSlacks(8) {
		if s == sysmonSlack() {
			t.Fatalf("thread %d sleeps with sysmon's slack %d", i, s)
		}
	}
	if b, err := os.ReadFile("/proc/" + strconv.Itoa(tid) + "/timerslack_ns"); err == nil {
		if got := strings.TrimSpace(string(b)); got != "1000000" {
			t.Fatalf("thread %d sleeps with a slack of %s ns, want 1000000", tid, got)
		}
	}
	// Keep sysmon out of its deep sleep (a P busy with system calls) and
	// watch the thread's system call: nanosleep (35) with a timespec whose
	// length is sysmon's.
	stop := make(chan struct{})
	defer close(stop)
	go func() {
		for {
			select {
			case <-stop:
				return
			default:
				syscall.Getpid()
			}
		}
	}()
	mem, err := os.Open("/proc/self/mem")
	if err != nil {
		t.Fatal(err)
	}
	defer mem.Close()
	seen := map[string]int{}
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(200 * time.Microsecond) {
		b, err := os.ReadFile("/proc/self/task/" + strconv.Itoa(tid) + "/syscall")
		if err != nil {
			t.Fatalf("thread %d: %v", tid, err)
		}
		f := strings.Fields(string(b))
		if len(f) < 2 || f[0] != "35" {
			seen[strings.Join(f[:min(len(f), 1)], "")]++
			continue
		}
		addr, err := strconv.ParseUint(strings.TrimPrefix(f[1], "0x"), 16, 64)
		if err != nil {
			t.Fatal(err)
		}
		var ts [16]byte // struct timespec: seconds, nanoseconds
		if _, err := mem.ReadAt(ts[:], int64(addr)); err != nil {
			continue
		}
		ns := binary.LittleEndian.Uint64(ts[8:]) + 1e9*binary.LittleEndian.Uint64(ts[:8])
		if ns >= 20_000 && ns%20_000 == 0 {
			return
		}
		seen[fmt.Sprintf("nanosleep %d ns", ns)]++
	}
	t.Fatalf("thread %d never napped as sysmon does; it was in system calls %v", tid, seen)
}

// A worker's sysmon alone naps with the worker's slack (5 ms), the
// gateway's with its own: the C constructor tells a worker by its first
// argument, which must be the subcommand the pool starts workers with.
// Reading another process's thread's slack needs CAP_SYS_NICE: the
// worker's threads are checked only where the test may.
func TestWorkerSysmonSlack(t *testing.T) {
	if got := workerSubcommand(); got != wire.Subcommand {
		t.Fatalf("the constructor knows a worker by %q, the pool starts one with %q", got, wire.Subcommand)
	}
	if workerSysmonSlack() <= sysmonSlack() && os.Getenv("RETAINER_SYSMON_SLACK_NS") == "" {
		t.Fatalf("a worker's sysmon slack %d ns is not longer than the gateway's %d", workerSysmonSlack(), sysmonSlack())
	}
	// Read before the pool starts: ownSlacks ends the threads it used, and
	// a worker dies with the thread that forked it (Pdeathsig).
	base := ownSlacks(1)[0]
	pool := startPool(t, Config{Workers: 1})
	// A worker whose threads end while they are read (replaced meanwhile)
	// is read again, in the worker serving then.
	for try := 0; ; try++ {
		if _, err := pool.Run(context.Background(), job("async () => 1")); err != nil {
			t.Fatal(err)
		}
		pid := 0
		pool.mu.Lock()
		if w := pool.workers[0]; w != nil {
			pid = w.pid
		}
		pool.mu.Unlock()
		slacks, err := threadSlacks(pid)
		if (pid == 0 || os.IsNotExist(err)) && try < 20 {
			time.Sleep(50 * time.Millisecond)
			continue
		}
		if err != nil {
			t.Skipf("the worker's threads' slack cannot be read here: %v", err)
		}
		withSysmons := 0
		for tid, got := range slacks {
			switch got {
			case workerSysmonSlack():
				withSysmons++
			case base:
			default:
				t.Errorf("worker thread %d sleeps with a slack of %d ns, want the worker's sysmon's %d or its gateway's %d", tid, got, workerSysmonSlack(), base)
			}
		}
		if withSysmons != 1 {
			t.Fatalf("%d of the worker's %d threads sleep with sysmon's slack %d ns, want one", withSysmons, len(slacks), workerSysmonSlack())
		}
		return
	}
}

// threadSlacks reads the timer slack of every thread of process pid.
func threadSlacks(pid int) (map[int]int64, error) {
	tasks, err := os.ReadDir("/proc/" + strconv.Itoa(pid) + "/task")
	if err != nil {
		return nil, err
	}
	out := map[int]int64{}
	for _, task := range tasks {
		b, err := os.ReadFile("/proc/" + task.Name() + "/timerslack_ns")
		if err != nil {
			return nil, err
		}
		n, err := strconv.ParseInt(strings.TrimSpace(string(b)), 10, 64)
		if err != nil {
			return nil, err
		}
		tid, _ := strconv.Atoi(task.Name())
		out[tid] = n
	}
	return out, nil
}
