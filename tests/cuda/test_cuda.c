/* test_cuda — the CUDA backend answers on a machine with a GPU; skips (77)
 * when the binary has no CUDA backend or the machine has no device. */
#include <stdio.h>

#include "engine/cuda/cuda.h"
#include "engine/err.h"

int main(void)
{
    struct cuda_device_info d[8];
    char msg[256];
    if (!cuda_compiled()) {
        printf("built without CUDA: skip\n");
        return 77;
    }
    int n = cuda_devices(d, 8);
    if (n <= 0) {
        printf("no CUDA device: skip\n");
        return 77;
    }
    for (int i = 0; i < n && i < 8; i++)
        printf("device %d: %s sm_%d, %zu MiB, %d SMs\n", d[i].index, d[i].name, d[i].sm,
               d[i].total_mem >> 20, d[i].n_sm);
    int rc = cuda_selftest(msg, sizeof(msg));
    printf("selftest: %s\n", msg);
    return rc == INF_OK ? 0 : 1;
}
