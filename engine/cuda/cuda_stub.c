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
