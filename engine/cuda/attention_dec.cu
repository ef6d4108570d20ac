/* cuda/attention_dec — decode batches' attention: the exact scores of a
 * row's positions in a grid of their own, then the sequential walk.
 *
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
 * c->att_sc; then att_dec_walk_kernel stages only V and walks. The grid
 * does not depend on the context (a CUDA graph replays it at every
 * length): a slice strides over the chunks. */
#include "engine/cuda/attention_impl.cuh"

extern "C" {
#include "engine/log.h"
}

#define ATT_DEC_Z 32    /* chunk slices a (row, KV head) of the score grid */

template <int HD>
static __global__ void __launch_bounds__(ATT_G_MAX *CUDA_WARP)
att_dec_score_kernel(const float *__restrict__ q, const quant_f16 *__restrict__ kc,
                     const int32_t *__restrict__ pos, const int32_t *__restrict__ seq,
                     const int32_t *__restrict__ bt, struct backend_attn a, float *__restrict__ sc_out,
                     int32_t early)
{
    if (early) /* the walk launches at the score's start (cuda_small_early) */
        cuda_pdl_trigger();
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
            att_stage_kf(S.u.kf[i], i, cch, *(const uint4 *)(kc + slot_sm[i] * kv_dim + (int64_t)kvh * HD + 8 * cch));
        }
        __syncthreads();
        if (lane < cnt)
            so[p0 + lane] = att_score_kf<HD>(S.qf[wid], S.u.kf[lane], lane, a.scale);
    }
}

/* The split's walk: one block per (row, KV head, 64 dimensions of the
 * head), a warp per query head, attention_gqa_tc_kernel's factors and walk
 * over the scores of att_dec_score_kernel. The dimensions' F16 chains are
 * independent, so a 128-dimension head walks in two blocks of two
 * dimensions a lane: twice the SMs for the one sequential walk of a
 * short batch, half the instructions a position on each (the factors are
 * taken in both). Each chunk's V rows are loaded while the previous
 * chunk is walked (registers, then the other of two shared buffers): the
 * walk no longer waits on the cache after every 32 positions. Two chunks
 * ahead (two register sets, 64 -> 99 registers) measured 1-5% slower
 * (bench/RESULTS.md 2026-12-03 20:30 call 10): one ahead is enough. */
#define ATT_DEC_PF 4 /* 16-byte V pieces a thread holds in flight (a chunk is 4 HDS of them) */

#define ATT_DEC_HDS 64 /* dimensions of a head a walk block takes */

/* One thread's share of the walk's V staging: piece t (t = tid, tid + nt,
 * ...) of a chunk is row t / PER_ROW, 8 values at 8 (t % PER_ROW) of the
 * block's HDS dimensions. locate() reads the block table for a chunk,
 * fetch() then loads its pieces into registers, stage() stores them as
 * F32. locate runs a chunk before fetch: the V loads then never wait for
 * the table load they depend on (ncu 2026-12-03 23:15: a chunk's walk took
 * ~3,000 cycles, the V loads of the next stalled on their addresses). */
template <int HDS> struct att_dec_feed {
    enum { PER_ROW = HDS / 8, PIECES = CUDA_WARP * PER_ROW };
    const quant_f16 *vb;
    const int32_t *table;
    int32_t kv_dim, bs, last;
    int tid, nt;
    int32_t slot[ATT_DEC_PF]; /* cache slots of the located chunk's pieces, -1: none */
    uint4 v8[ATT_DEC_PF];

    __device__ __forceinline__ void locate(int32_t p0)
    {
#pragma unroll
        for (int k = 0; k < ATT_DEC_PF; k++) {
            const int t = tid + k * nt;
            const int32_t p = p0 + t / PER_ROW;
            slot[k] = t < PIECES && p <= last ? table[p / bs] * bs + p % bs : -1;
        }
    }
    __device__ __forceinline__ void fetch()
    {
#pragma unroll
        for (int k = 0; k < ATT_DEC_PF; k++)
            if (slot[k] >= 0)
                v8[k] = *(const uint4 *)(vb + (int64_t)slot[k] * kv_dim + 8 * ((tid + k * nt) % PER_ROW));
    }
    __device__ __forceinline__ void stage(float (*buf)[HDS], int32_t p0)
    {
#pragma unroll
        for (int k = 0; k < ATT_DEC_PF; k++) {
            const int t = tid + k * nt;
            if (t < PIECES && p0 + t / PER_ROW <= last)
                att_stage_v(buf[t / PER_ROW], t % PER_ROW, v8[k]);
        }
        /* small groups: the pieces past ATT_DEC_PF a thread, loaded here */
        for (int t = tid + ATT_DEC_PF * nt; t < PIECES; t += nt) {
            const int32_t p = p0 + t / PER_ROW;
            if (p <= last) {
                const int64_t sl = (int64_t)table[p / bs] * bs + p % bs;
                att_stage_v(buf[t / PER_ROW], t % PER_ROW, *(const uint4 *)(vb + sl * kv_dim + 8 * (t % PER_ROW)));
            }
        }
    }
};

