/* cuda/mmqk_impl — the K-quant MMQ kernel template, mmqk_kernel<T, KDR, EXP>
 * (included by mmq_q4_k.cu, mmq_q5_k.cu, mmq_q6_k.cu for their instantiations;
 * mmqw.cu and mmqr.cu use its head and min-term helpers).
 *
 * Why this shape (bench/RESULTS.md, ncu on the H200, 2026-12-01): the first
 * MMQ kernel unpacked every weight stage to int8 in shared memory and
 * copied the activations through a raw staging buffer; L1/TEX throughput
 * was 88.6% with 59 M shared-load and 24.6 M shared-store wavefronts
 * (62% of the stores bank conflicts) for a q4_K 14336 x 4096 x 512
 * product, while the tensor pipe was 7.4% busy. Here nothing is unpacked
 * through shared memory:
 *  - the weights' raw blocks land by 16-byte cp.async (Q4_K 144-, Q5_K
 *    176-byte blocks; Q6_K's 210-byte blocks, only 2-byte aligned, by
 *    4-byte cp.async, or, EXP, pre-expanded at load to int8 in 288-byte
 *    16-aligned blocks), and each warp builds its mma A fragments from
 *    them in registers: one ldmatrix of Q4_K nibbles (Q5_K: four 32-bit
 *    loads, mmqk_w says why) gives the fragment words of two sub-blocks,
 *    one of expanded Q6_K those of one;
 *  - the activations (cuda_q8k planes, 16-byte aligned) land by cp.async
 *    straight into the tile the B fragments are read from;
 *  - both are double-buffered: stage s+1 is in flight while stage s
 *    computes; one barrier per stage.
 * Row strides are odd multiples of 16 bytes modulo 128 (mmqk_w<...>::SW),
 * so the 8 rows x 4 words of a fragment load fall on 32 distinct banks,
 * and an ldmatrix's 8 row reads on 8 distinct bank groups: the padding
 * does what the seeds' XOR swizzle does (zero conflicts), for 16 bytes a
 * row. Staging copies are unrolled at compile time (cuda_copy16).
 *
 * Tile: 64 weight rows x 32 NT activation rows, 256 threads as 2 x 4 warps
 * of 32 x 8 NT (2 x NT mma tiles; NT = 2 or 4, cuda/tiles.cuh picks); a
 * stage is KDR super-blocks (256 elements each). Per sub-block group one
 * mma with a zero accumulator, its int32 result times the row's integer
 * scale into an exact int32 block sum; at each super-block's end the
 * block sums enter the float chain of cuda/qtypes.cuh (p1 = d * xd, then
 * the min term p2 = -dmin * xd with v2 = sum of min * activation sums,
 * itself by mma) — the arithmetic of the decode kernel (cuda/mmvq.cu), so
 * a row's bits never depend on the batch.
 */
#ifndef INFERD_CUDA_MMQK_IMPL_CUH
#define INFERD_CUDA_MMQK_IMPL_CUH

#include "engine/cuda/mma.cuh"
#include "engine/cuda/mmq.cuh"
#include "engine/cuda/qtypes.cuh"
#include "engine/cuda/tiles.cuh"

#include <cuda_pipeline.h>
#include <stdio.h>

static_assert(MMQ_THREADS == 4 * MMQ_BM && MMQ_BN == MMQ_BM && MMQ_BM == 64,
              "mmqk_kernel is written for 64-row weight tiles of 256 threads");

#define MMQK_XS(KDR) (256 * (KDR) + 16) /* activation tile row, bytes */

/* bytes [off, off + 4) of a shared row of words that may start at any
 * even offset (Q6_K raw blocks) */
static __device__ __forceinline__ uint32_t mmqk_ld_a2(const uint32_t *row, int off)
{
    return __funnelshift_r(row[off >> 2], row[(off >> 2) + 1], (off & 3) * 8);
}

/* byte i (0..3) of w, sign-extended */
template <int I> static __device__ __forceinline__ int mmqk_sx8(uint32_t w)
{
    return (int)(w << (24 - 8 * I)) >> 24;
}
static __device__ __forceinline__ int mmqk_ux8(uint32_t w, int i)
{
    return (int)__byte_perm(w, 0, 0x4440 | i);
}

/* ---- weight layouts in the stage buffer ---------------------------------
 * SW: words per row (>= the stage's bytes, an odd multiple of 4 mod 32).
 * copy(): thread part `lp` of 4 queues its share of stage s of one row.
 * head(): the super-block's float scales and packed integer scales/mins.
 * frag(): the A fragment words (m16n8k32 layout: rows g and g+8, bytes
 * 4t.. and 16+4t.. of sub-block j) of two rows' sub-block j. */
struct mmqk_head {
    float d, dmin;
    uint32_t sc[4]; /* Q4_K/Q5_K: 8 scales, 8 mins as bytes; Q6_K: 16 int8 scales */
    uint32_t qh[2]; /* Q5_K: the row's fifth bits for bytes 4t.., 16+4t.. */
};

