package sandbox

/*
#cgo LDFLAGS: -Wl,--wrap=pthread_getattr_np
#define _GNU_SOURCE
#include <pthread.h>
#include <stddef.h>
#include <stdint.h>

// The real pthread_getattr_np (the linker's --wrap sends every other
// reference in the binary, V8's and runtime/cgo's, to the wrapper below).
extern int __real_pthread_getattr_np(pthread_t, pthread_attr_t *);

// The main thread is never answered from the cache: glibc works its stack
// out from /proc/self/maps and the stack's rlimit, and that answer may move.
static pthread_t retainer_main_thread;
__attribute__((constructor)) static void retainer_note_main_thread(void) {
	retainer_main_thread = pthread_self();
}

// What the calling thread's first call found: a thread's stack is fixed for
// its life (its own mapping, made by pthread_create), and the cache dies
// with the thread.
static __thread int retainer_stack_known;
static __thread void *retainer_stack_addr;
static __thread size_t retainer_stack_size;
static __thread size_t retainer_stack_guard;

// How many times the real function ran (tests).
static uint64_t retainer_stack_real_calls;

static int retainer_real_getattr(pthread_t th, pthread_attr_t *attr) {
	__atomic_add_fetch(&retainer_stack_real_calls, 1, __ATOMIC_RELAXED);
	return __real_pthread_getattr_np(th, attr);
}

int __wrap_pthread_getattr_np(pthread_t th, pthread_attr_t *attr) {
	pthread_t self = pthread_self();
	if (!pthread_equal(th, self) || pthread_equal(self, retainer_main_thread)) {
		return retainer_real_getattr(th, attr);
	}
	if (!retainer_stack_known) {
		pthread_attr_t a;
		int err = retainer_real_getattr(th, &a);
		if (err != 0) {
			return err;
		}
		if (pthread_attr_getstack(&a, &retainer_stack_addr, &retainer_stack_size) != 0 ||
		    pthread_attr_getguardsize(&a, &retainer_stack_guard) != 0) {
			pthread_attr_destroy(&a);
			return retainer_real_getattr(th, attr);
		}
		pthread_attr_destroy(&a);
		retainer_stack_known = 1;
	}
	int err = pthread_attr_init(attr);
	if (err != 0) {
		return err;
	}
	if (pthread_attr_setstack(attr, retainer_stack_addr, retainer_stack_size) != 0 ||
	    pthread_attr_setguardsize(attr, retainer_stack_guard) != 0) {
		pthread_attr_destroy(attr);
		return retainer_real_getattr(th, attr);
	}
	return 0;
}

// retainer_stack_of answers the calling thread's stack as the wrapped
// function does (real: as glibc does).
static int retainer_stack_of(int real, uintptr_t *addr, size_t *size) {
	pthread_attr_t a;
	int err = real ? __real_pthread_getattr_np(pthread_self(), &a) : pthread_getattr_np(pthread_self(), &a);
	if (err != 0) {
		return err;
	}
	void *p = NULL;
	err = pthread_attr_getstack(&a, &p, size);
	pthread_attr_destroy(&a);
	*addr = (uintptr_t)p;
	return err;
}

static uint64_t retainer_stack_real(void) { return __atomic_load_n(&retainer_stack_real_calls, __ATOMIC_RELAXED); }
*/
import "C"

// A thread's stack, as pthread_getattr_np answers it, is asked for by V8
// every time the isolate's loop takes its outer Locker (threadhold.cc): a
// top-level Locker sets up V8's per-thread state, whose stack guard asks
// glibc where the thread's stack is, and glibc answers with a
// sched_getaffinity system call and a malloc and free of the CPU set
// besides. A worker asked once every few milliseconds (one of 50 tenants')
// takes the Locker once a request, so that was one system call of the ~10
// a request of its own (docs/performance.md, "A cold worker's request").
// The wrapper above answers a thread's later calls from what its first
// found: the stack's address, size and guard, which is all V8 and Go's
// runtime/cgo read of it. Other threads' attributes, and the main
// thread's, are asked of glibc every time.

// threadStack is the calling thread's stack (its lowest address and size)
// as the wrapped pthread_getattr_np answers it; real asks glibc instead.
// The caller pins its goroutine to its thread (runtime.LockOSThread).
func threadStack(real bool) (addr, size uintptr, ok bool) {
	var a C.uintptr_t
	var s C.size_t
	r := C.int(0)
	if real {
		r = 1
	}
	if C.retainer_stack_of(r, &a, &s) != 0 {
		return 0, 0, false
	}
	return uintptr(a), uintptr(s), true
}

// stackRealCalls is how many times glibc's pthread_getattr_np ran through
// the wrapper.
func stackRealCalls() uint64 { return uint64(C.retainer_stack_real()) }
