/* cuda/mmqt_impl — the K-quant small-batch product (2-8 activation rows)
 * on the tensor cores, fed by the tensor memory accelerator:
 * mmqt_kernel<T, TL, C, D> (Q4_K, Q5_K, Q6_K's raw blocks; sm_90 and
 * later). Included by
 * mmq_q4_k.cu, mmq_q5_k.cu and mmq_q6_k.cu after cuda/mmqs_impl.cuh,
 * whose super-block step (mmqs_terms) it runs.
 *
 * Why (ncu on the H200, bench/RESULTS.md 2026-12-03 20:30): mmqs gives
 * each of a block's 4 producer warps its own cp.async ring (two stages of
 * K super-blocks of 16 rows) and one slice of k, so a 4096 x 14336 Q4_K
 * weight at 8 rows runs 2 blocks of 5 warps an SM, each producer 7 rounds
 * of ~620 instructions in series: 15% of issue slots, 10 cycles a warp
 * between issues, DRAM 27%, 25 us against the 7.4 us read. The fix is the
 * one that made the one-row kernel (cuda/mmvt.cu) fast: one feed warp
 * streams a block's stages with bulk copies into a ring the whole block
 * shares, so a warp needs no ring of its own and 16 compute warps fit an
 * SM, each doing one super-block of one 16-row tile a stage.
 *
 * Shape: a block holds RB = 16 TL weight rows (a row group; blocks take
 * groups blockIdx.x, + gridDim.x, ..., the ring running on from one group
 * into the next: cuda/tiles.cuh's cuda_stage). A stage is C consecutive
 * super-blocks of each weight row (rows RS bytes apart: C x BS + 16, or
 * Q6_K's + 32; RS / 16 odd, so the 8 row reads of an ldmatrix fall in 8
 * distinct bank groups, as in cuda/mmqk_impl.cuh). Where a row of the slot
 * fits a tensor box (RS <= 2,048 bytes: Q4_K/Q5_K at TL = 2) the feed warp
 * moves a stage by one tensor copy of the group's 32 rows, elsewhere (TL =
 * 1's 16 super-blocks, Q6_K's rows, which a tensor map cannot take on most
 * widths, or INFERD_TMA=0) by one bulk copy a row. The ring holds weights
 * only: a compute lane loads its B fragments of a super-block (64 bytes of
 * activation row g) from the plane the quantize kernel writes in fragment
 * order (cuda/qtypes.cuh cuda_q8k_frag), as 4 coalesced 16-byte loads
 * issued before it waits for the stage. Why (bench/RESULTS.md 2026-12-04
 * 12:00-, clock marks of bench/mmq_trace.cu): the accelerator took ~33 ns
 * a bulk copy whatever its size, so 32 weight-row and 8 activation-row
 * copies a stage held the stage period at ~1.5-1.9 us (calls 1-2: the
 * tensor copy, 4096 x 14336 at 8 rows 17.7 -> 16.1 us); and where the
 * weight comes from DRAM the kernel is bound by its bytes in flight (the
 * 7B's fused gate-up: 2 stages of 37 KB an SM, 2.2 TB/s), which the
 * activations' 16.5 KB a stage in the ring kept at D = 3 (call 8: without
 * them Q4_K holds 4 stages, Q5_K and Q6_K 3: 16.1 -> 14.8 us, the 7B's
 * Q4_K ffn-up 20.9 -> 16.5, 8-stream decode +5%). (Activations by 16 uncoalesced
 * 4-byte loads a lane from the Q8_K planes measured 12% slower, 2026-12-04
 * 10:15-, call 4.)
 * Compute warp w takes tile w / C, super-block w % C of the stage: its 16
 * rows x (up to) 8 activation rows' exact terms (mmqs_terms, through the
 * activation policy mmqt_xg), parked (p1, v1, p2, v2) per output; the two
 * chain warps then run the float chains over the stage in k order (TL =
 * 2: one a tile; TL = 1: rows g and g + 8 of the tile; cuda/qtypes.cuh's
 * chain: a row's bits are mmqs's, mmvq's and MMQ's) and store at the
 * group's last stage.
 *
 * Barriers: full[D] (the feed's one arrival with the stage's bytes, then
 * the copies'), rfree[D] (every compute lane, once it has read the slot),
 * pfull[PD] (every compute lane, after its park) and pfree[PD] (the chain
 * warps' lanes, after their chains read the park). The feed warp reads
 * weights only, so it never waits for the PDL (cuda/common.cuh); the
 * compute and chain warps do.
 */
