/* cuda/mmqw — mmqh's exact F16 Q4_K product with wgmma (sm_90a): two
 * consumer warpgroups of 64 weight rows x 128 activation rows, each k16
 * step one wgmma.mma_async m64n128k16 with both operands read from shared
 * memory by matrix descriptors; one producer warpgroup. The arithmetic
 * and so the bits are mmqh's (cuda/mmqh_impl.cuh): A = q x sc - 480 and the
 * q8 activations as f16, one exact f32 sum a super-block (|.| < 2^24: the
 * order of the tensor core's adds cannot change it), v1 = sum + 480 S by
 * one add, then mmqk's chain and min term in the CPU's order.
 *
 * Feeding: the activations (mmqh's x16) by one tensor copy a stage into a
 * 128-byte swizzled tile (wgmma's SWIZZLE_128B K-major B); the raw Q4_K
 * blocks by one tensor copy a super-block (two under the SwiGLU
 * epilogue), a super-block ahead, on their own barriers; each producer
 * thread expands its row's quarter (mmqh_expand) into core matrices (A,
 * no swizzle) and fences them for the async proxy.
 *
 * Why (bench/RESULTS.md 2026-12-05 session 40): mmqh's mma.sync form is
 * shared-memory bound (each of its 8 warps ldmatrix-loads a 64 x 16 A and
 * a 32 x 16 B fragment every k16 step: with the producers' stores ~512 KB
 * a super-block, ~4,000 cycles at 128 B a cycle); a warpgroup's wgmma
 * reads its A once for all 128 activation rows (~320 KB, ~2,500 cycles),
 * at wgmma's F16 rate (989 TFLOPS dense). Measured on the H100 (calls
 * 2-5): 4096 x 14336 x 512 mmqk 251, mmqh 258, this 199 us (0.79x; 0.81x
 * at 2048 rows, 2.2x slower at 128: cuda_mmqh_fills); 7B pp512 +6%. What
 * paces it (call 5's timing-only forms): without the expansion 156 us,
 * without the min term's int8 mma 187; the tensor pipe ~33% busy.
 *
 * Built only where gpu_arch has 90 (compute_90a; meson -DINFERD_MMQW=1);
 * cuda_mmqw answers INF_EUNSUPPORTED elsewhere and on other devices, and
 * mmqh's mma.sync form serves (INFERD_MMQW=0 asks for that form on sm_90
 * too, for A/B runs). */
#include "engine/cuda/mmqk_impl.cuh"
#include "engine/cuda/mmqh_impl.cuh"
#include "engine/cuda/trace.cuh"
#include "engine/cuda/wgmma.cuh"


/* The rings: activation tiles (ASL slots, filled by tensor copies) and
 * expanded weights (WSL slots, filled by the producers' stores), apart so
 * that the activations can be asked for ASL - WSL stages before their
 * weights are expanded. Written for the reading of session 40's call 3
 * (the consumers waiting on full slots, the tensor pipe 34% busy: an
 * activation tile's latency pacing a stage?); measured in call 4, 6/4 and
 * 7/3 were no faster than 4/4 (the expansion and the chain pace a stage,
 * calls 4-5), so both rings are 4 deep; the split stays (one constant). */
template <int ASL_, int WSL_> struct mmqw_rings {
    enum { ASL = ASL_, WSL = WSL_, LEAD = ASL_ - WSL_ };
};

/* A weight stage (a quarter super-block); the last quarter's slot also
 * carries what the super-block's chain needs */
struct mmqw_wslot {
    uint8_t a16[MMQH_BM * 128];        /* q x sc - 480, core matrices (mmqw_aoff) */
    uint32_t head[MMQH_BM][4];         /* the rows' d, dmin and scale bytes */
    float xd[MMQH_BN];                 /* the activations' d */
    float sf[MMQH_BN];                 /* 480 S */
    int8_t xhl[MMQH_BN][CUDA_Q8K_HL];  /* and 32-sums (cuda_q8k) */
};
#define MMQW_ATILE (MMQH_BN * 128) /* an activation tile: 128 rows of 64 halves */
/* act first: the tensor copy's 128-byte swizzle repeats every 1,024 bytes,
 * so each tile starts on a 1,024-byte boundary (the base is aligned) */
