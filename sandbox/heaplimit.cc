// A near-heap-limit callback for V8 isolates created by rogchap.com/v8go,
// which does not expose one.
//
// Why: past its heap limit V8 aborts the whole process ("Fatal JavaScript
// OOM"). V8 calls a near-heap-limit callback on the isolate's own thread just
// before that; ours records the hit, asks V8 to terminate the running script,
// and grants a little more heap so the termination can unwind instead of the
// process dying. The engine then disposes the isolate and answers MEMORY.
//
// No V8 header is included (third_party/v8 has them; this file needs two
// members only): the two member functions used are declared here with the
// exact signatures of include/v8-isolate.h, which the static library that
// v8go links defines. Only non-virtual members are called, so
// the class layout does not matter.
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>

namespace v8 {
class Isolate {
 public:
  void AddNearHeapLimitCallback(size_t (*callback)(void* data, size_t current_heap_limit, size_t initial_heap_limit), void* data);
  void TerminateExecution();
};
}  // namespace v8

#include "heaplimit.h"

static size_t near_heap_limit(void* data, size_t current_heap_limit, size_t initial_heap_limit) {
  retainer_heap_guard* g = static_cast<retainer_heap_guard*>(data);
  __atomic_store_n(&g->hits, g->hits + 1, __ATOMIC_SEQ_CST);
  static_cast<v8::Isolate*>(g->isolate)->TerminateExecution();
  // Room for the termination to unwind, and for the allocation that hit the
  // limit (a growing array's new backing store can be a large share of the
  // heap): double the limit. Each further hit doubles again; past what the
  // process can hold, the worker's rlimits end it, never the gateway.
  return current_heap_limit * 2;
}

extern "C" retainer_heap_guard* retainer_heap_guard_install(void* isolate) {
  retainer_heap_guard* g = static_cast<retainer_heap_guard*>(calloc(1, sizeof(retainer_heap_guard)));
  g->isolate = isolate;
  static_cast<v8::Isolate*>(isolate)->AddNearHeapLimitCallback(near_heap_limit, g);
  return g;
}

// A refused ArrayBuffer (bufferpool.cc) is a hit too: the program asked
// for more than its bound, whether or not it caught the RangeError.
extern "C" int retainer_heap_guard_hits(retainer_heap_guard* g) {
  return __atomic_load_n(&g->hits, __ATOMIC_SEQ_CST) + __atomic_load_n(&g->buffer_refused, __ATOMIC_SEQ_CST);
}

// Freed only after the isolate is disposed: V8 no longer calls back then.
extern "C" void retainer_heap_guard_free(retainer_heap_guard* g) { free(g); }
