#ifndef RETAINER_HEAPLIMIT_H
#define RETAINER_HEAPLIMIT_H
#ifdef __cplusplus
extern "C" {
#endif

typedef struct retainer_heap_guard {
  void* isolate;
  int hits;
  // The isolate's ArrayBuffers (bufferpool.cc): the bound they share with
  // the heap, the bytes they hold, and whether the last one asked for was
  // refused.
  size_t buffer_limit;
  size_t buffer_bytes;
  int buffer_refused;
} retainer_heap_guard;

retainer_heap_guard* retainer_heap_guard_install(void* isolate);
int retainer_heap_guard_hits(retainer_heap_guard* g);
void retainer_heap_guard_free(retainer_heap_guard* g);

// retainer_buffers_bound makes the isolate's ArrayBuffers count against
// limit bytes, with its heap (bufferpool.cc); retainer_buffers_forget lets
// go of the buffers still counted to g (after the isolate is disposed).
void retainer_buffers_bound(retainer_heap_guard* g, size_t limit);
void retainer_buffers_forget(retainer_heap_guard* g);

#ifdef __cplusplus
}
#endif
#endif
