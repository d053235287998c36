package sandbox

// #include "bufferpool.h"
import "C"

import "sync"

var arrayBufferPool sync.Once

// poolArrayBuffers puts the pool of bufferpool.cc in front of the
// ArrayBuffer allocator v8go gives every isolate it makes. v8go makes that
// allocator with the first isolate (it starts V8 lazily), so the first
// isolate of the process (the one that starts V8, snapshot.go) has V8's
// own; every later one the pool. Called right after an isolate is made.
func poolArrayBuffers() {
	arrayBufferPool.Do(func() { C.retainer_pool_array_buffers() })
}

// arrayBuffersReused is how many blocks the pool has handed out again.
func arrayBuffersReused() uint64 { return uint64(C.retainer_array_buffers_reused()) }
