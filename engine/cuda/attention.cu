/* cuda/attention — causal grouped-query attention over the paged F16 cache.
 *
 * One warp per (row, query head): lanes score 32 cached positions p <=
 * pos[row] of the row's sequence at a time (slot = block_table[p / bs] * bs
 * + p % bs; each score in the CPU's order, att_score_cpu, so the GPU's
 * attention gives the CPU backend's bits), take each position's softmax
 * factor in parallel from a prefix maximum, then lane l, holding
 * dimension pairs 64j + 2l, +1 of the output accumulator (DPL slots: 2, 4
 * or 8 by head_dim), walks them through the online softmax (running
 * maximum, rescaled sum), so any context length runs in registers. The
 * walk is the prefill's cost at long context (it mirrors the CPU's F16
 * accumulator, rounded after every position, so it is sequential in
 * positions): H200, 7B pp2048 6,540 -> 7,980 tok/s for DPL per head_dim
 * and the pairs, -> 8,244 for the factors through shared memory
 * (bench/RESULTS.md, 2026-12-01 21:03 and 21:06). Every row is computed on its own, in position order: results
 * do not depend on the batch or on how a prompt was chunked (the cache is
 * the only input besides the row's query).
 *
 * a.max_kv (the host's bound on the longest row) is not used yet: the grid
 * is one block per (row, 4 heads) whatever the length.
 *
 * Where head_dim is 64 or 128 the grouped-query heads take
 * attention_gqa_tc_kernel instead: K and V rows staged as F32 once per
 * group, the same scores and walk; with config attention_scores = tensor
 * the scores by tensor cores (ulps from the CPU's; pp2048 +18% on the
 * H200's 7B-shaped model, bench/RESULTS.md 2026-12-03).
 *
 * This is the correct baseline; the tiled flash-attention prefill and the
 * split decode kernel are later work (they must keep the per-row order).
 */
#include "engine/cuda/common.cuh"
#include "engine/cuda/mma.cuh"
#include "engine/sample_exp.h"

#include <type_traits>

#define ATT_MAX_DPL 8 /* dimensions per lane: head_dim <= 256 */
#define ATT_WARPS 4   /* query heads per thread block */
#define ATT_VS_HD 128 /* head_dim up to which a chunk's V rows are staged in shared memory */

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

/* The CPU's score of one cached position, bit for bit: engine/quant.c's
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
static __device__ __forceinline__ void att_factors(float m, float sc, int cnt, int lane, float4 *wk)
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

template <int DPL>
static __global__ void __launch_bounds__(ATT_WARPS *CUDA_WARP)
attention_kernel(const float *__restrict__ q, const quant_f16 *__restrict__ kc,
                 const quant_f16 *__restrict__ vc, float *__restrict__ out,
                 const int32_t *__restrict__ pos, const int32_t *__restrict__ seq,
                 const int32_t *__restrict__ bt, struct backend_attn a)
{
    cuda_pdl_enter();
    __shared__ __align__(16) float qs[ATT_WARPS][ATT_MAX_DPL * CUDA_WARP];
    /* the 32 V rows of the chunk being walked: the walk's one load per
     * position then hits shared memory instead of waiting on L2 (the
     * cache of a layer is re-read by every row and head) */
    __shared__ __align__(16) quant_f16 vs_sm[ATT_WARPS][CUDA_WARP][ATT_VS_HD];
    __shared__ float4 wk_sm[ATT_WARPS][CUDA_WARP]; /* att_walk's factors */
    const int32_t r = blockIdx.x;
    const int wid = threadIdx.x / CUDA_WARP;
    const int32_t h = blockIdx.y * ATT_WARPS + wid;
    const int lane = threadIdx.x % CUDA_WARP;
    if (h >= a.n_head)
        return;
    const int32_t hd = a.head_dim, kvh = h / (a.n_head / a.n_head_kv);
    const int32_t kv_dim = a.n_head_kv * hd;
    const float *qr = q + ((int64_t)r * a.n_head + h) * hd;
    const int32_t *table = bt + (int64_t)seq[r] * a.bt_stride;
    const int32_t last = pos[r];

    /* The CPU backend's (and llama.cpp's) flash-attention numerics: the
     * query rounded to F16, an F32 score times the scale, an F16 output
     * accumulator (rounded after every update), the running sum in F32.
     * Against all-F32 attention this moves logprobs by ~1e-3; mirroring it
     * keeps the GPU close to the CPU oracle on the F32 model.
     * Scores of 32 positions at a time, one per lane (the whole head_dim
     * dot in order, so a score never depends on the batch); then the online
     * softmax walks them in position order. */
    for (int d = lane; d < hd; d += CUDA_WARP)
        qs[wid][d] = __half2float(__float2half_rn(qr[d]));
    __syncwarp();
    float acc[DPL];
