/* cuda/mmq0_impl — the products of Q4_0 and Q8_0 weights in the packed
 * layout (cuda/qtypes.cuh: cuda_q0_packed): the load-time repack, the
 * decode kernel mmvq0_kernel<T, NC> (n <= 8 activation rows) and the
 * tensor-core kernel mmq0_kernel<T, KDR> (included by mmq_q4_0.cu and
 * mmq_q8_0.cu only).
 *
 * Numerics (cuda/qtypes.cuh): per 32-element block an exact int32 sum v1
 * and p1 = d_w * d_x rounded, acc = fmaf(p1, (float)v1, acc) block after
 * block in k order: the chain the warp-per-row kernel of cuda/mul_mat.cu
 * runs on ggml's layout, so the three kernels give a row the same bits.
 *
 * Why the packed layout: ggml's 18- and 34-byte blocks are 2-byte aligned,
 * so the first kernels read them two bytes at a time (q8_0 at n = 1: 53 us
 * for 4096 x 14336 on the H200, against llama.cpp's 23.1). Repacked at load
 * into a value plane and a scale plane per row (same row bytes), the
 * values are 16-byte aligned: one 128-bit load per Q4_0 block, cp.async
 * straight into the MMQ tile.
 *
 * Two exact shortcuts, both proven in the comments where they are used:
 *  - Q4_0's nibbles are stored XOR 8 (the 4-bit two's complement of
 *    q - 8), so a nibble placed in a byte's high half is the int8 16(q - 8):
 *    two logic ops per word build an mma operand, no per-byte subtract;
 *    the integer sum comes out times 16;
 *  - the int32 -> float conversion of a block sum (a quarter-rate I2F on
 *    sm_90, and one per output per 32 elements here) is an integer add on
 *    the bits of a magic float and a float subtract, exact for the sums
 *    these blocks give (cuda_q0_i2f), and a magic with a 16 times smaller
 *    ulp divides Q4_0's sum by 16 for free.
 */
#include "engine/cuda/mma.cuh"
#include "engine/cuda/mmq.cuh"
#include "engine/cuda/qtypes.cuh"
#include "engine/cuda/tiles.cuh"

#include <cuda_pipeline.h>

#include <stdio.h>

extern "C" {
#include "engine/quant.h"
}

template <int T> struct mmq0_t;
template <> struct mmq0_t<QT_Q4_0> {
    enum { QB = 16, RB = 18 }; /* value bytes, ggml bytes per block */
};
template <> struct mmq0_t<QT_Q8_0> {
    enum { QB = 32, RB = 34 };
};

/* (float)(v / S) for S = 16 (Q4_0: the integer sum of 16(q - 8) * x) or 1
 * (Q8_0), exactly, without I2F: adding v to the bits of the float
 * M = 1.5 * 2^k (k = 23 - log2 S, whose ulp is 1/S) gives M + v/S exactly
 * while M + v/S stays in [2^k, 2^(k+1)), i.e. |v| < 2^22; the subtract is
 * exact (both operands in one binade). Q4_0: |v| <= 16 * 32 * 8 * 128 =
 * 2^19; Q8_0: |v| <= 32 * 128 * 128 = 2^19. */
template <int T> static __device__ __forceinline__ float cuda_q0_i2f(int v)
{
    if (T == QT_Q4_0)
        return __fsub_rn(__int_as_float(v + 0x49400000), 786432.0f); /* 1.5 * 2^19 */
    return __fsub_rn(__int_as_float(v + 0x4B400000), 12582912.0f);   /* 1.5 * 2^23 */
}

/* ---- load-time repack ----------------------------------------------------
 * One thread block per row, in place: the row is staged in shared memory
 * (at most CUDA_Q0_MAX_ROW bytes), then written back as the two planes. */
template <int T>
static __global__ void q0_repack_kernel(uint8_t *__restrict__ w, size_t row_bytes, int64_t nb)
{
    typedef mmq0_t<T> Q;
    extern __shared__ __align__(16) uint8_t q0_row[];
    uint8_t *row = w + (size_t)blockIdx.x * row_bytes;
    for (size_t i = 2 * threadIdx.x; i < row_bytes; i += 2 * blockDim.x) /* 2-byte aligned */
        *(uint16_t *)(q0_row + i) = *(const uint16_t *)(row + i);
    __syncthreads();
    quant_f16 *dp = (quant_f16 *)(row + (size_t)nb * Q::QB);
    for (int64_t k = threadIdx.x; k < nb * Q::QB; k += blockDim.x) {
        const int64_t ib = k / Q::QB;
        const uint8_t b = q0_row[ib * Q::RB + 2 + k % Q::QB];
        row[k] = T == QT_Q4_0 ? (uint8_t)(b ^ 0x88) : b;
    }
    for (int64_t ib = threadIdx.x; ib < nb; ib += blockDim.x)
        dp[ib] = *(const quant_f16 *)(q0_row + ib * Q::RB);
}