template <class R> struct mmqw_smem {
    uint8_t act[R::ASL][MMQW_ATILE]; /* 128-byte swizzled rows (cuda_tmap_f16_sw128) */
    mmqw_wslot ws[R::WSL];
    uint32_t raw[2][MMQH_BM][36]; /* Q4_K blocks of two super-blocks (tensor copies, producers only) */
    uint64_t afull[R::ASL], aempty[R::ASL], wfull[R::WSL], wempty[R::WSL], rawb[2], lag;
};
static_assert(sizeof(mmqw_wslot) % 128 == 0, "mmqw: the raw weights' tensor copies land 128-byte aligned");
template <class R> static constexpr size_t mmqw_smem_bytes(void)
{
    return sizeof(mmqw_smem<R>) + 1024; /* + the base's alignment to 1,024 */
}

/* granule c (k 8c..8c+7) of weight tile row r in a slot's a16: wgmma's
 * core matrices (8 rows x 16 bytes, 128 contiguous bytes; no swizzle),
 * granule-major (LBO 2,048 B, SBO 128 B), so that a producer warp's 32
 * rows store one granule as 512 contiguous bytes */
static __device__ __forceinline__ uint32_t mmqw_aoff(int r, int c)
{
    return (uint32_t)(c * (MMQH_BM * 16) + r * 16);
}

#if WGMMA_DEVICE
/* The producers (one warpgroup, p = its thread 0..127, tile row p). Thread
 * 0 issues the tensor copies: stage j's activation tile (64 halves x 128
 * rows, one copy, counted on afull) at stage j - LEAD, once both consumer
 * warpgroups have released its slot, and the next super-block's raw
 * weights a super-block ahead (one copy of 128 rows, or under the SwiGLU
 * epilogue two of 64: the gate rows, then the up rows; rawb). Tensor
 * copies are counted on their own barriers, so the raw weights' DRAM
 * latency stays off the stages' (mmqh's cp.async copies, tracked by
 * cp.async.mbarrier.arrive, make each super-block's second stage wait for
 * the next super-block's weights). Every thread expands its row of the
 * stage into a16 and, at a last quarter, stores the super-block's head,
 * activation d, 32-sums and 480 S (loaded at the first quarter, so their
 * latency hides behind it). */