#pragma unroll
    for (int k = 0; k < DPL; k++)
        acc[k] = 0.0f;
    float m = -INFINITY, l = 0.0f;
    const bool stage = hd <= ATT_VS_HD && hd % 8 == 0;
    for (int32_t p0 = 0; p0 <= last; p0 += CUDA_WARP) {
        const int32_t p = p0 + lane;
        float sc = -INFINITY;
        int64_t slot = 0;
        if (p <= last)
            slot = (int64_t)table[p / a.block_size] * a.block_size + p % a.block_size;
        const int cnt0 = last - p0 + 1 < CUDA_WARP ? last - p0 + 1 : CUDA_WARP;
        if (stage) {
            /* V rows of positions p0..p0+cnt0-1, 16 bytes per lane and load,
             * all of them in flight together */
            const int per_row = hd / 8; /* 16-byte pieces per row; 32 rows = per_row trips */
            __syncwarp(); /* the previous chunk's walk is done with vs_sm */
            for (int t = 0; t < per_row; t++) {
                const int q = lane + CUDA_WARP * t, i = q / per_row, cch = q % per_row;
                const int64_t si = __shfl_sync(0xffffffffu, slot, i); /* every lane takes part */
                if (i < cnt0)
                    *(uint4 *)&vs_sm[wid][i][8 * cch] =
                        *(const uint4 *)(vc + si * kv_dim + (int64_t)kvh * hd + 8 * cch);
            }
        }
        if (p <= last) {
            const quant_f16 *kr = kc + slot * kv_dim + (int64_t)kvh * hd;
            sc = att_score(qs[wid], kr, hd, a.scale);
        }
        if (stage)
            __syncwarp(); /* the chunk's V rows are in vs_sm */
        att_walk<DPL>(m, l, acc, sc, cnt0, lane, hd, wk_sm[wid], [&](int i) -> const quant_f16 * {
            const int64_t si = __shfl_sync(0xffffffffu, slot, i);
            return stage ? vs_sm[wid][i] : vc + si * kv_dim + (int64_t)kvh * hd;
        });
    }
    att_store<DPL>(out + ((int64_t)r * a.n_head + h) * hd, acc, l, lane, hd);
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

/* The grouped-query kernel: one block per (row, KV head), one warp per
 * query head of the group (G = n_head / n_head_kv <= ATT_G_MAX). The
 * group's heads read the same K and V rows, so the block stages each
 * 32-position chunk of them in shared memory once (16-byte loads, all in
 * flight) instead of every head fetching them from L2 itself (H200, 18:13:
 * the per-head kernel moved ~30 GB through L2 per layer of a 2048-token
 * prefill, 10.9 ms). Each warp computes exactly what attention_kernel
 * computes for its head (att_score, att_walk): the same bits. */
#define ATT_G_MAX 16
#define ATT_KS (ATT_VS_HD + 8) /* K row stride in halves: 272 bytes, conflict-free row reads */

template <int DPL>
static __global__ void __launch_bounds__(ATT_G_MAX *CUDA_WARP)
attention_gqa_kernel(const float *__restrict__ q, const quant_f16 *__restrict__ kc,
                     const quant_f16 *__restrict__ vc, float *__restrict__ out,
                     const int32_t *__restrict__ pos, const int32_t *__restrict__ seq,
                     const int32_t *__restrict__ bt, struct backend_attn a)
{
    cuda_pdl_enter();
    __shared__ __align__(16) float qs[ATT_G_MAX][ATT_VS_HD];
    __shared__ __align__(16) quant_f16 ks[CUDA_WARP][ATT_KS];
    __shared__ __align__(16) quant_f16 vsm[CUDA_WARP][ATT_VS_HD];
    __shared__ int64_t slot_sm[CUDA_WARP];
    __shared__ float4 wk_sm[ATT_G_MAX][CUDA_WARP]; /* att_walk's factors */
    const int32_t r = blockIdx.x, kvh = blockIdx.y;
    const int wid = threadIdx.x / CUDA_WARP, lane = threadIdx.x % CUDA_WARP;
    const int G = a.n_head / a.n_head_kv, nt = G * CUDA_WARP;
    const int32_t h = kvh * G + wid, hd = a.head_dim, kv_dim = a.n_head_kv * hd;
    const float *qr = q + ((int64_t)r * a.n_head + h) * hd;
    const int32_t *table = bt + (int64_t)seq[r] * a.bt_stride;
    const int32_t last = pos[r];
    for (int d = lane; d < hd; d += CUDA_WARP)
        qs[wid][d] = __half2float(__float2half_rn(qr[d]));
    float acc[DPL];
#pragma unroll
    for (int k = 0; k < DPL; k++)
        acc[k] = 0.0f;
    float m = -INFINITY, l = 0.0f;
    const int per_row = hd / 8; /* 16-byte pieces per row */
    for (int32_t p0 = 0; p0 <= last; p0 += CUDA_WARP) {
        const int cnt = last - p0 + 1 < CUDA_WARP ? last - p0 + 1 : CUDA_WARP;
        att_chunk_slots(slot_sm, table, p0, cnt, wid, lane, a.block_size);
        for (int t = threadIdx.x; t < 2 * cnt * per_row; t += nt) {
            const int kv = t / (cnt * per_row), u = t % (cnt * per_row), i = u / per_row, cch = u % per_row;
            const int64_t off = slot_sm[i] * kv_dim + (int64_t)kvh * hd + 8 * cch;
            if (kv == 0)
                *(uint4 *)&ks[i][8 * cch] = *(const uint4 *)(kc + off);
            else
                *(uint4 *)&vsm[i][8 * cch] = *(const uint4 *)(vc + off);
        }
        __syncthreads();
        const float sc = lane < cnt ? att_score(qs[wid], ks[lane], hd, a.scale) : -INFINITY;
        att_walk<DPL>(m, l, acc, sc, cnt, lane, hd, wk_sm[wid], [&](int i) -> const quant_f16 * { return vsm[i]; });
    }
    att_store<DPL>(out + ((int64_t)r * a.n_head + h) * hd, acc, l, lane, hd);
}

