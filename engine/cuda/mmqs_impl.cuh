/* cuda/mmqs_impl — the K-quant small-batch product on the tensor cores,
 * mmqs_kernel<T, EXP, K, NT> (decode batches: up to CUDA_MMQS_MAX
 * activation rows, the dispatcher's c->mmqs_max; included by mmq_q4_k.cu,
 * mmq_q5_k.cu and mmq_q6_k.cu after cuda/mmqk_impl.cuh, whose weight
 * layouts mmqk_w<T, 1, EXP> it reads).
 *
 * Why (ncu on the H200, bench/RESULTS.md 2026-12-02): the dp4a decode
 * kernel (cuda/mmvq.cu) spends ~36 warp instructions a super-block and
 * weight row; a warp's ~500 instructions after its loads, at 22 cycles
 * each, hold DRAM at 41-43% on the 7B's rows, and at n = 8 (4096 x 14336:
 * 51 us) it is bound by the instructions alone. One m16n8k32 mma forms the
 * integer sums of 16 weight rows x 8 activation rows x 32 elements, which
 * dp4a takes 128 lane operations for.
 *
 * Shape: a block of MMQS_WARPS producer warps and one chain warp takes
 * 16 weight rows (one m16 tile) and 8 NT activation rows (NT n8 tiles;
 * more rows take more blocks side by side). Producer q takes super-blocks
 * q, q + MMQS_WARPS, ... of the rows
 * (K consecutive ones at a time, mmqs_cfg; the integer work split along
 * k, so a 4096-row weight still gives 4 warps an SM), each through its
 * own cp.async ring. Per round of MMQS_WARPS super-blocks every producer
 * parks each output's (p1, v1, p2, v2) terms in a park slot and arrives
 * on the slot's "full" mbarrier; the chain warp waits for it, runs every
 * output's float chain over the round in k order, and frees the slot.
 * The chain is that of cuda/qtypes.cuh, which MMQ and the dp4a kernel
 * run (per output and super-block fma(p1, v1), then fma(p2, v2)), from
 * the same exact integers, so a row's bits are those of every other
 * batch size and kernel (tests/cuda/test_cuda_ops.c checks each against
 * the others).
 *
 * Past 8 rows (bench/RESULTS.md, 2026-12-03 22:45 call 1): the 64 x 64
 * MMQ tile gives a 4096-row weight 64 blocks, each walking all of k alone,
 * so at 16-64 rows MMQ took 2.5-3.4x mmqs's 8-row time (4096 x 14336:
 * 62.6 / 67.7 / 84.1 us at 16 / 32 / 64 rows against 25.0 at 8). Here k
 * stays split over the producers at every batch.
 */
#ifndef INFERD_CUDA_MMQS_IMPL_CUH
#define INFERD_CUDA_MMQS_IMPL_CUH

#define MMQS_WARPS 4 /* super-block slices of a block's rows */
#define MMQS_ROWS 16 /* weight rows per block: one m16 tile */
#define MMQS_PARK 2  /* park slots: rounds the producers may run ahead of the chain */

/* K: consecutive super-blocks a warp's stage copies (each row's bytes in
 * one run); S: stages in a warp's ring. Measured on the H200 (bench/
 * RESULTS.md, 2026-12-02 calls 7-8): q4_K at K = 2, S = 2 is 5-10% faster
 * at n = 4-8 than K = 1, S = 3; q5_K and q6_K at K = 2 15-40% slower; S = 2
 * against 3 at K = 1 within 3%; 8 warps instead of 4 -5-10% for q4_K/q5_K
 * and +20-40% for q6_K (2026-12-03 20:30 call 3, with the chain warp: 8
 * producers of one super-block +5-12% for q4_K). q4_K's K = 2 block is 108
 * KB, more than sm_121 (GB10) gives a block (~99 KB): there mmqs_variant
 * falls back to K = 1, S = 3 (71 KB), the q4_K form measured before K = 2.
 * Q6_K expanded takes S = 2 so a block fits sm_121. */
template <int T> struct mmqs_k {
    enum { K = T == QT_Q4_K ? 2 : 1 };
};
/* NT: n8 tiles of activation rows a block (1: up to 8 rows; 2: 16, the
 * A fragments of a super-block then feed two mma each). NT = 2 runs K = 1
 * and S = 2: its activation tiles and park are twice NT = 1's, and at S =
 * 2 a block stays under ~86 KB, two an SM on the H200 and one on sm_121. */
