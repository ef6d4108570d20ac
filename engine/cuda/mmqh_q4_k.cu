/* cuda/mmqh_q4_k — Q4_K products past the decode batch on F16 tensor cores,
 * with the integer kernels' bits: mmqh_kernel and the load-time expansion
 * it reads (w->aux).
 *
 * Why (bench/RESULTS.md, 2026-12-01): the int8 kernel (cuda/mmqk_impl.cuh)
 * spends ~23 instructions per mma, and four of every output's are the
 * integer scaling of each 32-element sub-block's sum (sum += sc * dot), an
 * issue-slot cost no tile shape removes. Folding the 6-bit scale into the
 * weight makes the values q * sc <= 15 * 63 = 945: not int8 any more, but
 * exact in F16 (integers up to 2048 are), as the activations' Q8_K values
 * are (|x| <= 128). An F16 mma with F32 accumulation then forms the same
 * integer sum the int8 path forms, in the tensor core, and the issue slots
 * go to the mma.
 *
 * Exactness (DESIGN gate 4: this kernel must give a row the bits the
 * decode kernel, cuda/mmvq.cu, gives it):
 *  - every product (q * sc) * x is an integer below 2^17, exact in F32;
 *  - a half super-block (128 elements) sums to at most 128 * 945 * 128 <
 *    2^24, so every partial sum the tensor core forms while accumulating
 *    it (one m16n8k16 after another into the same C) is an integer below
 *    2^24: representable, nothing below the units place to lose;
 *  - the two halves meet in one F32 add, which rounds their exact sum to
 *    nearest even: what (float) of the int32 super-block sum does in the
 *    integer kernels (whose sum is exact: |sum| <= 256 * 945 * 128 < 2^31);
 *  - then the same float chain (p1 = d * xd, the min term through the
 *    activation sums) in the same order.
 * tests/cuda/test_cuda_ops.c's mm-variant and mm-invar lines check it bit
 * for bit against the dispatcher's decode kernel.
 *
 * Layout of the expansion (w->aux, MMQH_BYTES per super-block, 16-byte
 * aligned): 256 F16 values q * sc in k order, then d and dmin as float and
 * the 8 six-bit mins as bytes. 3.7x the Q4_K bytes: device memory for
 * speed, like Q6_K's expanded copy; without the memory the int8 kernel
 * serves with the same results.
 *
 * Tile: 64 weight rows x 64 activation rows, 256 threads as 2 x 4 warps of
 * 32 x 16 (2 x 2 m16n8k16 tiles); a stage is half a super-block, double
 * buffered by cp.async; fragments by ldmatrix from rows of 272 bytes (17
 * 16-byte units: the 8 rows of an 8x8 matrix fall in 8 distinct bank
 * groups, no conflicts without a swizzle).
 */
#include "engine/cuda/mma.cuh"
#include "engine/cuda/mmq.cuh"
#include "engine/cuda/qtypes.cuh"
#include "engine/cuda/tiles.cuh"

#include <cuda_pipeline.h>
#include <stdio.h>

#define MMQH_BYTES 528 /* 512 bytes of F16 values + d, dmin, 8 mins */
#define MMQH_AS 136    /* halves per tile row: 128 + 8 of pad */

struct mmqh_smem {
    __half a[2][MMQ_BM][MMQH_AS];
    __half b[2][MMQ_BN][MMQH_AS];
    uint4 hd[2][MMQ_BM];    /* d, dmin (float bits), mins 0-3, mins 4-7 */
    int16_t bs[2][MMQ_BN][8]; /* activation sums per 32 */
    float xd[2][MMQ_BN];
};

