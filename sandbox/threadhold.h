#ifndef RETAINER_THREADHOLD_H
#define RETAINER_THREADHOLD_H
#ifdef __cplusplus
extern "C" {
#endif

void* retainer_isolate_hold(void* isolate);
void retainer_isolate_release(void* isolate, void* hold);

#ifdef __cplusplus
}
#endif
#endif
