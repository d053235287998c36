#ifndef RETAINER_BUFFERPOOL_H
#define RETAINER_BUFFERPOOL_H
#include <stdint.h>
#ifdef __cplusplus
extern "C" {
#endif

// retainer_pool_array_buffers puts a pool in front of the ArrayBuffer
// allocator v8go gives its isolates (bufferpool.cc); 0 when v8go has not
// made its allocator yet (before its first isolate).
int retainer_pool_array_buffers(void);

// retainer_array_buffers_reused counts the blocks the pool handed out
// again (tests).
uint64_t retainer_array_buffers_reused(void);

#ifdef __cplusplus
}
#endif
#endif