template <int T> static int q0_repack(struct cuda_ctx *c, struct backend_weight *w)
{
    const int64_t nb = w->ne0 / 32;
    if (!cuda_q0_packed(T, w->ne0))
        return 0;
    if (CUDA_CHECK_CTX(c, cudaFuncSetAttribute(q0_repack_kernel<T>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                               (int)w->row_bytes)))
        return c->err;
    q0_repack_kernel<T><<<(unsigned)w->ne1, 256, w->row_bytes, c->stream>>>((uint8_t *)w->data, w->row_bytes, nb);
    if (CUDA_CHECK_LAUNCH(c, "q0_repack_kernel") || CUDA_CHECK_CTX(c, cudaStreamSynchronize(c->stream)))
        return c->err;
    return 0;
}

/* ---- decode: mmvq0_kernel<T, NC> ------------------------------------------
 * One warp per weight row, lane l takes blocks l, l + 32, ... (a warp's
 * value loads are 512 or 1024 consecutive bytes), MMVQ0_U passes of 32
 * blocks in flight; the warp parks (p1, v1) per block and activation row
 * in shared memory and lane r runs activation row r's chain over them in
 * k order. */
#define MMVQ0_WARPS 4
/* passes of 32 blocks per lane in flight: Q4_0 at nc <= 2 four (a
 * 4096-element row in one pass: 64 bytes per lane, as Q8_0's two); the
 * H200 measured (bench/RESULTS.md, call 2): Q8_0 at four passes and two
 * rows per warp 25.0 -> 30.6 us at n = 1, Q4_0 unchanged */
#define MMVQ0_UN(t, nc) ((t) == QT_Q4_0 && (nc) <= 2 ? 4 : 2)
/* park row stride in float2: odd for NC > 1, so 32 lanes' writes of one
 * activation row spread over the banks instead of 16-way conflicts */
#define MMVQ0_PS(nc) ((nc) == 1 ? 1 : (nc) + 1)

template <int T>
static __device__ __forceinline__ int mmvq0_dot(const uint8_t *rowq, int64_t ib, const int8_t *xq)
{
    const uint4 xa = *(const uint4 *)xq, xb = *(const uint4 *)(xq + 16);
    if (T == QT_Q8_0) {
        const uint4 qa = *(const uint4 *)(rowq + ib * 32), qb = *(const uint4 *)(rowq + ib * 32 + 16);
        int s = __dp4a((int)qa.x, (int)xa.x, 0);
        s = __dp4a((int)qa.y, (int)xa.y, s);
        s = __dp4a((int)qa.z, (int)xa.z, s);
        s = __dp4a((int)qa.w, (int)xa.w, s);
        s = __dp4a((int)qb.x, (int)xb.x, s);
        s = __dp4a((int)qb.y, (int)xb.y, s);
        s = __dp4a((int)qb.z, (int)xb.z, s);
        return __dp4a((int)qb.w, (int)xb.w, s);
    }
    /* byte k of the block: element k in the low nibble, 16 + k in the high */
    const uint4 q = *(const uint4 *)(rowq + ib * 16);
    int s = __dp4a((int)((q.x << 4) & 0xf0f0f0f0u), (int)xa.x, 0);
    s = __dp4a((int)((q.y << 4) & 0xf0f0f0f0u), (int)xa.y, s);
    s = __dp4a((int)((q.z << 4) & 0xf0f0f0f0u), (int)xa.z, s);
    s = __dp4a((int)((q.w << 4) & 0xf0f0f0f0u), (int)xa.w, s);
    s = __dp4a((int)(q.x & 0xf0f0f0f0u), (int)xb.x, s);
    s = __dp4a((int)(q.y & 0xf0f0f0f0u), (int)xb.y, s);
    s = __dp4a((int)(q.z & 0xf0f0f0f0u), (int)xb.z, s);
    return __dp4a((int)(q.w & 0xf0f0f0f0u), (int)xb.w, s);
}

