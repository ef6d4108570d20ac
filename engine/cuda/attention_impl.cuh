/* cuda/attention_impl — what the attention kernels share (cuda/attention.cu's
 * fused kernels, cuda/attention_dec.cu's decode split): the CPU-order score,
 * the online softmax's factors and walk with the CPU's F16 accumulator, the
 * chunk's cache slots and the staging of K/V rows as F32. Every kernel that
 * computes a row's attention goes through these, so their bits agree.
 */
#ifndef INFERD_CUDA_ATTENTION_IMPL_CUH
#define INFERD_CUDA_ATTENTION_IMPL_CUH

#include "engine/cuda/common.cuh"
#include "engine/cuda/mma.cuh"
#include "engine/sample_exp.h"

#define ATT_MAX_DPL 8 /* dimensions per lane: head_dim <= 256 */
#define ATT_WARPS 4   /* query heads per thread block */
#define ATT_VS_HD 128 /* head_dim up to which a chunk's V rows are staged in shared memory */
#define ATT_G_MAX 16  /* query heads a group (warps of the grouped kernels' blocks) */

/* The 32 chains of a score met as GGML_F32x8_REDUCE: (a0 + a2) + (a1 + a3)
 * per lane of the four 8-lane accumulators, lanes l + 4 onto l, then
 * (t0 + t1) + (t2 + t3) */
static __device__ __forceinline__ float att_reduce_cpu(const float a[32])
{
    float v[8];
#pragma unroll
    for (int l = 0; l < 8; l++)
        v[l] = __fadd_rn(__fadd_rn(a[l], a[16 + l]), __fadd_rn(a[8 + l], a[24 + l]));
    float t[4];
#pragma unroll
    for (int l = 0; l < 4; l++)
        t[l] = __fadd_rn(v[l], v[4 + l]);
    return __fadd_rn(__fadd_rn(t[0], t[1]), __fadd_rn(t[2], t[3]));
}

/* The CPU's score of one cached position, bit for bit: engine/quant_dot.c's
 * F16 dot (llama.cpp's ggml_vec_dot_f16 order) times the scale. Element e
 * of the first hd & ~31 goes into chain e % 32 (32 F32 fma chains, in e
 * order); the chains meet in att_reduce_cpu (avx2_reduce4x8's tree); the
 * hd % 32 tail is added in double, one exact product at a time, and
 * rounded once. qv: the F16-rounded query as floats (16-byte
 * aligned); K4(c): the K row's elements 4c .. 4c + 3 as floats (exact), for
 * 4c < hd & ~31; K1(e): element e, for the tail. A score depends only on
 * its query and its K row, never on the batch. */
template <typename KF4, typename KF1>
static __device__ __forceinline__ float att_score_cpu(const float *qv, KF4 K4, KF1 K1, int hd, float scale)
{
    float a[32];
#pragma unroll
    for (int j = 0; j < 32; j++)
        a[j] = 0.0f;
    const int np = hd & ~31;
    for (int c = 0; c < np; c += 32)
#pragma unroll
        for (int j = 0; j < 32; j += 4) {
            const float4 k = K4((c + j) >> 2), x = *(const float4 *)(qv + c + j);
            a[j] = __fmaf_rn(k.x, x.x, a[j]);
            a[j + 1] = __fmaf_rn(k.y, x.y, a[j + 1]);
            a[j + 2] = __fmaf_rn(k.z, x.z, a[j + 2]);
            a[j + 3] = __fmaf_rn(k.w, x.w, a[j + 3]);
        }
    const float s = att_reduce_cpu(a);
    if (np == hd)
        return __fmul_rn(s, scale);
    double sd = (double)s;
    for (int e = np; e < hd; e++)
        sd = __dadd_rn(sd, (double)__fmul_rn(K1(e), qv[e]));
    return __fmul_rn(__double2float_rn(sd), scale);
}

/* att_score_cpu on an F16 K row (global or shared memory; a row starts at
 * a multiple of hd elements, so where hd % 4 == 0 its fours are 8-byte
 * aligned) */
