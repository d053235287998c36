#ifndef RETAINER_THREADHOLD_H
#define RETAINER_THREADHOLD_H
#include <stdint.h>
#ifdef __cplusplus
extern "C" {
#endif

void* retainer_isolate_hold(void* isolate, int64_t max_age, int64_t* cpu);
void retainer_isolate_release(void* isolate, void* hold);
int64_t retainer_thread_cpu(int64_t max_age);

#ifdef __cplusplus
}
#endif
#endif