/* ---- the grouped-query kernel for head_dim HD = 64 or 128 ----------------
 * What attention_gqa_kernel does, with three costs cut (ncu, H200, 7B
 * pp2048: that kernel issued ~51 warp instructions per (head, position),
 * 82% of the issue slots busy, 47% of the prefill's time):
 *  - the chunk's K rows (EXACT) and V rows staged as F32 (the exact values
 *    of the F16 rows), converted once for the group instead of once per
 *    head and position; lane l holds the output dimensions DPL l .. DPL l +
 *    DPL - 1, one vector load per position; the walk's arithmetic per
 *    dimension is att_walk's (the F16 accumulator, the same roundings);
 *  - EXACT (the default): each lane scores its position for its warp's
 *    head in the CPU's order (att_score_cpu) from the F32 K rows, and the
 *    softmax factors take glibc's expf: the CPU backend's bits. TC
 *    (config attention_scores = "tensor"): the scores by tensor cores: the
 *    group's F16-rounded queries are A of m16n8k16 F16 mma with F32
 *    accumulation, padded to 16 rows with zeros, the chunk's 32 K rows B;
 *    HD / 16 mma per 8 positions replace HD FMAs per lane and position.
 *    The products are exact, the sums the tensor core's (not IEEE: a score
 *    differs from the CPU's in its last bits), and CUDA's expf; a score
 *    still depends only on its query and its K row, whatever the batch;
 *  - HD at compile time: the staging's indices are shifts, not divisions,
 *    and no dimension is predicated off. */
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

/* att_walk's loop over cnt staged F32 V rows (vl: this lane's DPL
 * dimensions of row 0, rows HD floats apart), per dimension the same
 * operations */
template <int HD>
static __device__ __forceinline__ void att_walk_f32(float &m, float &l, float acc[HD / CUDA_WARP], const float4 *wk,
                                                    const float *vl, int cnt)
{
    enum { DPL = HD / CUDA_WARP };
#pragma unroll 4
    for (int i = 0; i < cnt; i++) {
        const float4 f = wk[i];
        const float ms = f.x, vs = f.y, s = f.z;
        float v[DPL];
        if constexpr (DPL == 4) {
            const float4 v4 = *(const float4 *)(vl + i * HD);
            v[0] = v4.x, v[1] = v4.y, v[2] = v4.z, v[3] = v4.w;
        } else {
            const float2 v2 = *(const float2 *)(vl + i * HD);
            v[0] = v2.x, v[1] = v2.y;
        }
        att_rescale<DPL>(m, acc, s, ms);
#pragma unroll
        for (int k = 0; k < DPL; k += 2)
            att_acc2(acc[k], acc[k + 1], v[k], v[k + 1], vs);
        l = __fmaf_rn(l, ms, vs);
    }
}

#define ATT_TC_KS 136 /* K / query row stride in halves: 272 bytes, conflict-free fragment loads */

template <int HD> struct att_tc_smem {
    quant_f16 qh[16][ATT_TC_KS]; /* the queries as F16: A of the mma */
    quant_f16 ks[CUDA_WARP][ATT_TC_KS];
    float sc[16][CUDA_WARP + 1];
    float4 wk[ATT_G_MAX][CUDA_WARP]; /* att_walk's factors */
};
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

/* RPB rows a block (EXACT only; 2 where the batch has ATT_PAIR_MIN rows
 * and the group fits twice in a block): warps RPB x G, warp w on row
 * blockIdx.x * RPB + w / G, head w % G. When the block's rows read one
 * sequence (consecutive rows of a prompt) each chunk's K and V rows are
 * staged once for both (one phase, running to the later row's end); rows
 * of different sequences take one phase each, the other row's warps
 * idle. Every warp runs its row's chunks (p0 = 0, 32, ..) with its row's
 * counts, so its scores and walk are attention_gqa_kernel's: the same bits
 * at RPB 1 and 2. */
#define ATT_PAIR_MIN 32
/* ... and where the batch has this many rows a sequence on average (the
 * host's backend_attn.n_seqs; 0, not known, pairs): a batch of decode rows
 * of many sequences would pair rows of different sequences, whose two
 * phases run one after the other in one block, twice the time of two
 * blocks side by side */
