/* bench/read_probe — the time to read a weight-sized buffer once, as a
 * decode product reads it: the floor a one-row product of that many bytes
 * can reach, launch and ramp included (h200-ceilings.md's 4,490 GB/s is a
 * 4 GiB stream, where neither shows).
 *
 * Two ways, each the mean of back-to-back launches:
 *   same  one buffer read again and again (what `bench --op` does with a
 *         weight: whatever of it the L2 still holds from the last launch
 *         comes from there)
 *   cold  a ring of buffers, >= 400 MB together, one a launch (what a
 *         model's decode step does: every product reads other bytes)
 * Sizes in MB on the command line (default: the #11 shapes' weights).
 * Build: nvcc -O3 -std=c++17 -arch=sm_90 bench/read_probe.cu -o read_probe
 */
#include <cstdio>
#include <cstdlib>
#include <cuda_runtime.h>
#include <vector>

#include "probe.cuh"


/* four 16-byte loads in flight a thread before any is used; plain
 * read-only loads (L2 evict-normal, as the bulk copies of a weight are):
 * with `ld.global.cs` (evict-first, session 39's first run) the same
 * buffer got nothing from the L2 */
__global__ void __launch_bounds__(512) rd(const uint4 *p, size_t n, unsigned *out)
{
    unsigned acc = 0;
    const size_t st = (size_t)gridDim.x * blockDim.x;
    size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x;
    for (; i + 3 * st < n; i += 4 * st) {
        const uint4 a = __ldg(p + i), b = __ldg(p + i + st), c = __ldg(p + i + 2 * st), d = __ldg(p + i + 3 * st);
        acc ^= a.x ^ b.y ^ c.z ^ d.w;
    }
    for (; i < n; i += st)
        acc ^= __ldg(p + i).x;
    if (acc == 0x12345678u)
        out[0] = acc;
}

int main(int argc, char **argv)
{
    std::vector<double> mb = {8, 16, 24, 33.03, 40, 48.17, 56, 64, 128};
    if (argc > 1) {
        mb.clear();
        for (int i = 1; i < argc; i++)
            mb.push_back(atof(argv[i]));
    }
    cudaDeviceProp pr;
    CK(cudaGetDeviceProperties(&pr, 0));
    printf("device %s, %d SMs, L2 %d MB\n", pr.name, pr.multiProcessorCount, pr.l2CacheSize >> 20);
    unsigned *dout;
    CK(cudaMalloc(&dout, 64));
    cudaEvent_t e0, e1;
    cudaEventCreate(&e0);
    cudaEventCreate(&e1);
    const int blocks = pr.multiProcessorCount * 4, reps = 40;
    printf("%10s %12s %10s %12s %10s\n", "MB", "same us", "GB/s", "cold us", "GB/s");
    for (double m : mb) {
        const size_t bytes = ((size_t)(m * 1e6) + 15) / 16 * 16;
        const int nb = (int)(400e6 / bytes) + 2;
        std::vector<uint4 *> b(nb);
        for (auto &x : b) {
            CK(cudaMalloc(&x, bytes));
            CK(cudaMemset(x, 1, bytes));
        }
        double t[2];
        for (int mode = 0; mode < 2; mode++) {
            for (int w = 0; w < 3; w++)
                rd<<<blocks, 512>>>(b[0], bytes / 16, dout);
            CK(cudaDeviceSynchronize());
            cudaEventRecord(e0);
            for (int r = 0; r < reps; r++)
                rd<<<blocks, 512>>>(b[mode ? r % nb : 0], bytes / 16, dout);
            cudaEventRecord(e1);
            CK(cudaEventSynchronize(e1));
            float ms;
            cudaEventElapsedTime(&ms, e0, e1);
            t[mode] = ms * 1e3 / reps;
        }
        printf("%10.2f %12.2f %10.0f %12.2f %10.0f\n", m, t[0], bytes / t[0] / 1e3, t[1], bytes / t[1] / 1e3);
        for (auto &x : b)
            CK(cudaFree(x));
    }
    return 0;
}
