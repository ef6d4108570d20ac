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
 * `read_probe bulk ROWS ROW_BYTES RB RUN D` (session 51): mmvt's bulk-copy
 * stream without its arithmetic beside the plain read (bulk below).
 * `read_probe tiles NBM NBN STEPS WB AB D` (session 52): a blocked
 * product's tile reads with nothing else (tiles below): the L2's rate.
 * Build (from the repository root): nvcc -O3 -std=c++17 -arch=sm_90 -I.
 * bench/read_probe.cu -o read_probe
 */
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <cuda_runtime.h>
#include <vector>

#include "engine/cuda/mma.cuh"
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

/* mmvt's stream without its arithmetic (cuda/mmvt.cu): a block a group of
 * rb rows of row_bytes each, a stage = each row's next run of `run` bytes
 * by one bulk copy a row (lane r: row r), a ring of d slots; the one warp
 * waits for a slot's bytes and refills it at once. What the TMA pattern
 * of a one-row product gets from the memory system with nothing else in
 * the way: if it reads slower than rd, the pattern costs; if mmvt reads
 * slower than it, the arithmetic does. */
/* a row's stride in bulk's ring: its run and 16 bytes, rounded to an odd
 * number of 16-byte granules, as mmvt's RS */
static __host__ __device__ __forceinline__ int bulk_rs(int run)
{
    return (run + 16 + 15) / 16 * 16 | 16;
}

/* bulk's and tiles' one warp: its ring of d slot barriers, one arrival
 * each (the lane that expects the slot's bytes) */
static __device__ __forceinline__ void ring_init(uint64_t *full, int d, int lane)
{
    if (lane == 0)
        for (int i = 0; i < d; i++)
            cuda_mbar_init(&full[i], 1);
    cuda_mbar_init_fence();
    __syncwarp();
}

__global__ void __launch_bounds__(32) bulk(const uint8_t *w, int rows, int row_bytes, int rb, int run, int d,
                                           unsigned *out)
{
    extern __shared__ __align__(128) uint8_t sm[];
    __shared__ uint64_t full[8];
    const int lane = threadIdx.x, row = blockIdx.x * rb + lane;
    const int ns = (row_bytes + run - 1) / run;
    const int rs = bulk_rs(run);
    ring_init(full, d, lane);
    auto issue = [&](int s) {
        const int off = s * run, n = row_bytes - off < run ? row_bytes - off : run;
        const uintptr_t src = (uintptr_t)(w + (size_t)row * row_bytes + off);
        const uint32_t sz = (uint32_t)(((src & 15) + n + 15) & ~(uintptr_t)15);
        const uint32_t all = __reduce_add_sync(0xffffffffu, lane < rb && row < rows ? sz : 0u);
        if (lane == 0)
            cuda_mbar_expect(&full[s % d], all);
        __syncwarp();
        if (lane < rb && row < rows)
            cuda_bulk_copy(sm + (size_t)(s % d) * rb * rs + lane * rs, (const void *)(src & ~(uintptr_t)15), sz,
                           &full[s % d]);
    };
    for (int s = 0; s < d && s < ns; s++)
        issue(s);
    unsigned acc = 0;
    for (int s = 0; s < ns; s++) {
        cuda_mbar_wait(&full[s % d], (uint32_t)(s / d) & 1);
        if (lane < rb)
            acc ^= sm[(size_t)(s % d) * rb * rs + lane * rs];
        __syncwarp();
        if (s + d < ns)
            issue(s + d);
    }
    if (acc == 0x12345678u)
        out[0] = acc;
}

/* The L2's side of a blocked product (session 52's question for weights
 * pre-expanded at load): block b of NBM x NBN (one an SM, one wave) reads
 * row block b % NBM's weight tiles and column block b / NBM's activation
 * tiles, STEPS steps of WB + AB bytes by bulk copies of up to 16 KB (a
 * lane a copy) into a ring of D slots, and does nothing with them: what a
 * kernel that only fed its tensor cores could get. Each weight tile is
 * read by NBN blocks and each activation tile by NBM, so most of the
 * bytes the SMs take come from the L2. */
