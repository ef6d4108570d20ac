/* cuda/mmq4p — Q4_K batches on int8 wgmma from two u8 weight planes made
 * at load (the design card's EXP = true for Q4_K), with the CPU's bits
 * (sm_90a; where the weight has planes, from c->q6p_min rows, not under
 * the SwiGLU epilogue; else mmqr serves).
 *
 * Why (bench/RESULTS.md session 55): #11's q4_K 4096 x 14336 x 512 row is
 * mmqr at ~142 us on the H100 (target 117), whose consumers expand each
 * fragment from the raw nibbles on the schedulers that also issue the
 * products and run the chain (ncu: issue 48%, tensor 50%; session 44's
 * lever without the expansion 0.937x). mmq6w's planes form does no
 * expansion and, with its warpgroups in turns, runs the Q6_K product at
 * ~124 us. Here the same frame (cuda/mmqp.cuh) runs Q4_K: u = sc q (0..945)
 * = 32 P1 + P2 (mmq4p_planes), so 32 D1 + D2 = v1, the super-block's exact
 * int sum_j sc_j dot_j, with no offset; the activations are the
 * quantizer's int8 plane (its f16 copy is not written for these products:
 * 7 MB less at 512 x 14336). The min term is mmqr's: one f16 m64n128k16
 * step a super-block (cuda/mmqmin.cuh) into the registers the second plane
 * used, issued after the planes' wait, under the chain's first half. The
 * chain is mmqk's Q4_K chain in the CPU's order: acc = fma(d xd, v1, acc),
 * then acc = fma(-(dmin xd), v2, acc), the heads from the rows' first 16
 * raw bytes. Same integers, same products: mmqr's bits.
 *
 * Shape: mmq6w<true>'s (2 consumer warpgroups of 64 weight rows x 128
 * activation rows, the feed warpgroup's copy warp and row warp, the
 * activation blocks along the grid's x); the side slot holds the weight
 * rows' heads (the raw rows' first 16 bytes, one tensor copy by the copy
 * warp), the min term's B and the activations' d (the row warp).
 * Measured (session 55, H100, bench --op against mmqr in one binary):
 * 0.90-0.92x at 4096 x 14336 x 512 (141.5 -> 127-130 us), 0.90 at 256,
 * 0.93-0.95 at 2048; the 7B's ffn-up / ffn-down 0.89-0.92x at 512 and
 * 2048, attn-q 0.97 / 0.92; the 7B-shaped pp512 +0-1.5% (the default 5%
 * budget covers a part of its Q4_K matrices, and its fused Q/K and
 * gate/up products read none: such weights get no planes, fuse_next).
 * The price: 2 bytes a weight of planes (cuda/q6planes.cu's table and
 * budget, shared with Q6_K's, config q6_planes_percent; INFERD_Q4P=0
 * leaves Q4_K out). */
#include "engine/cuda/mmqk_impl.cuh"
#include "engine/cuda/mmqh_impl.cuh"
#include "engine/cuda/mmqmin.cuh"
#include "engine/cuda/mmq6w_planes.cuh"
#include "engine/cuda/mmqp.cuh"
#include "engine/cuda/trace.cuh"
#include "engine/cuda/wgrs.cuh"

#ifndef INFERD_CUDA_TRACE /* bench/mmq_trace includes this file and links no engine code */
extern "C" {
#include "engine/quant.h"
}
#endif

/* the side slot: the weight rows' first 16 bytes (d, dmin, 12 scale
 * bytes), the min term's B (mmqr_min_brow's rows), the activations' d */
struct mmq4p_side {
    uint32_t hd[MMQH_BM][4];
    uint8_t mb[2 * MMQR_MBG];
    float xd[MMQH_BN];
};
typedef mmqp_smem<mmq4p_side> mmq4p_smem;
static_assert(offsetof(mmq4p_side, mb) % 16 == 0 && sizeof(mmq4p_side) % 128 == 0,
              "mmq4p: the heads' tensor copies land 128-byte aligned, wgmma's core matrices 16");
#if defined(INFERD_MMQW) /* the launcher's (builds with gpu_arch 90) */
static constexpr size_t mmq4p_smem_bytes = sizeof(mmq4p_smem) + 1024;
static_assert(mmq4p_smem_bytes <= 232448, "mmq4p: within sm_90's 227 KB of shared memory a block");
#endif