template <int T, int KDR, bool EXP> struct mmqk_w;

/* Q4_K/Q5_K: d, dmin and the 12 scale bytes are a block's first 4 words */
static __device__ __forceinline__ void mmqk_k45_head(const uint32_t *b, mmqk_head &h)
{
    const uint32_t d2 = b[0], s0 = b[1], s1 = b[2], s2 = b[3];
    h.d = cuda_h2f((quant_f16)(d2 & 0xffff));
    h.dmin = cuda_h2f((quant_f16)(d2 >> 16));
    /* engine/quant_impl.h's k4_scale_min for all 8 at once: sc[0..1] the
     * scales of sub-blocks 0-3, 4-7; sc[2..3] their mins */
    h.sc[0] = s0 & 0x3f3f3f3fu;
    h.sc[1] = (s2 & 0x0f0f0f0fu) | ((s0 >> 2) & 0x30303030u);
    h.sc[2] = s1 & 0x3f3f3f3fu;
    h.sc[3] = ((s2 >> 4) & 0x0f0f0f0fu) | ((s1 >> 2) & 0x30303030u);
}

template <int KDR> struct mmqk_w<QT_Q4_K, KDR, false> {
    enum { BW = 36, SW = KDR == 1 ? 36 : 76, MIN = 1, G16 = 0, LDSM = 1 }; /* BW: words per block */
    static __device__ __forceinline__ void copy(uint32_t *dst, const uint8_t *row, int64_t s, int lp)
    {
        cuda_copy16<9 * KDR, 4>(dst, row + (size_t)s * KDR * 144, lp);
    }
    static __device__ __forceinline__ void head(const uint32_t *r, int kd, int sh, mmqk_head &h)
    {
        (void)sh;
        mmqk_k45_head(r + BW * kd, h);
    }
    /* sub-blocks 2p (low nibbles) and 2p+1 (high) share their 32 bytes,
     * at word aoff(kd, p) of the row; w: the fragment words of rows g,
     * g + 8 x words t, t + 4 of them (cuda_ldsm_x4) */
    static __device__ __forceinline__ int aoff(int kd, int p) { return BW * kd + 4 + 8 * p; }
    static __device__ __forceinline__ void frag2(const uint32_t w[4], int p, const mmqk_head &ha,
                                                 const mmqk_head &hb, int lo[4], int hi[4])
    {
        (void)p;
        (void)ha;
        (void)hb;
#pragma unroll
        for (int i = 0; i < 4; i++) {
            lo[i] = (int)(w[i] & 0x0f0f0f0fu);
            hi[i] = (int)((w[i] >> 4) & 0x0f0f0f0fu);
        }
    }
};

template <int KDR> struct mmqk_w<QT_Q5_K, KDR, false> {
    /* LDSM 0: the ldmatrix fragments cost q5_K (fifth bits: more live
     * registers) spills of 164 -> 372 B at 128 registers and 4% (H200,
     * 2026-12-02); q4_K and q6_K EXP gained 2-3.5% */
    enum { BW = 44, SW = KDR == 1 ? 44 : 92, MIN = 1, G16 = 0, LDSM = 0 };
    static __device__ __forceinline__ void copy(uint32_t *dst, const uint8_t *row, int64_t s, int lp)
    {
        cuda_copy16<11 * KDR, 4>(dst, row + (size_t)s * KDR * 176, lp);
    }
    static __device__ __forceinline__ void head(const uint32_t *r, int kd, int t, mmqk_head &h)
    {
        const uint32_t *b = r + BW * kd;
        mmqk_k45_head(b, h);
        h.qh[0] = b[4 + t];     /* qh bytes 4t.. */
        h.qh[1] = b[4 + 4 + t]; /* qh bytes 16+4t.. */
    }
    static __device__ __forceinline__ int aoff(int kd, int p) { return BW * kd + 12 + 8 * p; }
    static __device__ __forceinline__ void frag2(const uint32_t w[4], int p, const mmqk_head &ha,
                                                 const mmqk_head &hb, int lo[4], int hi[4])
    {
        const uint32_t qh[4] = {ha.qh[0], hb.qh[0], ha.qh[1], hb.qh[1]};
#pragma unroll
        for (int i = 0; i < 4; i++) {
            lo[i] = (int)((w[i] & 0x0f0f0f0fu) | (((qh[i] >> (2 * p)) & 0x01010101u) << 4));
            hi[i] = (int)(((w[i] >> 4) & 0x0f0f0f0fu) | (((qh[i] >> (2 * p + 1)) & 0x01010101u) << 4));
        }
    }
};

