/* cuda/mmqmin — the Q4_K min term's f16 wgmma operands (one m64n128k16
 * step a super-block: v2 = sum_j m_j S_j), shared by mmqr (cuda/mmqr.cu)
 * and the Q4_K planes form (cuda/mmq4p.cu): the weight rows' A fragment
 * from their mins, the activation rows' B rows from their 32-sums (the
 * quantizer's hl bytes). Host and device (the host checks run them). */
#ifndef INFERD_CUDA_MMQMIN_CUH
#define INFERD_CUDA_MMQMIN_CUH

#include "engine/cuda/mmqh_impl.cuh"
#include "engine/cuda/mmqk_impl.cuh" /* mmqk_head */
#include "engine/cuda/wgmma.cuh"

#define MMQR_MBG (MMQH_BN * 16)          /* the min term's B: bytes of a granule (k 8 c..) of its 128 rows */

/* mins 2 t4 and 2 t4 + 1 of a Q4_K row (its block rw) in bytes 0, 1
 * (mmqk_k45_head's sc[2], sc[3]) */
static __host__ __device__ __forceinline__ uint32_t mmqr_min_pair(const uint32_t *rw, int t4)
{
    const uint32_t s1 = rw[2], s2 = rw[3];
    const uint32_t mw = t4 < 2 ? s1 & 0x3f3f3f3fu : ((s2 >> 4) & 0x0f0f0f0fu) | ((s1 >> 2) & 0x30303030u);
    return mw >> (16 * (t4 & 1));
}

/* an f16 pair of small integers (exact) */
static __host__ __device__ __forceinline__ uint32_t mmqr_h2(int lo, int hi)
{
    return (uint32_t)__half_raw(__int2half_rn(lo)).x | ((uint32_t)__half_raw(__int2half_rn(hi)).x << 16);
}

/* The min term's A fragment of rows A and B (mins pairs pa, pb): k 2 t4,
 * 2 t4 + 1 hold 128 m (f[0] row A, f[1] row B), k 2 t4 + 8, + 9 hold m
 * (f[2], f[3]) */
static __host__ __device__ __forceinline__ void mmqr_min_frag(uint32_t pa, uint32_t pb, uint32_t f[4])
{
    const int a0 = (int)(pa & 0xff), a1 = (int)((pa >> 8) & 0xff);
    const int b0 = (int)(pb & 0xff), b1 = (int)((pb >> 8) & 0xff);
    f[0] = mmqr_h2(128 * a0, 128 * a1);
    f[1] = mmqr_h2(128 * b0, 128 * b1);
    f[2] = mmqr_h2(a0, a1);
    f[3] = mmqr_h2(b0, b1);
}

/* The min term's B row of an activation row (its hl: hi_0..7, lo_0..7) as
 * 16 f16 in hl's order: b[0..3] k 0-7 (granule 0), b[4..7] k 8-15. The
 * feed stores granule c of row r at byte MMQR_MBG c + 16 r of the slot's
 * mb (core matrices without swizzle: LBO 2,048, SBO 128, as mmqw's A) */
static __host__ __device__ __forceinline__ void mmqr_min_brow(uint4 hl, uint32_t b[8])
{
    const uint32_t w[4] = {hl.x ^ 0x80808080u, hl.y ^ 0x80808080u, hl.z ^ 0x80808080u, hl.w ^ 0x80808080u};
    for (int i = 0; i < 4; i++) {
        b[2 * i] = mmqh_i8x2(w[i], 0x4140u);
        b[2 * i + 1] = mmqh_i8x2(w[i], 0x4342u);
    }
}

/* the feed's store of activation row r's B row into a slot's mb (both
 * granules) */
static __device__ __forceinline__ void mmqr_min_store(uint8_t *mb, int r, uint4 hl)
{
    uint32_t b[8];
    mmqr_min_brow(hl, b);
    *(uint4 *)&mb[16 * r] = make_uint4(b[0], b[1], b[2], b[3]);
    *(uint4 *)&mb[MMQR_MBG + 16 * r] = make_uint4(b[4], b[5], b[6], b[7]);
}

#if WGMMA_DEVICE
/* The min term of rows A and B (their first 16 raw bytes wa, wb) by one
 * f16 wgmma into d (exact: mmqr_min_frag against the slot's B rows mb),
 * issued and committed; fm holds its A fragment until mmqr_min_finish */
static __device__ __forceinline__ void mmqr_min_issue(float (&d)[16][4], uint32_t (&fm)[1][4], const uint32_t *wa,
                                                      const uint32_t *wb, const uint8_t *mb, int t4)
{
    mmqr_min_frag(mmqr_min_pair(wa, t4), mmqr_min_pair(wb, t4), fm[0]);
    wgmma_fence();
    wgmma_rs_z(&d[0][0], fm[0], wgmma_desc(cuda_saddr(mb), MMQR_MBG, 128, 0));
    wgmma_commit();
}

/* The chain's second half (mmqk's Q4_K chain in the CPU's order, after
 * the v1 term): acc = fma(-(dmin x), v2, acc) with dd = v2 (the min term's
 * wgmma sums), columns 8 j + 2 t4 (+ 1) of the activations' d xds, rows A
 * (hd[0]) and B (hd[1]) */
static __device__ __forceinline__ void mmqr_chain_v2(float acc[16][4], const float dd[16][4], const float *xds,
                                                     const mmqk_head hd[2], int t4)
{
#pragma unroll
    for (int j = 0; j < 16; j++) {
        const float2 xd = *(const float2 *)&xds[8 * j + 2 * t4];
#pragma unroll
        for (int k = 0; k < 4; k++) {
            const float p2 = -__fmul_rn(hd[k >> 1].dmin, k & 1 ? xd.y : xd.x);
            acc[j][k] = __fmaf_rn(p2, dd[j][k], acc[j][k]);
        }
    }
}

/* mmqr_min_issue's sums waited for (every wgmma of this warpgroup), its
 * fragment released, then the chain's second half with them */
static __device__ __forceinline__ void mmqr_min_finish(float acc[16][4], float (&d)[16][4], const uint32_t (&fm)[1][4],
                                                       const float *xds, const mmqk_head hd[2], int t4)
{
    wgmma_wait<0>();
    wgmma_pin(&d[0][0]);
    wgmma_keep(fm);
    mmqr_chain_v2(acc, d, xds, hd, t4);
}
#endif

#endif
