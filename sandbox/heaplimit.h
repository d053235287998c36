#ifndef RETAINER_HEAPLIMIT_H
#define RETAINER_HEAPLIMIT_H
#ifdef __cplusplus
extern "C" {
#endif

typedef struct retainer_heap_guard {
  void* isolate;
  int hits;
} retainer_heap_guard;

retainer_heap_guard* retainer_heap_guard_install(void* isolate);
int retainer_heap_guard_hits(retainer_heap_guard* g);
void retainer_heap_guard_free(retainer_heap_guard* g);

#ifdef __cplusplus
}
#endif
#endif
