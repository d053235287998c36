package sandbox

// #cgo CXXFLAGS: -std=c++17 -fno-rtti -fno-exceptions
// #include "heaplimit.h"
import "C"

import (
	"reflect"
	"sync/atomic"
	"unsafe"

	v8 "rogchap.com/v8go"
)

// heapGuard is the near-heap-limit callback installed on one isolate (see
// heaplimit.cc). It lives exactly as long as the isolate: install after
// NewIsolate, free after Dispose.
type heapGuard struct{ g *C.retainer_heap_guard }

func installHeapGuard(iso *v8.Isolate) heapGuard {
	return heapGuard{g: C.retainer_heap_guard_install(isolatePointer(iso))}
}

// hit reports whether V8 reached the isolate's heap limit since install,
// or refused one of its ArrayBuffers. It reads the two counts the way
// retainer_heap_guard_hits does, without the call into C: every boundHit
// asks (several times an invocation), and a cgo call is an entersyscall
// and an exitsyscall each (docs/history/performance-log.md, "The worker's
// CPU a request"). A C int is 32 bits wherever this builds (cgo checks the
// field's type).
func (h heapGuard) hit() bool {
	return atomic.LoadInt32((*int32)(unsafe.Pointer(&h.g.hits))) > 0 ||
		atomic.LoadInt32((*int32)(unsafe.Pointer(&h.g.buffer_refused))) > 0
}

// A C int that is not 32 bits does not compile here.
var _ [unsafe.Sizeof(C.int(0)) - 4]byte
var _ [4 - unsafe.Sizeof(C.int(0))]byte

// boundBuffers makes the isolate's ArrayBuffers and typed arrays count
// against its memory bound, with its heap (bufferpool.cc): past it they
// are refused and the run ends with MEMORY.
func (h heapGuard) boundBuffers(memoryMiB int) {
	C.retainer_buffers_bound(h.g, C.size_t(memoryMiB)<<20)
}

// free is called after the isolate is disposed.
func (h heapGuard) free() {
	C.retainer_buffers_forget(h.g)
	C.retainer_heap_guard_free(h.g)
}

// isolatePointer reads the v8::Isolate* that v8go keeps in its unexported
// first field. v8go is pinned at v0.9.0; the test TestHeapGuardCatchesBombs
// fails loudly if its layout ever changes.
func isolatePointer(iso *v8.Isolate) unsafe.Pointer {
	f := reflect.ValueOf(iso).Elem().FieldByName("ptr")
	if !f.IsValid() || f.Kind() != reflect.Pointer {
		panic("sandbox: rogchap.com/v8go's Isolate no longer has its ptr field")
	}
	return unsafe.Pointer(f.Pointer())
}