template <class R>
static __device__ __forceinline__ void mmqw_produce(mmqw_smem<R> &S, int p, const CUtensorMap *wmap,
                                                    const CUtensorMap *xmap, const cuda_q8k &X, int32_t nbr,
                                                    int32_t n_rows, int32_t m0, int32_t n0, int32_t glu)
{
    const int32_t n_st = 4 * nbr;
    /* the raw row of tile row p (mmq_wrow's map: gate rows jb + 8 (p >> 4)
     * + (p & 7) in copy rows 0..63, the same up rows in 64..127) */
    const int rr = glu ? ((p & 8) ? 64 : 0) + 8 * (p >> 4) + (p & 7) : p;
    auto issue_raw = [&](int32_t s) {
        uint64_t *bar = &S.rawb[s & 1];
        const int32_t x8 = s * 18; /* 144 bytes a super-block: 18 words */
        if (glu) {
            cuda_mbar_expect(bar, 2 * 64 * 144);
            cuda_tma_rows(&S.raw[s & 1][0][0], wmap, x8, m0 / 2, bar);
            cuda_tma_rows(&S.raw[s & 1][64][0], wmap, x8, glu + m0 / 2, bar);
        } else {
            cuda_mbar_expect(bar, MMQH_BM * 144);
            cuda_tma_rows(&S.raw[s & 1][0][0], wmap, x8, m0, bar);
        }
    };
    auto issue_act = [&](int32_t j) {
        const int as = j % R::ASL;
        if (j >= R::ASL)
            cuda_mbar_wait(&S.aempty[as], (uint32_t)(j / R::ASL - 1) & 1);
        cuda_mbar_expect(&S.afull[as], MMQW_ATILE);
        cuda_tma_rows(S.act[as], xmap, (j >> 2) * QK_K + 64 * (j & 3), n0, &S.afull[as]);
    };
    if (p == 0) {
        issue_raw(0);
        for (int32_t j = 0; j < R::LEAD && j < n_st; j++)
            issue_act(j);
    }
    float xdp = 0.0f;
    uint4 hlp = make_uint4(0, 0, 0, 0);
    for (int32_t i = 0; i < n_st; i++) {
        const int32_t s = i >> 2;
        const int qd = i & 3, ws = i % R::WSL;
        mmqw_wslot &L = S.ws[ws];
        /* stage i + LEAD's activations: their slot frees with stage i -
         * WSL's, the one this stage's weight slot waits for anyway */
        if (p == 0 && i + R::LEAD < n_st)
            issue_act(i + R::LEAD);
        if (i >= R::WSL)
            cuda_mbar_wait(&S.wempty[ws], (uint32_t)(i / R::WSL - 1) & 1);
        if (qd == 0 && p == 0)
            cuda_tr(s, CUDA_TR_X0); /* super-block s's first slot free */
        if (qd == 0) {
            if (n0 + p < n_rows) {
                const size_t b = (size_t)(n0 + p) * (size_t)nbr + (size_t)s;
                xdp = __ldg(X.d + b);
                hlp = __ldg((const uint4 *)(X.hl + b * CUDA_Q8K_HL));
            }
            /* every producer is past super-block s - 1: raw[(s + 1) & 1]
             * is free for s + 1's */
            mmqh_prod_sync();
            if (p == 0 && s + 1 < nbr)
                issue_raw(s + 1);
            cuda_mbar_wait(&S.rawb[s & 1], (uint32_t)(s >> 1) & 1);
            if (p == 0)
                cuda_tr(s, CUDA_TR_X1); /* its raw weights landed */
        }
        const uint32_t *rw = S.raw[s & 1][rr];
        uint4 gr[8];
        mmqh_expand(rw, qd, gr);
#pragma unroll
        for (int c = 0; c < 8; c++)
            *(uint4 *)&L.a16[mmqw_aoff(p, c)] = gr[c];
        if (qd == 3) {
            *(uint4 *)L.head[p] = *(const uint4 *)rw;
            L.xd[p] = xdp;
            *(uint4 *)&L.xhl[p][0] = hlp;
            L.sf[p] = mmqh_sf(hlp);
        }
        /* wgmma reads the slot through the async proxy */
        cuda_fence_async_smem();
        cuda_mbar_arrive(&S.wfull[ws]);
        if (qd == 3 && p == 0)
            cuda_tr(s, CUDA_TR_FEED); /* its last quarter expanded */
    }
}
#endif

/* 2 consumer warpgroups + 1 producer warpgroup (no setmaxnreg: the
 * consumers' 2 x 64 accumulators fit the launch bound's 168 registers) */