#ifndef INFERD_CUDA_MMQT_IMPL_CUH
#define INFERD_CUDA_MMQT_IMPL_CUH

#include "engine/cuda/trace.cuh"

#define MMQT_SMEM_MAX (227 * 1024) /* sm_90's dynamic shared memory a block */

/* TL: 16-row tiles a block; C: super-blocks a stage (even: RS / 16 odd);
 * D: stages in the ring */
template <int T, int TL, int C, int D> struct mmqt_geom {
    enum {
        BS = T == QT_Q4_K ? 144 : T == QT_Q5_K ? 176 : 210, /* bytes a super-block */
        RB = 16 * TL,
        CW = TL * C,       /* compute warps: one (tile, super-block) task a stage */
        /* a weight row's stride in the slot: Q6_K's runs (210-byte blocks,
         * 2-byte aligned) are copied from the 16-byte granule their first
         * byte lies in, up to 14 bytes early, so 32 bytes of pad */
        RS = C * BS + (T == QT_Q6_K ? 32 : 16),
        WSL = RB * RS,
        SLOT = (WSL + 127) / 128 * 128, /* weights only; 128-byte aligned: tensor copies land there */
        PD = 2, /* park slots: stages the compute warps may run ahead of the chain */
        PARK = CW * 4 * CUDA_WARP * 16,
        SMEM = D * SLOT + PD * PARK + (2 * D + 2 * PD) * 8,
        NCH = 2, /* chain warps: TL = 2 one a tile; TL = 1 one for rows g, one for g + 8 */
        THREADS = (CW + 1 + NCH) * CUDA_WARP, /* compute warps, the feed warp, the chain warps */
    };
    static_assert(C % 2 == 0 && (RS / 16) % 2 == 1, "odd 16-byte granules a row");
};

/* The deepest ring (2..4) that fits sm_90's shared memory (at least 2). */
template <int T, int TL, int C> struct mmqt_depth {
    enum {
        D = mmqt_geom<T, TL, C, 4>::SMEM <= MMQT_SMEM_MAX   ? 4
            : mmqt_geom<T, TL, C, 3>::SMEM <= MMQT_SMEM_MAX ? 3
                                                             : 2
    };
};

/* The activations of one super-block (mmqs_terms's xf): the lane's B
 * fragments (64 bytes from the fragment plane, cuda_q8k_frag), its 4 bytes
 * of the sums and the scales of rows 2 t4, 2 t4 + 1, all loaded by the
 * read-only path before the compute warp waits for its stage, so their L2
 * latency passes inside the wait. */
struct mmqt_xg {
    uint4 b[4];
    int vhl;
    float d0, d1;
    __device__ __forceinline__ void bfrag(int nt, int p, uint32_t r[4]) const
    {
        (void)nt;
        r[0] = b[p].x;
        r[1] = b[p].y;
        r[2] = b[p].z;
        r[3] = b[p].w;
    }
    __device__ __forceinline__ int hl(int nt) const
    {
        (void)nt;
        return vhl;
    }
    __device__ __forceinline__ float d(int nt, int c) const
    {
        (void)nt;
        return c ? d1 : d0;
    }
};

