package workers

import (
	"context"
	"testing"
	"time"

	"github.com/retainer-gw/retainer/internal/waitfor"
	"github.com/retainer-gw/retainer/program"
)

// A run whose caller leaves ends in its worker (wire's cancel frame),
// long before its own bound: the worker stops spending CPU on it. (Host
// calls would not show it: a run its caller left has none answered.)
func TestCancelledRunEndsInItsWorker(t *testing.T) {
	pool := startPool(t, Config{Workers: 1})
	if _, err := pool.RunFor(context.Background(), "t", program.Job{Program: program.Program{Code: `async () => 0`}}); err != nil {
		t.Fatal(err)
	}
	pids := pidsOf(pool)
	if len(pids) == 0 {
		t.Fatal("no worker")
	}
	pid := pids[len(pids)-1]
	for _, s := range pool.Status() {
		if s.Tenant == "t" {
			pid = s.PID
		}
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	idle := processCPU(pid)
	go func() {
		_, err := pool.RunFor(ctx, "t", program.Job{Program: program.Program{Code: `async () => { for (;;) {} }`}, Timeout: 30 * time.Second})
		done <- err
	}()
	waitfor.Until(t, 20*time.Second, "the run to spin in its worker", func() bool {
		return processCPU(pid)-idle >= int64(50*time.Millisecond)
	})
	cancel()
	if err := <-done; err == nil {
		t.Fatal("a cancelled run answered")
	}
	time.Sleep(200 * time.Millisecond)
	before := processCPU(pid)
	time.Sleep(time.Second)
	if spent := time.Duration(processCPU(pid) - before); spent > 400*time.Millisecond {
		t.Fatalf("the worker spent %v of CPU in the second after the run's caller left: the run went on", spent)
	}
	if out, err := pool.RunFor(context.Background(), "t", program.Job{Program: program.Program{Code: `async () => 7`}}); err != nil || string(out.Result) != "7" {
		t.Fatalf("the next run: %s %v", out.Result, err)
	}
}