template <int T, class R>
static __global__ void __launch_bounds__(MMQH_THREADS, 1)
mmqw_kernel(const __grid_constant__ CUtensorMap wmap, const __grid_constant__ CUtensorMap xmap, cuda_q8k X,
            int32_t nbr, int32_t n_w, float *__restrict__ y, int32_t n_rows, struct cuda_epi E)
{
#if WGMMA_DEVICE
    extern __shared__ __align__(1024) uint8_t mmqw_smem_raw[];
    mmqw_smem<R> &S = wgmma_smem<mmqw_smem<R>>(mmqw_smem_raw);
    const int tid = threadIdx.x, lane = tid % CUDA_WARP, warp = tid / CUDA_WARP;
    const int32_t m0 = blockIdx.x * MMQH_BM, n0 = blockIdx.y * MMQH_BN;
    if (tid == 0) {
        /* afull: thread 0's arrival with the tile's bytes; wfull: every
         * producer's after its expansion; the empties: every consumer */
        for (int i = 0; i < R::ASL; i++) {
            cuda_mbar_init(&S.afull[i], 1);
            cuda_mbar_init(&S.aempty[i], MMQH_CONS);
        }
        for (int i = 0; i < R::WSL; i++) {
            cuda_mbar_init(&S.wfull[i], MMQH_PROD);
            cuda_mbar_init(&S.wempty[i], MMQH_CONS);
        }
        cuda_mbar_init(&S.rawb[0], 1);
        cuda_mbar_init(&S.rawb[1], 1);
        cuda_mbar_init(&S.lag, MMQH_CONS / 2);
        cuda_mbar_init_fence();
    }
    __syncthreads();
    cuda_tr_block(0);
    cuda_pdl_enter();
    if (tid >= MMQH_CONS) {
        mmqw_produce<R>(S, tid - MMQH_CONS, &wmap, &xmap, X, nbr, n_rows, m0, n0, E.glu);
        return;
    }
    /* warpgroup wg: weight rows 64 wg..; its warp w4 holds rows 16 w4 + g
     * (+8) of them and activation rows 8 j + 2 t4 (+1), j = 0..15 (the
     * wgmma accumulator layout: the m16n8 one, 16 n8 tiles) */
    const int wg = warp >> 2, w4 = warp & 3;
    const int g = lane >> 2, t4 = lane & 3;
    const uint32_t sa = cuda_saddr(S.ws[0].a16) + mmqw_aoff(64 * wg, 0);
    const uint32_t sb = cuda_saddr(S.act[0]);
    constexpr uint32_t WS = (uint32_t)sizeof(mmqw_wslot);

    float acc[1][16][4], dd[16][4];
    wgmma_zero(&acc[0][0][0]);

    /* stage i: its four k16 steps as one commit group (FIRST: a
     * super-block's first quarter, its first step without an accumulator).
     * A: 64 rows x 16 k of core matrices (LBO: the next granule, 2,048 B;
     * SBO: the next 8 rows, 128 B); B: the swizzled tile, k16 step kk 32
     * bytes into its rows (SBO: 8 rows, 1,024 B). */
    auto stage = [&](int32_t i, auto first) {
        cuda_mbar_wait(&S.wfull[i % R::WSL], (uint32_t)(i / R::WSL) & 1);
        cuda_mbar_wait(&S.afull[i % R::ASL], (uint32_t)(i / R::ASL) & 1);
        wgmma_fence();
        const uint32_t wo = (uint32_t)(i % R::WSL) * WS, ao = (uint32_t)(i % R::ASL) * MMQW_ATILE;
#pragma unroll
        for (int kk = 0; kk < 4; kk++) {
            const uint64_t da = wgmma_desc(sa + wo + mmqw_aoff(0, 2 * kk), MMQH_BM * 16, 128, 0);
            const uint64_t db = wgmma_desc(sb + ao + 32 * kk, 16, 1024, 1);
            if (decltype(first)::value && kk == 0)
                wgmma_ss_z(&dd[0][0], da, db);
            else
                wgmma_ss(&dd[0][0], da, db);
        }
        wgmma_commit();
    };
    auto release = [&](int32_t i) {
        cuda_mbar_arrive(&S.aempty[i % R::ASL]);
        cuda_mbar_arrive(&S.wempty[i % R::WSL]);
    };

    /* warpgroup 1 starts half a super-block behind warpgroup 0, so that one
     * chain runs while the other's wgmma keep the tensor pipe busy */
    if (wg == 1)
        cuda_mbar_wait(&S.lag, 0);
    for (int32_t s = 0; s < nbr; s++) {
        stage(4 * s, std::true_type{});
        if (w4 == 0) /* marks of each warpgroup's warp 0 */
            cuda_tr(s, wg ? CUDA_TR_LANDL : CUDA_TR_LAND0);
        stage(4 * s + 1, std::false_type{});
        wgmma_wait<1>(); /* stage 4s read: its slots are free */
        release(4 * s);
        stage(4 * s + 2, std::false_type{});
        wgmma_wait<1>();
        release(4 * s + 1);
        if (s == 0 && wg == 0)
            cuda_mbar_arrive(&S.lag);
        stage(4 * s + 3, std::false_type{});
        wgmma_wait<0>();
        wgmma_pin(&dd[0][0]);
        if (w4 == 0) /* the super-block's wgmma done: its chain starts */
            cuda_tr(s, wg ? CUDA_TR_CHAIN : CUDA_TR_PARK0);
        release(4 * s + 2);
        cuda_mbar_arrive(&S.aempty[(4 * s + 3) % R::ASL]);
        /* the chain of the super-block (its d, 32-sums, heads and 480 S in
         * the last quarter's weight slot): v1 = dd + 480 S, then mmqk's
         * chain and min term, as mmqh */
        const mmqw_wslot &L = S.ws[(4 * s + 3) % R::WSL];
        mmqk_head hd[2];
        int mh[2], ml[2];
        mmqh_tile_heads(L.head[64 * wg + 16 * w4 + g], L.head[64 * wg + 16 * w4 + g + 8], t4, hd, mh, ml);
        mmqh_chain_row(acc[0], dd, L, hd, mh, ml, g, t4);
        cuda_mbar_arrive(&S.wempty[(4 * s + 3) % R::WSL]);
        if (w4 == 0)
            cuda_tr(s, wg ? CUDA_TR_DONEL : CUDA_TR_DONE0);
    }
    mmq_tiles_store<1, 16>(acc, m0, n0, 4 * wg + w4, 0, g, t4, n_w, n_rows, y, E);
    if (wg == 0 && w4 == 0)
        cuda_tr_block(1);
#endif
}