/* A walker lane's DPL dimensions of head h's output row: acc / l */
template <int HD, int DPL>
static __device__ __forceinline__ void att_dec_out(float *out, const struct backend_attn &a, int32_t r, int32_t h,
                                                   int32_t d0, int lane, const float acc[DPL], float l)
{
    const float inv = l == 0.0f ? 0.0f : 1.0f / l;
    float *o = out + ((int64_t)r * a.n_head + h) * HD + d0 + DPL * lane;
#pragma unroll
    for (int k = 0; k < DPL; k++)
        o[k] = acc[k] * inv;
}

template <int HD>
static __global__ void __launch_bounds__(ATT_G_MAX *CUDA_WARP)
att_dec_walk_kernel(const quant_f16 *__restrict__ vc, float *__restrict__ out, const int32_t *__restrict__ pos,
                    const int32_t *__restrict__ seq, const int32_t *__restrict__ bt, struct backend_attn a,
                    const float *__restrict__ scores, int32_t early)
{
    if (early) /* the wo product reads it next (cuda_small_early) */
        cuda_pdl_trigger();
    cuda_pdl_enter();
    enum { HDS = HD < ATT_DEC_HDS ? HD : ATT_DEC_HDS, DPL = HDS / CUDA_WARP };
    __shared__ __align__(16) float vsf[2][CUDA_WARP][HDS];
    __shared__ float4 wk_sm[ATT_G_MAX][CUDA_WARP];
    const int32_t r = blockIdx.x, kvh = blockIdx.y, d0 = HDS * (int32_t)blockIdx.z;
    const int wid = threadIdx.x / CUDA_WARP, lane = threadIdx.x % CUDA_WARP;
    const int G = a.n_head / a.n_head_kv, nt = G * CUDA_WARP;
    const int32_t h = kvh * G + wid, kv_dim = a.n_head_kv * HD, last = pos[r], bs = a.block_size;
    const int32_t *table = bt + (int64_t)seq[r] * a.bt_stride;
    const float *sr = scores + ((int64_t)r * a.n_head + h) * ((int64_t)a.bt_stride * bs);
    att_dec_feed<HDS> F{vc + (int64_t)kvh * HD + d0, table, kv_dim, bs, last, (int)threadIdx.x, nt, {}, {}};
    float acc[DPL];
#pragma unroll
    for (int k = 0; k < DPL; k++)
        acc[k] = 0.0f;
    float m = -INFINITY, l = 0.0f;
    F.locate(0);
    F.fetch();
    F.stage(vsf[0], 0);
    if (CUDA_WARP <= last)
        F.locate(CUDA_WARP);
    float scn = lane <= last ? sr[lane] : -INFINITY;
    __syncthreads();
    int b = 0;
    for (int32_t p0 = 0; p0 <= last; p0 += CUDA_WARP, b ^= 1) {
        const int cnt = last - p0 + 1 < CUDA_WARP ? last - p0 + 1 : CUDA_WARP;
        const float sc = scn;
        const int32_t p1 = p0 + CUDA_WARP;
        if (p1 <= last) { /* the next chunk's V rows and scores, in flight during this walk */
            F.fetch();
            scn = p1 + lane <= last ? sr[p1 + lane] : -INFINITY;
            if (p1 + CUDA_WARP <= last)
                F.locate(p1 + CUDA_WARP);
        }
        const bool any_new = att_factors<true>(m, sc, cnt, lane, wk_sm[wid]);
        att_walk_f32<HDS>(m, l, acc, wk_sm[wid], &vsf[b][0][DPL * lane], cnt, any_new);
        if (p1 <= last)
            F.stage(vsf[b ^ 1], p1); /* the other buffer: read last in the walk before the previous barrier */
        __syncthreads();
    }
    att_dec_out<HD, DPL>(out, a, r, h, d0, lane, acc, l);
}