#define ATT_PAIR_ROWS_PER_SEQ 4

template <int HD, bool TC, int RPB>
static __global__ void __launch_bounds__(ATT_G_MAX *CUDA_WARP)
attention_gqa_tc_kernel(const float *__restrict__ q, const quant_f16 *__restrict__ kc,
                        const quant_f16 *__restrict__ vc, float *__restrict__ out,
                        const int32_t *__restrict__ pos, const int32_t *__restrict__ seq,
                        const int32_t *__restrict__ bt, struct backend_attn a, int32_t n_rows)
{
    cuda_pdl_enter();
    enum { DPL = HD / CUDA_WARP, PER_ROW = HD / 8 }; /* dimensions per lane; 16-byte pieces per row */
    static_assert(HD == 64 || HD == 128, "head_dim 64 or 128");
    static_assert(RPB == 1 || !TC, "the tensor-core scores take one row a block");
    typedef typename std::conditional<TC, att_tc_smem<HD>, att_ex_smem<HD>>::type SM;
    __shared__ __align__(16) SM S;
    __shared__ __align__(16) float vsf[CUDA_WARP][HD];
    __shared__ int64_t slot_sm[CUDA_WARP];
    const int32_t kvh = blockIdx.y;
    const int wid = threadIdx.x / CUDA_WARP, lane = threadIdx.x % CUDA_WARP;
    const int g = lane >> 2, t4 = lane & 3;
    const int G = a.n_head / a.n_head_kv, nt = RPB * G * CUDA_WARP;
    const int half = wid / G, hw = wid % G; /* this warp's row of the block, its head of the group */
    const int32_t r0 = blockIdx.x * RPB, r = r0 + half;
    const bool rv = r < n_rows;
    const int32_t h = kvh * G + hw, kv_dim = a.n_head_kv * HD;
    const float *qr = q + ((int64_t)(rv ? r : r0) * a.n_head + h) * HD;
    const int32_t last = rv ? pos[r] : -1;
    /* the phases: one when the block's rows share a sequence (or RPB 1) */
    const bool one = RPB == 1 || r0 + 1 >= n_rows || seq[r0] == seq[r0 + 1];
    if constexpr (TC) {
        for (int d = lane; d < HD; d += CUDA_WARP) /* the bits of the F16 value, not a value cast */
            S.qh[wid][d] = (quant_f16)__half_as_ushort(__float2half_rn(qr[d]));
        for (int t = threadIdx.x; t < (16 - G) * HD; t += nt) /* the padding rows */
            S.qh[G + t / HD][t % HD] = 0;
    } else {
        for (int d = lane; d < HD; d += CUDA_WARP)
            S.qf[wid][d] = __half2float(__float2half_rn(qr[d]));
    }
    float acc[DPL];
#pragma unroll
    for (int k = 0; k < DPL; k++)
        acc[k] = 0.0f;
    float m = -INFINITY, l = 0.0f;
    for (int ph = 0; ph < (one ? 1 : RPB); ph++) {
        /* the staged row (whose sequence's cache the chunk comes from) and
         * how far: one phase runs to the later row's end */
        const int32_t rs = one ? r0 : r0 + ph;
        int32_t last_st = pos[rs];
        if (one && RPB > 1 && r0 + 1 < n_rows && pos[r0 + 1] > last_st)
            last_st = pos[r0 + 1];
        const int32_t *table = bt + (int64_t)seq[rs] * a.bt_stride;
        const bool act = one || half == ph; /* this warp's row is walked in this phase */
        for (int32_t p0 = 0; p0 <= last_st; p0 += CUDA_WARP) {
            const int cnt_st = last_st - p0 + 1 < CUDA_WARP ? last_st - p0 + 1 : CUDA_WARP;
            /* this warp's positions of the chunk: its row's count, 0 past its end */
            const int cnt = !act || last < p0 ? 0 : last - p0 + 1 < CUDA_WARP ? last - p0 + 1 : CUDA_WARP;
            att_chunk_slots(slot_sm, table, p0, cnt_st, wid, lane, a.block_size);
            /* K rows as F16 (the mma's B) or F32 (EXACT), V rows as F32 (the walk's) */
            for (int t = threadIdx.x; t < 2 * CUDA_WARP * PER_ROW; t += nt) {
                const int kv = t / (CUDA_WARP * PER_ROW), i = (t / PER_ROW) % CUDA_WARP, cch = t % PER_ROW;
                if (i >= cnt_st)
                    continue;
                const int64_t off = slot_sm[i] * kv_dim + (int64_t)kvh * HD + 8 * cch;
                const uint4 v8 = *(const uint4 *)((kv ? vc : kc) + off);
                if constexpr (TC) {
                    if (kv == 0) { /* the mma's B: the F16 bits as they are */
                        *(uint4 *)&S.ks[i][8 * cch] = v8;
                        continue;
                    }
                }
                if (kv) {
                    att_stage_v(vsf[i], cch, v8);
                    continue;
                }
                if constexpr (!TC) { /* att_stage_v's store order, swizzled by row */
                    float4 lo, hi;
                    att_h8(v8, lo, hi);
                    const bool sw = (cch >> 2) & 1;
                    const int x = i & 7; /* the row's swizzle: chunk c at c ^ x */
                    S.u.kf[i][(2 * cch + (sw ? 1 : 0)) ^ x] = sw ? hi : lo;
                    S.u.kf[i][(2 * cch + (sw ? 0 : 1)) ^ x] = sw ? lo : hi;
                }
            }
            __syncthreads();
            float sc;
            if constexpr (TC) {
                /* warp w scores positions 8 n.. for n = w, w + G, .. < 4; K rows
                 * past cnt hold stale bytes whose scores are never read */
                for (int n8 = wid; n8 < 4; n8 += G) {
                    float d[4] = {0.0f, 0.0f, 0.0f, 0.0f};
    #pragma unroll
                    for (int k0 = 0; k0 < HD; k0 += 16) {
                        const uint32_t af[4] = {*(const uint32_t *)&S.qh[g][k0 + 2 * t4],
                                                *(const uint32_t *)&S.qh[g + 8][k0 + 2 * t4],
                                                *(const uint32_t *)&S.qh[g][k0 + 8 + 2 * t4],
                                                *(const uint32_t *)&S.qh[g + 8][k0 + 8 + 2 * t4]};
                        cuda_mma_f16_k16(d, af, *(const uint32_t *)&S.ks[8 * n8 + g][k0 + 2 * t4],
                                         *(const uint32_t *)&S.ks[8 * n8 + g][k0 + 8 + 2 * t4]);
                    }
                    S.sc[g][8 * n8 + 2 * t4] = __fmul_rn(d[0], a.scale);
                    S.sc[g][8 * n8 + 2 * t4 + 1] = __fmul_rn(d[1], a.scale);
                    S.sc[g + 8][8 * n8 + 2 * t4] = __fmul_rn(d[2], a.scale);
                    S.sc[g + 8][8 * n8 + 2 * t4 + 1] = __fmul_rn(d[3], a.scale);
                }
                __syncthreads();
                sc = lane < cnt ? S.sc[wid][lane] : -INFINITY;
            } else {
                const int x = lane & 7;
                const float4 *kr = S.u.kf[lane];
                sc = -INFINITY;
                if (lane < cnt)
                    sc = att_score_cpu( /* HD % 32 == 0: no tail */
                        S.qf[wid], [&](int c4) { return kr[c4 ^ x]; }, [](int) { return 0.0f; }, HD, a.scale);
                __syncthreads(); /* every warp has read the K rows: wk reuses them */
            }
            float4 *wk;
            if constexpr (TC)
                wk = S.wk[wid];
            else
                wk = S.u.wk[wid];
            if (cnt == 0)
                continue; /* (warp-uniform) another phase's row, or past this row's end */
            att_factors<!TC>(m, sc, cnt, lane, wk);
            att_walk_f32<HD>(m, l, acc, wk, &vsf[0][DPL * lane], cnt);
        }
    }
    if (!rv)
        return;
    const float inv = l == 0.0f ? 0.0f : 1.0f / l;
    float *o = out + ((int64_t)r * a.n_head + h) * HD + DPL * lane;
#pragma unroll
    for (int k = 0; k < DPL; k++)
        o[k] = acc[k] * inv;
}

