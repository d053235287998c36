package workers

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/retainer-gw/retainer/internal/waitfor"
	"github.com/retainer-gw/retainer/program"
)

// favourPool is a `workers auto` pool whose favours last bound and at
// most max at once; it skips where the kernel refuses a favour (a gateway
// without CAP_SYS_NICE favours nothing).
func favourPool(t *testing.T, bound time.Duration, max int) *Pool {
	t.Helper()
	pool := sparesPool(t, 25)
	f := pool.favours
	f.mu.Lock()
	f.bound, f.max = bound, max
	f.mu.Unlock()
	for pid := range waitSpares(t, pool, 1) {
		if err := unix.Setpriority(unix.PRIO_PGRP, pid, f.base-favourNice); err != nil {
			t.Skipf("the kernel refuses a nice below the gateway's: %v", err)
		}
		unix.Setpriority(unix.PRIO_PGRP, pid, f.base)
	}
	return pool
}

// threadNices answers the nice of each thread of process pid.
func threadNices(t *testing.T, pid int) []int {
	t.Helper()
	stats, _ := filepath.Glob(fmt.Sprintf("/proc/%d/task/*/stat", pid))
	var nices []int
	for _, path := range stats {
		b, err := os.ReadFile(path)
		if err != nil {
			continue // the thread ended
		}
		// The fields after the command's closing parenthesis start at
		// the third (state); nice is the nineteenth.
		fields := strings.Fields(string(b[strings.LastIndexByte(string(b), ')')+1:]))
		n, err := strconv.Atoi(fields[19-3])
		if err != nil {
			t.Fatalf("%s: %v", path, err)
		}
		nices = append(nices, n)
	}
	return nices
}

// niceOf answers the nice of every thread of pid when they agree, and ok
// false when they do not (or it has none).
func niceOf(t *testing.T, pid int) (int, bool) {
	nices := threadNices(t, pid)
	if len(nices) == 0 {
		return 0, false
	}
	for _, n := range nices[1:] {
		if n != nices[0] {
			return 0, false
		}
	}
	return nices[0], true
}

// workerOf answers the pid of tenant's worker (0 while it has none).
func workerOf(pool *Pool, tenant string) int {
	for _, s := range pool.Status() {
		if s.State == "up" && s.Tenant == tenant {
			return s.PID
		}
	}
	return 0
}

// runAsync runs code as tenant's run in the background; done is closed
// once it is answered, with its error in *err.
func runAsync(pool *Pool, tenant, code string) (done chan struct{}, err *error) {
	done, err = make(chan struct{}), new(error)
	go func() {
		defer close(done)
		_, *err = pool.RunFor(context.Background(), tenant, program.Job{Program: program.Program{Code: code}, Timeout: 10 * time.Second})
	}()
	return done, err
}

const waitLong = `async () => { await new Promise(r => setTimeout(r, 1500)); return 1 }`

// A worker's first run is favoured (favour_linux.go): every thread of its
// worker runs favourNice steps ahead of the gateway while the run lasts,
// and back at the gateway's nice once it is answered; the tenant's second
// run, in the same worker, is never favoured (a tenant that runs again
// and again stays where every tenant is); a bystander's counter keeps its
// state.
func TestAWorkersFirstRunIsFavouredUntilAnswered(t *testing.T) {
	pool := favourPool(t, time.Minute, 8)
	base := pool.favours.base
	waitSpares(t, pool, 1)
	// Its own first run, favoured.
	if _, err := pool.RunFor(context.Background(), "bystander", program.Job{ID: "bystander", RetainHandles: true, Program: program.Program{Code: counter}}); err != nil {
		t.Fatal(err)
	}
	waitSpares(t, pool, 1)
	done, err := runAsync(pool, "newcomer", waitLong)
	waitfor.Until(t, 10*time.Second, "the newcomer's worker favoured while its first run waits", func() bool {
		pid := workerOf(pool, "newcomer")
		n, ok := niceOf(t, pid)
		return pid != 0 && ok && n == base-favourNice
	})
	<-done
	if *err != nil {
		t.Fatal(*err)
	}
	pid := workerOf(pool, "newcomer")
	if n, ok := niceOf(t, pid); !ok || n != base {
		t.Fatalf("after its first run the newcomer's worker's threads are at %v, want all at the gateway's %d", threadNices(t, pid), base)
	}
	done, err = runAsync(pool, "newcomer", waitLong)
	for running := true; running; {
		select {
		case <-done:
			running = false
		case <-time.After(20 * time.Millisecond):
		}
		if nices := threadNices(t, pid); len(nices) > 0 && nices[0] != base {
			t.Fatalf("the newcomer's second run is favoured: %v", nices)
		}
	}
	if *err != nil {
		t.Fatal(*err)
	}
	if workerOf(pool, "newcomer") != pid {
		t.Fatalf("the second run went to another worker")
	}
	if res, err := get(pool, "bystander", "https://x/"); err != nil || string(res.BodyBytes()) != "1" {
		t.Fatalf("the bystander answered %v %q", err, res.BodyBytes())
	}
}