template <int T, int NC>
static __global__ void __launch_bounds__(MMVQ0_WARPS *CUDA_WARP)
mmvq0_kernel(const uint8_t *__restrict__ w, size_t row_bytes, int32_t n_w, cuda_q80 X, int64_t nbr,
             float *__restrict__ y, int32_t n_rows, struct cuda_epi E)
{
    typedef mmq0_t<T> Q;
    enum { U = MMVQ0_UN(T, NC), PB = U * CUDA_WARP };
    __shared__ float2 park[MMVQ0_WARPS][PB][MMVQ0_PS(NC)];
    const int warp = threadIdx.x / CUDA_WARP, lane = threadIdx.x % CUDA_WARP;
    const int32_t jr = blockIdx.x * MMVQ0_WARPS + warp;
    cuda_pdl_enter();
    if (jr >= n_w)
        return; /* whole warps: the __syncwarp below stays full */
    const int32_t r0 = blockIdx.y * NC;
    const int nr = n_rows - r0 < NC ? n_rows - r0 : NC;
    const uint8_t *rowq = w + (size_t)jr * row_bytes;
    const quant_f16 *rowd = (const quant_f16 *)(rowq + (size_t)nbr * Q::QB);
    const int64_t xb0 = (int64_t)r0 * nbr;
    float acc = 0.0f; /* lane r < nr: activation row r0 + r */
    for (int64_t base = 0; base < nbr; base += PB) {
#pragma unroll
        for (int u = 0; u < U; u++) {
            const int64_t ib = base + u * CUDA_WARP + lane;
            if (ib < nbr) {
                const float dw = cuda_h2f(rowd[ib]);
#pragma unroll
                for (int r = 0; r < NC; r++)
                    if (r < nr) {
                        const int64_t xb = xb0 + r * nbr + ib;
                        const int v = mmvq0_dot<T>(rowq, ib, X.qs + xb * 32);
                        park[warp][u * CUDA_WARP + lane][r] =
                            make_float2(__fmul_rn(dw, X.d[xb]), cuda_q0_i2f<T>(v));
                    }
            }
        }
        __syncwarp();
        if (lane < nr) {
            const int cnt = nbr - base < PB ? (int)(nbr - base) : PB;
            for (int k = 0; k < cnt; k++) {
                const float2 t = park[warp][k][lane];
                acc = __fmaf_rn(t.x, t.y, acc);
            }
        }
        __syncwarp();
    }
    if (lane < nr)
        cuda_epi_store(y, r0 + lane, jr, n_w, acc, E);
}

template <int T, int NC>
static void mmvq0_launch(struct cuda_ctx *c, const struct backend_weight *w, const void *xq, float *y,
                         int32_t n_rows)
{
    const int64_t nbr = w->ne0 / 32;
    const dim3 grid(cuda_blocks(w->ne1, MMVQ0_WARPS), cuda_blocks(n_rows, NC));
    cuda_launch(c, mmvq0_kernel<T, NC>, grid, MMVQ0_WARPS * CUDA_WARP, 0,
        (const uint8_t *)w->data, w->row_bytes, (int32_t)w->ne1, cuda_q80_planes(xq, (int64_t)n_rows * nbr), nbr,
        y, n_rows, c->epi);
}

/* ---- MMQ: mmq0_kernel<T, KDR> ----------------------------------------------
 * The K-quant kernel's frame (cuda/mmqk_impl.cuh): 64 x 64 tile, 256
 * threads as 2 x 4 warps of 32 x 16, stages of KDR * 256 elements
 * double-buffered by cp.async, one barrier per stage, row strides odd
 * multiples of 16 bytes so fragment loads are conflict-free. One mma per
 * 32-element block and warp tile; its int32 results enter the float chain
 * at once (a scale per 32: no integer scaling step). */
template <int T, int KDR> struct mmq0_smem {
    enum { QW = mmq0_t<T>::QB * 8 * KDR / 4 + 4 }; /* value words per row, odd multiple of 4 */
    uint32_t wq[2][MMQ_BM][QW];
    quant_f16 wd[2][MMQ_BM][8 * KDR];
    int8_t xq[2][MMQ_BN][256 * KDR + 16];
    float xd[2][8 * KDR][MMQ_BN]; /* transposed: a thread's two columns are adjacent */
};