/* The walk with helpers: G walker warps (one per query head) do only the
 * F16 updates of chunk c while G helper warps stage chunk c + 1's V rows
 * and take its factors (att_factors: the prefix max, glibc's expf), with
 * chunk c + 2's V rows and scores already loading into their registers.
 * The factors need only the scores and the running maximum, never the
 * walk, so they run a chunk ahead in other warps instead of between the
 * walker's chunks (ncu 2026-12-03 22:45 call 1: a position of the one-warp
 * walk took ~140 cycles, most of them waiting). The same operations on
 * the same values: the same bits. Block: 2 G warps. */
template <int HD>
static __global__ void __launch_bounds__(2 * ATT_G_MAX *CUDA_WARP)
att_dec_walkh_kernel(const quant_f16 *__restrict__ vc, float *__restrict__ out, const int32_t *__restrict__ pos,
                     const int32_t *__restrict__ seq, const int32_t *__restrict__ bt, struct backend_attn a,
                     const float *__restrict__ scores, int32_t early)
{
    if (early) /* the wo product reads it next (cuda_small_early) */
        cuda_pdl_trigger();
    cuda_pdl_enter();
    enum { HDS = HD < ATT_DEC_HDS ? HD : ATT_DEC_HDS, DPL = HDS / CUDA_WARP };
    __shared__ __align__(16) float vsf[2][CUDA_WARP][HDS];
    __shared__ float4 wk_sm[2][ATT_G_MAX][CUDA_WARP];
    __shared__ int new_sm[2][ATT_G_MAX];
    const int32_t r = blockIdx.x, kvh = blockIdx.y, d0 = HDS * (int32_t)blockIdx.z;
    const int G = a.n_head / a.n_head_kv, nt = G * CUDA_WARP;
    const int wid = threadIdx.x / CUDA_WARP, lane = threadIdx.x % CUDA_WARP;
    const bool helper = wid >= G;
    const int hw = helper ? wid - G : wid, ht = threadIdx.x - (helper ? nt : 0);
    const int32_t h = kvh * G + hw, kv_dim = a.n_head_kv * HD, last = pos[r], bs = a.block_size;
    const int32_t *table = bt + (int64_t)seq[r] * a.bt_stride;
    const float *sr = scores + ((int64_t)r * a.n_head + h) * ((int64_t)a.bt_stride * bs);
    /* helpers: chunk p0's V pieces (located a chunk before) and this
     * lane's score into registers */
    att_dec_feed<HDS> F{vc + (int64_t)kvh * HD + d0, table, kv_dim, bs, last, ht, nt, {}, {}};
    float scn = -INFINITY, mf = -INFINITY;
    auto fetch = [&](int32_t p0) {
        F.fetch();
        scn = p0 + lane <= last ? sr[p0 + lane] : -INFINITY;
        if (p0 + CUDA_WARP <= last)
            F.locate(p0 + CUDA_WARP);
    };
    /* helpers: stage chunk p0 (fetched) into buffer b, its factors from mf */
    auto prepare = [&](int32_t p0, int b) {
        F.stage(vsf[b], p0);
        const int cnt = last - p0 + 1 < CUDA_WARP ? last - p0 + 1 : CUDA_WARP;
        const bool any_new = att_factors<true>(mf, scn, cnt, lane, wk_sm[b][hw], &mf);
        if (lane == 0)
            new_sm[b][hw] = any_new;
    };
    float acc[DPL];
#pragma unroll
    for (int k = 0; k < DPL; k++)
        acc[k] = 0.0f;
    float m = -INFINITY, l = 0.0f;
    if (helper) {
        F.locate(0);
        fetch(0);
        prepare(0, 0);
        if (CUDA_WARP <= last)
            fetch(CUDA_WARP);
    }
    __syncthreads();
    int b = 0;
    for (int32_t p0 = 0; p0 <= last; p0 += CUDA_WARP, b ^= 1) {
        const int32_t p1 = p0 + CUDA_WARP;
        if (helper) {
            if (p1 <= last) {
                prepare(p1, b ^ 1); /* the buffers the walk of chunk p0 - 32 read, before the barrier */
                if (p1 + CUDA_WARP <= last)
                    fetch(p1 + CUDA_WARP);
            }
        } else {
            const int cnt = last - p0 + 1 < CUDA_WARP ? last - p0 + 1 : CUDA_WARP;
            att_walk_f32<HDS>(m, l, acc, wk_sm[b][hw], &vsf[b][0][DPL * lane], cnt, new_sm[b][hw] != 0);
        }
        __syncthreads();
    }
    if (helper)
        return;
    att_dec_out<HD, DPL>(out, a, r, h, d0, lane, acc, l);
}