/* Q6_K as loaded (210-byte blocks, 2-byte aligned): the row's words from
 * the word at or below the stage's first byte; `sh` = that byte's offset
 * in its word (0 or 2) for the row. Element k of a super-block: half h =
 * k/128, quarter q = (k%128)/32, l = k%32: low 4 bits in nibble q/2 of
 * ql[64h + 32(q%2) + l], high 2 bits at 2q of qh[32h + l]. */
template <int KDR> struct mmqk_w<QT_Q6_K, KDR, false> {
    enum { SW = KDR == 1 ? 60 : 108, MIN = 0, G16 = 1, LDSM = 0 }; /* 2-byte aligned: no ldmatrix */
    static __device__ __forceinline__ void copy(uint32_t *dst, const uint8_t *row, int64_t s, int lp)
    {
        cuda_raw_copy<210 * KDR, 4>(dst, row + (size_t)s * KDR * 210, lp);
    }
    static __device__ __forceinline__ void head(const uint32_t *r, int kd, int sh, mmqk_head &h)
    {
        const int b = sh + 210 * kd;
#pragma unroll
        for (int i = 0; i < 4; i++)
            h.sc[i] = mmqk_ld_a2(r, b + 192 + 4 * i);
        h.d = cuda_h2f((quant_f16)(mmqk_ld_a2(r, b + 208) & 0xffff));
        h.dmin = 0.0f;
        h.qh[0] = (uint32_t)b; /* the block's byte offset, for frag() */
    }
    /* sub-block j = 4hh + q: both k16 halves in the k32 fragment layout */
    static __device__ __forceinline__ void frag(const uint32_t *ra, const uint32_t *rb, int j, int t,
                                                const mmqk_head &ha, const mmqk_head &hb, int a[4])
    {
        const int hh = j >> 2, q = j & 3;
        const int ql = 64 * hh + 32 * (q & 1) + 4 * t, qh = 128 + 32 * hh + 4 * t;
        const int ls = 4 * (q >> 1), hs = 2 * q;
        const int ba = (int)ha.qh[0], bb = (int)hb.qh[0];
        const uint32_t L[4] = {mmqk_ld_a2(ra, ba + ql), mmqk_ld_a2(rb, bb + ql), mmqk_ld_a2(ra, ba + ql + 16),
                               mmqk_ld_a2(rb, bb + ql + 16)};
        const uint32_t H[4] = {mmqk_ld_a2(ra, ba + qh), mmqk_ld_a2(rb, bb + qh), mmqk_ld_a2(ra, ba + qh + 16),
                               mmqk_ld_a2(rb, bb + qh + 16)};
#pragma unroll
        for (int i = 0; i < 4; i++)
            a[i] = (int)__vsubss4(((L[i] >> ls) & 0x0f0f0f0fu) | (((H[i] >> hs) & 0x03030303u) << 4),
                                  0x20202020);
    }
};

/* Q6_K expanded at load (cuda_mmq_expand_q6_K): per super-block 256 int8
 * values q - 32 in k order, 16 int8 scales, the float d, 12 bytes of pad:
 * 288 bytes, 16-byte aligned, so fragments are plain 32-bit loads. */
#define MMQ_Q6X_BYTES 288
template <int KDR> struct mmqk_w<QT_Q6_K, KDR, true> {
    enum { BW = 72, SW = KDR == 1 ? 76 : 148, MIN = 0, G16 = 1, LDSM = 1 };
    static __device__ __forceinline__ void copy(uint32_t *dst, const uint8_t *row, int64_t s, int lp)
    {
        cuda_copy16<18 * KDR, 4>(dst, row + (size_t)s * KDR * MMQ_Q6X_BYTES, lp);
    }
    static __device__ __forceinline__ void head(const uint32_t *r, int kd, int sh, mmqk_head &h)
    {
        (void)sh;
        const uint32_t *b = r + BW * kd;
#pragma unroll
        for (int i = 0; i < 4; i++)
            h.sc[i] = b[64 + i];
        h.d = __uint_as_float(b[68]);
        h.dmin = 0.0f;
    }
    /* sub-block j's 32 values at word aoff(kd, j): the fragment is the
     * words themselves (cuda_ldsm_x4) */
    static __device__ __forceinline__ int aoff(int kd, int j) { return BW * kd + 8 * j; }
};

/* NT: m16n8 tiles per warp along the activations: the block's tile is 64
 * weight rows x 32 NT activation rows (NT = 2: 64, NT = 4: 128) */
template <int T, int KDR, bool EXP, int NT> struct mmqk_smem {
    typedef mmqk_w<T, KDR, EXP> W;
    uint32_t w[2][MMQ_BM][W::SW];
    int8_t x[2][32 * NT][MMQK_XS(KDR)];
    int8_t xhl[2][32 * NT][CUDA_Q8K_HL * KDR]; /* activation sums per 32 as bytes (cuda_q8k.hl) */
    float xd[2][32 * NT][KDR];
};

