package sandbox

import (
	"os"
	"runtime"
	"sync"
	"syscall"
	"testing"
)

// TestIsolatesNeverRunOnTheMainThread: goroutines that pin their thread, as
// every isolate's loop does, never get the main thread (mainthread.go).
// Before that, 221 of 400 did here.
func TestIsolatesNeverRunOnTheMainThread(t *testing.T) {
	pid := os.Getpid()
	var mu sync.Mutex
	onMain := 0
	for round := 0; round < 50; round++ {
		var wg sync.WaitGroup
		for i := 0; i < 8; i++ {
			wg.Add(1)
			go func() {
				defer wg.Done()
				runtime.LockOSThread()
				defer runtime.UnlockOSThread()
				if syscall.Gettid() == pid {
					mu.Lock()
					onMain++
					mu.Unlock()
				}
			}()
		}
		wg.Wait()
	}
	if onMain > 0 {
		t.Fatalf("%d pinned goroutines ran on the main thread", onMain)
	}
}
