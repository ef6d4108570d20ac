/* cuda/mmqp — the planes form's frame, shared by the int8 wgmma products
 * whose weights come as two u8 planes made at load (the design card's
 * EXP = true): mmq6w<true> (Q6_K, cuda/mmq6w.cu) and mmq4p (Q4_K,
 * cuda/mmq4p.cu). Each super-block s of a block's 128 weight rows is two
 * plane uses u = 2 s + p in a ring of MMQ6P_PSL plane slots (two tensor
 * copies of 128 rows x 128 bytes each, 128-byte swizzled, as the int8
 * activations' two halves of MMQ6W_ATILE are), so A comes by descriptor
 * like B and the consumers expand nothing. The copy warp feeds both
 * rings (mmqp_feed_copy); the kernels' row warps feed their own side
 * slots. Device code for sm_90a builds (WGMMA_DEVICE). */
#ifndef INFERD_CUDA_MMQP_CUH
#define INFERD_CUDA_MMQP_CUH

#include "engine/cuda/mmqh_impl.cuh"
#include "engine/cuda/wgrs.cuh"

#define MMQ6W_ASL 4                          /* activation stages: half super-blocks */
#define MMQ6W_RSL 4                          /* super-block slots (3: the feed barely ahead, session 43) */
#define MMQ6W_ATILE (MMQH_BN * 128)          /* 128 rows x 128 int8 */
#define MMQ6P_PSL 4                          /* plane slots: two super-blocks */
#ifndef MMQ4P_SPLIT /* cuda/mmq4p.cu's split form (a build switch for A/B runs; 0: main's form) */
#define MMQ4P_SPLIT 0
#endif
static_assert(MMQ6W_ATILE == MMQH_BM * 128, "a plane half: the block's 128 weight rows x 128 bytes");

/* A planes kernel's shared memory: the activation ring, the plane ring,
 * the side slots (SIDE: what each kernel's row warp stores for its chain),
 * the barriers (mmq6w_bars) and the plane slots' full / empty */
template <class SIDE> struct mmqp_smem {
    uint8_t act[MMQ6W_ASL][MMQ6W_ATILE]; /* first: 1,024-byte aligned tiles */
    uint8_t pl[MMQ6P_PSL][2][MMQ6W_ATILE];
    SIDE ss[MMQ6W_RSL];
    wgrs_bars<MMQ6W_ASL, MMQ6W_RSL> bar;
    uint64_t pfull[MMQ6P_PSL], pempty[MMQ6P_PSL];
#if MMQ4P_SPLIT
    uint64_t mi[2]; /* mmq4p's split form: warpgroup w's gate, the other warpgroup's min term issued */
#endif
};

#if WGMMA_DEVICE
/* the plane slots' barriers (thread 0, before wgrs_start's init and sync):
 * full with the copy warp's arrival and bytes, empty with every consumer's */
template <class SM> static __device__ __forceinline__ void mmqp_init(SM &S)
{
    if (threadIdx.x == 0)
        for (int i = 0; i < MMQ6P_PSL; i++) {
            cuda_mbar_init(&S.pfull[i], 1);
            cuda_mbar_init(&S.pempty[i], WGRS_CONS);
        }
#if MMQ4P_SPLIT
    if (threadIdx.x == 0)
        for (int i = 0; i < 2; i++)
            cuda_mbar_init(&S.mi[i], WGRS_CONS / 2);
#endif
}

typedef wgrs_bars<MMQ6W_ASL, MMQ6W_RSL> mmq6w_bars; /* every form's */

/* super-block s's slot landed (the row warp's and copy warp's arrivals) */
static __device__ __forceinline__ void mmq6w_land(mmq6w_bars &B, int32_t s, int wg, int w4)
{
    cuda_mbar_wait(&B.sfull[s % MMQ6W_RSL], (uint32_t)(s / MMQ6W_RSL) & 1);
    if (w4 == 0)
        cuda_tr(s, wg ? CUDA_TR_LANDL : CUDA_TR_LAND0);
}

/* both activation halves of super-block s landed */
static __device__ __forceinline__ void mmq6w_acts(mmq6w_bars &B, int32_t s)
{
    cuda_mbar_wait(&B.afull[(2 * s) % MMQ6W_ASL], (uint32_t)((2 * s) / MMQ6W_ASL) & 1);
    cuda_mbar_wait(&B.afull[(2 * s + 1) % MMQ6W_ASL], (uint32_t)((2 * s + 1) / MMQ6W_ASL) & 1);
}

