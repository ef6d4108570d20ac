/* cuda — the CUDA backend's entry points as seen from C (daemon, tools, tests).
 *
 * Built only when meson finds nvcc (option cuda); without it cuda_stub.c
 * answers "no device". For now this is device discovery; the CUDA op table
 * (MMQ kernels, attention, prewarm) comes with the CUDA backend issue.
 * Any thread may call these.
 */
#ifndef INFERD_CUDA_H
#define INFERD_CUDA_H

#include <stddef.h>

struct cuda_device_info {
    int index;
    char name[256];
    int sm;                 /* major * 10 + minor, e.g. 90, 121 */
    size_t total_mem;
    int n_sm;
};

/* 1 when this binary contains the CUDA backend. */
int cuda_compiled(void);
/* Number of usable devices (0 when none or no driver); fills up to cap infos. */
int cuda_devices(struct cuda_device_info *out, int cap);
/* Run a tiny kernel on device 0 and check its result: 0 on success, or a
 * negative INF_E* code (INF_EUNSUPPORTED when no device). */
int cuda_selftest(char *msg, size_t cap);

#endif