template <int T, bool EXP, int K, int NT = 1> struct mmqs_cfg {
    enum { S = NT == 2 || (T == QT_Q4_K && K == 2) || (T == QT_Q6_K && EXP) ? 2 : 3 };
};

template <int T, bool EXP, int KK, int NT> struct mmqs_smem {
    typedef mmqk_w<T, KK, EXP> W;
    enum { S = mmqs_cfg<T, EXP, KK, NT>::S, K = KK };
    uint32_t w[MMQS_WARPS][S][MMQS_ROWS][W::SW];
    int8_t x[MMQS_WARPS][S][8 * NT][MMQK_XS(K)];
    int8_t xhl[MMQS_WARPS][S][8 * NT][CUDA_Q8K_HL * K];
    float xd[MMQS_WARPS][S][8 * NT][K];
    /* round r's terms in slot r % MMQS_PARK: super-block of the round,
     * n8 tile, output, lane (lane-contiguous float4s: each STS.128/LDS.128
     * of a warp is four conflict-free wavefronts) */
    float4 park[MMQS_PARK][MMQS_WARPS * K][NT][4][CUDA_WARP];
    uint64_t full[MMQS_PARK], empty[MMQS_PARK]; /* mbarriers of the park slots */
};

/* One super-block's terms of a 16-row weight tile x NT n8 activation
 * tiles (mmqs's step, and mmqt's in cuda/mmqt_impl.cuh): out[nt][i] =
 * (p1, v1, p2, v2) of accumulator i of the lane (rows g, g + 8 x
 * activation rows 2 t4, 2 t4 + 1), cuda/qtypes.cuh's head and exact
 * terms. rg, rg8: the word rows of weight rows g and g + 8 (heads, the
 * 32-bit fragment loads; sw words a row); sa: the lane's ldmatrix address
 * of the A fragments (cuda_ldsm_x4: row (l % 8) + 8 ((l / 8) % 2), word
 * 4 (l / 16)); kd: the super-block's index in those rows; sh: Q6_K raw
 * rows' byte offsets in their words; the activations from xf:
 * xf.bfrag(nt, p, r): n8 tile nt's B fragment words {b0, b1} of sub-block
 * 2p, then of 2p + 1 (the lane's activation row g, bytes 4 t4.. and 16 +
 * 4 t4.. of each); xf.hl(nt): the lane's 4 bytes of the activation sums
 * (row g, bytes 4 t4..), xf.d(nt, c): the scale of activation row 8 nt + 2
 * t4 + c. */