/* MMQ4P_LEVER: probe builds of bench/mmq_trace only (wrong results,
 * timing): 1 no min term (its f16 wgmma and finish), 2 no v1 chain (the
 * IMAD and mmqp_chain_v1; the planes' sums still read, XORed into one
 * word that reaches acc, since sums only an empty asm pins let ptxas drop
 * their wgmma: session 58's first lever-2 build measured that, not the
 * chain). What each saves is what it costs the period (session 58: the
 * min term 0.85x). 0 everywhere else. */
#ifndef MMQ4P_LEVER
#define MMQ4P_LEVER 0
#endif

#if WGMMA_DEVICE
/* The feed. fw 0, the copy warp: the weight rows' heads of super-block s
 * (their first 16 bytes, one tensor copy of 128 rows: hmap) into the side
 * slot once it is free, with its one arrival telling the bytes, then
 * mmqp_feed_copy. fw 1, the row warp: the activation rows' d and 32-sums,
 * loaded before the side slot's wait, then stored (the min term's B as
 * mmqr's feed stores it), fenced for the async proxy (a wgmma reads mb),
 * its 32 arrivals (wgrs_init's count is 33). Why the heads by copy (call
 * 9): as the row warp's own 16-byte loads, beside the activation rows'
 * in its 40 registers, the row warp delivered a super-block every ~3.8 us
 * and the consumers waited ~2.1 us of it. */
static __device__ __forceinline__ void mmq4p_feed(mmq4p_smem &S, int fw, int lane, const CUtensorMap *pmap,
                                                  const CUtensorMap *xmap, const CUtensorMap *hmap,
                                                  const cuda_q8k &X, int32_t nbr, int32_t n_rows, int32_t m0,
                                                  int32_t n0)
{
    for (int32_t s = 0; s < nbr; s++) {
        const int rs = s % MMQ6W_RSL;
        mmq4p_side &L = S.ss[rs];
        if (fw == 0) {
            if (s >= MMQ6W_RSL)
                cuda_mbar_wait(&S.bar.sempty[rs], (uint32_t)(s / MMQ6W_RSL - 1) & 1);
            if (lane == 0) {
                cuda_mbar_expect(&S.bar.sfull[rs], sizeof(L.hd));
                cuda_tma_rows(&L.hd[0][0], hmap, s * (144 / 8), m0, &S.bar.sfull[rs]);
            }
            mmqp_feed_copy(S, lane, pmap, xmap, nbr, m0, n0, s);
            continue;
        }
        wgrs_feed_row<true>(S, s, lane, X, nbr, n_rows, n0, [](mmq4p_side &L, int r, float xd, uint4 hl) {
            L.xd[r] = xd;
            mmqr_min_store(L.mb, r, hl);
        });
    }
}
#endif

/* wmap: the planes (cuda_q6p_find's rows: plane 1 then plane 2, seen as
 * halves); xmap: the int8 activations seen as halves; hmap: the raw Q4_K
 * rows as 16-byte boxes of 128 rows (the heads); turns as mmq6w<true>'s
 * (c->q6p_turns) */