// A first run that spins keeps its favour for the bound at most: its
// worker is back at the gateway's nice while it still spins.
func TestAFavourEndsAtItsBound(t *testing.T) {
	pool := favourPool(t, 100*time.Millisecond, 8)
	base := pool.favours.base
	waitSpares(t, pool, 1)
	done, err := runAsync(pool, "spinner", `async () => { const end = Date.now() + 4000; while (Date.now() < end) {} return 1 }`)
	favoured := false
	waitfor.Until(t, 10*time.Second, "the spinner's worker favoured, then back at the gateway's nice", func() bool {
		pid := workerOf(pool, "spinner")
		n, ok := niceOf(t, pid)
		if pid != 0 && ok && n == base-favourNice {
			favoured = true
		}
		return favoured && ok && n == base
	})
	select {
	case <-done:
		t.Fatalf("the run ended (%v) before its favour did", *err)
	default:
	}
	<-done
	if *err != nil {
		t.Fatal(*err)
	}
}

// At most max first runs are favoured at once: of three newcomers' first
// runs at once with max 1, one is favoured at a time, and at least one
// was.
func TestFavoursAtOnceAreBounded(t *testing.T) {
	pool := favourPool(t, time.Minute, 1)
	base := pool.favours.base
	waitSpares(t, pool, 1)
	var dones []chan struct{}
	var errs []*error
	for i := range 3 {
		done, err := runAsync(pool, fmt.Sprintf("newcomer-%d", i), waitLong)
		dones, errs = append(dones, done), append(errs, err)
	}
	seen := 0
	for _, done := range dones {
		for running := true; running; {
			select {
			case <-done:
				running = false
			case <-time.After(10 * time.Millisecond):
			}
			favoured := 0
			for i := range 3 {
				if pid := workerOf(pool, fmt.Sprintf("newcomer-%d", i)); pid != 0 {
					if nices := threadNices(t, pid); len(nices) > 0 && nices[0] == base-favourNice {
						favoured++
					}
				}
			}
			if favoured > 1 {
				t.Fatalf("%d first runs favoured at once, the bound is 1", favoured)
			}
			seen += favoured
		}
	}
	for _, err := range errs {
		if *err != nil {
			t.Fatal(*err)
		}
	}
	if seen == 0 {
		t.Fatal("no first run was favoured")
	}
}

// A spare being started that a newcomer claimed is favoured while it
// starts (favourStart), and back at the gateway's nice once the
// newcomer's first run is answered; a start nobody claimed is not.
func TestAClaimedSparesStartIsFavoured(t *testing.T) {
	pool := favourPool(t, time.Minute, 8)
	base := pool.favours.base
	waitSpares(t, pool, 1)
	held, release := make(chan int, 8), make(chan struct{})
	hold := func(pid int) {
		held <- pid
		<-release
	}
	pool.startHold.Store(&hold)
	released := false
	defer func() {
		if !released {
			close(release)
		}
	}()
	startHeld := func() int {
		t.Helper()
		select {
		case pid := <-held:
			return pid
		case <-time.After(30 * time.Second):
			t.Fatal("no spare started")
			return 0
		}
	}
	// newcomer-0 takes the spare up, and the next spare starts (held).
	done0, err0 := runAsync(pool, "newcomer-0", waitLong)
	claimed := startHeld()
	if n, ok := niceOf(t, claimed); !ok || n != base {
		t.Fatalf("a start nobody claimed is at %v, want all at the gateway's %d", threadNices(t, claimed), base)
	}
	// newcomer-1 claims it, and its claim starts the next spare (held).
	done1, err1 := runAsync(pool, "newcomer-1", waitLong)
	waitfor.Until(t, 10*time.Second, "the claimed spare's start favoured", func() bool {
		n, ok := niceOf(t, claimed)
		return ok && n == base-favourNice
	})
	unclaimed := startHeld()
	if n, ok := niceOf(t, unclaimed); !ok || n != base {
		t.Fatalf("a start nobody claimed is at %v, want all at the gateway's %d", threadNices(t, unclaimed), base)
	}
	pool.startHold.Store(nil)
	close(release)
	released = true
	for _, w := range []struct {
		done chan struct{}
		err  *error
	}{{done0, err0}, {done1, err1}} {
		<-w.done
		if *w.err != nil {
			t.Fatal(*w.err)
		}
	}
	if pid := workerOf(pool, "newcomer-1"); pid != claimed {
		t.Fatalf("newcomer-1 runs in %d, not the spare it claimed (%d)", pid, claimed)
	}
	if n, ok := niceOf(t, claimed); !ok || n != base {
		t.Fatalf("after newcomer-1's first run its worker's threads are at %v, want all at the gateway's %d", threadNices(t, claimed), base)
	}
}
