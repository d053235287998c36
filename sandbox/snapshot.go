package sandbox

// #include <stdlib.h>
// #include "snapshot.h"
import "C"

import (
	"crypto/sha256"
	_ "embed"
	"errors"
	"fmt"
	"sync"
	"unsafe"

	v8 "rogchap.com/v8go"
)

// The runtime's startup snapshot (snapshot.cc; docs/runtime.md, "Startup
// snapshot"). The process makes it once, as its first engine starts, from
// a fresh snapshot-making isolate in which no program ever ran; every
// isolate then starts from it and restores the runtime's context instead
// of compiling and installing the runtime. When it cannot be made or is
// refused, isolates install the compiled runtime as before, and a worker
// logs why.

// runtimeSnapshot is the process's snapshot: its blob (C memory V8 reads
// for the life of the process) and the SHA-256 taken when it was made.
type runtimeSnapshot struct {
	blob []byte
	sum  [sha256.Size]byte
}

var (
	snapshotOnce sync.Once
	snapshotOn   bool  // isolates start from the snapshot
	snapshotErr  error // why not
)

// makeProcessSnapshot makes the process's snapshot and puts it in use,
// once, as the process's first engine starts (its V8 flags set), before
// any isolate of the engine is made: every isolate of a process shares one
// read-only heap, laid out by the snapshot its first isolate started from,
// so once the snapshot is in use every isolate must start from it, those
// that install the compiled runtime too (the link adds it to all:
// snapshot.cc). Making it takes ~20 ms of the first engine's start.
func makeProcessSnapshot() {
	snapshotOnce.Do(func() {
		flagsMu.Lock()
		defer flagsMu.Unlock()
		// v8go initializes V8 with its first isolate, which the maker
		// needs; it is disposed before any isolate starts from the
		// snapshot.
		v8.NewIsolate().Dispose()
		poolArrayBuffers()
		// One given by the pool's first worker (startup.go), if V8 can
		// read it; else this process makes its own.
		var err error
		s := givenSnapshot()
		given := s != nil && isolateParamsWrapped && s.check() == nil
		if !given {
			if s != nil {
				s.free()
			}
			s, err = makeSnapshot()
			if err == nil {
				err = s.check()
			}
		}
		if err != nil {
			snapshotErr = err
			return
		}
		C.retainer_snapshot_use((*C.char)(unsafe.Pointer(&s.blob[0])), C.int(len(s.blob)))
		snapshotOn = true
		snapshotInUse(s, given)
	})
}

// SnapshotStatus answers whether this process's isolates start from the
// runtime's startup snapshot, and if not, why (after its first engine).
func SnapshotStatus() (bool, error) {
	makeProcessSnapshot()
	return snapshotOn, snapshotErr
}

// makeSnapshot runs the runtime in a snapshot-making isolate and answers
// its blob.
func makeSnapshot() (*runtimeSnapshot, error) {
	if !isolateParamsWrapped {
		return nil, errors.New("this build cannot start isolates from a snapshot (it needs GNU ld's --wrap: Linux)")
	}
	source := runtimeMinified
	src := C.CString(source)
	defer C.free(unsafe.Pointer(src))
	hot := C.CString(hotHostNames)
	defer C.free(unsafe.Pointer(hot))
	cold := C.CString(coldHostNames)
	defer C.free(unsafe.Pointer(cold))
	var blob, cerr *C.char
	var n C.int
	if C.retainer_snapshot_make(src, C.int(len(source)), hot, cold, &blob, &n, &cerr) == 0 {
		defer C.free(unsafe.Pointer(cerr))
		return nil, fmt.Errorf("making the runtime's startup snapshot: %s", C.GoString(cerr))
	}
	// The blob stays in C memory for the life of the process: V8 reads it
	// whenever an isolate is made.
	s := &runtimeSnapshot{blob: unsafe.Slice((*byte)(unsafe.Pointer(blob)), int(n))}
	s.sum = sha256.Sum256(s.blob)
	return s, nil
}

// runtimeMinified is the runtime's source as the snapshot holds it:
// without comments and indentation (esbuild, whitespace only: every name
// stays; committed, made by TestMinifiedRuntimeIsCurrent). V8 keeps a script's source beside its
// functions (to compile one on its first call, and for toString), and
// every isolate deserializes it: 142 KB became 93 KB, the snapshot
// 396 → 349 KiB, and making an isolate with the runtime ready 3.1 → 2.4–2.8
// ms (`-bench IsolateCreate`, three interleaved pairs). It is made ahead
// because esbuild takes 20–30 ms over it, which each worker's start would
// pay. The runtime's own frames never reach a program's stack traces, so
// their lines and columns are nobody's concern.
//
//go:generate go test -run TestMinifiedRuntimeIsCurrent -update-runtime-min .
//go:embed js/gen/runtime.min.js
var runtimeMinified string

// check refuses a blob that is not, byte for byte, the one made (its
// SHA-256), or that this V8 did not make (V8's version check): V8 aborts
// the process on a snapshot it cannot read, so nothing doubtful reaches it.
func (s *runtimeSnapshot) check() error {
	if len(s.blob) == 0 {
		return errors.New("the runtime's startup snapshot is empty")
	}
	if sha256.Sum256(s.blob) != s.sum {
		return errors.New("the runtime's startup snapshot is corrupted (its SHA-256 changed since it was made)")
	}
	if C.retainer_snapshot_valid((*C.char)(unsafe.Pointer(&s.blob[0])), C.int(len(s.blob))) == 0 {
		return errors.New("the runtime's startup snapshot was made by another V8 version")
	}
	if C.retainer_snapshot_rehashable((*C.char)(unsafe.Pointer(&s.blob[0])), C.int(len(s.blob))) == 0 {
		// Every isolate would share the snapshot's hash seed.
		return errors.New("the runtime's startup snapshot cannot be rehashed")
	}
	return nil
}

// askRuntimeContext makes v8go's next context on this thread the
// snapshot's runtime context (the loop's goroutine is pinned by its hold).
func askRuntimeContext() { C.retainer_snapshot_next_context() }

// free gives back a snapshot's C memory (one never put in use).
func (s *runtimeSnapshot) free() { C.free(unsafe.Pointer(&s.blob[0])) }

// isolateParamsWrapped: this build wraps V8's isolate constructor, so an
// isolate's heap bound goes with its own parameters (nextIsolateHeap)
// rather than through V8's process-wide flags.
var isolateParamsWrapped = C.retainer_snapshot_wrapped() == 1

// nextIsolateHeap bounds the old generation of the next isolate made on
// this thread (the goroutine is pinned) to mib MiB.
func nextIsolateHeap(mib int) { C.retainer_isolate_heap(C.size_t(mib) << 20) }
