/* cuda/mmqh_impl — Q4_K batches on the F16 tensor cores with the CPU's bits:
 * mmqh_kernel<T> (included by mmq_q4_k.cu after cuda/mmqk_impl.cuh, whose
 * head and min-term helpers it uses).
 *
 * Why (bench/RESULTS.md 2026-12-05 session 39): the int8 MMQ (mmqk) pays
 * four IMADs per m16n8k32 for the sub-block scales (an mma's int32 sum
 * times the row's 6-bit scale into the block sum: 29.4 M of its 117.8 M
 * warp instructions on the 4096 x 14336 x 512 product, 251 us, the issue's
 * 117 out of reach). Folded into the weights, the scale costs nothing in
 * the inner loop: A = q x sc (Q4_K: <= 15 x 63 = 945) is an integer f16
 * holds exactly, as are the q8 activations (-127..127), so
 * mma.sync m16n8k16 f16 x f16 -> f32 multiplies exactly, and the f32
 * accumulator adds integers exactly while every partial sum stays under
 * 2^24 (bench/hmma_probe: 0 of 811 K outputs differ from the int64 sums,
 * the largest magnitudes included). Half a super-block is at most 128 x
 * 945 x 127 = 15.4 M < 2^24, so each half has its own accumulator and the
 * super-block's v1 is their f32 sum: both halves exact, the add rounds
 * once, to (float)v1 as the CPU converts it. Then the canonical chain
 * (cuda/qtypes.cuh) as mmqk runs it, the min term by its int8 mma: a
 * row's bits are mmqk's, the CPU's.
 * The F16 product does half an int8 mma's MACs an instruction at the same
 * rate (hmma_probe, H100: 635 TFLOPS against 1,286 TOPS, 6.7 SMSP cycles
 * each): the floor for 4096 x 14336 x 512 is ~95 us; mmqk's instruction
 * count, not its tensor time, held it at 2.6x that.
 *
 * Shape: 128 weight rows x 128 activation rows a block, 16 warps (4 x 4) of
 * 32 x 32; a stage is half a super-block (128 elements). Per stage the
 * activations come as F16 (x16: the quantized activations' qs converted
 * once a product by mmqh_x16_kernel) by cp.async into a double buffer;
 * the weights' raw blocks by cp.async a super-block ahead, and every
 * thread expands its share of the next stage's weights (q x sc as f16:
 * one PRMT builds 1024 + q in f16, one HFMA2 (1024 + q) sc - 1024 sc, exact)
 * into the other A buffer while its warp's mma run on this one. Rows of
 * 128 halves + 16 bytes (17 granules: ldmatrix's 8 rows in 8 bank
 * groups). One barrier a stage. 181 KB of shared memory: one block an SM
 * on sm_90 (227 KB); sm_121's ~100 KB cannot hold it (mmqk serves there).
 */
#ifndef INFERD_CUDA_MMQH_IMPL_CUH
#define INFERD_CUDA_MMQH_IMPL_CUH

#include <cuda_fp16.h>

#define MMQH_BM 128
#define MMQH_BN 128
#define MMQH_THREADS 512
#define MMQH_RS 272 /* bytes a row of an F16 stage: 128 halves + 16 */

struct mmqh_smem {
    uint32_t raw[2][MMQH_BM][36];           /* Q4_K blocks (144 bytes) of two super-blocks */
    uint8_t a16[2][MMQH_BM][MMQH_RS];       /* q x sc, the two halves of a super-block */
    uint8_t b16[2][MMQH_BN][MMQH_RS];       /* activations, stage parity */
    float xd[2][MMQH_BN];                   /* their d, super-block parity */
    int8_t xhl[2][MMQH_BN][CUDA_Q8K_HL];    /* their 32-sums split (cuda_q8k) */
};

/* x16[i] = qs[i] as f16 (exact), 8 a thread */
static __global__ void mmqh_x16_kernel(const int8_t *__restrict__ qs, __half *__restrict__ x16, int64_t n8)
{
    const int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x;
    if (i >= n8)
        return;
    const uint2 v = ((const uint2 *)qs)[i];
    const int8_t *b = (const int8_t *)&v;
    __align__(16) __half h[8];
#pragma unroll
    for (int k = 0; k < 8; k++)
        h[k] = __int2half_rn((int)b[k]);
    ((uint4 *)x16)[i] = *(const uint4 *)h;
}

/* two f16 of the nibbles' bytes 0/1 or 2/3 (sel) of x (each <= 15) times
 * the sub-block scale: (1024 + q) as f16 by placing q under the exponent
 * byte 0x64, then (1024 + q) sc - 1024 sc in one exact f16 fma */