template <int T, int TL, int C, int D>
static __global__ void __launch_bounds__(mmqt_geom<T, TL, C, D>::THREADS, 1)
mmqt_kernel(const uint8_t *__restrict__ w, size_t row_bytes, int32_t n_w, cuda_q8k X,
            const uint4 *__restrict__ xfr, int32_t nbr, float *__restrict__ y, int32_t n_rows, struct cuda_epi E,
            const __grid_constant__ CUtensorMap tm, int tma)
{
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    typedef mmqt_geom<T, TL, C, D> G;
    extern __shared__ __align__(128) uint8_t mmqt_sm[];
    float4 *park = (float4 *)(mmqt_sm + D * G::SLOT); /* [PD][CW][4][lane] */
    uint64_t *full = (uint64_t *)(mmqt_sm + D * G::SLOT + G::PD * G::PARK);
    uint64_t *rfree = full + D, *pfull = rfree + D, *pfree = pfull + G::PD;
    const int warp = threadIdx.x / CUDA_WARP, lane = threadIdx.x % CUDA_WARP;
    const int g = lane >> 2, t4 = lane & 3;
    const int32_t n_grp = (n_w + G::RB - 1) / G::RB;
    const int32_t ns = (nbr + C - 1) / C; /* stages a row group */
    const int32_t n_st = ((n_grp - 1 - (int32_t)blockIdx.x) / (int32_t)gridDim.x + 1) * ns;
    const int xrows = n_rows < 8 ? n_rows : 8;
    if (threadIdx.x == 0) {
        for (int i = 0; i < D; i++) {
            cuda_mbar_init(&full[i], 1);
            cuda_mbar_init(&rfree[i], G::CW * CUDA_WARP);
        }
        for (int i = 0; i < G::PD; i++) {
            cuda_mbar_init(&pfull[i], G::CW * CUDA_WARP);
            cuda_mbar_init(&pfree[i], G::NCH * CUDA_WARP);
        }
        cuda_mbar_init_fence();
    }
    __syncthreads();
    if (threadIdx.x == 0)
        cuda_tr_block(0);
    const cuda_stage p0 = cuda_stage_first<C>(nbr);
    if (warp == G::CW) {
        /* the feed warp: stage f into slot f % D, the first D at once
         * (weights only: no PDL wait), from stage D on into the slot of
         * stage f - D once every compute warp has read it */
        auto feed_w = [&](int32_t f, const cuda_stage &p) {
            uint8_t *slot = mmqt_sm + (f % D) * G::SLOT;
            if (tma) {
                /* tensor copies of tma rows x RS bytes each from the stage's
                 * first super-block (rows past the weight, and a row's last
                 * 16 bytes past its end, land as zeros) */
                if (lane == 0)
                    cuda_mbar_expect(&full[f % D], (uint32_t)G::WSL);
                __syncwarp();
                if (lane < G::RB / tma)
                    cuda_tma_rows(slot + lane * tma * G::RS, &tm, p.st * C * G::BS / 8, p.g * G::RB + lane * tma,
                                  &full[f % D]);
                return;
            }
            cuda_feed_rows(slot, G::RS, w, row_bytes, n_w, p.g * G::RB, G::RB, (size_t)p.st * C * G::BS,
                           (uint32_t)p.cnt * G::BS, &full[f % D]);
        };
        cuda_stage fp = p0;
        for (int32_t f = 0; f < n_st; f++, cuda_stage_next<C>(fp, ns, nbr)) {
            if (f >= D)
                cuda_mbar_wait(&rfree[f % D], (uint32_t)((f - D) / D) & 1);
            feed_w(f, fp);
            cuda_tr(f, CUDA_TR_FEED);
        }
        return;
    }
    if (warp > G::CW) {
        /* chain warp h: TL = 2 tile h's outputs, TL = 1 the tile's rows g + 8 h
         * (the lane's accumulators i = 2 h, 2 h + 1); each over the stage in
         * k order */
        const int h = warp - G::CW - 1;
        enum { NI = TL == 2 ? 4 : 2 };
        const int t = TL == 2 ? h : 0, i0 = TL == 2 ? 0 : 2 * h;
        cuda_pdl_wait();
        cuda_stage cp = p0;
        float acc[NI];
#pragma unroll
        for (int i = 0; i < NI; i++)
            acc[i] = 0.0f;
        for (int32_t s = 0; s < n_st; s++, cuda_stage_next<C>(cp, ns, nbr)) {
            const int pk = s % G::PD;
            cuda_mbar_wait(&pfull[pk], (uint32_t)(s / G::PD) & 1);
            const float4 *pp = park + (((size_t)pk * G::CW + t * C) * 4 + i0) * CUDA_WARP + lane;
#pragma unroll
            for (int j = 0; j < C; j++) {
                if (j < cp.cnt) {
#pragma unroll
                    for (int i = 0; i < NI; i++) {
                        const float4 v = pp[(j * 4 + i) * CUDA_WARP];
                        acc[i] = __fmaf_rn(v.x, v.y, acc[i]);
                        if (T != QT_Q6_K) /* no min term (cuda/qtypes.cuh's chain) */
                            acc[i] = __fmaf_rn(v.z, v.w, acc[i]);
                    }
                }
            }
            cuda_mbar_arrive(&pfree[pk]);
            if (h == 0)
                cuda_tr(s, CUDA_TR_CHAIN);
            if (cp.st == ns - 1) {
#pragma unroll
                for (int i = 0; i < NI; i++) {
                    const int ii = i0 + i;
                    const int32_t row = cp.g * G::RB + 16 * t + g + 8 * (ii >> 1), col = 2 * t4 + (ii & 1);
                    if (row < n_w && col < n_rows)
                        cuda_epi_store(y, col, row, n_w, acc[i], E);
                    acc[i] = 0.0f;
                }
            }
        }
        if (h == 0)
            cuda_tr_block(1);
        return;
    }
    cuda_pdl_wait();
    const int tile = warp / C, j = warp % C;
    const uint32_t base = cuda_saddr(mmqt_sm);
    /* the lane's ldmatrix rows of A: weight row (l % 8) + 8 ((l / 8) % 2) of
     * the tile, word 4 (l / 16) */
    const uint32_t aoff = (uint32_t)((16 * tile + (lane & 7) + 8 * ((lane >> 3) & 1)) * G::RS + 16 * (lane >> 4));
    const int32_t rg = g < xrows ? g : xrows - 1, r0 = 2 * t4 < xrows ? 2 * t4 : xrows - 1,
                  r1 = 2 * t4 + 1 < xrows ? 2 * t4 + 1 : xrows - 1;
    cuda_stage cp = p0;
    for (int32_t s = 0; s < n_st; s++, cuda_stage_next<C>(cp, ns, nbr)) {
        const int pk = s % G::PD;
        const bool have = j < cp.cnt && cp.g * G::RB + 16 * tile < n_w;
        const int64_t sb = (int64_t)cp.st * C + j;
        /* sums and scales: rows past the batch read row n_rows - 1 (never
         * stored) */
        mmqt_xg xf = {};
        if (have) {
            /* the B fragments of activation row g: lanes past the batch
             * load nothing (their products are never stored) */
            if (g < xrows) {
                const uint4 *fr = xfr + (size_t)sb * 4 * CUDA_WARP + lane;
#pragma unroll
                for (int p = 0; p < 4; p++)
                    xf.b[p] = __ldg(fr + p * CUDA_WARP);
            }
            xf.vhl = __ldg((const int *)(X.hl + (rg * (int64_t)nbr + sb) * CUDA_Q8K_HL) + t4);
            xf.d0 = __ldg(X.d + r0 * (int64_t)nbr + sb);
            xf.d1 = __ldg(X.d + r1 * (int64_t)nbr + sb);
        }
        cuda_mbar_wait(&full[s % D], (uint32_t)(s / D) & 1);
        if (warp == 0 || warp == G::CW - 1)
            cuda_tr(s, warp ? CUDA_TR_LANDL : CUDA_TR_LAND0);
        float4 out[1][4];
        if (have) {
            const uint32_t so = (uint32_t)(s % D) * G::SLOT;
            /* rows g, g + 8: each run starts (row * row_bytes + its stage's
             * first byte) % 16 bytes into its slot row (Q4_K/Q5_K: 0); the
             * word row holding that byte, and its offset in the word (Q6_K:
             * 0 or 2) */
            const uint32_t *rw[2];
            int sh[2];
#pragma unroll
            for (int h = 0; h < 2; h++) {
                const int r = 16 * tile + g + 8 * h;
                uint32_t mis = 0; /* Q4_K/Q5_K: rows and stages 16-byte aligned (mmqt_variant) */
                if constexpr (T == QT_Q6_K)
                    mis = (uint32_t)(((size_t)(cp.g * G::RB + r) * row_bytes + (size_t)cp.st * C * G::BS) & 15);
                rw[h] = (const uint32_t *)(mmqt_sm + so + r * G::RS + (mis & ~3u));
                sh[h] = (int)(mis & 3);
            }
            mmqs_terms<T, false, 1>(out, rw[0], rw[1], G::RS / 4, base + so + aoff, j, sh, t4, xf);
        }
        /* the slot is read: the feed warp may refill it */
        if (warp == 0 || warp == G::CW - 1)
            cuda_tr(s, warp ? CUDA_TR_DONEL : CUDA_TR_DONE0);
        cuda_mbar_arrive(&rfree[s % D]);
        /* the chains have read this park slot's last stage */
        cuda_mbar_wait(&pfree[pk], (uint32_t)(((s / G::PD) & 1) ^ 1));
        if (have) {
            float4 *pp = park + ((size_t)pk * G::CW + warp) * 4 * CUDA_WARP + lane;
#pragma unroll
            for (int i = 0; i < 4; i++)
                pp[i * CUDA_WARP] = out[0][i];
        }
        if (warp == 0)
            cuda_tr(s, CUDA_TR_PARK0);
        cuda_mbar_arrive(&pfull[pk]);
    }
#endif
}