/* one sub-block's products of the warp's 2 x NT tiles, scaled into sum */
template <int G16, int NT>
static __device__ __forceinline__ void mmqk_sub(int sum[2][NT][4], const int a[2][4], const int b[NT][2],
                                                const int s0[2], const int s1[2], const int s0b[2],
                                                const int s1b[2])
{
#pragma unroll
    for (int mt = 0; mt < 2; mt++)
#pragma unroll
        for (int nt = 0; nt < NT; nt++) {
            int c[4];
            if (!G16) {
                cuda_mma_k32(c, a[mt], b[nt]);
                sum[mt][nt][0] += s0[mt] * c[0];
                sum[mt][nt][1] += s0[mt] * c[1];
                sum[mt][nt][2] += s1[mt] * c[2];
                sum[mt][nt][3] += s1[mt] * c[3];
            } else {
                /* Q6_K: a scale per 16: the k32 fragment as two k16 halves */
                cuda_mma_k16(c, a[mt][0], a[mt][1], b[nt][0]);
                sum[mt][nt][0] += s0[mt] * c[0];
                sum[mt][nt][1] += s0[mt] * c[1];
                sum[mt][nt][2] += s1[mt] * c[2];
                sum[mt][nt][3] += s1[mt] * c[3];
                cuda_mma_k16(c, a[mt][2], a[mt][3], b[nt][1]);
                sum[mt][nt][0] += s0b[mt] * c[0];
                sum[mt][nt][1] += s0b[mt] * c[1];
                sum[mt][nt][2] += s1b[mt] * c[2];
                sum[mt][nt][3] += s1b[mt] * c[3];
            }
        }
}

/* The min term's A words of rows g, g + 8 (hd[0], hd[1]): the min term v2 =
 * sum_j m_j s_j of K-quants with mins runs as two m16n8k16 mma, A the
 * rows' 8 mins in the half of K the mma takes (thread t4 holds k = 4 t4..:
 * mins 4 (t4 & 1).., kept for t4 < 2 in the first mma, mh, for t4 >= 2 in
 * the second, ml), B the activation sums' bytes (cuda_q8k.hl: hi_0..7,
 * lo_0..7); v2 = 128 (m . hi) + (m . lo), the exact integer the decode
 * kernel's dp4a give. */
static __device__ __forceinline__ void mmqk_min_words(const mmqk_head hd[2], int t4, int mh[2], int ml[2])
{
#pragma unroll
    for (int h = 0; h < 2; h++) {
        const int mw = (int)((t4 & 1) ? hd[h].sc[3] : hd[h].sc[2]);
        mh[h] = t4 < 2 ? mw : 0;
        ml[h] = t4 < 2 ? 0 : mw;
    }
}

/* The A fragment words of rows g, g + 8 x words o + t, o + 4 + t (o: the
 * chunk's first word, a multiple of 4): one ldmatrix from the lane's row
 * address `sa` (LDSM), or four 32-bit loads from row g (`ra`, sw words a
 * row). The activations' B
 * fragments stay 32-bit loads: ldmatrix for them raised ptxas's spills at
 * 128 registers (q4_K 0 -> 116 B, q6_K EXP 0 -> 436 B) and was not
 * measured. */
template <int LDSM>
static __device__ __forceinline__ void mmqk_afrag(uint32_t w[4], uint32_t sa, const uint32_t *ra, int sw, int o,
                                                  int t)
{
    if (LDSM) {
        cuda_ldsm_x4(w, sa + 4 * o);
    } else {
        o += t;
        w[0] = ra[o];
        w[1] = ra[8 * sw + o];
        w[2] = ra[o + 4];
        w[3] = ra[8 * sw + o + 4];
    }
}