#if defined(INFERD_MMQW)
template <class R>
static int mmqw_launch(struct cuda_ctx *c, const struct backend_weight *w, cuda_q8k X, __half *x16, float *y,
                       int32_t n_rows, const CUtensorMap &wm, const CUtensorMap &xm)
{
    if (mmq_occupancy_once<mmqw_kernel<QT_Q4_K, R>>(mmqw_smem_bytes<R>(), MMQH_THREADS) == 0)
        return -1;
    mmqh_x16(c, X, n_rows, w->ne0, x16, false);
    const dim3 grid(cuda_blocks(w->ne1, MMQH_BM), cuda_blocks(n_rows, MMQH_BN));
    cuda_launch(c, mmqw_kernel<QT_Q4_K, R>, grid, MMQH_THREADS, mmqw_smem_bytes<R>(), wm, xm, X,
                (int32_t)(w->ne0 / QK_K), (int32_t)w->ne1, y, n_rows, c->epi);
    return 0;
}
#endif

/* 1 where this build has the wgmma form (gpu_arch has 90) */
int cuda_mmqw_built(void)
{
#if defined(INFERD_MMQW)
    return 1;
#else
    return 0;
#endif
}

int cuda_mmqh_tmaps(const struct cuda_ctx *c, const struct backend_weight *w, const __half *x16, int32_t n_rows,
                    CUtensorMap *wm, CUtensorMap *xm)
{
    if (c->sm != 90 || w->ne0 / QK_K > INT32_MAX / 4)
        return INF_EUNSUPPORTED;
    memset(wm, 0, sizeof(*wm));
    memset(xm, 0, sizeof(*xm));
    if (cuda_tmap_rows(wm, w->data, w->row_bytes, w->ne1, 144, c->epi.glu ? 64 : MMQH_BM) ||
        cuda_tmap_f16_sw128(xm, x16, w->ne0, n_rows, MMQH_BN))
        return INF_EUNSUPPORTED;
    return 0;
}

int cuda_mmqw(struct cuda_ctx *c, const struct backend_weight *w, cuda_q8k X, __half *x16, float *y,
              int32_t n_rows)
{
#if defined(INFERD_MMQW)
    CUtensorMap wm, xm;
    if (cuda_mmqh_tmaps(c, w, x16, n_rows, &wm, &xm))
        return INF_EUNSUPPORTED;
    /* 4 activation and 4 weight slots: deeper activation rings (6/4, 7/3)
     * measured no faster (bench/RESULTS.md 2026-12-05 session 40, call 4) */
    return mmqw_launch<mmqw_rings<4, 4>>(c, w, X, x16, y, n_rows, wm, xm);
#else
    (void)c, (void)w, (void)X, (void)x16, (void)y, (void)n_rows;
    return INF_EUNSUPPORTED;
#endif
}