__global__ void __launch_bounds__(32) tiles(const uint8_t *w, const uint8_t *x, int nbm, int steps, int wb, int ab,
                                            int d, unsigned *out)
{
    extern __shared__ __align__(128) uint8_t sm[];
    __shared__ uint64_t full[8];
    const int lane = threadIdx.x, m = blockIdx.x % nbm, n = blockIdx.x / nbm;
    const uint8_t *ws = w + (size_t)m * steps * wb, *xs = x + (size_t)n * steps * ab;
    const int slot = wb + ab, nw = (wb + 16383) / 16384, nx = (ab + 16383) / 16384;
    ring_init(full, d, lane);
    auto issue = [&](int s) {
        if (lane == 0)
            cuda_mbar_expect(&full[s % d], (uint32_t)slot);
        __syncwarp();
        uint8_t *dst = sm + (size_t)(s % d) * slot;
        if (lane < nw) {
            const int o = 16384 * lane, sz = wb - o < 16384 ? wb - o : 16384;
            cuda_bulk_copy(dst + o, ws + (size_t)s * wb + o, (uint32_t)sz, &full[s % d]);
        } else if (lane < nw + nx) {
            const int o = 16384 * (lane - nw), sz = ab - o < 16384 ? ab - o : 16384;
            cuda_bulk_copy(dst + wb + o, xs + (size_t)s * ab + o, (uint32_t)sz, &full[s % d]);
        }
    };
    for (int s = 0; s < d && s < steps; s++)
        issue(s);
    unsigned acc = 0;
    for (int s = 0; s < steps; s++) {
        cuda_mbar_wait(&full[s % d], (uint32_t)(s / d) & 1);
        acc ^= sm[(size_t)(s % d) * slot + 16 * lane];
        __syncwarp();
        if (s + d < steps)
            issue(s + d);
    }
    if (acc == 0x12345678u)
        out[0] = acc;
}

/* The mean time of `reps` back-to-back launches, us: launch(r) issues
 * launch r (three of launch(0) first, unmeasured) */
template <class F> static double mean_us(F launch, int reps)
{
    cudaEvent_t e0, e1;
    cudaEventCreate(&e0);
    cudaEventCreate(&e1);
    for (int i = 0; i < 3; i++)
        launch(0);
    CK(cudaDeviceSynchronize());
    cudaEventRecord(e0);
    for (int r = 0; r < reps; r++)
        launch(r);
    cudaEventRecord(e1);
    CK(cudaEventSynchronize(e1));
    float ms;
    cudaEventElapsedTime(&ms, e0, e1);
    cudaEventDestroy(e0);
    cudaEventDestroy(e1);
    return ms * 1e3 / reps;
}

/* `tiles NBM NBN STEPS WB AB D`: the blocked read (tiles above), back to
 * back on the same bytes; the SMs' bytes and the distinct bytes a launch,
 * each as a rate */
static int tiles_main(char **argv, unsigned *dout)
{
    const int nbm = atoi(argv[2]), nbn = atoi(argv[3]), steps = atoi(argv[4]), wb = atoi(argv[5]),
              ab = atoi(argv[6]), d = atoi(argv[7]);
    const size_t smem = (size_t)d * (wb + ab);
    if (nbm < 1 || nbn < 1 || steps < 1 || wb < 16 || ab < 16 || wb % 16 || ab % 16 || d < 1 || d > 8 ||
        (wb + 16383) / 16384 + (ab + 16383) / 16384 > 32 || smem > 227 * 1024) {
        fprintf(stderr, "tiles: WB, AB multiples of 16 (32 copies of 16 KB at most), D 1..8, D (WB + AB) <= 227 KB\n");
        return 2;
    }
    CK(cudaFuncSetAttribute(tiles, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem));
    const size_t wbytes = (size_t)nbm * steps * wb, xbytes = (size_t)nbn * steps * ab;
    uint8_t *w, *x;
    CK(cudaMalloc(&w, wbytes));
    CK(cudaMalloc(&x, xbytes));
    CK(cudaMemset(w, 1, wbytes));
    CK(cudaMemset(x, 2, xbytes));
    const double us = mean_us([&](int) { tiles<<<nbm * nbn, 32, smem>>>(w, x, nbm, steps, wb, ab, d, dout); }, 40);
    const double sm_bytes = (double)nbm * nbn * steps * (wb + ab);
    printf("tiles %d x %d blocks, %d steps of %d + %d B, %d slots: %.2f us; to the SMs %.1f MB %.0f GB/s; "
           "distinct %.1f MB %.0f GB/s\n",
           nbm, nbn, steps, wb, ab, d, us, sm_bytes / 1e6, sm_bytes / us / 1e3, (wbytes + xbytes) / 1e6,
           (wbytes + xbytes) / us / 1e3);
    CK(cudaFree(w));
    CK(cudaFree(x));
    return 0;
}