template <int T, int KDR, bool EXP, int NT>
static __global__ void __launch_bounds__(MMQ_THREADS, MMQK_MIN_BLOCKS(NT))
mmqk_kernel(const uint8_t *__restrict__ w, size_t row_bytes, int32_t n_w, cuda_q8k X, int64_t nbr,
            float *__restrict__ y, int32_t n_rows, struct cuda_epi E)
{
    cuda_pdl_enter();
    typedef mmqk_w<T, KDR, EXP> W;
    typedef mmqk_smem<T, KDR, EXP, NT> SM;
    extern __shared__ __align__(16) uint8_t mmqk_smem_raw[];
    SM &S = *(SM *)mmqk_smem_raw;
    const int tid = threadIdx.x, lane = tid % CUDA_WARP, warp = tid / CUDA_WARP;
    const int wm = warp / 4, wn = warp % 4; /* warp tile: rows 32*wm.., activations 8*NT*wn.. */
    const int g = lane >> 2, t4 = lane & 3;
    const int32_t m0 = blockIdx.x * MMQ_BM, n0 = blockIdx.y * (32 * NT);
    const int64_t n_stages = nbr / KDR;

    /* loader: 4 threads per row of each tile (activation rows lr, lr + 64) */
    const int lr = tid / 4, lp = tid % 4;
    const int32_t wrl = mmq_wrow(m0, lr, n_w, E.glu);        /* -1: past the weight */
    const int32_t wrow = wrl >= 0 ? wrl : n_w - 1;             /* clamped: never loaded */
    /* The loader's sources as 32-bit offsets from block-uniform bases
     * (uniform registers): 64-bit per-thread pointers held across the
     * stage loop were what ptxas spilled at 128 registers, and their
     * reloads at each stage's copies were 15% of the q4_K kernel's stall
     * samples (ncu, 2026-12-02: long scoreboard after LDL). The launcher
     * keeps a block's weight rows and the activations under 4 GB of
     * offset (mmqk_launch). */
    const int32_t wr0 = E.glu ? m0 / 2 : m0;
    const uint8_t *wbase = w + (size_t)wr0 * row_bytes;
    const uint32_t woff = (uint32_t)((size_t)(wrow - wr0) * row_bytes);
    uint32_t xb0[NT / 2]; /* activation block index of the row's super-block 0 */
#pragma unroll
    for (int q = 0; q < NT / 2; q++) {
        const int32_t xrow = n0 + lr + 64 * q < n_rows ? n0 + lr + 64 * q : n_rows - 1;
        xb0[q] = (uint32_t)xrow * (uint32_t)nbr;
    }

    /* Q6_K raw: each of the thread's 4 weight rows starts its stage at byte
     * (address & 3) of its first word */
    const uint8_t *wr4[2][2];
#pragma unroll
    for (int mt = 0; mt < 2; mt++)
#pragma unroll
        for (int h = 0; h < 2; h++) {
            const int32_t r = mmq_wrow(m0, 32 * wm + 16 * mt + g + 8 * h, n_w, E.glu);
            wr4[mt][h] = w + (size_t)(r >= 0 ? r : n_w - 1) * row_bytes;
        }

    /* the A fragments' ldmatrix row addresses in buffer 0 (W::LDSM,
     * cuda_ldsm_x4): lane l reads row (l & 7) + 8 ((l >> 3) & 1) of the
     * warp's 16-row tile mt, words 4 (l >> 4).. of a fragment chunk */
    uint32_t sa[2];
#pragma unroll
    for (int mt = 0; mt < 2; mt++)
        sa[mt] = cuda_saddr(&S.w[0][32 * wm + 16 * mt + (lane & 7) + 8 * ((lane >> 3) & 1)][4 * (lane >> 4)]);

    float acc[2][NT][4];
    int sum[2][NT][4];
#pragma unroll
    for (int a = 0; a < 2; a++)
#pragma unroll
        for (int b = 0; b < NT; b++)
#pragma unroll
            for (int i = 0; i < 4; i++) {
                acc[a][b][i] = 0.0f;
                sum[a][b][i] = 0;
            }

    /* queue stage s into buffer s & 1 */
    /* Rows past the weight's or the batch's end are not loaded: their tile
     * rows hold stale bytes whose products are never stored. (Loading the
     * clamped last row instead had 48 threads of a 16-row batch copy the
     * same bytes: q4_K n = 16 took longer than n = 64.) */
    const bool wload = wrl >= 0;
#define MMQK_ISSUE(s)                                                                             \
    do {                                                                                          \
        const int bf = (int)((s) & 1);                                                            \
        if (wload)                                                                                \
            W::copy(S.w[bf][lr], wbase + woff, (s), lp);                                          \
        _Pragma("unroll") for (int q = 0; q < NT / 2; q++)                                        \
        {                                                                                         \
            const int xr = lr + 64 * q;                                                           \
            const uint32_t xb = xb0[q] + (uint32_t)(s) * KDR;                                     \
            if (n0 + xr < n_rows) {                                                               \
                cuda_copy16<16 * KDR, 4>(S.x[bf][xr], X.qs + xb * QK_K, lp);                      \
                if (lp < KDR)                                                                     \
                    __pipeline_memcpy_async(&S.xd[bf][xr][lp], X.d + xb + lp, 4);                 \
                else if (lp < 2 * KDR)                                                            \
                    __pipeline_memcpy_async(&S.xhl[bf][xr][CUDA_Q8K_HL * (lp - KDR)], X.hl + (xb + lp - KDR) * CUDA_Q8K_HL, CUDA_Q8K_HL); \
            }                                                                                     \
        }                                                                                         \
        __pipeline_commit();                                                                      \
    } while (0)

    MMQK_ISSUE((int64_t)0);
    for (int64_t s = 0; s < n_stages; s++) {
        __pipeline_wait_prior(0);
        __syncthreads(); /* stage s has landed everywhere; stage s-1's readers are done */
        if (s + 1 < n_stages)
            MMQK_ISSUE(s + 1);
        const int bf = (int)(s & 1);

#pragma unroll
        for (int kd = 0; kd < KDR; kd++) {
            mmqk_head hd[2][2];
#pragma unroll
            for (int mt = 0; mt < 2; mt++)
#pragma unroll
                for (int h = 0; h < 2; h++) {
                    const int sh = EXP || T != QT_Q6_K
                                       ? 0
                                       : (int)(((uintptr_t)(wr4[mt][h] + (size_t)s * KDR * 210)) & 3);
                    W::head(S.w[bf][32 * wm + 16 * mt + g + 8 * h], kd, W::G16 ? sh : t4, hd[mt][h]);
                }
#pragma unroll
            for (int j = 0; j < 8; j++) {
                int a[2][4];
                if constexpr (!W::G16) {
                    /* Q4_K/Q5_K: sub-blocks 2p and 2p+1 from one load */
                    if (j % 2)
                        continue;
                    int hi[2][4];
#pragma unroll
                    for (int mt = 0; mt < 2; mt++) {
                        uint32_t wf[4];
                        mmqk_afrag<W::LDSM>(wf, sa[mt] + bf * (uint32_t)sizeof(S.w[0]),
                                            S.w[bf][32 * wm + 16 * mt + g], W::SW, W::aoff(kd, j / 2), t4);
                        W::frag2(wf, j / 2, hd[mt][0], hd[mt][1], a[mt], hi[mt]);
                    }
#pragma unroll
                    for (int jj = 0; jj < 2; jj++) {
                        const int sj = j + jj;
                        int b[NT][2];
#pragma unroll
                        for (int nt = 0; nt < NT; nt++) {
                            const int rb = 8 * NT * wn + 8 * nt + g;
                            b[nt][0] = *(const int *)&S.x[bf][rb][256 * kd + 32 * sj + 4 * t4];
                            b[nt][1] = *(const int *)&S.x[bf][rb][256 * kd + 32 * sj + 16 + 4 * t4];
                        }
                        int s0[2], s1[2];
#pragma unroll
                        for (int mt = 0; mt < 2; mt++) {
                            s0[mt] = mmqk_ux8(hd[mt][0].sc[sj >> 2], sj & 3);
                            s1[mt] = mmqk_ux8(hd[mt][1].sc[sj >> 2], sj & 3);
                        }
                        mmqk_sub<0, NT>(sum, jj ? hi : a, b, s0, s1, s0, s1);
                    }
                } else {
#pragma unroll
                    for (int mt = 0; mt < 2; mt++) {
                        if constexpr (W::LDSM) {
                            cuda_ldsm_x4((uint32_t *)a[mt],
                                         sa[mt] + bf * (uint32_t)sizeof(S.w[0]) + 4 * W::aoff(kd, j));
                        } else {
                            const int ra = 32 * wm + 16 * mt + g;
                            W::frag(S.w[bf][ra], S.w[bf][ra + 8], j, t4, hd[mt][0], hd[mt][1], a[mt]);
                        }
                    }
                    int b[NT][2];
#pragma unroll
                    for (int nt = 0; nt < NT; nt++) {
                        const int rb = 8 * NT * wn + 8 * nt + g;
                        b[nt][0] = *(const int *)&S.x[bf][rb][256 * kd + 32 * j + 4 * t4];
                        b[nt][1] = *(const int *)&S.x[bf][rb][256 * kd + 32 * j + 16 + 4 * t4];
                    }
                    /* scales 2j (elements 32j..+15) and 2j+1, int8 */
                    int s0[2], s1[2], s0b[2], s1b[2];
#pragma unroll
                    for (int mt = 0; mt < 2; mt++) {
                        const uint32_t wa = hd[mt][0].sc[j >> 1], wb = hd[mt][1].sc[j >> 1];
                        if (j & 1) {
                            s0[mt] = mmqk_sx8<2>(wa);
                            s0b[mt] = mmqk_sx8<3>(wa);
                            s1[mt] = mmqk_sx8<2>(wb);
                            s1b[mt] = mmqk_sx8<3>(wb);
                        } else {
                            s0[mt] = mmqk_sx8<0>(wa);
                            s0b[mt] = mmqk_sx8<1>(wa);
                            s1[mt] = mmqk_sx8<0>(wb);
                            s1b[mt] = mmqk_sx8<1>(wb);
                        }
                    }
                    mmqk_sub<1, NT>(sum, a, b, s0, s1, s0b, s1b);
                }
            }
            /* the super-block ends: its terms enter each element's chain,
             * the min term by mma (mmqk_min_words) */
            float xd[NT][2];
            int bhl[NT];
#pragma unroll
            for (int nt = 0; nt < NT; nt++) {
#pragma unroll
                for (int e = 0; e < 2; e++)
                    xd[nt][e] = S.xd[bf][8 * NT * wn + 8 * nt + 2 * t4 + e][kd];
                bhl[nt] = W::MIN ? *(const int *)&S.xhl[bf][8 * NT * wn + 8 * nt + g][CUDA_Q8K_HL * kd + 4 * t4] : 0;
            }
#pragma unroll
            for (int mt = 0; mt < 2; mt++) {
                int mh[2] = {0, 0}, ml[2] = {0, 0};
                if (W::MIN)
                    mmqk_min_words(hd[mt], t4, mh, ml);
#pragma unroll
                for (int nt = 0; nt < NT; nt++) {
                    int ch[4] = {0, 0, 0, 0}, cl[4] = {0, 0, 0, 0};
                    if (W::MIN) {
                        cuda_mma_k16(ch, mh[0], mh[1], bhl[nt]);
                        cuda_mma_k16(cl, ml[0], ml[1], bhl[nt]);
                    }
#pragma unroll
                    for (int i = 0; i < 4; i++) {
                        const mmqk_head &H = hd[mt][i >> 1];
                        const float x = xd[nt][i & 1];
                        const float p1 = __fmul_rn(H.d, x);
                        float a2 = __fmaf_rn(p1, (float)sum[mt][nt][i], acc[mt][nt][i]);
                        if (W::MIN) {
                            const float p2 = -__fmul_rn(H.dmin, x);
                            a2 = __fmaf_rn(p2, (float)(ch[i] * 128 + cl[i]), a2);
                        }
                        acc[mt][nt][i] = a2;
                        sum[mt][nt][i] = 0;
                    }
                }
            }
        }
    }
#undef MMQK_ISSUE
    mmq_tile_store<NT>(acc, m0, n0, wm, wn, g, t4, n_w, n_rows, y, E);
}

