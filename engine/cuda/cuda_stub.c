/* cuda_stub — what a CPU-only build answers: no CUDA backend in this binary. */
#include "engine/cuda/cuda.h"
#include "engine/err.h"

#include <stdio.h>

int cuda_compiled(void)
{
    return 0;
}

int cuda_devices(struct cuda_device_info *out, int cap)
{
    (void)out;
    (void)cap;
    return 0;
}

int cuda_selftest(char *msg, size_t cap)
{
    snprintf(msg, cap, "built without CUDA");
    return INF_EUNSUPPORTED;
}

struct backend *cuda_backend_new(int device, struct inf_error *err)
{
    (void)device;
    inf_error_set(err, INF_EUNSUPPORTED, "cuda: this binary was built without the CUDA backend");
    return NULL;
}

int cuda_backend_mem(const struct backend *be, size_t *weights, size_t *free_b, size_t *total)
{
    (void)be;
    *weights = *free_b = *total = 0;
    return INF_EUNSUPPORTED;
}
