/* bench/hmma_probe — the two facts an exact F16 MMQ would stand on, measured
 * before anyone writes it (bench/RESULTS.md 2026-12-05 session 39):
 *
 * 1. Rate: mma.sync m16n8k16 f16 x f16 -> f32 against m16n8k32 s8 x s8 -> s32,
 *    registers only, on this GPU (h200-ceilings.md has the int8 one: 1,287
 *    TOPS). An F16 product does half the MACs an instruction.
 * 2. Exactness: with integer-valued operands (Q4_K's q x scale <= 945, Q5_K's
 *    <= 1953, the q8 activations' -127..127, all exact in f16) every partial
 *    sum is an integer; while |sum| < 2^24 the f32 accumulator can hold it,
 *    so the tensor core's result should be the exact integer whatever order
 *    and alignment it adds in. Checked here tile by tile against int64 sums
 *    computed on the host: random operands, the largest magnitudes, large
 *    partial sums followed by small terms, and past the bound (where it
 *    must fail). Also: two exact halves added in f32 equal (float) of the
 *    exact int (the canonical chain converts v1 once, round to nearest).
 *
 * Build: nvcc -O3 -std=c++17 -arch=sm_90 bench/hmma_probe.cu -o hmma_probe
 */
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cuda_fp16.h>
#include <cuda_runtime.h>
#include <vector>

#include "probe.cuh"


static __device__ __forceinline__ void mma_f16(float d[4], const uint32_t a[4], const uint32_t b[2])
{
    asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
                 "{%0,%1,%2,%3};\n"
                 : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
}

__global__ void peak_f16(float *out, int iters)
{
    uint32_t a[4] = {threadIdx.x * 0x3c003c00u, 0x3c00u, 0x3c003c00u, 0u}, b[2] = {0x3c003c00u, threadIdx.x};
    float c[8][4] = {};
    for (int i = 0; i < iters; i++) {
#pragma unroll
        for (int j = 0; j < 8; j++)
            mma_f16(c[j], a, b);
    }
    float s = 0;
    for (int j = 0; j < 8; j++)
        s += c[j][0] + c[j][1] + c[j][2] + c[j][3];
    if (s == 1234.5f)
        out[0] = s;
}

__global__ void peak_s8(int *out, int iters)
{
    int a0 = threadIdx.x, a1 = a0 * 3, a2 = a0 * 5, a3 = a0 * 7, b0 = a0 ^ 0x55, b1 = a0 ^ 0x33;
    int c[8][4] = {};
    for (int i = 0; i < iters; i++) {
#pragma unroll
        for (int j = 0; j < 8; j++)
            asm volatile("mma.sync.aligned.m16n8k32.row.col.s32.s8.s8.s32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
                         "{%0,%1,%2,%3};\n"
                         : "+r"(c[j][0]), "+r"(c[j][1]), "+r"(c[j][2]), "+r"(c[j][3])
                         : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1));
    }
    int s = 0;
    for (int j = 0; j < 8; j++)
        s += c[j][0] + c[j][1] + c[j][2] + c[j][3];
    if (s == 0x7fffffff)
        out[0] = s;
}

/* One warp a 16 x 8 tile: A 16 x K row-major, B K x 8 stored n-major (B[n][k]),
 * K in k16 steps accumulated in one f32 accumulator, the halves [0, K/2) and
 * [K/2, K) in two (h0, h1) and their f32 sum (hs). */
