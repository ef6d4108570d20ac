/* bench/probe.cuh — what the standalone probe programs (bench/read_probe.cu,
 * bench/hmma_probe.cu: one nvcc command each, no build system) share. */
#ifndef INFERD_BENCH_PROBE_CUH
#define INFERD_BENCH_PROBE_CUH

#include <cstdio>
#include <cstdlib>
#include <cuda_runtime.h>

/* a CUDA call that must succeed: the probe stops with where and why */
#define CK(x)                                                                            \
    do {                                                                                 \
        cudaError_t e_ = (x);                                                            \
        if (e_ != cudaSuccess) {                                                         \
            fprintf(stderr, "%s:%d %s\n", __FILE__, __LINE__, cudaGetErrorString(e_));   \
            exit(1);                                                                     \
        }                                                                                \
    } while (0)

#endif
