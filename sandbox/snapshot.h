#ifndef RETAINER_SNAPSHOT_H
#define RETAINER_SNAPSHOT_H
#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

// retainer_snapshot_make runs the runtime's source (its bootstrap called
// with a placeholder for each of the hot host functions and with the cold
// host names, both comma-separated) in a fresh snapshot-making isolate and
// answers the blob (malloc'd) or, with 0, the reason in *err (malloc'd).
int retainer_snapshot_make(const char* src, int len, const char* hot, const char* cold, char** blob, int* blobLen, char** err);

// retainer_snapshot_valid answers whether this V8 made the blob (its
// version check); retainer_snapshot_rehashable whether V8 can give an
// isolate made from it a hash seed of its own.
int retainer_snapshot_valid(const char* blob, int len);
int retainer_snapshot_rehashable(const char* blob, int len);

// retainer_snapshot_use makes every later isolate of the process start
// from blob, which must stay alive and unchanged from then on.
void retainer_snapshot_use(const char* blob, int len);

// retainer_snapshot_next_context makes the next context v8go makes on this
// thread the snapshot's runtime context.
void retainer_snapshot_next_context(void);

// retainer_isolate_heap bounds the old generation of the next isolate made
// on this thread (its CreateParams' constraints), in bytes.
void retainer_isolate_heap(size_t bytes);

// retainer_snapshot_wrapped answers 1 when this build wraps V8's isolate
// and context constructors (snapshot.cc says why), else 0.
int retainer_snapshot_wrapped(void);

#ifdef __cplusplus
}
#endif
#endif