/* `bulk ROWS ROW_BYTES RB RUN D`: the bulk pattern on one buffer back to
 * back and over a 400 MB ring, beside rd on the same bytes */
static int bulk_main(char **argv, int rd_blocks, unsigned *dout)
{
    const int rows = atoi(argv[2]), row_bytes = atoi(argv[3]), rb = atoi(argv[4]), run = atoi(argv[5]),
              d = atoi(argv[6]);
    if (rb < 1 || rb > 32 || d < 1 || d > 8 || run < 16 || rows < 1 || row_bytes < run) {
        fprintf(stderr, "bulk: RB 1..32, D 1..8, RUN >= 16, ROW_BYTES >= RUN\n");
        return 2;
    }
    const size_t bytes = (size_t)rows * row_bytes;
    const size_t smem = (size_t)d * rb * bulk_rs(run);
    CK(cudaFuncSetAttribute(bulk, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem));
    const int nb = (int)(400e6 / bytes) + 2, reps = 40, grid = (rows + rb - 1) / rb;
    std::vector<uint8_t *> b(nb);
    for (auto &x : b) {
        CK(cudaMalloc(&x, bytes + 64));
        CK(cudaMemset(x, 1, bytes + 64));
    }
    double t[2][2];
    for (int k = 0; k < 2; k++) /* k 0: rd, 1: bulk */
        for (int mode = 0; mode < 2; mode++)
            t[k][mode] = mean_us(
                [&](int r) {
                    const uint8_t *p = b[mode ? r % nb : 0];
                    if (k)
                        bulk<<<grid, 32, smem>>>(p, rows, row_bytes, rb, run, d, dout);
                    else
                        rd<<<rd_blocks, 512>>>((const uint4 *)p, bytes / 16, dout);
                },
                reps);
    printf("%.2f MB (%d rows x %d B), bulk: %d blocks of %d rows, runs of %d B, %d slots (%zu B smem)\n",
           bytes / 1e6, rows, row_bytes, grid, rb, run, d, smem);
    printf("  rd   same %7.2f us %6.0f GB/s   cold %7.2f us %6.0f GB/s\n", t[0][0], bytes / t[0][0] / 1e3, t[0][1],
           bytes / t[0][1] / 1e3);
    printf("  bulk same %7.2f us %6.0f GB/s   cold %7.2f us %6.0f GB/s\n", t[1][0], bytes / t[1][0] / 1e3, t[1][1],
           bytes / t[1][1] / 1e3);
    for (auto &x : b)
        CK(cudaFree(x));
    return 0;
}

int main(int argc, char **argv)
{
    std::vector<double> mb = {8, 16, 24, 33.03, 40, 48.17, 56, 64, 128};
    if (argc > 1 && strcmp(argv[1], "bulk") && strcmp(argv[1], "tiles")) {
        mb.clear();
        for (int i = 1; i < argc; i++)
            mb.push_back(atof(argv[i]));
    }
    cudaDeviceProp pr;
    CK(cudaGetDeviceProperties(&pr, 0));
    printf("device %s, %d SMs, L2 %d MB\n", pr.name, pr.multiProcessorCount, pr.l2CacheSize >> 20);
    unsigned *dout;
    CK(cudaMalloc(&dout, 64));
    const int blocks = pr.multiProcessorCount * 4, reps = 40;
    if (argc > 1 && !strcmp(argv[1], "bulk")) {
        if (argc != 7) {
            fprintf(stderr, "usage: read_probe bulk ROWS ROW_BYTES RB RUN D\n");
            return 2;
        }
        return bulk_main(argv, blocks, dout);
    }
    if (argc > 1 && !strcmp(argv[1], "tiles")) {
        if (argc != 8) {
            fprintf(stderr, "usage: read_probe tiles NBM NBN STEPS WB AB D\n");
            return 2;
        }
        return tiles_main(argv, dout);
    }
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
        for (int mode = 0; mode < 2; mode++)
            t[mode] = mean_us([&](int r) { rd<<<blocks, 512>>>(b[mode ? r % nb : 0], bytes / 16, dout); }, reps);
        printf("%10.2f %12.2f %10.0f %12.2f %10.0f\n", m, t[0], bytes / t[0] / 1e3, t[1], bytes / t[1] / 1e3);
        for (auto &x : b)
            CK(cudaFree(x));
    }
    return 0;
}