/* super-block s's second plane done: its activation halves free (its
 * slot after the chain, wgrs_slot_done) */
static __device__ __forceinline__ void mmq6w_retire(mmq6w_bars &B, int32_t s, int wg, int w4)
{
    cuda_mbar_arrive(&B.aempty[(2 * s) % MMQ6W_ASL]);
    cuda_mbar_arrive(&B.aempty[(2 * s + 1) % MMQ6W_ASL]);
    if (w4 == 0)
        cuda_tr(s, wg ? CUDA_TR_CHAIN : CUDA_TR_PARK0);
}

/* The copy warp's super-block s: its first plane (once both warpgroups
 * are done with the plane four slots back), its two activation halves
 * (wgrs_feed_act), its second plane. pmap: the planes' rows (plane 1's
 * ne0 bytes then plane 2's, seen as halves: cuda_tmap_f16_sw128) */
template <class SM>
static __device__ __forceinline__ void mmqp_feed_copy(SM &S, int lane, const CUtensorMap *pmap,
                                                      const CUtensorMap *xmap, int32_t nbr, int32_t m0, int32_t n0,
                                                      int32_t s)
{
#pragma unroll 1
    for (int p = 0; p < 2; p++) {
        const int32_t u = 2 * s + p, ps = u % MMQ6P_PSL;
        if (u >= MMQ6P_PSL)
            cuda_mbar_wait(&S.pempty[ps], (uint32_t)(u / MMQ6P_PSL - 1) & 1);
        if (lane == 0 && WGRS_LEVER == 1 && u >= MMQ6P_PSL) {
            cuda_mbar_expect(&S.pfull[ps], 0); /* the lever: stale planes, no copy */
        } else if (lane == 0) {
            /* plane p's halves of super-block s: half (p ne0 + 256 s + 128 h) / 2 */
            const int32_t x = p * nbr * 128 + 128 * s;
            cuda_mbar_expect(&S.pfull[ps], 2 * MMQ6W_ATILE);
            cuda_tma_rows(S.pl[ps][0], pmap, x, m0, &S.pfull[ps]);
            cuda_tma_rows(S.pl[ps][1], pmap, x + 64, m0, &S.pfull[ps]);
        }
        if (p == 0)
#pragma unroll 1
            for (int h = 0; h < 2; h++)
                wgrs_feed_act(S.bar, S.act[(2 * s + h) % MMQ6W_ASL], sizeof(S.act[0]), xmap, 2 * s + h,
                              128 * s + 64 * h, n0);
    }
}

/* Plane p of super-block s into D: its 8 k32 steps by
 * descriptors, A from the plane slot (warpgroup wg's 64 rows), B the
 * activations (sb: the activation ring's base), one commit group */
template <class SM>
static __device__ __forceinline__ void mmqp_issue(SM &S, int (&D)[16][4], int32_t s, int p, int wg, uint32_t sb)
{
    const int32_t u = 2 * s + p;
    cuda_mbar_wait(&S.pfull[u % MMQ6P_PSL], (uint32_t)(u / MMQ6P_PSL) & 1);
    const uint32_t pa = cuda_saddr(S.pl[u % MMQ6P_PSL][0]) + (uint32_t)wg * 64 * 128;
    wgmma_fence();
#pragma unroll
    for (int j = 0; j < 8; j++) {
        const uint32_t ao = sb + (uint32_t)((2 * s + j / 4) % MMQ6W_ASL) * MMQ6W_ATILE;
        const uint64_t da = wgmma_desc(pa + (uint32_t)(j / 4) * MMQ6W_ATILE + 32 * (j & 3), 16, 1024, 1);
        const uint64_t db = wgmma_desc(ao + 32 * (j & 3), 16, 1024, 1);
        if (j == 0)
            wgmma_u8s8_ss_z(&D[0][0], da, db);
        else
            wgmma_u8s8_ss(&D[0][0], da, db);
    }
    wgmma_commit();
}

/* plane use u's sums in D (a wait covered them): its slot free */
template <class SM> static __device__ __forceinline__ void mmqp_done(SM &S, int (&D)[16][4], int32_t u)
{
    wgmma_pin_i(&D[0][0]);
    cuda_mbar_arrive(&S.pempty[u % MMQ6P_PSL]);
}