/* Blocks per SM the register cap is set for: KDR = 1's shared memory
 * (58 / 74 KB) leaves room for three on sm_90, which the registers then
 * decide (65,536 / 768 = 85 per thread: 80, no spills). Measured on the
 * H200 (bench/RESULTS.md, call 2, n = 512): q8_0 414 -> 402 us at three,
 * q4_0 376 -> 380, so Q8_0 only; sm_121 keeps one. */
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 1200
#define MMQ0_MIN_BLOCKS(t, kdr) 1
#else
#define MMQ0_MIN_BLOCKS(t, kdr) ((kdr) == 1 && (t) == QT_Q8_0 ? 3 : 2)
#endif

template <int T, int KDR>
static __global__ void __launch_bounds__(MMQ_THREADS, MMQ0_MIN_BLOCKS(T, KDR))
mmq0_kernel(const uint8_t *__restrict__ w, size_t row_bytes, int32_t n_w, cuda_q80 X, int64_t nbr,
            float *__restrict__ y, int32_t n_rows, struct cuda_epi E)
{
    cuda_pdl_enter();
    typedef mmq0_t<T> Q;
    typedef mmq0_smem<T, KDR> SM;
    extern __shared__ __align__(16) uint8_t mmq0_smem_raw[];
    SM &S = *(SM *)mmq0_smem_raw;
    const int tid = threadIdx.x, lane = tid % CUDA_WARP, warp = tid / CUDA_WARP;
    const int wm = warp / 4, wn = warp % 4;
    const int g = lane >> 2, t4 = lane & 3;
    const int32_t m0 = blockIdx.x * MMQ_BM, n0 = blockIdx.y * MMQ_BN;
    const int64_t n_stages = nbr / (8 * KDR);

    const int lr = tid / 4, lp = tid % 4;
    const int32_t wrl = mmq_wrow(m0, lr, n_w, E.glu);        /* -1: past the weight */
    const int32_t wrow = wrl >= 0 ? wrl : n_w - 1;             /* clamped: never loaded */
    const int32_t xrow = n0 + lr < n_rows ? n0 + lr : n_rows - 1;
    const uint8_t *wq = w + (size_t)wrow * row_bytes;
    const uint8_t *wdp = wq + (size_t)nbr * Q::QB;
    const int64_t xb0 = (int64_t)xrow * nbr;

    /* the A fragments' ldmatrix row addresses in buffer 0 (cuda_ldsm_x4;
     * the lanes as in cuda/mmqk_impl.cuh): row (l & 7) + 8 ((l >> 3) & 1)
     * of the warp's 16-row tile mt, words 4 (l >> 4).. of a fragment chunk
     * (Q8_0: a block's words t, t + 4; Q4_0: blocks jj, jj + 1 as a pair).
     * The activations' B fragments stay 32-bit loads (cuda/mmqk_impl.cuh
     * says why). Measured (H200, 2026-12-02, n = 512): q8_0 -5.9%, q4_0
     * -5.1% with the unrolled staging of cuda_copy16. */
    uint32_t sa[2];
#pragma unroll
    for (int mt = 0; mt < 2; mt++)
        sa[mt] = cuda_saddr(&S.wq[0][32 * wm + 16 * mt + (lane & 7) + 8 * ((lane >> 3) & 1)][4 * (lane >> 4)]);
    const uint32_t wbuf = (uint32_t)sizeof(S.wq[0]);

    float acc[2][2][4];
#pragma unroll
    for (int a = 0; a < 2; a++)
#pragma unroll
        for (int b = 0; b < 2; b++)
#pragma unroll
            for (int i = 0; i < 4; i++)
                acc[a][b][i] = 0.0f;

    /* rows past the weight's or the batch's end are not loaded (their
     * products are never stored; cuda/mmqk_impl.cuh says why) */
    const bool wload = wrl >= 0, xload = n0 + lr < n_rows;
#define MMQ0_ISSUE(s)                                                                              \
    do {                                                                                           \
        const int bf = (int)((s) & 1);                                                             \
        const int64_t blk = (s) * 8 * KDR; /* first block of the stage */                          \
        if (wload) {                                                                               \
            cuda_copy16<Q::QB * KDR / 2, 4>(S.wq[bf][lr], wq + blk * Q::QB, lp);                   \
            if (lp < KDR)                                                                          \
                __pipeline_memcpy_async(&S.wd[bf][lr][8 * lp], wdp + (blk + 8 * lp) * 2, 16);      \
        }                                                                                          \
        if (xload) {                                                                               \
            cuda_copy16<16 * KDR, 4>(S.xq[bf][lr], X.qs + (xb0 + blk) * 32, lp);                  \
            _Pragma("unroll") for (int k = 0; k < 2 * KDR; k++)                                    \
                __pipeline_memcpy_async(&S.xd[bf][lp + 4 * k][lr], X.d + xb0 + blk + lp + 4 * k, 4); \
        }                                                                                          \
        __pipeline_commit();                                                                       \
    } while (0)

    MMQ0_ISSUE((int64_t)0);
    for (int64_t s = 0; s < n_stages; s++) {
        __pipeline_wait_prior(0);
        __syncthreads(); /* stage s has landed everywhere; stage s-1's readers are done */
        if (s + 1 < n_stages)
            MMQ0_ISSUE(s + 1);
        const int bf = (int)(s & 1);
        uint32_t q4[2][4]; /* Q4_0: the words of blocks jj, jj + 1 (rows g, g + 8) */
#pragma unroll
        for (int jj = 0; jj < 8 * KDR; jj++) {
            int a[2][4];
#pragma unroll
            for (int mt = 0; mt < 2; mt++) {
                if (T == QT_Q8_0) {
                    cuda_ldsm_x4((uint32_t *)a[mt], sa[mt] + bf * wbuf + 32 * jj);
                } else {
                    /* bytes 4t.. of the block: elements 4t.. low, 16+4t.. high */
                    if (jj % 2 == 0)
                        cuda_ldsm_x4(q4[mt], sa[mt] + bf * wbuf + 16 * jj);
                    const uint32_t u0 = q4[mt][2 * (jj % 2)], u1 = q4[mt][2 * (jj % 2) + 1];
                    a[mt][0] = (int)((u0 << 4) & 0xf0f0f0f0u);
                    a[mt][1] = (int)((u1 << 4) & 0xf0f0f0f0u);
                    a[mt][2] = (int)(u0 & 0xf0f0f0f0u);
                    a[mt][3] = (int)(u1 & 0xf0f0f0f0u);
                }
            }
            int b[2][2];
            float2 dx[2];
#pragma unroll
            for (int nt = 0; nt < 2; nt++) {
                const int rb = 16 * wn + 8 * nt + g;
                b[nt][0] = *(const int *)&S.xq[bf][rb][32 * jj + 4 * t4];
                b[nt][1] = *(const int *)&S.xq[bf][rb][32 * jj + 16 + 4 * t4];
                dx[nt] = *(const float2 *)&S.xd[bf][jj][16 * wn + 8 * nt + 2 * t4];
            }
            float dw[2][2];
#pragma unroll
            for (int mt = 0; mt < 2; mt++)
#pragma unroll
                for (int h = 0; h < 2; h++)
                    dw[mt][h] = cuda_h2f(S.wd[bf][32 * wm + 16 * mt + g + 8 * h][jj]);
#pragma unroll
            for (int mt = 0; mt < 2; mt++)
#pragma unroll
                for (int nt = 0; nt < 2; nt++) {
                    int cc[4];
                    cuda_mma_k32(cc, a[mt], b[nt]);
#pragma unroll
                    for (int i = 0; i < 4; i++) {
                        const float p1 = __fmul_rn(dw[mt][i >> 1], (i & 1) ? dx[nt].y : dx[nt].x);
                        acc[mt][nt][i] = __fmaf_rn(p1, cuda_q0_i2f<T>(cc[i]), acc[mt][nt][i]);
                    }
                }
        }
    }
#undef MMQ0_ISSUE
    mmq_tile_store(acc, m0, n0, wm, wn, g, t4, n_w, n_rows, y, E);
}