/* blocks per SM of one instantiation (cuda/tiles.cuh), asked once */
template <int T, int KDR, bool EXP, int NT> static int mmqk_occupancy(void)
{
    return mmq_occupancy_once<mmqk_kernel<T, KDR, EXP, NT>>(sizeof(mmqk_smem<T, KDR, EXP, NT>));
}

/* Launch one instantiation; 0, or -1 when this device cannot hold its
 * shared memory (the caller then takes another row of the tile table). */
template <int T, int KDR, bool EXP, int NT>
static int mmqk_launch(struct cuda_ctx *c, const uint8_t *wdata, size_t row_bytes, int32_t n_w,
                       int64_t ne0, const void *xq, float *y, int32_t n_rows)
{
    typedef mmqk_smem<T, KDR, EXP, NT> SM;
    const int64_t nbr = ne0 / QK_K;
    if (mmqk_occupancy<T, KDR, EXP, NT>() == 0)
        return -1;
    /* the kernel's 32-bit loader offsets: a block's weight rows (under the
     * SwiGLU epilogue up to F + 64 rows past its base) and the activations
     * each under 4 GB; past that (no model comes near) the product fails
     * with a clear error instead of reading wrong bytes */
    if ((uint64_t)n_rows * (uint64_t)ne0 >= (1ull << 32) ||
        (uint64_t)(c->epi.glu + MMQ_BM) * row_bytes >= (1ull << 32))
        return INF_EUNSUPPORTED;
    const dim3 grid(cuda_blocks(n_w, MMQ_BM), cuda_blocks(n_rows, 32 * NT));
    cuda_launch(c, mmqk_kernel<T, KDR, EXP, NT>, grid, MMQ_THREADS, sizeof(SM),
        wdata, row_bytes, n_w, cuda_q8k_planes(xq, (int64_t)n_rows * nbr), nbr, y, n_rows, c->epi);
    return 0;
}