__global__ void tiles(const __half *A, const __half *B, int K, float *full, float *h0, float *h1, float *hs)
{
    const int tile = blockIdx.x, lane = threadIdx.x, g = lane >> 2, t = lane & 3;
    const __half *a = A + (size_t)tile * 16 * K, *b = B + (size_t)tile * 8 * K;
    float d[4] = {0, 0, 0, 0}, e[2][4] = {{0, 0, 0, 0}, {0, 0, 0, 0}};
    for (int k = 0; k < K; k += 16) {
        uint32_t af[4], bf[2];
        __half2 v;
        v = __halves2half2(a[g * K + k + 2 * t], a[g * K + k + 2 * t + 1]);
        af[0] = *(uint32_t *)&v;
        v = __halves2half2(a[(g + 8) * K + k + 2 * t], a[(g + 8) * K + k + 2 * t + 1]);
        af[1] = *(uint32_t *)&v;
        v = __halves2half2(a[g * K + k + 2 * t + 8], a[g * K + k + 2 * t + 9]);
        af[2] = *(uint32_t *)&v;
        v = __halves2half2(a[(g + 8) * K + k + 2 * t + 8], a[(g + 8) * K + k + 2 * t + 9]);
        af[3] = *(uint32_t *)&v;
        v = __halves2half2(b[g * K + k + 2 * t], b[g * K + k + 2 * t + 1]);
        bf[0] = *(uint32_t *)&v;
        v = __halves2half2(b[g * K + k + 2 * t + 8], b[g * K + k + 2 * t + 9]);
        bf[1] = *(uint32_t *)&v;
        mma_f16(d, af, bf);
        mma_f16(e[k >= K / 2], af, bf);
    }
    const int r[4] = {g, g, g + 8, g + 8}, c[4] = {2 * t, 2 * t + 1, 2 * t, 2 * t + 1};
    for (int i = 0; i < 4; i++) {
        const size_t o = (size_t)tile * 128 + r[i] * 8 + c[i];
        full[o] = d[i];
        h0[o] = e[0][i];
        h1[o] = e[1][i];
        hs[o] = __fadd_rn(e[0][i], e[1][i]);
    }
}

static uint64_t rng = 88172645463325252ull;
static int rnd(int lo, int hi) /* inclusive */
{
    rng ^= rng << 13;
    rng ^= rng >> 7;
    rng ^= rng << 17;
    return lo + (int)(rng % (uint64_t)(hi - lo + 1));
}

/* mode: 0 random, 1 every operand at its largest, 2 large terms then small
 * ones (the first half's products at the maximum, the second half's 1 x 1),
 * 3 alternating signs that cancel to a small sum */
static void check(const char *name, int K, int amax, int mode, int n_tiles)
{
    std::vector<__half> A((size_t)n_tiles * 16 * K), B((size_t)n_tiles * 8 * K);
    std::vector<int> Ai(A.size()), Bi(B.size());
    for (size_t i = 0; i < A.size(); i++) {
        const int k = (int)(i % K);
        Ai[i] = mode == 0 ? rnd(0, amax) : mode == 2 && k >= K / 2 ? 1 : amax;
        A[i] = __int2half_rn(Ai[i]);
    }
    for (size_t i = 0; i < B.size(); i++) {
        const int k = (int)(i % K);
        Bi[i] = mode == 0 ? rnd(-127, 127) : mode == 2 && k >= K / 2 ? 1 : mode == 3 ? (k % 2 ? -127 : 127) : 127;
        if (mode == 3 && k == K - 1)
            Bi[i] = 1;
        B[i] = __int2half_rn(Bi[i]);
    }
    __half *dA, *dB;
    float *dout;
    const size_t no = (size_t)n_tiles * 128;
    CK(cudaMalloc(&dA, A.size() * 2));
    CK(cudaMalloc(&dB, B.size() * 2));
    CK(cudaMalloc(&dout, 4 * no * 4));
    CK(cudaMemcpy(dA, A.data(), A.size() * 2, cudaMemcpyHostToDevice));
    CK(cudaMemcpy(dB, B.data(), B.size() * 2, cudaMemcpyHostToDevice));
    tiles<<<n_tiles, 32>>>(dA, dB, K, dout, dout + no, dout + 2 * no, dout + 3 * no);
    CK(cudaDeviceSynchronize());
    std::vector<float> o(4 * no);
    CK(cudaMemcpy(o.data(), dout, o.size() * 4, cudaMemcpyDeviceToHost));
    long long bad_full = 0, bad_half = 0, bad_sum = 0;
    int64_t vmax = 0;
    for (int tl = 0; tl < n_tiles; tl++)
        for (int r = 0; r < 16; r++)
            for (int c = 0; c < 8; c++) {
                int64_t s = 0, s0 = 0, s1 = 0;
                for (int k = 0; k < K; k++) {
                    const int64_t p = (int64_t)Ai[((size_t)tl * 16 + r) * K + k] * Bi[((size_t)tl * 8 + c) * K + k];
                    s += p;
                    (k < K / 2 ? s0 : s1) += p;
                }
                const size_t i = (size_t)tl * 128 + r * 8 + c;
                vmax = s > vmax ? s : -s > vmax ? -s : vmax;
                bad_full += o[i] != (float)s || (double)o[i] != (double)s;
                bad_half += (double)o[no + i] != (double)s0 || (double)o[2 * no + i] != (double)s1;
                bad_sum += o[3 * no + i] != (float)s; /* (float) of the exact int: round to nearest */
            }
    printf("%-34s K=%3d |A|<=%4d: %7lld outputs, max |sum| %9lld (2^24 = 16777216): full-K f32 sum not exact %lld, "
           "halves not exact %lld, f32(half0 + half1) != (float)exact %lld\n",
           name, K, amax, (long long)no, (long long)vmax, bad_full, bad_half, bad_sum);
    CK(cudaFree(dA));
    CK(cudaFree(dB));
    CK(cudaFree(dout));
}