/* one warp per super-block, 8 values per lane */
static __global__ void mmqh_expand_kernel(const struct block_q4_K *__restrict__ src, uint8_t *__restrict__ dst,
                                          int64_t n_blocks)
{
    const int64_t ib = (int64_t)blockIdx.x * (blockDim.x / CUDA_WARP) + threadIdx.x / CUDA_WARP;
    const int lane = threadIdx.x % CUDA_WARP;
    if (ib >= n_blocks)
        return;
    const struct block_q4_K *b = src + ib;
    uint8_t *o = dst + ib * MMQH_BYTES;
    const int j = lane / 4; /* sub-block of elements 8 lane .. 8 lane + 7 */
    int sc, m;
    cuda_k4_scale_min(b->scales, j, &sc, &m);
    uint32_t h[4];
#pragma unroll
    for (int k = 0; k < 8; k++) {
        const int l = (8 * lane + k) % 32;
        const int q = (b->qs[32 * (j / 2) + l] >> (4 * (j & 1))) & 0x0f;
        const uint32_t v = __half_as_ushort(__int2half_rn(q * sc)); /* <= 945: exact */
        h[k / 2] = k % 2 ? h[k / 2] | (v << 16) : v;
    }
    *(uint4 *)(o + 16 * lane) = make_uint4(h[0], h[1], h[2], h[3]);
    if (lane == 0) {
        uint32_t mins[2] = {0, 0};
        for (int jj = 0; jj < 8; jj++) {
            int s2, m2;
            cuda_k4_scale_min(b->scales, jj, &s2, &m2);
            mins[jj / 4] |= (uint32_t)m2 << (8 * (jj % 4));
        }
        *(uint4 *)(o + 512) = make_uint4(__float_as_uint(cuda_h2f(b->d)), __float_as_uint(cuda_h2f(b->dmin)),
                                         mins[0], mins[1]);
    }
}

size_t cuda_mmqh_expand_bytes(const struct backend_weight *w)
{
    return (size_t)(w->ne0 / QK_K) * MMQH_BYTES * (size_t)w->ne1;
}

int cuda_mmqh_expand(struct cuda_ctx *c, struct backend_weight *w)
{
    if (w->type != QT_Q4_K || w->ne0 % QK_K || !w->data)
        return INF_EUNSUPPORTED;
    void *p = NULL;
    if (cuda_malloc(c, &p, cuda_mmqh_expand_bytes(w)) != cudaSuccess) {
        cudaGetLastError();
        return INF_ENOMEM;
    }
    const int64_t nb = (w->ne0 / QK_K) * w->ne1;
    const int per = 8;
    mmqh_expand_kernel<<<cuda_blocks(nb, per), per * CUDA_WARP, 0, c->stream>>>(
        (const struct block_q4_K *)w->data, (uint8_t *)p, nb);
    if (CUDA_CHECK_LAUNCH(c, "mmqh_expand kernel") || CUDA_CHECK_CTX(c, cudaStreamSynchronize(c->stream))) {
        cudaFree(p);
        return c->err;
    }
    w->aux = p;
    return 0;
}