/* ---- dispatch ------------------------------------------------------------ */

template <int T, bool EXP, int NT>
static int mmqk_variant(struct cuda_ctx *c, const struct backend_weight *w, const void *xq, float *y,
                        int32_t n_rows, int kdr)
{
    const uint8_t *wd = EXP ? (const uint8_t *)w->aux : (const uint8_t *)w->data;
    const size_t rb = EXP ? (size_t)(w->ne0 / QK_K) * MMQ_Q6X_BYTES : w->row_bytes;
    return kdr == 2 ? mmqk_launch<T, 2, EXP, NT>(c, wd, rb, (int32_t)w->ne1, w->ne0, xq, y, n_rows)
                    : mmqk_launch<T, 1, EXP, NT>(c, wd, rb, (int32_t)w->ne1, w->ne0, xq, y, n_rows);
}

template <int T, bool EXP>
static int mmqk_variant_bn(struct cuda_ctx *c, const struct backend_weight *w, const void *xq, float *y,
                           int32_t n_rows, int kdr, int bn)
{
    return bn == 128 ? mmqk_variant<T, EXP, 4>(c, w, xq, y, n_rows, kdr)
                     : mmqk_variant<T, EXP, 2>(c, w, xq, y, n_rows, kdr);
}

/* bn: the block's activation rows, 64 (0 means 64) or 128 */
template <int T>
static int mmqk_variant_any(struct cuda_ctx *c, const struct backend_weight *w, const void *xq, float *y,
                            int32_t n_rows, int kdr, int exp, int bn)
{
    if (!mmq_tile_valid(kdr, bn) || w->ne0 % (QK_K * kdr))
        return INF_EUNSUPPORTED;
    if (exp) {
        if constexpr (T == QT_Q6_K) {
            if (w->aux)
                return mmqk_variant_bn<T, true>(c, w, xq, y, n_rows, kdr, bn);
        }
        return INF_EUNSUPPORTED;
    }
    return mmqk_variant_bn<T, false>(c, w, xq, y, n_rows, kdr, bn);
}