template <int T, bool EXP, int NT, class XF>
static __device__ __forceinline__ void mmqs_terms(float4 out[NT][4], const uint32_t *rg, const uint32_t *rg8, int sw,
                                                  uint32_t sa, int kd, const int sh[2], int t4, const XF &xf)
{
    typedef mmqk_w<T, 1, EXP> W; /* heads, offsets and fragments do not depend on the stage depth */
    mmqk_head hd[2];
    W::head(rg, kd, W::G16 ? sh[0] : t4, hd[0]);
    W::head(rg8, kd, W::G16 ? sh[1] : t4, hd[1]);
    int sum[NT][4] = {};
    uint32_t bx[NT][4];
#pragma unroll
    for (int j = 0; j < 8; j++) {
        if (j % 2 == 0) {
#pragma unroll
            for (int nt = 0; nt < NT; nt++)
                xf.bfrag(nt, j / 2, bx[nt]);
        }
        if constexpr (!W::G16) {
            /* Q4_K/Q5_K: sub-blocks 2p and 2p+1 from one fragment load */
            if (j % 2)
                continue;
            uint32_t wf[4];
            mmqk_afrag<W::LDSM>(wf, sa, rg, sw, W::aoff(kd, j / 2), t4);
            int lo[4], hi[4];
            W::frag2(wf, j / 2, hd[0], hd[1], lo, hi);
#pragma unroll
            for (int jj = 0; jj < 2; jj++) {
                const int sj = j + jj;
                const int s0 = mmqk_ux8(hd[0].sc[sj >> 2], sj & 3), s1 = mmqk_ux8(hd[1].sc[sj >> 2], sj & 3);
#pragma unroll
                for (int nt = 0; nt < NT; nt++) {
                    const int b[2] = {(int)bx[nt][2 * jj], (int)bx[nt][2 * jj + 1]};
                    int c[4];
                    cuda_mma_k32(c, jj ? hi : lo, b);
                    sum[nt][0] += s0 * c[0];
                    sum[nt][1] += s0 * c[1];
                    sum[nt][2] += s1 * c[2];
                    sum[nt][3] += s1 * c[3];
                }
            }
        } else {
            int a[4];
            if constexpr (W::LDSM)
                cuda_ldsm_x4((uint32_t *)a, sa + 4 * W::aoff(kd, j));
            else
                W::frag(rg, rg8, j, t4, hd[0], hd[1], a);
            const uint32_t wa = hd[0].sc[j >> 1], wb = hd[1].sc[j >> 1];
            /* scales 2j (elements 32j..+15) and 2j+1, int8 */
            const int s0 = (j & 1) ? mmqk_sx8<2>(wa) : mmqk_sx8<0>(wa);
            const int s0b = (j & 1) ? mmqk_sx8<3>(wa) : mmqk_sx8<1>(wa);
            const int s1 = (j & 1) ? mmqk_sx8<2>(wb) : mmqk_sx8<0>(wb);
            const int s1b = (j & 1) ? mmqk_sx8<3>(wb) : mmqk_sx8<1>(wb);
#pragma unroll
            for (int nt = 0; nt < NT; nt++) {
                const int b0 = (int)bx[nt][2 * (j & 1)], b1 = (int)bx[nt][2 * (j & 1) + 1];
                int c[4];
                cuda_mma_k16(c, a[0], a[1], b0);
                sum[nt][0] += s0 * c[0];
                sum[nt][1] += s0 * c[1];
                sum[nt][2] += s1 * c[2];
                sum[nt][3] += s1 * c[3];
                cuda_mma_k16(c, a[2], a[3], b1);
                sum[nt][0] += s0b * c[0];
                sum[nt][1] += s0b * c[1];
                sum[nt][2] += s1b * c[2];
                sum[nt][3] += s1b * c[3];
            }
        }
    }
    /* the min term v2 by two k16 mma (mmqk_min_words) */
    int mh[2] = {0, 0}, ml[2] = {0, 0};
    if (W::MIN)
        mmqk_min_words(hd, t4, mh, ml);
#pragma unroll
    for (int nt = 0; nt < NT; nt++) {
        int ch[4] = {0, 0, 0, 0}, cl[4] = {0, 0, 0, 0};
        if (W::MIN) {
            const int bhl = xf.hl(nt);
            cuda_mma_k16(ch, mh[0], mh[1], bhl);
            cuda_mma_k16(cl, ml[0], ml[1], bhl);
        }
#pragma unroll
        for (int i = 0; i < 4; i++) {
            const mmqk_head &H = hd[i >> 1];
            const float x = xf.d(nt, i & 1);
            const float p1 = __fmul_rn(H.d, x);
            const float p2 = W::MIN ? -__fmul_rn(H.dmin, x) : 0.0f;
            out[nt][i] = make_float4(p1, (float)sum[nt][i], p2, (float)(ch[i] * 128 + cl[i]));
        }
    }
}

/* mmqs's activations, from its stage (rows of K super-blocks: 256 K
 * int8 values at sx, by ldmatrix: the lane's row l % 8, byte 32 (l / 16) +
 * 16 ((l / 8) % 2) of super-block kd's first pair; CUDA_Q8K_HL K bytes of
 * sums, K floats) */
template <int K> struct mmqs_xsm {
    const int8_t *xhl; /* [8 NT][CUDA_Q8K_HL K] */
    const float *xd;   /* [8 NT][K] */
    int kd, g, t4;
    uint32_t sx, xtile; /* the lane's ldmatrix address; bytes to the next n8 tile */
    __device__ __forceinline__ void bfrag(int nt, int p, uint32_t r[4]) const
    {
        cuda_ldsm_x4(r, sx + nt * xtile + 64 * p);
    }
    __device__ __forceinline__ int hl(int nt) const
    {
        return *(const int *)(xhl + (8 * nt + g) * CUDA_Q8K_HL * K + CUDA_Q8K_HL * kd + 4 * t4);
    }
    __device__ __forceinline__ float d(int nt, int c) const { return xd[(8 * nt + 2 * t4 + c) * K + kd]; }
};