/* ---- decode: the exact scores apart from the walk -------------------------
 * A decode batch has a row a sequence, so attention_gqa_tc_kernel's grid is
 * rows x KV heads: one step of the 7B at one stream is 4 blocks, each
 * scoring and walking its whole context chunk after chunk (H200, 2026-12-03
 * 20:30 call 8: 109 us a layer at ~600 positions, one decode step 5.7 ms
 * against 3.2 ms at 32 positions). Only the walk is sequential (the F16
 * accumulator is rounded after every position); the scores of a row's
 * positions are independent. So for small decode batches the scores run
 * first in a grid of (row, KV head, ATT_DEC_Z slices of the chunks), each
 * block staging its chunks' K rows and scoring them exactly as the fused
 * kernel does (the same staging, att_score_cpu: the same bits), into
 * c->att_sc; then att_dec_walk_kernel stages only V and walks. The grid does not depend on the context (a CUDA graph
 * replays it at every length): a slice strides over the chunks. */
#define ATT_DEC_Z 32    /* chunk slices a (row, KV head) of the score grid */
#define ATT_DEC_ROWS 16 /* rows up to which a decode batch takes the split (c->att_sc holds them) */

template <int HD>
static __global__ void __launch_bounds__(ATT_G_MAX *CUDA_WARP)
att_dec_score_kernel(const float *__restrict__ q, const quant_f16 *__restrict__ kc,
                     const int32_t *__restrict__ pos, const int32_t *__restrict__ seq,
                     const int32_t *__restrict__ bt, struct backend_attn a, float *__restrict__ sc_out)
{
    cuda_pdl_enter();
    enum { PER_ROW = HD / 8 };
    __shared__ __align__(16) att_ex_smem<HD> S;
    __shared__ int64_t slot_sm[CUDA_WARP];
    const int32_t r = blockIdx.x, kvh = blockIdx.y;
    const int wid = threadIdx.x / CUDA_WARP, lane = threadIdx.x % CUDA_WARP;
    const int G = a.n_head / a.n_head_kv, nt = G * CUDA_WARP;
    const int32_t h = kvh * G + wid, kv_dim = a.n_head_kv * HD, last = pos[r];
    const float *qr = q + ((int64_t)r * a.n_head + h) * HD;
    const int32_t *table = bt + (int64_t)seq[r] * a.bt_stride;
    float *so = sc_out + ((int64_t)r * a.n_head + h) * ((int64_t)a.bt_stride * a.block_size);
    for (int d = lane; d < HD; d += CUDA_WARP)
        S.qf[wid][d] = __half2float(__float2half_rn(qr[d]));
    for (int32_t p0 = CUDA_WARP * (int32_t)blockIdx.z; p0 <= last; p0 += CUDA_WARP * ATT_DEC_Z) {
        const int cnt = last - p0 + 1 < CUDA_WARP ? last - p0 + 1 : CUDA_WARP;
        att_chunk_slots(slot_sm, table, p0, cnt, wid, lane, a.block_size);
        for (int t = threadIdx.x; t < CUDA_WARP * PER_ROW; t += nt) {
            const int i = t / PER_ROW, cch = t % PER_ROW;
            if (i >= cnt)
                continue;
            const uint4 v8 = *(const uint4 *)(kc + slot_sm[i] * kv_dim + (int64_t)kvh * HD + 8 * cch);
            float4 lo, hi;
            att_h8(v8, lo, hi);
            /* attention_gqa_tc_kernel's swizzle and store order */
            const bool sw = (cch >> 2) & 1;
            const int x = i & 7;
            S.u.kf[i][(2 * cch + (sw ? 1 : 0)) ^ x] = sw ? hi : lo;
            S.u.kf[i][(2 * cch + (sw ? 0 : 1)) ^ x] = sw ? lo : hi;
        }
        __syncthreads();
        if (lane < cnt) {
            const int x = lane & 7;
            const float4 *kr = S.u.kf[lane];
            so[p0 + lane] = att_score_cpu(
                S.qf[wid], [&](int c4) { return kr[c4 ^ x]; }, [](int) { return 0.0f; }, HD, a.scale);
        }
    }
}