static __device__ __forceinline__ float att_score(const float *qv, const quant_f16 *kr, int hd, float scale)
{
    return att_score_cpu(
        qv,
        [&](int c) {
            if (hd % 4)
                return make_float4(__half2float(__ushort_as_half(kr[4 * c])),
                                   __half2float(__ushort_as_half(kr[4 * c + 1])),
                                   __half2float(__ushort_as_half(kr[4 * c + 2])),
                                   __half2float(__ushort_as_half(kr[4 * c + 3])));
            const uint2 u = *(const uint2 *)(kr + 4 * c);
            const float2 lo = __half22float2(*(const __half2 *)&u.x), hi = __half22float2(*(const __half2 *)&u.y);
            return make_float4(lo.x, lo.y, hi.x, hi.y);
        },
        [&](int e) { return __half2float(__ushort_as_half(kr[e])); }, hd, scale);
}

/* The online softmax over one chunk of cnt positions (lane i holds the
 * score sc of the chunk's position i; vrow(i) gives its V row). The
 * running maximum before each position comes from a prefix max across the
 * lanes, so each lane takes its own position's exponential in parallel:
 * m_before(i) = max(m, s_0..s_{i-1}) is what a one-at-a-time walk has in m
 * at step i, so ms/vs are the same bits; the walk keeps only the dependent
 * F16-rounded updates (the CPU's flash-attention accumulator). */
template <bool LIBM_EXP>
static __device__ __forceinline__ bool att_factors(float m, float sc, int cnt, int lane, float4 *wk,
                                                   float *m_next = nullptr)
{
    float run = sc; /* inclusive prefix max */
#pragma unroll
    for (int o = 1; o < CUDA_WARP; o <<= 1) {
        const float t = __shfl_up_sync(0xffffffffu, run, o);
        if (lane >= o)
            run = fmaxf(run, t);
    }
    float before = __shfl_up_sync(0xffffffffu, run, 1);
    before = lane == 0 ? m : fmaxf(m, before);
    /* m_next: the running maximum after the chunk (lanes past cnt hold
     * -inf), for a caller that takes the next chunk's factors before this
     * chunk is walked (att_dec_walkh_kernel) */
    if (m_next)
        *m_next = fmaxf(m, __shfl_sync(0xffffffffu, run, CUDA_WARP - 1));
    float my_ms = 1.0f, my_vs = 1.0f;
    if (lane < cnt) {
        /* LIBM_EXP: glibc's expf step for step (engine/sample_exp.h), the
         * CPU's bits; else CUDA's expf (2 ulp) */
        if (sc > before)
            my_ms = LIBM_EXP ? sample_expf(before - sc) : expf(before - sc);
        else
            my_vs = LIBM_EXP ? sample_expf(sc - before) : expf(sc - before);
    }
    /* the walk's per-position factors through the warp's shared slots:
     * one broadcast 16-byte load per position instead of three shuffles */
    __syncwarp(); /* the previous chunk's walk has read wk */
    wk[lane] = make_float4(my_ms, my_vs, sc, 0.0f);
    __syncwarp();
    /* whether a position of the chunk is a new maximum (att_walk_f32's
     * slow path) */
    return __any_sync(0xffffffffu, lane < cnt && sc > before);
}

/* A position of the walk whose score s is a new maximum rescales the F16
 * accumulator by its factor ms (uniform across the warp: every lane holds
 * the same s and m) */
template <int DPL>
static __device__ __forceinline__ void att_rescale(float &m, float acc[DPL], float s, float ms)
{
    if (s > m) {
        m = s;
#pragma unroll
        for (int k = 0; k < DPL; k += 2) {
            const __half2 r = __floats2half2_rn(__fmul_rn(acc[k], ms), __fmul_rn(acc[k + 1], ms));
            acc[k] = __low2float(r);
            acc[k + 1] = __high2float(r);
        }
    }
}

/* acc += v * vs for two dimensions, each rounded to F16 (one packed rounding) */
static __device__ __forceinline__ void att_acc2(float &a0, float &a1, float v0, float v1, float vs)
{
    const __half2 r = __floats2half2_rn(__fmaf_rn(v0, vs, a0), __fmaf_rn(v1, vs, a1));
    a0 = __low2float(r);
    a1 = __high2float(r);
}