/* Warps 0 .. MMQS_WARPS - 1 load and multiply; warp MMQS_WARPS (the chain
 * warp) runs the float chains and stores. They meet only at the park's
 * mbarriers, so a producer waits for the chain only when it is
 * MMQS_PARK rounds ahead of it, never at a block barrier. */
template <int T, bool EXP, int KK, int NT>
static __global__ void __launch_bounds__((MMQS_WARPS + 1) * CUDA_WARP)
mmqs_kernel(const uint8_t *__restrict__ w, size_t row_bytes, int32_t n_w, cuda_q8k X, int64_t nbr,
            float *__restrict__ y, int32_t n_rows, struct cuda_epi E)
{
    cuda_pdl_enter();
    typedef mmqs_smem<T, EXP, KK, NT> SM;
    typedef typename SM::W W;
    enum { S = SM::S, K = SM::K };
    extern __shared__ __align__(16) uint8_t mmqs_smem_raw[];
    SM &M = *(SM *)mmqs_smem_raw;
    const int lane = threadIdx.x % CUDA_WARP, q = threadIdx.x / CUDA_WARP;
    const int g = lane >> 2, t4 = lane & 3;
    /* x: the activation tile (the tiles of one weight tile run side by
     * side, so its bytes come from L2 after the first), y: the weight tile */
    const int32_t m0 = blockIdx.y * MMQS_ROWS, n0 = blockIdx.x * 8 * NT;
    const int64_t n_gs = nbr / K, rounds = (n_gs + MMQS_WARPS - 1) / MMQS_WARPS;

    if (threadIdx.x < MMQS_PARK) {
        cuda_mbar_init(&M.full[threadIdx.x], MMQS_WARPS * CUDA_WARP);
        cuda_mbar_init(&M.empty[threadIdx.x], CUDA_WARP);
    }
    __syncthreads(); /* the barriers are initialized */

    if (q == MMQS_WARPS) {
        /* the chain warp: round r's super-blocks in k order, per output
         * fma(p1, v1) then fma(p2, v2) (cuda/qtypes.cuh's chain) */
        float acc[NT][4] = {};
        for (int64_t r = 0; r < rounds; r++) {
            const int slot = (int)(r % MMQS_PARK);
            cuda_mbar_wait(&M.full[slot], (uint32_t)((r / MMQS_PARK) & 1));
#pragma unroll
            for (int k = 0; k < MMQS_WARPS * K; k++) {
                if ((int64_t)MMQS_WARPS * K * r + k >= nbr)
                    break;
#pragma unroll
                for (int nt = 0; nt < NT; nt++)
#pragma unroll
                    for (int i = 0; i < 4; i++) {
                        const float4 t = M.park[slot][k][nt][i][lane];
                        acc[nt][i] = __fmaf_rn(t.x, t.y, acc[nt][i]);
                        if (W::MIN)
                            acc[nt][i] = __fmaf_rn(t.z, t.w, acc[nt][i]);
                    }
            }
            cuda_mbar_arrive(&M.empty[slot]);
        }
#pragma unroll
        for (int nt = 0; nt < NT; nt++)
#pragma unroll
            for (int i = 0; i < 4; i++) {
                const int32_t j = m0 + g + 8 * (i >> 1), rr = n0 + 8 * nt + 2 * t4 + (i & 1);
                if (j < n_w && rr < n_rows)
                    cuda_epi_store(y, rr, j, n_w, acc[nt][i], E);
            }
        return;
    }

    /* loader: lane (r = lane / 4, part lp = lane % 4) copies weight rows r
     * and r + 8 and activation row r; rows past the weight or the batch are
     * not loaded (their products are never stored) */
    const int lr = lane >> 2, lp = lane & 3;
    const uint8_t *wrp[2];
    bool wld[2];
#pragma unroll
    for (int h = 0; h < 2; h++) {
        wld[h] = m0 + lr + 8 * h < n_w;
        wrp[h] = w + (size_t)(wld[h] ? m0 + lr + 8 * h : 0) * row_bytes;
    }
    bool xld[NT];
    int64_t xb0[NT];
#pragma unroll
    for (int nt = 0; nt < NT; nt++) {
        xld[nt] = n0 + 8 * nt + lr < n_rows;
        xb0[nt] = (int64_t)(xld[nt] ? n0 + 8 * nt + lr : 0) * nbr;
    }
    /* stage gs: super-blocks K gs .. K gs + K - 1 */
#define MMQS_ISSUE(gs, slot)                                                                      \
    do {                                                                                          \
        _Pragma("unroll") for (int h = 0; h < 2; h++) if (wld[h])                                 \
            W::copy(M.w[q][slot][lr + 8 * h], wrp[h], (gs), lp);                                  \
        _Pragma("unroll") for (int nt = 0; nt < NT; nt++) if (xld[nt]) {                          \
            const int64_t xb = xb0[nt] + (int64_t)K * (gs);                                       \
            const int xr = lr + 8 * nt;                                                           \
            cuda_copy16<16 * K, 4>(M.x[q][slot][xr], X.qs + xb * QK_K, lp);                       \
            if (lp < K)                                                                           \
                __pipeline_memcpy_async(&M.xd[q][slot][xr][lp], X.d + xb + lp, 4);                \
            else if (lp < 2 * K)                                                                  \
                __pipeline_memcpy_async(&M.xhl[q][slot][xr][CUDA_Q8K_HL * (lp - K)],              \
                                        X.hl + (xb + lp - K) * CUDA_Q8K_HL, CUDA_Q8K_HL);         \
        }                                                                                         \
    } while (0)

    /* this thread's two weight rows (accumulator rows g, g + 8) for the
     * Q6_K raw layout's per-row byte alignment */
    const uint8_t *wr2[2];
#pragma unroll
    for (int h = 0; h < 2; h++)
        wr2[h] = w + (size_t)(m0 + g + 8 * h < n_w ? m0 + g + 8 * h : 0) * row_bytes;
    /* the A fragments' ldmatrix row addresses (cuda_ldsm_x4), slot 0 */
    const uint32_t sa = cuda_saddr(&M.w[q][0][(lane & 7) + 8 * ((lane >> 3) & 1)][4 * (lane >> 4)]);
    const uint32_t wslot = (uint32_t)sizeof(M.w[0][0]);
    /* the B fragments of sub-blocks 2p, 2p + 1 by one ldmatrix .x4: lane l
     * gives row l % 8, bytes 32 (l / 16) + 16 ((l / 8) % 2) of the pair,
     * and gets words {b0, b1} of 2p, then of 2p + 1 (slot 0; n8 tile nt
     * xtile bytes on) */
    const uint32_t sx = cuda_saddr(&M.x[q][0][lane & 7][32 * (lane >> 4) + 16 * ((lane >> 3) & 1)]);
    const uint32_t xslot = (uint32_t)sizeof(M.x[0][0]), xtile = (uint32_t)sizeof(M.x[0][0][0]) * 8;

#pragma unroll
    for (int st = 0; st < S - 1; st++) {
        const int64_t gs = (int64_t)MMQS_WARPS * st + q;
        if (gs < n_gs)
            MMQS_ISSUE(gs, st);
        __pipeline_commit();
    }
    for (int64_t r = 0; r < rounds; r++) {
        /* stage r + S - 1 first, into the slot round r - 1 read (every lane
         * is past it): the wait for stage r then has S stages in flight,
         * not S - 1 */
        __syncwarp();
        {
            const int64_t gsn = (int64_t)MMQS_WARPS * (r + S - 1) + q;
            if (gsn < n_gs)
                MMQS_ISSUE(gsn, (int)((r + S - 1) % S));
            __pipeline_commit();
        }
        __pipeline_wait_prior(S - 1);
        __syncwarp(); /* stage r of this slice has landed for the whole warp */
        const int64_t gs = (int64_t)MMQS_WARPS * r + q;
        const int slot = (int)(r % S), pk = (int)(r % MMQS_PARK);
        /* the chain warp has read this park slot's last round */
        cuda_mbar_wait(&M.empty[pk], (uint32_t)(((r / MMQS_PARK) & 1) ^ 1));
#pragma unroll
        for (int kd = 0; kd < K; kd++) {
            if (gs >= n_gs)
                break;
            int sh[2] = {0, 0};
            if constexpr (!EXP && T == QT_Q6_K) {
#pragma unroll
                for (int h = 0; h < 2; h++)
                    sh[h] = (int)(((uintptr_t)(wr2[h] + (size_t)gs * K * 210)) & 3);
            }
            const mmqs_xsm<K> xf = {&M.xhl[q][slot][0][0], &M.xd[q][slot][0][0], kd, g, t4,
                                    sx + slot * xslot + 256 * kd, xtile};
            float4 out[NT][4];
            mmqs_terms<T, EXP, NT>(out, M.w[q][slot][g], M.w[q][slot][g + 8], W::SW, sa + slot * wslot, kd, sh,
                                   t4, xf);
#pragma unroll
            for (int nt = 0; nt < NT; nt++)
#pragma unroll
                for (int i = 0; i < 4; i++)
                    M.park[pk][K * q + kd][nt][i][lane] = out[nt][i];
        }
        cuda_mbar_arrive(&M.full[pk]); /* round r parked (or nothing to park) */
    }
#undef MMQS_ISSUE
}