template <int T, int TL, int C>
static int mmqt_launch(struct cuda_ctx *c, const struct backend_weight *w, const void *xq, float *y,
                       int32_t n_rows, int max_blocks)
{
    enum { D = mmqt_depth<T, TL, C>::D };
    typedef mmqt_geom<T, TL, C, D> G;
    const int occ = mmq_occupancy_once<mmqt_kernel<T, TL, C, D>>(G::SMEM, G::THREADS);
    if (occ == 0)
        return -1;
    const int64_t nbr = w->ne0 / QK_K;
    const int64_t blocks = cuda_stream_blocks((w->ne1 + G::RB - 1) / G::RB, occ, c->n_sm, max_blocks);
    /* a stage's weight rows by tensor copies of tma rows where the rows
     * allow a map (Q4_K/Q5_K: RS <= 2048 bytes); else a bulk copy a row */
    CUtensorMap tm;
    memset(&tm, 0, sizeof(tm));
    const int br = c->tma_rows < G::RB ? c->tma_rows : G::RB;
    const int tma = T != QT_Q6_K && br > 0 && cuda_tmap_rows(&tm, w->data, w->row_bytes, w->ne1, G::RS, br) == 0 ? br : 0;
    cuda_launch(c, mmqt_kernel<T, TL, C, D>, dim3((unsigned)blocks), G::THREADS, (size_t)G::SMEM,
                (const uint8_t *)w->data, w->row_bytes, (int32_t)w->ne1, cuda_q8k_planes(xq, (int64_t)n_rows * nbr),
                (const uint4 *)cuda_q8k_frag(xq, n_rows, nbr), (int32_t)nbr, y, n_rows, c->epi, tm, tma);
    return 0;
}