static __global__ void __launch_bounds__(MMQ_THREADS, MMQ_MIN_BLOCKS)
mmqh_kernel(const uint8_t *__restrict__ w, size_t row_bytes, int32_t n_w, cuda_q8k X, int64_t nbr,
            float *__restrict__ y, int32_t n_rows, struct cuda_epi E)
{
    extern __shared__ __align__(16) uint8_t mmqh_smem_raw[];
    mmqh_smem &S = *(mmqh_smem *)mmqh_smem_raw;
    const int tid = threadIdx.x, lane = tid % CUDA_WARP, warp = tid / CUDA_WARP;
    const int wm = warp / 4, wn = warp % 4;
    const int g = lane >> 2, t4 = lane & 3;
    const int32_t m0 = blockIdx.x * MMQ_BM, n0 = blockIdx.y * MMQ_BN;
    const int64_t n_stages = 2 * nbr;

    const int lr = tid / 4, lp = tid % 4;
    const int32_t wrow = m0 + lr < n_w ? m0 + lr : n_w - 1; /* clamped: read, never stored */
    const int32_t xrow = n0 + lr < n_rows ? n0 + lr : n_rows - 1;
    const uint8_t *wp = w + (size_t)wrow * row_bytes;
    const int64_t xb0 = (int64_t)xrow * nbr;

    float acc[2][2][4], c0[2][2][4], c1[2][2][4];
#pragma unroll
    for (int a = 0; a < 2; a++)
#pragma unroll
        for (int b = 0; b < 2; b++)
#pragma unroll
            for (int i = 0; i < 4; i++)
                acc[a][b][i] = c0[a][b][i] = c1[a][b][i] = 0.0f;

    /* stage s: half (s & 1) of super-block s / 2 into buffer s & 1 */
#define MMQH_ISSUE(s)                                                                             \
    do {                                                                                          \
        const int bf = (int)((s) & 1);                                                            \
        const int64_t sb = (s) / 2;                                                               \
        const uint8_t *src = wp + (size_t)sb * MMQH_BYTES + 256 * bf;                             \
        const uint8_t *xs = (const uint8_t *)(X.xh + (xb0 + sb) * QK_K) + 256 * bf;               \
        for (int i = lp; i < 16; i += 4) {                                                        \
            __pipeline_memcpy_async(&S.a[bf][lr][8 * i], src + 16 * i, 16);                       \
            __pipeline_memcpy_async(&S.b[bf][lr][8 * i], xs + 16 * i, 16);                        \
        }                                                                                         \
        if (lp == 0)                                                                              \
            __pipeline_memcpy_async(&S.hd[bf][lr], wp + (size_t)sb * MMQH_BYTES + 512, 16);       \
        else if (lp == 1)                                                                         \
            __pipeline_memcpy_async(&S.bs[bf][lr][0], X.bs + (xb0 + sb) * 8, 16);                 \
        else if (lp == 2)                                                                         \
            __pipeline_memcpy_async(&S.xd[bf][lr], X.d + xb0 + sb, 4);                            \
        __pipeline_commit();                                                                      \
    } while (0)

    /* the ldmatrix row each lane addresses (cuda_ldmatrix_x4): A rows
     * 16 mt + lane % 16 at k + 8 (lane / 16); B rows 8 (lane / 16) + lane % 8
     * at k + 8 ((lane / 8) % 2), so r[] = b0, b1 of n-tile 0, then n-tile 1 */
    const int ar = 32 * wm + (lane % 16), ak = 8 * (lane / 16);
    const int br = 16 * wn + 8 * (lane / 16) + (lane % 8), bk = 8 * ((lane / 8) % 2);

    MMQH_ISSUE((int64_t)0);
    for (int64_t s = 0; s < n_stages; s++) {
        __pipeline_wait_prior(0);
        __syncthreads(); /* stage s has landed everywhere; stage s-1's readers are done */
        if (s + 1 < n_stages)
            MMQH_ISSUE(s + 1);
        const int bf = (int)(s & 1);
#pragma unroll
        for (int kk = 0; kk < 128; kk += 16) {
            uint32_t a0[4], a1[4], b[4];
            cuda_ldmatrix_x4(a0, &S.a[bf][ar][kk + ak]);
            cuda_ldmatrix_x4(a1, &S.a[bf][ar + 16][kk + ak]);
            cuda_ldmatrix_x4(b, &S.b[bf][br][kk + bk]);
            if (bf == 0) {
                cuda_mma_f16_k16(c0[0][0], a0, b[0], b[1]);
                cuda_mma_f16_k16(c0[0][1], a0, b[2], b[3]);
                cuda_mma_f16_k16(c0[1][0], a1, b[0], b[1]);
                cuda_mma_f16_k16(c0[1][1], a1, b[2], b[3]);
            } else {
                cuda_mma_f16_k16(c1[0][0], a0, b[0], b[1]);
                cuda_mma_f16_k16(c1[0][1], a0, b[2], b[3]);
                cuda_mma_f16_k16(c1[1][0], a1, b[0], b[1]);
                cuda_mma_f16_k16(c1[1][1], a1, b[2], b[3]);
            }
        }
        if (bf == 0)
            continue;
        /* the super-block ends: its terms enter each element's chain
         * (cuda/mmqk_impl.cuh's, in the same order) */
#pragma unroll
        for (int nt = 0; nt < 2; nt++)
#pragma unroll
            for (int e = 0; e < 2; e++) {
                const int rb = 16 * wn + 8 * nt + 2 * t4 + e;
                const float xd = S.xd[1][rb];
                const uint4 xbw = *(const uint4 *)&S.bs[1][rb][0];
#pragma unroll
                for (int mt = 0; mt < 2; mt++)
#pragma unroll
                    for (int h = 0; h < 2; h++) {
                        const int i = 2 * h + e;
                        const uint4 H = S.hd[1][32 * wm + 16 * mt + g + 8 * h];
                        const float sum = __fadd_rn(c0[mt][nt][i], c1[mt][nt][i]);
                        const float p1 = __fmul_rn(__uint_as_float(H.x), xd);
                        float a2 = __fmaf_rn(p1, sum, acc[mt][nt][i]);
                        int v2 = __dp2a_lo((int)xbw.x, (int)H.z, 0);
                        v2 = __dp2a_hi((int)xbw.y, (int)H.z, v2);
                        v2 = __dp2a_lo((int)xbw.z, (int)H.w, v2);
                        v2 = __dp2a_hi((int)xbw.w, (int)H.w, v2);
                        const float p2 = -__fmul_rn(__uint_as_float(H.y), xd);
                        acc[mt][nt][i] = __fmaf_rn(p2, (float)v2, a2);
                        c0[mt][nt][i] = 0.0f;
                        c1[mt][nt][i] = 0.0f;
                    }
            }
    }
#undef MMQH_ISSUE
#pragma unroll
    for (int mt = 0; mt < 2; mt++)
#pragma unroll
        for (int nt = 0; nt < 2; nt++)
#pragma unroll
            for (int i = 0; i < 4; i++) {
                const int32_t j = m0 + 32 * wm + 16 * mt + g + 8 * (i >> 1);
                const int32_t r = n0 + 16 * wn + 8 * nt + 2 * t4 + (i & 1);
                if (j < n_w && r < n_rows)
                    cuda_epi_store(y, r, j, n_w, acc[mt][nt][i], E);
            }
}