static __global__ void __launch_bounds__(WGRS_THREADS, 1)
mmq4p_kernel(const __grid_constant__ CUtensorMap wmap, const __grid_constant__ CUtensorMap xmap,
             const __grid_constant__ CUtensorMap hmap, cuda_q8k X, int32_t nbr, int32_t n_w, float *__restrict__ y,
             int32_t n_rows, struct cuda_epi E, int32_t turns)
{
#if WGMMA_DEVICE
    extern __shared__ __align__(1024) uint8_t mmq4p_smem_raw[];
    mmq4p_smem &S = wgmma_smem<mmq4p_smem>(mmq4p_smem_raw);
    /* the activation blocks along the grid's x (mmq6w<true>'s raster: the
     * blocks sharing a weight tile run together) */
    const int32_t m0 = blockIdx.y * MMQH_BM, n0 = blockIdx.x * MMQH_BN;
    mmqp_init(S);
    wgrs_start(S.bar);
    if (!wgrs_roles([&](int fw) {
            mmq4p_feed(S, fw, threadIdx.x % CUDA_WARP, &wmap, &xmap, &hmap, X, nbr, n_rows, m0, n0);
        }))
        return;
    const wgrs_lane P = wgrs_lane_of(0); /* never under the SwiGLU epilogue (the launcher) */
    const int wg = P.wg, w4 = P.w4, t4 = P.t4, ra = P.ra, rb = P.rb;
    const uint32_t sb = cuda_saddr(S.act[0]);

    float acc[1][16][4];
    int dd[16][4], de[16][4];
    wgmma_zero(&acc[0][0][0]);
    mmqp_lag(S, wg, turns);
#pragma unroll 1
    for (int32_t s = 0; s < nbr; s++) {
        const int rs = s % MMQ6W_RSL;
        const mmq4p_side &L = S.ss[rs];
        uint32_t fm[1][4];
        float dm[16][4];
        mmqp_planes(S, dd, de, s, wg, w4, sb, turns, MMQ4P_SPLIT);
        /* v1 = 32 D1 + D2 (int32: every partial sum below 2^31) */
#pragma unroll
        for (int j = 0; j < 16; j++)
#pragma unroll
            for (int k = 0; k < 4; k++)
                if (MMQ4P_LEVER != 2)
                    dd[j][k] = dd[j][k] * 32 + de[j][k];
        mmqk_head hd[2];
        mmqk_k45_head(L.hd[ra], hd[0]);
        mmqk_k45_head(L.hd[rb], hd[1]);
        /* the min term v2 by one f16 wgmma into the second plane's
         * registers (exact: mmqr_min_frag), under the chain's first half */
        if (MMQ4P_LEVER != 1)
            mmqr_min_issue(dm, fm, L.hd[ra], L.hd[rb], L.mb, t4);
#if MMQ4P_SPLIT
        cuda_mbar_arrive(&S.mi[wg ^ 1]); /* the other warpgroup's second plane may go now (mmqp_planes' gate) */
#endif
        if (MMQ4P_LEVER != 2) {
            mmqp_chain_v1(acc[0], dd, hd[0].d, hd[1].d, L.xd, t4);
        } else {
            int x = 0;
#pragma unroll
            for (int j = 0; j < 16; j++)
#pragma unroll
                for (int k = 0; k < 4; k++)
                    x ^= dd[j][k] ^ de[j][k];
            acc[0][0][0] += (float)x;
        }
        if (MMQ4P_LEVER != 1)
            mmqr_min_finish(acc[0], dm, fm, L.xd, hd, t4);
        wgrs_slot_done(S.bar, rs, s, wg, w4);
    }
    wgrs_store(acc, P, m0, n0, n_w, n_rows, y, E);
#endif
}

/* The Q4_K planes on the host (tests/cuda/test_cuda_host.c): (1) every q in
 * 0..15 at each byte of a word, with every scale 0..63: 32 P1 + P2 = q sc,
 * P2 in 0..31; (2) n_blocks random Q4_K super-blocks (d = 1, dmin = 0, so
 * engine/quant.c's dequantization gives sc q exactly): mmq4p_word's planes
 * of every word against it. Returns what differs (the first into msg). */