/* Whether mmqt's ring fills on a shape (its default path; speed only):
 * a block streams at least 4 stages and the row groups cover at least
 * half the SMs. Measured on the H200 (bench/RESULTS.md 2026-12-04 10:15-,
 * call 6, n = 2-8): the 7B's 3584 x 3584 attn-q (2 stages a block) and
 * 512 x 3584 attn-kv (16 blocks) are 5-50% slower than mmqs or the dp4a
 * kernel; 4096 x 14336 (7 stages), 3584 x 18944 (10) and 18944 x 3584 (9
 * one-stage groups a block) 15-35% faster. */
static inline bool mmqt_fills(int64_t n_w, int64_t nbr, int tl, int n_sm)
{
    const int64_t rb = 16 * tl, c = tl == 1 ? 16 : 8;
    const int64_t groups = (n_w + rb - 1) / rb, blocks = groups < n_sm ? groups : n_sm;
    const int64_t stages = (groups + blocks - 1) / blocks * ((nbr + c - 1) / c);
    return 2 * groups >= n_sm && stages >= 4;
}

/* 0, INF_EUNSUPPORTED (n_rows outside 1..8, a row not whole
 * super-blocks, a weight not 16-byte aligned, before sm_90) or -1 (the
 * device cannot hold the block). tl: tiles a block (1 or 2; 0 by shape,
 * and then INF_EUNSUPPORTED too where the ring would not fill: mmqt_fills);
 * max_blocks > 0 caps the grid (each block then streams several row
 * groups: tests). */