/* A consumer warpgroup's products of super-block s: its side slot and
 * activations landed, plane 1 into dd and plane 2 into de (each its own
 * accumulator set), both issued at once, one wait; both plane slots and
 * the activation halves then free (the side slot after the chain).
 * turns (c->q6p_turns): warpgroup 1 issues super-block s only after
 * warpgroup 0 has issued it, 0 issues s + 1 after 1 has issued s, so each
 * warpgroup's products sit in the pipe ahead of the other's and its chain
 * runs under the other's products; without, warpgroup 1 starts behind 0
 * by the lag barrier (mmqp_lag) and the two run in step. (Handed over
 * later, after mmq4p's min term's step, the turn measured 1.06-1.11x
 * slower: bench/RESULTS.md session 59, MMQ4P_TM.) */
template <class SM>
static __device__ __forceinline__ void mmqp_planes(SM &S, int (&dd)[16][4], int (&de)[16][4], int32_t s, int wg,
                                                   int w4, uint32_t sb, int32_t turns, int gate = 0)
{
    mmq6w_land(S.bar, s, wg, w4);
    mmq6w_acts(S.bar, s);
    if (wg == 0 && w4 == 0) /* trace builds: land0 -> act0 -> turn0 -> x0 split its waits */
        cuda_tr(s, CUDA_TR_ACT0);
    if (turns && (wg == 1 || s > 0))
        cuda_mbar_wait(&S.bar.turn[wg], (uint32_t)(wg ? s : s - 1) & 1);
    if (wg == 0 && w4 == 0)
        cuda_tr(s, CUDA_TR_TURN0);
    mmqp_issue(S, dd, s, 0, wg, sb);
    if (!turns && s == 0 && wg == 0)
        cuda_mbar_arrive(&S.bar.lag);
    /* gate (mmq4p's split form, MMQ4P_SPLIT): the second plane only after
     * the other warpgroup's latest min term is issued (warpgroup 0 at s:
     * 1's of s - 1; 1 at s: 0's of s), so that min term waits behind this
     * warpgroup's 8 first-plane steps, not behind all 16 */
#if MMQ4P_SPLIT
    if (gate && (wg == 1 || s > 0))
        cuda_mbar_wait(&S.mi[wg], (uint32_t)(wg ? s : s - 1) & 1);
#endif
    mmqp_issue(S, de, s, 1, wg, sb);
    if (w4 == 0) /* trace builds: when each warpgroup's 16 steps are issued (x0, x1) */
        cuda_tr(s, wg ? CUDA_TR_X1 : CUDA_TR_X0);
    if (turns)
        cuda_mbar_arrive(&S.bar.turn[wg ^ 1]);
    wgmma_wait<0>();
    mmqp_done(S, dd, 2 * s);
    mmqp_done(S, de, 2 * s + 1);
    mmq6w_retire(S.bar, s, wg, w4);
}
/* The chain's v1 term from an exact int32 v1 (mmqk's chain in the CPU's
 * order: p1 = d x xd, acc = fma(p1, (float) v1, acc)); da, db the weight
 * rows A and B's d, xds the activations' d (columns 8 j + 2 t4 (+ 1)).
 * Q6_K's whole chain (mmq6w), Q4_K's first half (mmq4p). */
static __device__ __forceinline__ void mmqp_chain_v1(float (&acc)[16][4], const int (&dd)[16][4], float da, float db,
                                                     const float *xds, int t4)
{
#pragma unroll
    for (int j = 0; j < 16; j++) {
        const float2 xd = *(const float2 *)&xds[8 * j + 2 * t4];
#pragma unroll
        for (int k = 0; k < 4; k++) {
            const float p1 = __fmul_rn(k < 2 ? da : db, k & 1 ? xd.y : xd.x);
            acc[j][k] = __fmaf_rn(p1, (float)dd[j][k], acc[j][k]);
        }
    }
}

/* before the loop: without turns warpgroup 1 waits for 0's first issue */
template <class SM> static __device__ __forceinline__ void mmqp_lag(SM &S, int wg, int32_t turns)
{
    if (wg == 1 && !turns)
        cuda_mbar_wait(&S.bar.lag, 0);
}
#endif

#endif