#ifndef INFERD_CUDA_TRACE
extern "C" int64_t cuda_mmq4p_host_check(int n_blocks, char *msg, size_t cap)
{
    wgrs_check k = wgrs_check_start(0x3c6ef372fe94f82bull, msg, cap);
    for (int sc = 0; sc < 64; sc++)
        for (int q = 0; q < 16; q++)
            for (int pos = 0; pos < 4; pos++) {
                uint32_t w = wgrs_rnd(k) & 0x0f0f0f0fu;
                w = (w & ~(0xffu << (8 * pos))) | ((uint32_t)q << (8 * pos));
                uint32_t p1, p2;
                mmq4p_planes(w, sc, p1, p2);
                const int a = (int)((p1 >> (8 * pos)) & 0xff), b = (int)((p2 >> (8 * pos)) & 0xff);
                if (32 * a + b != sc * q || b > 31)
                    wgrs_miss(k, "sc %d, q %d at byte %d: planes %d, %d", sc, q, pos, a, b);
            }
    for (int blk = 0; blk < n_blocks; blk++) {
        uint32_t words[144 / 4];
        for (int i = 0; i < 144 / 4; i++)
            words[i] = wgrs_rnd(k);
        uint8_t *b = (uint8_t *)words;
        const quant_f16 one = quant_f32_to_f16(1.0f), zero = quant_f32_to_f16(0.0f);
        memcpy(b, &one, 2);
        memcpy(b + 2, &zero, 2);
        float ref[QK_K];
        quant_dequant_row(QT_Q4_K, b, ref, QK_K);
        for (int kk = 0; kk < QK_K; kk += 4) {
            uint32_t p1, p2;
            mmq4p_word(b, kk, p1, p2);
            for (int e = 0; e < 4; e++) {
                const int u = 32 * (int)((p1 >> (8 * e)) & 0xff) + (int)((p2 >> (8 * e)) & 0xff);
                if ((float)u != ref[kk + e])
                    wgrs_miss(k, "block %d element %d: planes give %d, the dequantization %g", blk, kk + e, u,
                              (double)ref[kk + e]);
            }
        }
    }
    return k.bad;
}
#endif

/* 0 launched; INF_EUNSUPPORTED (no planes for w, fewer rows than
 * c->q6p_min unless force, the SwiGLU epilogue, not compute capability
 * 9.0, no int8 activations, a shape the maps cannot take); -1 no room */
static int mmq4p_check(const struct cuda_ctx *c, const struct backend_weight *w, int32_t n_rows, int force,
                       const void **pl)
{
    if (c->sm != 90 || w->type != QT_Q4_K || w->ne0 % QK_K || c->epi.glu || (!force && n_rows < c->q6p_min) ||
        w->ne0 / QK_K > INT32_MAX / 2 || ((uintptr_t)w->data & 15) || w->row_bytes % 16)
        return INF_EUNSUPPORTED;
    *pl = cuda_q6p_find(c, w);
    return *pl ? 0 : INF_EUNSUPPORTED;
}

int cuda_mmq4p_takes(const struct cuda_ctx *c, const struct backend_weight *w, int32_t n_rows)
{
#if defined(INFERD_MMQW)
    const void *pl;
    return mmq4p_check(c, w, n_rows, 0, &pl) == 0;
#else
    (void)c, (void)w, (void)n_rows;
    return 0;
#endif
}

int cuda_mmq4p(struct cuda_ctx *c, const struct backend_weight *w, const void *xq, float *y, int32_t n_rows,
               int force)
{
#if defined(INFERD_MMQW)
    const void *pl;
    const int rc = mmq4p_check(c, w, n_rows, force, &pl);
    if (rc || c->xq_no_qs)
        return rc ? rc : INF_EUNSUPPORTED;
    const int64_t nbr = w->ne0 / QK_K;
    const cuda_q8k X = cuda_q8k_planes(xq, (int64_t)n_rows * nbr);
    CUtensorMap wm, xm, hm;
    memset(&wm, 0, sizeof(wm));
    memset(&xm, 0, sizeof(xm));
    memset(&hm, 0, sizeof(hm));
    if (cuda_tmap_f16_sw128(&wm, pl, w->ne0, w->ne1, MMQH_BM) ||
        cuda_tmap_f16_sw128(&xm, X.qs, w->ne0 / 2, n_rows, MMQH_BN) ||
        cuda_tmap_rows(&hm, w->data, w->row_bytes, w->ne1, 16, MMQH_BM))
        return INF_EUNSUPPORTED;
    if (mmq_occupancy_once<mmq4p_kernel>(mmq4p_smem_bytes, WGRS_THREADS) == 0)
        return -1;
    const dim3 grid(cuda_blocks(n_rows, MMQH_BN), cuda_blocks(w->ne1, MMQH_BM));
    cuda_launch(c, mmq4p_kernel, grid, WGRS_THREADS, mmq4p_smem_bytes, wm, xm, hm, X, (int32_t)nbr, (int32_t)w->ne1,
                y, n_rows, c->epi, (int32_t)c->q6p_turns);
    return 0;
#else
    (void)c, (void)w, (void)xq, (void)y, (void)n_rows, (void)force;
    return INF_EUNSUPPORTED;
#endif
}