template <int DPL, typename VRow>
static __device__ __forceinline__ void att_walk(float &m, float &l, float acc[DPL], float sc, int cnt, int lane,
                                                int hd, float4 *wk, VRow vrow)
{
    att_factors<true>(m, sc, cnt, lane, wk);
    for (int i = 0; i < cnt; i++) {
        const float4 f = wk[i];
        const float ms = f.x, vs = f.y, s = f.z;
        const quant_f16 *vr = vrow(i);
        att_rescale<DPL>(m, acc, s, ms);
        /* lane l holds the dimension pairs 64 j + 2 l, + 1: one 4-byte load
         * of V and one packed F16 rounding per pair (the same roundings, two
         * at a time) */
#pragma unroll
        for (int k = 0; k < DPL; k += 2) {
            const int d = 32 * k + 2 * lane;
            if (d < hd) {
                const __half2 v2 = *(const __half2 *)(vr + d);
                att_acc2(acc[k], acc[k + 1], __low2float(v2), __high2float(v2), vs);
            }
        }
        l = __fmaf_rn(l, ms, vs);
    }
}

template <int DPL>
static __device__ __forceinline__ void att_store(float *o, const float acc[DPL], float l, int lane, int hd)
{
    const float inv = l == 0.0f ? 0.0f : 1.0f / l;
#pragma unroll
    for (int k = 0; k < DPL; k += 2) {
        const int d = 32 * k + 2 * lane;
        if (d < hd) {
            o[d] = acc[k] * inv;
            o[d + 1] = acc[k + 1] * inv;
        }
    }
}

/* The cache slots of a chunk's positions p0 .. p0 + cnt - 1 into slot_sm
 * (warp 0, from the sequence's block table), between the barriers that
 * end the previous chunk and publish them to the block. */
static __device__ __forceinline__ void att_chunk_slots(int64_t *slot_sm, const int32_t *table, int32_t p0, int cnt,
                                                       int wid, int lane, int32_t block_size)
{
    __syncthreads(); /* every warp is done with the previous chunk */
    if (wid == 0 && lane < cnt) {
        const int32_t p = p0 + lane;
        slot_sm[lane] = (int64_t)table[p / block_size] * block_size + p % block_size;
    }
    __syncthreads();
}

/* The 8 F16 values of a 16-byte load as two float4s (exact) */
static __device__ __forceinline__ void att_h8(uint4 v8, float4 &lo, float4 &hi)
{
    const __half2 *h2 = (const __half2 *)&v8;
    const float2 f0 = __half22float2(h2[0]), f1 = __half22float2(h2[1]);
    const float2 f2 = __half22float2(h2[2]), f3 = __half22float2(h2[3]);
    lo = make_float4(f0.x, f0.y, f1.x, f1.y);
    hi = make_float4(f2.x, f2.y, f3.x, f3.y);
}

/* Chunk cch (8 values) of a staged V row as F32. The two stores go in an
 * order that puts a phase's 8 threads (chunks cch..cch+7 of a row, 32
 * bytes apart) on 8 distinct 16-byte bank groups: chunks 4..7 of each 8
 * store their high half first. In chunk order the first store of cch and
 * cch + 4 hit the same banks (53 M shared-store conflicts in a 2048-row
 * launch, ncu 2026-12-01). */
static __device__ __forceinline__ void att_stage_v(float *row, int cch, uint4 v8)
{
    float4 lo, hi;
    att_h8(v8, lo, hi);
    const bool sw = (cch >> 2) & 1;
    *(float4 *)&row[8 * cch + (sw ? 4 : 0)] = sw ? hi : lo;
    *(float4 *)&row[8 * cch + (sw ? 0 : 4)] = sw ? lo : hi;
}

/* a lane's DPL (2 or 4) dimensions of a staged F32 V row, one load */
template <int DPL> static __device__ __forceinline__ void att_vrow(const float *vl, float v[DPL])
{
    if constexpr (DPL == 4) {
        const float4 v4 = *(const float4 *)vl;
        v[0] = v4.x, v[1] = v4.y, v[2] = v4.z, v[3] = v4.w;
    } else {
        const float2 v2 = *(const float2 *)vl;
        v[0] = v2.x, v[1] = v2.y;
    }
}

