package sandbox

import "runtime"

// The process's main thread is kept for the main goroutine, so that no
// isolate ever runs on it. V8 looks up the current thread's stack whenever
// a thread enters an isolate (v8::Isolate::New, and each top-level
// v8::Locker, which the loop takes per turn: threadhold.go) through glibc's
// pthread_getattr_np; on the main thread, and only there, that call reads
// and parses the whole of /proc/self/maps, whose length grows with every
// isolate's mappings (~4,000 lines beside 700 retained isolates).
//
// Before this, Go's scheduler gave the main thread to whichever pinned
// goroutine came first: a worker made every computation's isolate on it
// (strace: 499 reads of /proc/self/maps in 4 s of computations), and in
// `go test ./sandbox -bench ComputationCold` parsing the map was a quarter
// of the CPU. Locking the main goroutine during init keeps it on the main
// thread for the life of the program (the runtime's documented rule), so
// the scheduler gives that thread to nothing else.
func init() { runtime.LockOSThread() }