/* 0, or -1 when this device cannot hold the kernel's shared memory */
int cuda_mmqh_q4_K(struct cuda_ctx *c, const struct backend_weight *w, const void *xq, float *y, int32_t n_rows)
{
    static int occ = -1;
    if (!w->aux || w->type != QT_Q4_K || w->ne0 % QK_K)
        return INF_EUNSUPPORTED;
    if (occ < 0) {
        int n = 0;
        if (cudaFuncSetAttribute(mmqh_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                 (int)sizeof(mmqh_smem)) != cudaSuccess ||
            cudaOccupancyMaxActiveBlocksPerMultiprocessor(&n, mmqh_kernel, MMQ_THREADS, sizeof(mmqh_smem)) !=
                cudaSuccess) {
            cudaGetLastError();
            n = 0;
        }
        occ = n;
    }
    if (occ == 0)
        return -1;
    const int64_t nbr = w->ne0 / QK_K;
    const dim3 grid(cuda_blocks(w->ne1, MMQ_BM), cuda_blocks(n_rows, MMQ_BN));
    mmqh_kernel<<<grid, MMQ_THREADS, sizeof(mmqh_smem), c->stream>>>(
        (const uint8_t *)w->aux, (size_t)nbr * MMQH_BYTES, (int32_t)w->ne1, cuda_q8k_planes(xq, (int64_t)n_rows * nbr),
        nbr, y, n_rows, c->epi);
    return 0;
}
