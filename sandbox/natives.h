#ifndef RETAINER_NATIVES_H
#define RETAINER_NATIVES_H
#ifdef __cplusplus
extern "C" {
#endif

// retainer_install_natives puts the runtime's native conversions on the
// current context's global object as __retainerNatives (natives.cc); it
// answers 0 when there is no current context or V8 refused.
int retainer_install_natives(void* isolate);

// retainer_natives_reference is the address of the natives' one C++
// function, which a startup snapshot holding it names (snapshot.cc).
#include <stdint.h>
intptr_t retainer_natives_reference(void);

#ifdef __cplusplus
}
#endif
#endif
