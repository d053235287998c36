package sandbox

import "sync"

// jobQueue is an isolate's jobs: closures its loop runs, in arrival order
// (the only way other goroutines reach the isolate: vm.submit). mu and
// closed make a queued job and the final drain exclusive: once the loop's
// end has drained the queue, push refuses, so every job push accepted runs
// (an answer callback is never lost).
type jobQueue struct {
	jobs   chan func()
	mu     sync.Mutex
	closed bool
}

// newJobQueue holds up to n jobs waiting (the handle's queue bound).
func newJobQueue(n int) jobQueue { return jobQueue{jobs: make(chan func(), n)} }

// push queues f unless the queue is closed or full.
func (q *jobQueue) push(f func()) (queued, closed bool) {
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.closed {
		return false, true
	}
	select {
	case q.jobs <- f:
		return true, false
	default:
		return false, false
	}
}

// pushWhenRoom queues f once the queue has room, or gives up when gone is
// closed (the isolate was disposed meanwhile).
func (q *jobQueue) pushWhenRoom(f func(), gone <-chan struct{}) {
	select {
	case q.jobs <- f:
	case <-gone:
	}
}

// waiting is how many jobs wait.
func (q *jobQueue) waiting() int { return len(q.jobs) }

// closeAndDrain refuses later pushes and runs the jobs still queued (the
// loop's end: each job then sees its isolate dead).
func (q *jobQueue) closeAndDrain() {
	q.mu.Lock()
	q.closed = true
	q.mu.Unlock()
	for {
		select {
		case f := <-q.jobs:
			f()
		default:
			return
		}
	}
}