/* att_walk's loop over cnt staged F32 V rows (vl: this lane's DPL
 * dimensions of row 0, rows HD floats apart), per dimension the same
 * operations */
template <int HD>
static __device__ __forceinline__ void att_walk_f32(float &m, float &l, float acc[HD / CUDA_WARP], const float4 *wk,
                                                    const float *vl, int cnt, bool any_new)
{
    enum { DPL = HD / CUDA_WARP };
    if (!any_new) {
        /* No position of the chunk is a new maximum (att_factors), so
         * none rescales (ms = 1) and m stays: the same operations without
         * the per-position compare and branch, which made every position
         * wait for its factors' load and the branch (ncu 2026-12-03 22:45
         * call 1: ~140 cycles a position). Most chunks past the first take
         * this path. */
#pragma unroll 4
        for (int i = 0; i < cnt; i++) {
            const float4 f = wk[i];
            float v[DPL];
            att_vrow<DPL>(vl + i * HD, v);
#pragma unroll
            for (int k = 0; k < DPL; k += 2)
                att_acc2(acc[k], acc[k + 1], v[k], v[k + 1], f.y);
            l = __fmaf_rn(l, f.x, f.y);
        }
        return;
    }
#pragma unroll 4
    for (int i = 0; i < cnt; i++) {
        const float4 f = wk[i];
        const float ms = f.x, vs = f.y, s = f.z;
        float v[DPL];
        att_vrow<DPL>(vl + i * HD, v);
        att_rescale<DPL>(m, acc, s, ms);
#pragma unroll
        for (int k = 0; k < DPL; k += 2)
            att_acc2(acc[k], acc[k + 1], v[k], v[k + 1], vs);
        l = __fmaf_rn(l, ms, vs);
    }
}

/* EXACT: the F32 K rows are read only between the chunk's staging barrier
 * and the barrier after scoring, the walk's factors only after it: one
 * buffer. Rows are 16-byte chunks XOR-swizzled by (row & 7): the scoring
 * lanes (one row each, the same chunk) and the staging stores fall on 8
 * distinct bank groups per phase without padding. */
template <int HD> struct att_ex_smem {
    float qf[ATT_G_MAX][HD]; /* the F16-rounded queries as F32 */
    union {
        float4 kf[CUDA_WARP][HD / 4];
        float4 wk[ATT_G_MAX][CUDA_WARP];
    } u;
};

/* Chunk cch (8 values) of staged K row i as F32 into kr (the row's
 * att_ex_smem.u.kf), att_stage_v's store order with the row's 16-byte
 * chunks at c ^ (i & 7) */
static __device__ __forceinline__ void att_stage_kf(float4 *kr, int i, int cch, uint4 v8)
{
    float4 lo, hi;
    att_h8(v8, lo, hi);
    const bool sw = (cch >> 2) & 1;
    const int x = i & 7;
    kr[(2 * cch + (sw ? 1 : 0)) ^ x] = sw ? hi : lo;
    kr[(2 * cch + (sw ? 0 : 1)) ^ x] = sw ? lo : hi;
}

/* The CPU-order score of staged K row i (att_stage_kf's layout) against
 * the F16-rounded query qf (HD % 32 == 0: no tail) */
template <int HD>
static __device__ __forceinline__ float att_score_kf(const float *qf, const float4 *kr, int i, float scale)
{
    const int x = i & 7;
    return att_score_cpu(qf, [&](int c4) { return kr[c4 ^ x]; }, [](int) { return 0.0f; }, HD, scale);
}

/* The decode split (cuda/attention_dec.cu) for head_dim hd (64 or 128,
 * exact scores): 1 when it took the batch (launched), 0 when the batch is
 * not a small decode batch, the split is off, or its score buffer cannot
 * be had (the caller runs the fused kernel). */
int cuda_att_dec(struct cuda_ctx *c, int hd, int32_t n_rows, const float *q, const quant_f16 *kc,
                 const quant_f16 *vc, float *out, const int32_t *pos, const int32_t *seq, const int32_t *bt,
                 const struct backend_attn *a);

#endif