template <int T>
static int mmqt_variant(struct cuda_ctx *c, const struct backend_weight *w, const void *xq, float *y,
                        int32_t n_rows, int tl, int max_blocks)
{
    if (n_rows < 1 || n_rows > 8 || w->ne0 % QK_K || ((uintptr_t)w->data & 15) ||
        (T != QT_Q6_K && w->row_bytes % 16) || c->sm < 90 || w->ne1 > INT32_MAX - 32 ||
        w->ne0 / QK_K > INT32_MAX)
        return INF_EUNSUPPORTED;
    if (tl <= 0) {
        /* two tiles (32 rows: a stage's activations serve both) unless
         * 32-row groups spread worse over the SMs (cuda_group_rows); Q5_K
         * two everywhere: on the 7B's 18944-row ffn-up at 8 rows 24.0 us
         * against 28.9 with one (bench/RESULTS.md 2026-12-04 12:00-, call
         * 5: there TL = 2 has the tensor copies, TL = 1 does not) */
        tl = T != QT_Q4_K ? 2 : cuda_group_rows(w->ne1, c->n_sm) / 16;
        if (!mmqt_fills(w->ne1, w->ne0 / QK_K, tl, c->n_sm))
            return INF_EUNSUPPORTED;
    }
    /* Q6_K: two tiles only (16 x 16 super-blocks of 210 bytes and 32 KB
     * of activations a stage do not fit two stages) */
    if constexpr (T == QT_Q6_K)
        return mmqt_launch<T, 2, 8>(c, w, xq, y, n_rows, max_blocks);
    else
        return tl == 1 ? mmqt_launch<T, 1, 16>(c, w, xq, y, n_rows, max_blocks)
                       : mmqt_launch<T, 2, 8>(c, w, xq, y, n_rows, max_blocks);
}

#define MMQT_DEFINE(T)                                                                            \
    template <>                                                                                   \
    int cuda_mmqt<T>(struct cuda_ctx * c, const struct backend_weight *w, const void *xq, float *y, \
                     int32_t n_rows, int tl, int max_blocks)                                      \
    {                                                                                             \
        return mmqt_variant<T>(c, w, xq, y, n_rows, tl, max_blocks);                              \
    }

#endif
