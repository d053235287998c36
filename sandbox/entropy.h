#ifndef RETAINER_ENTROPY_H
#define RETAINER_ENTROPY_H
#ifdef __cplusplus
extern "C" {
#endif

void retainer_entropy_install(void);
long retainer_entropy_seeds(void);

#ifdef __cplusplus
}
#endif
#endif