/* occ[b][k]: blocks per SM at BN = 64 << b, KDR = k + 1 */
template <int T, bool EXP> static void mmqk_occ(int occ[2][2])
{
    occ[0][0] = mmqk_occupancy<T, 1, EXP, 2>();
    occ[0][1] = mmqk_occupancy<T, 2, EXP, 2>();
    occ[1][0] = mmqk_occupancy<T, 1, EXP, 4>();
    occ[1][1] = mmqk_occupancy<T, 2, EXP, 4>();
}

/* the tile table's choice (cuda/tiles.cuh: mmq_pick_tile, from the
 * instantiations' occupancy on this device), falling back to KDR = 1
 * where the device cannot give KDR = 2 its shared memory (sm_121) */
template <int T>
static void mmqk_dispatch(struct cuda_ctx *c, const struct backend_weight *w, const void *xq, float *y,
                          int32_t n_rows)
{
    /* Q4_K: the planes' int8 product where the weight has planes (cuda/
     * mmq4p.cu), else the exact F16 product where it runs (cuda/
     * mmqh_impl.cuh); the same bits; else below */
    if constexpr (T == QT_Q4_K) {
        if (cuda_mmqh_takes(c, c->mmqh, c->mmqh_fill, T, w->ne0, w->ne1, n_rows) &&
            ((c->mmqw >= 2 && cuda_mmq4p(c, w, xq, y, n_rows, 0) == 0) || cuda_mmqh<T>(c, w, xq, y, n_rows) == 0))
            return;
        /* every form below reads the int8 plane, which the quantizer left
         * out only where cuda_mmqr_takes said mmqr would run (cuda/
         * mul_mat.cu MM_HELD_X16): a bug, so an error, never a product of
         * bytes not written */
        if (c->xq_no_qs) {
            c->err = INF_EINTERNAL;
            snprintf(c->err_msg, sizeof(c->err_msg), "mul_mat: Q4_K product without the int8 plane");
            return;
        }
    }
    /* Q6_K: int8 wgmma where it runs (cuda/mmq6w.cu; the same bits) */
    if constexpr (T == QT_Q6_K) {
        if (cuda_mmqh_takes(c, c->mmq6w, c->mmq6w_fill, T, w->ne0, w->ne1, n_rows) &&
            cuda_mmq6w(c, w, xq, y, n_rows, -1) == 0)
            return;
    }
    const int exp = T == QT_Q6_K && w->aux != NULL;
    int occ[2][2] = {{0, 0}, {0, 0}};
    if constexpr (T == QT_Q6_K) {
        if (exp)
            mmqk_occ<T, true>(occ);
        else
            mmqk_occ<T, false>(occ);
    } else {
        mmqk_occ<T, false>(occ);
    }
    int kdr = 1, bn = 64;
    mmq_pick_tile(c->n_sm, occ, w->ne0, w->ne1, n_rows, &kdr, &bn);
    const int rc = mmq_launch_picked(
        kdr, [&](int k) { return mmqk_variant_any<T>(c, w, xq, y, n_rows, k, exp, bn); });
    if (rc) {
        c->err = rc == -1 ? INF_EDEVICE : rc;
        snprintf(c->err_msg, sizeof(c->err_msg), "mmq: no kernel for %lld x %lld (kdr %d, exp %d, bn %d)",
                 (long long)w->ne0, (long long)w->ne1, kdr, exp, bn);
    }
}

#define MMQK_DEFINE(T)                                                                            \
    template <>                                                                                   \
    void cuda_mmq<T>(struct cuda_ctx * c, const struct backend_weight *w, const void *xq, float *y, \
                     int32_t n_rows)                                                              \
    {                                                                                             \
        mmqk_dispatch<T>(c, w, xq, y, n_rows);                                                    \
    }                                                                                             \
    template <>                                                                                   \
    int cuda_mmqk_variant<T>(struct cuda_ctx * c, const struct backend_weight *w, const void *xq, \
                             float *y, int32_t n_rows, int kdr, int exp, int bn)                  \
    {                                                                                             \
        return mmqk_variant_any<T>(c, w, xq, y, n_rows, kdr, exp, bn);                            \
    }

#endif