template <int T, int KDR> static int mmq0_occupancy(void)
{
    static int occ = -1;
    if (occ < 0)
        occ = mmq_occupancy((const void *)mmq0_kernel<T, KDR>, sizeof(mmq0_smem<T, KDR>));
    return occ;
}

/* 0, -1 when this device cannot hold KDR's shared memory, INF_EUNSUPPORTED
 * for a shape it does not serve */
template <int T, int KDR>
static int mmq0_launch(struct cuda_ctx *c, const struct backend_weight *w, const void *xq, float *y, int32_t n_rows)
{
    typedef mmq0_smem<T, KDR> SM;
    if (!cuda_q0_packed(T, w->ne0) || w->ne0 % (256 * KDR))
        return INF_EUNSUPPORTED;
    if (mmq0_occupancy<T, KDR>() == 0)
        return -1;
    const int64_t nbr = w->ne0 / 32;
    const dim3 grid(cuda_blocks(w->ne1, MMQ_BM), cuda_blocks(n_rows, MMQ_BN));
    cuda_launch(c, mmq0_kernel<T, KDR>, grid, MMQ_THREADS, sizeof(SM),
        (const uint8_t *)w->data, w->row_bytes, (int32_t)w->ne1, cuda_q80_planes(xq, (int64_t)n_rows * nbr), nbr,
        y, n_rows, c->epi);
    return 0;
}