/* 0, -1 when this device cannot hold the block's shared memory, or
 * INF_EUNSUPPORTED (EXP without w->aux, more than CUDA_MMQS_MAX rows, a
 * row not whole stages). The grid: (activation tiles of 8 NT rows, weight
 * tiles of 16 rows). */
template <int T, bool EXP, int K, int NT>
static int mmqs_launch(struct cuda_ctx *c, const struct backend_weight *w, const void *xq, float *y,
                       int32_t n_rows)
{
    if (n_rows > CUDA_MMQS_MAX || w->ne0 % (QK_K * K) || (EXP && !w->aux))
        return INF_EUNSUPPORTED;
    if (mmq_occupancy_once<mmqs_kernel<T, EXP, K, NT>>(sizeof(mmqs_smem<T, EXP, K, NT>),
                                                       (MMQS_WARPS + 1) * CUDA_WARP) == 0)
        return -1;
    const int64_t nbr = w->ne0 / QK_K;
    const uint8_t *wd = EXP ? (const uint8_t *)w->aux : (const uint8_t *)w->data;
    const size_t rb = EXP ? (size_t)nbr * MMQ_Q6X_BYTES : w->row_bytes;
    const dim3 grid(cuda_blocks(n_rows, 8 * NT), cuda_blocks(w->ne1, MMQS_ROWS));
    cuda_launch(c, mmqs_kernel<T, EXP, K, NT>, grid, (MMQS_WARPS + 1) * CUDA_WARP,
                sizeof(mmqs_smem<T, EXP, K, NT>), wd, rb, (int32_t)w->ne1,
                cuda_q8k_planes(xq, (int64_t)n_rows * nbr), nbr, y, n_rows, c->epi);
    return 0;
}