/* The split's walk: one block per (row, KV head), a warp per query head,
 * attention_gqa_tc_kernel's factors and walk over the scores of
 * att_dec_score_kernel. Each chunk's V rows are loaded while the previous
 * chunk is walked (registers, then the other of two shared buffers): the
 * walk no longer waits on the cache after every 32 positions. */
#define ATT_DEC_PF 4 /* 16-byte V pieces a thread holds in flight (a chunk is 4 HD of them) */

template <int HD>
static __global__ void __launch_bounds__(ATT_G_MAX *CUDA_WARP)
att_dec_walk_kernel(const quant_f16 *__restrict__ vc, float *__restrict__ out, const int32_t *__restrict__ pos,
                    const int32_t *__restrict__ seq, const int32_t *__restrict__ bt, struct backend_attn a,
                    const float *__restrict__ scores)
{
    cuda_pdl_enter();
    enum { DPL = HD / CUDA_WARP, PER_ROW = HD / 8, PIECES = CUDA_WARP * PER_ROW };
    __shared__ __align__(16) float vsf[2][CUDA_WARP][HD];
    __shared__ float4 wk_sm[ATT_G_MAX][CUDA_WARP];
    const int32_t r = blockIdx.x, kvh = blockIdx.y;
    const int wid = threadIdx.x / CUDA_WARP, lane = threadIdx.x % CUDA_WARP;
    const int G = a.n_head / a.n_head_kv, nt = G * CUDA_WARP;
    const int32_t h = kvh * G + wid, kv_dim = a.n_head_kv * HD, last = pos[r], bs = a.block_size;
    const int32_t *table = bt + (int64_t)seq[r] * a.bt_stride;
    const float *sr = scores + ((int64_t)r * a.n_head + h) * ((int64_t)a.bt_stride * bs);
    const quant_f16 *vb = vc + (int64_t)kvh * HD;
    /* piece t of a chunk: row t / PER_ROW, 8 values at 8 (t % PER_ROW) */
    auto piece = [&](int32_t p0, int t) -> uint4 {
        const int32_t p = p0 + t / PER_ROW;
        const int64_t slot = (int64_t)table[p / bs] * bs + p % bs;
        return *(const uint4 *)(vb + slot * kv_dim + 8 * (t % PER_ROW));
    };
    auto fetch = [&](int32_t p0, uint4 v8[ATT_DEC_PF]) {
#pragma unroll
        for (int k = 0; k < ATT_DEC_PF; k++) {
            const int t = threadIdx.x + k * nt;
            if (t < PIECES && p0 + t / PER_ROW <= last)
                v8[k] = piece(p0, t);
        }
    };
    auto store = [&](int32_t p0, int b, const uint4 v8[ATT_DEC_PF]) {
#pragma unroll
        for (int k = 0; k < ATT_DEC_PF; k++) {
            const int t = threadIdx.x + k * nt;
            if (t < PIECES && p0 + t / PER_ROW <= last)
                att_stage_v(vsf[b][t / PER_ROW], t % PER_ROW, v8[k]);
        }
        /* small groups: the pieces past ATT_DEC_PF a thread, loaded here */
        for (int t = threadIdx.x + ATT_DEC_PF * nt; t < PIECES; t += nt)
            if (p0 + t / PER_ROW <= last)
                att_stage_v(vsf[b][t / PER_ROW], t % PER_ROW, piece(p0, t));
    };
    float acc[DPL];
#pragma unroll
    for (int k = 0; k < DPL; k++)
        acc[k] = 0.0f;
    float m = -INFINITY, l = 0.0f;
    uint4 v8[ATT_DEC_PF];
    fetch(0, v8);
    store(0, 0, v8);
    float scn = lane <= last ? sr[lane] : -INFINITY;
    __syncthreads();
    int b = 0;
    for (int32_t p0 = 0; p0 <= last; p0 += CUDA_WARP, b ^= 1) {
        const int cnt = last - p0 + 1 < CUDA_WARP ? last - p0 + 1 : CUDA_WARP;
        const float sc = scn;
        const int32_t p1 = p0 + CUDA_WARP;
        if (p1 <= last) { /* the next chunk's V rows and scores, in flight during this walk */
            fetch(p1, v8);
            scn = p1 + lane <= last ? sr[p1 + lane] : -INFINITY;
        }
        att_factors<true>(m, sc, cnt, lane, wk_sm[wid]);
        att_walk_f32<HD>(m, l, acc, wk_sm[wid], &vsf[b][0][DPL * lane], cnt);
        if (p1 <= last)
            store(p1, b ^ 1, v8); /* the other buffer: read last in the walk before the previous barrier */
        __syncthreads();
    }
    const float inv = l == 0.0f ? 0.0f : 1.0f / l;
    float *o = out + ((int64_t)r * a.n_head + h) * HD + DPL * lane;
#pragma unroll
    for (int k = 0; k < DPL; k++)
        o[k] = acc[k] * inv;
}