int main(void)
{
    cudaDeviceProp p;
    CK(cudaGetDeviceProperties(&p, 0));
    printf("device %s, %d SMs\n", p.name, p.multiProcessorCount);
    cudaEvent_t e0, e1;
    cudaEventCreate(&e0);
    cudaEventCreate(&e1);
    void *dout;
    CK(cudaMalloc(&dout, 64));
    int khz = 0; /* the SM clock's maximum, kHz */
    CK(cudaDeviceGetAttribute(&khz, cudaDevAttrClockRate, 0));
    for (int warps = 4; warps <= 16; warps *= 2) {
        const int blocks = p.multiProcessorCount * 4, iters = 4096;
        for (int f = 0; f < 2; f++) {
            for (int w = 0; w < 2; w++) {
                if (w)
                    cudaEventRecord(e0);
                if (f)
                    peak_f16<<<blocks, warps * 32>>>((float *)dout, w ? iters : 16);
                else
                    peak_s8<<<blocks, warps * 32>>>((int *)dout, w ? iters : 16);
                if (w)
                    cudaEventRecord(e1);
                CK(cudaDeviceSynchronize());
            }
            float ms;
            cudaEventElapsedTime(&ms, e0, e1);
            const double macs = f ? 16.0 * 8 * 16 : 16.0 * 8 * 32;
            const double ops = (double)blocks * warps * iters * 8 * 2 * macs;
            printf("mma.sync %s, %2d warps x %d blocks: %6.0f T%s/s, %.2f SMSP cycles an instruction at %d MHz\n",
                   f ? "m16n8k16 f16->f32" : "m16n8k32 s8->s32 ", warps, blocks, ops / (ms * 1e-3) / 1e12,
                   f ? "FLOP" : "OP", ms * 1e-3 * khz * 1e3 / ((double)blocks * warps * iters * 8 / (4.0 * p.multiProcessorCount)),
                   khz / 1000);
        }
    }
    /* Q4_K: q x sc <= 15 x 63 = 945; Q5_K: 31 x 63 = 1953; activations q8 */
    check("random, half a super-block", 128, 945, 0, 2048);
    check("largest, half a super-block", 128, 945, 1, 64);
    check("large then small", 128, 945, 2, 64);
    check("cancelling signs", 128, 945, 3, 64);
    check("random, a super-block", 256, 945, 0, 2048);
    check("largest, a super-block (past 2^24)", 256, 945, 1, 64);
    check("large then small, a super-block", 256, 945, 2, 64);
    check("Q5_K random, quarter", 64, 1953, 0, 2048);
    check("Q5_K largest, quarter", 64, 1953, 1, 64);
    check("Q5_K largest, half (past 2^24)", 128, 1953, 1, 64);
    return 0;
}
