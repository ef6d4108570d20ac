/* cuda/device — device discovery and a self-test kernel.
 *
 * Three tiers as in ggml-cuda: the kernel, a launcher, and the C entry points.
 * Errors are returned, never fatal: a host without a driver reports 0 devices.
 */
#include <cuda_runtime.h>
#include <stdio.h>
#include <string.h>

extern "C" {
#include "engine/cuda/cuda.h"
#include "engine/err.h"
}

static __global__ void cuda_selftest_kernel(int *out, int n)
{
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n)
        out[i] = i * 3 + 1;
}

extern "C" int cuda_compiled(void)
{
    return 1;
}

extern "C" int cuda_devices(struct cuda_device_info *out, int cap)
{
    int n = 0;
    if (cudaGetDeviceCount(&n) != cudaSuccess) {
        cudaGetLastError(); /* clear the sticky "no driver" error */
        return 0;
    }
    for (int i = 0; i < n && i < cap; i++) {
        cudaDeviceProp p;
        if (cudaGetDeviceProperties(&p, i) != cudaSuccess)
            return i;
        out[i].index = i;
        snprintf(out[i].name, sizeof(out[i].name), "%s", p.name);
        out[i].sm = p.major * 10 + p.minor;
        out[i].total_mem = p.totalGlobalMem;
        out[i].n_sm = p.multiProcessorCount;
    }
    return n;
}

extern "C" int cuda_selftest(char *msg, size_t cap)
{
    const int n = 1000;
    int *d = NULL;
    int h[1000];
    cudaError_t e;
    if (cuda_devices(NULL, 0) == 0) {
        snprintf(msg, cap, "no CUDA device");
        return INF_EUNSUPPORTED;
    }
    if ((e = cudaMalloc(&d, n * sizeof(int))) != cudaSuccess)
        goto err;
    cuda_selftest_kernel<<<(n + 255) / 256, 256>>>(d, n);
    if ((e = cudaGetLastError()) != cudaSuccess)
        goto err;
    if ((e = cudaMemcpy(h, d, sizeof(h), cudaMemcpyDeviceToHost)) != cudaSuccess)
        goto err;
    cudaFree(d);
    for (int i = 0; i < n; i++) {
        if (h[i] != i * 3 + 1) {
            snprintf(msg, cap, "wrong result at %d: %d", i, h[i]);
            return INF_EDEVICE;
        }
    }
    snprintf(msg, cap, "ok");
    return INF_OK;
err:
    if (d)
        cudaFree(d);
    snprintf(msg, cap, "%s", cudaGetErrorString(e));
    return INF_EDEVICE;
}