/* c->att_sc for ATT_DEC_ROWS rows of this shape's scores, or NULL (no
 * memory, or a stream capture under way: the fused kernel serves). The
 * first decode step of a shape runs op by op (engine/graph.c records a
 * key on its second step), so the buffer exists before any recording
 * refers to it; a larger shape (another model) gets a new buffer and the
 * old one stays allocated (a recording may hold it) until destroy. */
static float *att_dec_scratch(struct cuda_ctx *c, const struct backend_attn *a)
{
    const size_t need = (size_t)ATT_DEC_ROWS * (size_t)a->n_head * (size_t)a->bt_stride * (size_t)a->block_size;
    if (c->att_sc && c->att_sc_n >= need)
        return c->att_sc;
    cudaStreamCaptureStatus cs = cudaStreamCaptureStatusNone;
    if (cudaStreamIsCapturing(c->stream, &cs) != cudaSuccess || cs != cudaStreamCaptureStatusNone ||
        c->att_sc_nold >= (int)(sizeof(c->att_sc_old) / sizeof(c->att_sc_old[0])))
        return NULL;
    void *p = NULL;
    if (cuda_malloc(c, &p, need * sizeof(float)) != cudaSuccess) {
        cudaGetLastError();
        return NULL;
    }
    if (c->att_sc)
        c->att_sc_old[c->att_sc_nold++] = c->att_sc;
    c->att_sc = (float *)p;
    c->att_sc_n = need;
    return c->att_sc;
}

/* attention_gqa_tc_kernel<HD, the configured scores, rows a block> (c->att_tc;
 * EXACT takes two rows a block from ATT_PAIR_MIN rows where 2 G warps fit) */