/* Past 8 rows two n8 tiles a block (NT = 2, K = 1), in as many activation
 * tiles as the rows need. */
template <int T>
static int mmqs_variant(struct cuda_ctx *c, const struct backend_weight *w, const void *xq, float *y,
                        int32_t n_rows, int exp, int k)
{
    if constexpr (T == QT_Q6_K) {
        if (exp)
            return n_rows > 8 ? mmqs_launch<T, true, 1, 2>(c, w, xq, y, n_rows)
                              : mmqs_launch<T, true, 1, 1>(c, w, xq, y, n_rows);
    }
    if (exp)
        return INF_EUNSUPPORTED;
    if (n_rows > 8)
        return mmqs_launch<T, false, 1, 2>(c, w, xq, y, n_rows);
    if (k == 1)
        return mmqs_launch<T, false, 1, 1>(c, w, xq, y, n_rows);
    const int rc = mmqs_launch<T, false, mmqs_k<T>::K, 1>(c, w, xq, y, n_rows);
    if constexpr (mmqs_k<T>::K > 1) {
        /* the device's shared memory (sm_121) or the row length does not
         * take K super-blocks a stage: one */
        if (rc == -1 || rc == INF_EUNSUPPORTED)
            return mmqs_launch<T, false, 1, 1>(c, w, xq, y, n_rows);
    }
    return rc;
}

#define MMQS_DEFINE(T)                                                                            \
    template <>                                                                                   \
    int cuda_mmqs<T>(struct cuda_ctx * c, const struct backend_weight *w, const void *xq, float *y, \
                     int32_t n_rows, int exp, int k)                                              \
    {                                                                                             \
        if (exp < 0)                                                                              \
            exp = T == QT_Q6_K && w->aux != NULL;                                                 \
        return mmqs_variant<T>(c, w, xq, y, n_rows, exp, k);                                      \
    }

#endif