static __device__ __forceinline__ uint32_t mmqh_qs2(uint32_t x, uint32_t sel, __half2 sc, __half2 nsc)
{
    const uint32_t q = __byte_perm(x, 0x64646464u, sel);
    const __half2 r = __hfma2(*(const __half2 *)&q, sc, nsc);
    return *(const uint32_t *)&r;
}

template <int T>
static __global__ void __launch_bounds__(MMQH_THREADS, 1)
mmqh_kernel(const uint8_t *__restrict__ w, size_t row_bytes, int32_t n_w, cuda_q8k X,
            const __half *__restrict__ x16, int64_t nbr, float *__restrict__ y, int32_t n_rows, struct cuda_epi E)
{
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
    cuda_pdl_enter();
    extern __shared__ __align__(16) uint8_t mmqh_smem_raw[];
    mmqh_smem &S = *(mmqh_smem *)mmqh_smem_raw;
    const int tid = threadIdx.x, lane = tid % CUDA_WARP, warp = tid / CUDA_WARP;
    const int wm = warp & 3, wn = warp >> 2; /* rows 32 wm.., activation rows 32 wn.. */
    const int g = lane >> 2, t4 = lane & 3;
    const int32_t m0 = blockIdx.x * MMQH_BM, n0 = blockIdx.y * MMQH_BN;
    const int64_t n_st = 2 * nbr; /* stages: half super-blocks */

    /* the raw weights: 9 granules a row, chunks c = tid, tid + 512, tid + 1024 */
    auto issue_raw = [&](int64_t s) {
#pragma unroll
        for (int k = 0; k < 3; k++) {
            const int c = tid + MMQH_THREADS * k;
            if (c < MMQH_BM * 9) {
                const int r = c / 9, ch = c % 9;
                const int32_t wr = mmq_wrow(m0, r, n_w, E.glu);
                if (wr >= 0)
                    __pipeline_memcpy_async(&S.raw[s & 1][r][4 * ch],
                                            w + (size_t)wr * row_bytes + (size_t)s * 144 + 16 * ch, 16);
            }
        }
    };
    /* stage i's activations (16 granules a row), and at a super-block's
     * first half its d and 32-sums */
    auto issue_b = [&](int64_t i) {
        const int64_t s = i >> 1;
        const int h = (int)(i & 1);
#pragma unroll
        for (int k = 0; k < 4; k++) {
            const int c = tid + MMQH_THREADS * k, r = c >> 4, ch = c & 15;
            if (n0 + r < n_rows)
                __pipeline_memcpy_async(&S.b16[i & 1][r][16 * ch],
                                        x16 + ((size_t)(n0 + r) * nbr + s) * QK_K + 128 * h + 8 * ch, 16);
        }
        if (h == 0) {
            if (tid < MMQH_BN && n0 + tid < n_rows)
                __pipeline_memcpy_async(&S.xd[s & 1][tid], X.d + (size_t)(n0 + tid) * nbr + s, 4);
            else if (tid >= MMQH_BN && tid < 2 * MMQH_BN && n0 + tid - MMQH_BN < n_rows)
                __pipeline_memcpy_async(&S.xhl[s & 1][tid - MMQH_BN][0],
                                        X.hl + ((size_t)(n0 + tid - MMQH_BN) * nbr + s) * CUDA_Q8K_HL,
                                        CUDA_Q8K_HL);
        }
    };
    /* stage i's weights, q x sc as f16, into a16[i & 1]: thread (row r,
     * chunk p of the half's two 32-byte chunks, its 16-byte half q) */
    const int er = tid >> 2, ep = (tid >> 1) & 1, eq = tid & 1;
    auto expand = [&](int64_t i) {
        const int64_t s = i >> 1;
        const int h = (int)(i & 1), pc = 2 * h + ep; /* the super-block's chunk: sub-blocks 2pc, 2pc + 1 */
        const uint32_t *rw = S.raw[s & 1][er];
        mmqk_head hd;
        mmqk_k45_head(rw, hd);
        const uint32_t sw = hd.sc[pc >> 1] >> (16 * (pc & 1)); /* scales 2pc, 2pc + 1 in bytes 0, 1 */
        const __half2 slo = __half2half2(__int2half_rn((int)(sw & 0xff)));
        const __half2 shi = __half2half2(__int2half_rn((int)((sw >> 8) & 0xff)));
        const __half2 nlo = __hmul2(slo, __half2half2(__float2half(-1024.0f)));
        const __half2 nhi = __hmul2(shi, __half2half2(__float2half(-1024.0f)));
        const uint4 qv = *(const uint4 *)&rw[4 + 8 * pc + 4 * eq];
        const uint32_t qw[4] = {qv.x, qv.y, qv.z, qv.w};
        uint32_t lo[8], hi[8];
#pragma unroll
        for (int k = 0; k < 4; k++) {
            const uint32_t l = qw[k] & 0x0f0f0f0fu, u = (qw[k] >> 4) & 0x0f0f0f0fu;
            lo[2 * k] = mmqh_qs2(l, 0x5140u, slo, nlo);
            lo[2 * k + 1] = mmqh_qs2(l, 0x7362u, slo, nlo);
            hi[2 * k] = mmqh_qs2(u, 0x5140u, shi, nhi);
            hi[2 * k + 1] = mmqh_qs2(u, 0x7362u, shi, nhi);
        }
        /* element 64 ep + 16 eq + i (low nibbles, sub-block 2pc) and + 32
         * (high, 2pc + 1) of the half */
        uint8_t *row = S.a16[i & 1][er];
        *(uint4 *)(row + 2 * (64 * ep + 16 * eq)) = make_uint4(lo[0], lo[1], lo[2], lo[3]);
        *(uint4 *)(row + 2 * (64 * ep + 16 * eq + 8)) = make_uint4(lo[4], lo[5], lo[6], lo[7]);
        *(uint4 *)(row + 2 * (64 * ep + 32 + 16 * eq)) = make_uint4(hi[0], hi[1], hi[2], hi[3]);
        *(uint4 *)(row + 2 * (64 * ep + 32 + 16 * eq + 8)) = make_uint4(hi[4], hi[5], hi[6], hi[7]);
    };

    /* ldmatrix row addresses (buffer 0): A rows 32 wm + 16 mt + (l & 7) +
     * 8 ((l >> 3) & 1), halves 8 (l >> 4); B rows 32 wn + 16 np + 8 (l >>
     * 4) + (l & 7), halves 8 ((l >> 3) & 1) */
    uint32_t sa[2], sb[2];
#pragma unroll
    for (int mt = 0; mt < 2; mt++)
        sa[mt] = cuda_saddr(&S.a16[0][32 * wm + 16 * mt + (lane & 7) + 8 * ((lane >> 3) & 1)][16 * (lane >> 4)]);
#pragma unroll
    for (int np = 0; np < 2; np++)
        sb[np] = cuda_saddr(&S.b16[0][32 * wn + 16 * np + 8 * (lane >> 4) + (lane & 7)][16 * ((lane >> 3) & 1)]);
    constexpr uint32_t AB = (uint32_t)sizeof(S.a16[0]), BB = (uint32_t)sizeof(S.b16[0]);

    float acc[2][4][4], dh[2][2][4][4];
#pragma unroll
    for (int a = 0; a < 2; a++)
#pragma unroll
        for (int b = 0; b < 4; b++)
#pragma unroll
            for (int i = 0; i < 4; i++) {
                acc[a][b][i] = 0.0f;
                dh[0][a][b][i] = 0.0f;
                dh[1][a][b][i] = 0.0f;
            }

    /* stage i = 2 s + H into dh[H] (H at compile time: the two halves'
     * accumulators stay registers) */
    auto stage = [&](int64_t i, float (&d)[2][4][4]) {
        const int64_t s = i >> 1;
        __pipeline_wait_prior(0);
        __syncthreads(); /* stage i's activations and a16 are in; stage i - 1's readers are done */
        if (i + 1 < n_st) {
            issue_b(i + 1);
            if (!(i & 1) && s + 1 < nbr)
                issue_raw(s + 1);
            __pipeline_commit();
            expand(i + 1); /* its raw block landed: this super-block's, or the next one's (issued a stage ago) */
        }
        const uint32_t ab = (uint32_t)(i & 1) * AB, bb = (uint32_t)(i & 1) * BB;
#pragma unroll
        for (int kk = 0; kk < 8; kk++) {
            uint32_t af[2][4], bf[2][4];
#pragma unroll
            for (int mt = 0; mt < 2; mt++)
                cuda_ldsm_x4(af[mt], sa[mt] + ab + 32 * kk);
#pragma unroll
            for (int np = 0; np < 2; np++)
                cuda_ldsm_x4(bf[np], sb[np] + bb + 32 * kk);
#pragma unroll
            for (int mt = 0; mt < 2; mt++)
#pragma unroll
                for (int nt = 0; nt < 4; nt++)
                    cuda_mma_f16_k16(d[mt][nt], af[mt], bf[nt >> 1][2 * (nt & 1)], bf[nt >> 1][2 * (nt & 1) + 1]);
        }
    };

    issue_raw(0);
    issue_b(0);
    __pipeline_commit();
    __pipeline_wait_prior(0);
    __syncthreads();
    expand(0);
    for (int64_t s = 0; s < nbr; s++) {
        stage(2 * s, dh[0]);
        stage(2 * s + 1, dh[1]);
        /* the super-block ends: v1 = the halves' f32 sum (exact halves, one
         * rounding: (float)v1), then mmqk's chain and min term */
        mmqk_head hd[2][2];
#pragma unroll
        for (int mt = 0; mt < 2; mt++)
#pragma unroll
            for (int hh = 0; hh < 2; hh++)
                mmqk_k45_head(S.raw[s & 1][32 * wm + 16 * mt + g + 8 * hh], hd[mt][hh]);
        float xd[4][2];
        int bhl[4];
#pragma unroll
        for (int nt = 0; nt < 4; nt++) {
#pragma unroll
            for (int e = 0; e < 2; e++)
                xd[nt][e] = S.xd[s & 1][32 * wn + 8 * nt + 2 * t4 + e];
            bhl[nt] = *(const int *)&S.xhl[s & 1][32 * wn + 8 * nt + g][4 * t4];
        }
#pragma unroll
        for (int mt = 0; mt < 2; mt++) {
            int mh[2], ml[2];
            mmqk_min_words(hd[mt], t4, mh, ml);
#pragma unroll
            for (int nt = 0; nt < 4; nt++) {
                int ch[4], cl[4];
                cuda_mma_k16(ch, mh[0], mh[1], bhl[nt]);
                cuda_mma_k16(cl, ml[0], ml[1], bhl[nt]);
#pragma unroll
                for (int k = 0; k < 4; k++) {
                    const mmqk_head &H = hd[mt][k >> 1];
                    const float x = xd[nt][k & 1];
                    const float p1 = __fmul_rn(H.d, x);
                    const float v1 = __fadd_rn(dh[0][mt][nt][k], dh[1][mt][nt][k]);
                    const float a2 = __fmaf_rn(p1, v1, acc[mt][nt][k]);
                    const float p2 = -__fmul_rn(H.dmin, x);
                    acc[mt][nt][k] = __fmaf_rn(p2, (float)(ch[k] * 128 + cl[k]), a2);
                    dh[0][mt][nt][k] = 0.0f;
                    dh[1][mt][nt][k] = 0.0f;
                }
            }
        }
    }
    mmq_tile_store<4>(acc, m0, n0, wm, wn, g, t4, n_w, n_rows, y, E);
#endif
}

