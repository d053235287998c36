package sandbox

import (
	"runtime"
	"sync"
)

// The background lane runs the isolate work that no caller waits for, at
// the lowest CPU priority: creating the prewarmed isolates that refill the
// warm pool, and disposing of a computation's isolate after its answer
// left. Both cost milliseconds of CPU (a fresh isolate ~4 ms here, its
// disposal ~1 ms) and start the moment a computation ends, exactly while
// its answer crosses the worker boundary, the gateway and the client; at
// the same priority they held the cores those hops wake on (measured: a
// sequential `async () => 1 + 1` took ~4 ms over HTTP though the gateway
// saw ~2 ms of it). At nice 19 any waking request-path thread preempts
// them, and they still run whenever a core is free.
//
// The lane is a few goroutines locked to their OS threads for the
// process's life (a thread whose priority was lowered never goes back to
// Go's pool to run other goroutines). It starts with the first Engine, so
// a worker process creates it before its seccomp filter refuses
// setpriority. Where the priority cannot be lowered the lane still works,
// at normal priority.
//
// Ownership: a vm's loop hands its isolate to the lane and waits, so the
// isolate is still used by one goroutine at a time.
var background struct {
	once sync.Once
	work chan func()
}

// backgroundThreads is the lane's width: one refill and one disposal at a
// time is what the engine ever asks for at once.
const backgroundThreads = 2

func startBackground() {
	background.once.Do(func() {
		background.work = make(chan func())
		started := make(chan struct{}, backgroundThreads)
		for i := 0; i < backgroundThreads; i++ {
			go func() {
				runtime.LockOSThread() // never unlocked: see above
				lowerThreadPriority()
				started <- struct{}{}
				for f := range background.work {
					f()
				}
			}()
		}
		for i := 0; i < backgroundThreads; i++ {
			<-started
		}
	})
}

// inBackground runs f on the background lane and returns when it is done.
func inBackground(f func()) {
	done := make(chan struct{})
	background.work <- func() {
		defer close(done)
		f()
	}
	<-done
}