/* c->att_sc for c->att_split rows of this shape's scores, or NULL (no
 * memory, or a stream capture under way: the fused kernel serves). The
 * first decode step of a shape runs op by op (engine/graph.c records a
 * key on its second step), so the buffer exists before any recording
 * refers to it; a larger shape (another model) gets a new buffer and the
 * old one stays allocated (a recording may hold it) until destroy. A
 * refused size is remembered (warned once), not retried. */
static float *att_dec_scratch(struct cuda_ctx *c, const struct backend_attn *a)
{
    const size_t need = (size_t)c->att_split * (size_t)a->n_head * (size_t)a->bt_stride * (size_t)a->block_size;
    if (c->att_sc && c->att_sc_n >= need)
        return c->att_sc;
    cudaStreamCaptureStatus cs = cudaStreamCaptureStatusNone;
    if (cudaStreamIsCapturing(c->stream, &cs) != cudaSuccess || cs != cudaStreamCaptureStatusNone ||
        c->att_sc_nold >= (int)(sizeof(c->att_sc_old) / sizeof(c->att_sc_old[0])))
        return NULL;
    if (need <= c->att_sc_fail)
        return NULL; /* refused before: no cudaMalloc per layer and step */
    void *p = NULL;
    if (cuda_malloc(c, &p, need * sizeof(float)) != cudaSuccess) {
        cudaGetLastError();
        c->att_sc_fail = need;
        log_warn("cuda: no memory for the decode attention's score buffer (%zu MiB): decode batches keep "
                 "the fused attention kernel (the same results, slower at long context)",
                 (need * sizeof(float)) >> 20);
        return NULL;
    }
    if (c->att_sc)
        c->att_sc_old[c->att_sc_nold++] = c->att_sc;
    c->att_sc = (float *)p;
    c->att_sc_n = need;
    return c->att_sc;
}

int cuda_att_dec(struct cuda_ctx *c, int hd, int32_t n_rows, const float *q, const quant_f16 *kc,
                 const quant_f16 *vc, float *out, const int32_t *pos, const int32_t *seq, const int32_t *bt,
                 const struct backend_attn *a)
{
    if (c->att_tc || n_rows > c->att_split || (a->n_seqs > 0 && n_rows >= 2 * a->n_seqs) ||
        (hd != 64 && hd != 128))
        return 0;
    float *sc = att_dec_scratch(c, a);
    if (!sc)
        return 0;
    const int G = a->n_head / a->n_head_kv;
    const dim3 sgrid(n_rows, a->n_head_kv, ATT_DEC_Z), wgrid(n_rows, a->n_head_kv, hd / ATT_DEC_HDS),
        block(G * CUDA_WARP);
    const dim3 hblock(2 * G * CUDA_WARP);
    /* the walk is the last kernel of the op: the wo product after it may
     * launch at its start; the score kernel lets the walk launch at its
     * start too (c->pdl_att) */
    const int32_t early = c->pdl_att && cuda_small_early(c, n_rows), early2 = early && c->pdl_att == 2;
    /* the walk with helpers while its grid is under two blocks an SM, the
     * one-warp walk past that (H200, bench/RESULTS.md 2026-12-03 22:45 call
     * 3, the 7B at 512 + 128: helpers +4% at 1 and 16 streams, +1% at 32,
     * -2% at 64, where the grid holds every SM anyway) */
    const int helpers = c->att_walk ? c->att_walk == 2 : (int64_t)wgrid.x * wgrid.y * wgrid.z <= 2 * c->n_sm;
    if (hd == 64) {
        cuda_launch(c, att_dec_score_kernel<64>, sgrid, block, 0, q, kc, pos, seq, bt, *a, sc, early2);
        if (!helpers)
            cuda_launch(c, att_dec_walk_kernel<64>, wgrid, block, 0, vc, out, pos, seq, bt, *a, (const float *)sc,
                        early);
        else
            cuda_launch(c, att_dec_walkh_kernel<64>, wgrid, hblock, 0, vc, out, pos, seq, bt, *a, (const float *)sc,
                        early);
    } else {
        cuda_launch(c, att_dec_score_kernel<128>, sgrid, block, 0, q, kc, pos, seq, bt, *a, sc, early2);
        if (!helpers)
            cuda_launch(c, att_dec_walk_kernel<128>, wgrid, block, 0, vc, out, pos, seq, bt, *a, (const float *)sc,
                        early);
        else
            cuda_launch(c, att_dec_walkh_kernel<128>, wgrid, hblock, 0, vc, out, pos, seq, bt, *a, (const float *)sc,
                        early);
    }
    return 1;
}