template <int T>
static int mmqh_launch(struct cuda_ctx *c, const struct backend_weight *w, const void *xq, float *y, int32_t n_rows)
{
    static_assert(T == QT_Q4_K, "mmqh: Q4_K's scales and nibbles only (Q5_K's q x sc needs quarter stages)");
    const int64_t nbr = w->ne0 / QK_K;
    if (w->ne0 % QK_K || !c->x16 || (size_t)n_rows * (size_t)w->ne0 * 2 > c->x16_bytes || c->sm < 80)
        return INF_EUNSUPPORTED;
    if (mmq_occupancy_once<mmqh_kernel<T>>(sizeof(mmqh_smem), MMQH_THREADS) == 0)
        return -1;
    const cuda_q8k X = cuda_q8k_planes(xq, (int64_t)n_rows * nbr);
    /* the activations as f16, once a product (the activation may differ
     * between products; mul_mat_ex's shared quantization is kept as is) */
    const int64_t n8 = (int64_t)n_rows * w->ne0 / 8;
    mmqh_x16_kernel<<<(unsigned)((n8 + 255) / 256), 256, 0, c->stream>>>(X.qs, (__half *)c->x16, n8);
    const dim3 grid(cuda_blocks(w->ne1, MMQH_BM), cuda_blocks(n_rows, MMQH_BN));
    cuda_launch(c, mmqh_kernel<T>, grid, MMQH_THREADS, sizeof(mmqh_smem), (const uint8_t *)w->data, w->row_bytes,
                (int32_t)w->ne1, X, (const __half *)c->x16, nbr, y, n_rows, c->epi);
    return 0;
}

#define MMQH_DEFINE(T)                                                                            \
    template <>                                                                                   \
    int cuda_mmqh<T>(struct cuda_ctx * c, const struct backend_weight *w, const void *xq, float *y, \
                     int32_t n_rows)                                                              \
    {                                                                                             \
        return mmqh_launch<T>(c, w, xq, y, n_rows);                                               \
    }

#endif
