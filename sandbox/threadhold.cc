// An outer v8::Locker and Isolate::Enter held by an isolate's own OS thread
// for as long as its loop runs.
//
// Why: every rogchap.com/v8go call takes a v8::Locker and enters the
// isolate. When no outer Locker is held, each such Locker is "top level":
// V8 initializes the thread's state when it is taken (which asks the OS for
// the thread's stack with pthread_getattr_np: a sched_getaffinity call, and
// on the main thread an open of /proc/self/maps) and frees it again when it
// is dropped. An invocation makes several v8go calls, so this cost came
// several times per invocation (perf on a worker under load: ~12% of its
// CPU). With an outer Locker held, v8go's become nested Lockers, which only
// check that this thread holds the lock. The thread must then never change:
// the loop goroutine is pinned with runtime.LockOSThread (threadhold.go).
//
// As in heaplimit.cc, no V8 header is included: the members used are
// declared with the exact signatures and data layout of V8 10.9
// (include/v8-locker.h, include/v8-isolate.h), which the static library
// v8go links defines. Locker's constructor is inline in V8's header (it
// calls Initialize), so the Locker is built here with Initialize on memory
// of the class's size.
#include <stdint.h>
#include <stdlib.h>
#include <time.h>
#include <new>

namespace v8 {
class Isolate {
 public:
  void Enter();
  void Exit();
};
class Locker {
 public:
  void Initialize(Isolate* isolate);
  ~Locker();

 private:
  bool has_lock_;
  bool top_level_;
  void* isolate_;
};
}  // namespace v8

#include "threadhold.h"

// The calling thread's last reading of its own CPU clock, and the
// monotonic clock just before it was read (ns; cpu -1: none yet). A
// thread's CPU clock cannot advance faster than the wall clock, so a
// reading taken max_age ago is at most max_age behind (threadhold.go).
static thread_local int64_t cpu_read = -1;
static thread_local int64_t cpu_read_at;

static int64_t nanos(const struct timespec& ts) {
  return int64_t(ts.tv_sec) * 1000000000 + ts.tv_nsec;
}

extern "C" int64_t retainer_thread_cpu(int64_t max_age) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);  // vDSO: no system call
  int64_t now = nanos(ts);
  if (max_age > 0 && cpu_read >= 0 && now - cpu_read_at <= max_age) {
    return cpu_read;
  }
  if (clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts) != 0) return -1;
  cpu_read = nanos(ts);
  cpu_read_at = now;
  return cpu_read;
}

extern "C" void* retainer_isolate_hold(void* isolate, int64_t max_age, int64_t* cpu) {
  v8::Isolate* iso = static_cast<v8::Isolate*>(isolate);
  void* mem = malloc(sizeof(v8::Locker));
  if (mem == nullptr) return nullptr;
  v8::Locker* locker = static_cast<v8::Locker*>(mem);
  locker->Initialize(iso);
  iso->Enter();
  *cpu = retainer_thread_cpu(max_age);
  return locker;
}

extern "C" void retainer_isolate_release(void* isolate, void* hold) {
  if (hold == nullptr) return;
  static_cast<v8::Isolate*>(isolate)->Exit();
  v8::Locker* locker = static_cast<v8::Locker*>(hold);
  locker->~Locker();
  free(locker);
}