template <int HD>
static void att_gqa_tc_launch(struct cuda_ctx *c, int32_t n_rows, const float *q, const quant_f16 *kc,
                              const quant_f16 *vc, float *out, const int32_t *pos, const int32_t *seq,
                              const int32_t *block_table, const struct backend_attn *a)
{
    const int G = a->n_head / a->n_head_kv;
    float *sc;
    if (c->att_tc)
        cuda_launch(c, attention_gqa_tc_kernel<HD, true, 1>, dim3(n_rows, a->n_head_kv), dim3(G * CUDA_WARP), 0, q,
                    kc, vc, out, pos, seq, block_table, *a, n_rows);
    else if (n_rows >= ATT_PAIR_MIN && 2 * G <= ATT_G_MAX && c->att_pair &&
             (a->n_seqs <= 0 || n_rows >= ATT_PAIR_ROWS_PER_SEQ * a->n_seqs))
        cuda_launch(c, attention_gqa_tc_kernel<HD, false, 2>, dim3(cuda_blocks(n_rows, 2), a->n_head_kv),
                    dim3(2 * G * CUDA_WARP), 0, q, kc, vc, out, pos, seq, block_table, *a, n_rows);
    else if (c->att_split && n_rows <= ATT_DEC_ROWS && (a->n_seqs <= 0 || n_rows < 2 * a->n_seqs) &&
             (sc = att_dec_scratch(c, a)) != NULL) {
        /* a decode batch (about a row a sequence): the split, the same bits */
        cuda_launch(c, att_dec_score_kernel<HD>, dim3(n_rows, a->n_head_kv, ATT_DEC_Z), dim3(G * CUDA_WARP), 0, q,
                    kc, pos, seq, block_table, *a, sc);
        cuda_launch(c, att_dec_walk_kernel<HD>, dim3(n_rows, a->n_head_kv), dim3(G * CUDA_WARP), 0, vc, out, pos,
                    seq, block_table, *a, (const float *)sc);
    } else
        cuda_launch(c, attention_gqa_tc_kernel<HD, false, 1>, dim3(n_rows, a->n_head_kv), dim3(G * CUDA_WARP), 0, q,
                    kc, vc, out, pos, seq, block_table, *a, n_rows);
}

void cuda_op_attention(struct backend *be, const float *q, const void *k_cache, const void *v_cache,
                       float *out, int32_t n_rows, const int32_t *pos, const int32_t *seq,
                       const int32_t *block_table, const struct backend_attn *a)
{
    struct cuda_ctx *c = cuda_ctx_of(be);
    if (cuda_op_begin(c) || n_rows <= 0)
        return;
    if (a->head_dim > ATT_MAX_DPL * CUDA_WARP || a->head_dim % 2 || a->n_head_kv <= 0 ||
        a->n_head % a->n_head_kv) {
        c->err = INF_EUNSUPPORTED;
        return;
    }
    /* DPL: accumulator slots per lane for this head_dim (pairs of 64), so
     * a 128-wide head does not issue the predicated-off half of a 256-wide
     * walk; which lane holds a dimension never changes its arithmetic */
    const int G = a->n_head / a->n_head_kv, hd = a->head_dim;
    const int dpl = hd <= 64 ? 2 : hd <= 128 ? 4 : 8;
    const quant_f16 *kc = (const quant_f16 *)k_cache, *vc = (const quant_f16 *)v_cache;
    if (G <= ATT_G_MAX && (hd == 64 || hd == 128)) {
        /* a model's head_dim decides the kernel's arithmetic, never the
         * batch (the batch picks only the rows a block: no bit moves) */
        if (hd == 64)
            att_gqa_tc_launch<64>(c, n_rows, q, kc, vc, out, pos, seq, block_table, a);
        else
            att_gqa_tc_launch<128>(c, n_rows, q, kc, vc, out, pos, seq, block_table, a);
        CUDA_CHECK_LAUNCH(c, "attention_gqa_tc_kernel");
        return;
    }
    if (G <= ATT_G_MAX && hd <= ATT_VS_HD && hd % 8 == 0) {
        const dim3 grid(n_rows, a->n_head_kv), block(G * CUDA_WARP);
        if (dpl == 2)
            cuda_launch(c, attention_gqa_kernel<2>, grid, block, 0, q, kc, vc, out, pos, seq, block_table, *a);
        else
            cuda_launch(c, attention_gqa_kernel<4>, grid, block, 0, q, kc, vc, out, pos, seq, block_table, *a);
        CUDA_CHECK_LAUNCH(c, "attention_gqa_kernel");
        return;
    }
    const dim3 grid(n_rows, cuda_blocks(a->n_head, ATT_WARPS)), block(ATT_WARPS * CUDA_WARP);
    if (dpl == 2)
        cuda_launch(c, attention_kernel<2>, grid, block, 0, q, kc, vc, out, pos, seq, block_table, *a);
    else if (dpl == 4)
        cuda_launch(c, attention_kernel<4>, grid, block, 0, q, kc, vc, out, pos, seq, block_table, *a);
    else
        cuda_launch(c, attention_kernel<8>, grid, block, 0, q, kc, vc, out, pos, seq, block_table, *a);
    CUDA_CHECK_LAUNCH(c, "attention_kernel");
}

void cuda_op_attention_layer(struct backend *be, const float *q, struct backend_kv *kv,
                             int32_t layer, float *out, int32_t n_rows, const int32_t *pos,
                             const int32_t *seq, const int32_t *block_table,
                             const struct backend_attn *a)
{
    struct cuda_ctx *c = cuda_ctx_of(be);
    if (c->err)
        return;
    if (layer < 0 || layer >= kv->s.n_layer || kv->s.row_len != a->n_head_kv * a->head_dim ||
        kv->s.block_size != a->block_size) {
        c->err = INF_EINTERNAL; /* the graph's shapes disagree with its cache */
        return;
    }
    cuda_op_attention(be, q, cuda_kv_plane(kv, layer, 0), cuda_kv_plane(kv, layer, 1), out,
                      n_rows, pos, seq, block_table, a);
}