template <int T>
static int mmq0_variant(struct cuda_ctx *c, const struct backend_weight *w, const void *xq, float *y, int32_t n_rows,
                        int kdr)
{
    if (kdr == 2)
        return mmq0_launch<T, 2>(c, w, xq, y, n_rows);
    if (kdr == 1)
        return mmq0_launch<T, 1>(c, w, xq, y, n_rows);
    return INF_EUNSUPPORTED;
}

template <int T>
static void mmq0_dispatch(struct cuda_ctx *c, const struct backend_weight *w, const void *xq, float *y,
                          int32_t n_rows)
{
    const int kdr =
        mmq_pick_kdr(c->n_sm, mmq0_occupancy<T, 1>(), mmq0_occupancy<T, 2>(), w->ne0, w->ne1, n_rows, MMQ_BN);
    const int rc = mmq_launch_picked(kdr, [&](int k) { return mmq0_variant<T>(c, w, xq, y, n_rows, k); });
    if (rc) {
        c->err = rc == -1 ? INF_EDEVICE : rc;
        snprintf(c->err_msg, sizeof(c->err_msg), "mmq: no kernel for %s %lld x %lld (kdr %d)",
                 quant_type_name(T), (long long)w->ne0, (long long)w->ne1, kdr);
    }
}

template <int T>
static void mmvq0_dispatch(struct cuda_ctx *c, const struct backend_weight *w, const void *xq, float *y,
                           int32_t n_rows, int nc)
{
    if (nc <= 0)
        nc = cuda_mmvq_nc(n_rows);
    switch (nc) {
    case 1: mmvq0_launch<T, 1>(c, w, xq, y, n_rows); break;
    case 2: mmvq0_launch<T, 2>(c, w, xq, y, n_rows); break;
    case 4: mmvq0_launch<T, 4>(c, w, xq, y, n_rows); break;
    default: mmvq0_launch<T, 8>(c, w, xq, y, n_rows); break;
    }
}

#define MMQ0_DEFINE(T)                                                                            \
    template <>                                                                                   \
    void cuda_mmq<T>(struct cuda_ctx * c, const struct backend_weight *w, const void *xq, float *y, \
                     int32_t n_rows)                                                              \
    {                                                                                             \
        mmq0_dispatch<T>(c, w, xq, y, n_rows);                                                    \
    }                                                                                             \
    template <>                                                                                   \
    int cuda_mmqk_variant<T>(struct cuda_ctx * c, const struct backend_weight *w, const void *xq, \
                             float *y, int32_t n_rows, int kdr, int exp, int bn)                  \
    {                                                                                             \
        return exp || (bn && bn != 64) ? INF_EUNSUPPORTED : mmq0_variant<T>(c, w, xq, y, n_rows, kdr); \
    }                                                                                             \
    template <>                                                                                   \
    void cuda_mmvq<T>(struct cuda_ctx * c, const struct backend_weight *w, const void *xq, float *y, \
                      int32_t n_rows, int nc, int wpr)                                            \
    {                                                                                             \
        if (wpr > 1) { /* one warp per row only */                                                \
            c->err = INF_EUNSUPPORTED;                                                            \
            return;                                                                               \
        }                                                                                         \
        mmvq0_dispatch<T>(c, w, xq, y, n_rows, nc);                                               \
    }                                                                                             \
    template <> int cuda_q0_repack<T>(struct cuda_ctx * c, struct backend_weight * w)             \
    {                                                                                             \
        return q0_repack<T>(c, w);                                                                \
    }
