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
 * Decode batches (a row a sequence, up to 16 rows) score apart from the
 * walk: cuda/attention_dec.cu. A tiled flash-attention prefill is later
 * work (it must keep the per-row order).
 */
#include "engine/cuda/attention_impl.cuh"

#include <type_traits>

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

/* The grouped-query kernel: one block per (row, KV head), one warp per
 * query head of the group (G = n_head / n_head_kv <= ATT_G_MAX). The
 * group's heads read the same K and V rows, so the block stages each
 * 32-position chunk of them in shared memory once (16-byte loads, all in
 * flight) instead of every head fetching them from L2 itself (H200, 18:13:
 * the per-head kernel moved ~30 GB through L2 per layer of a 2048-token
 * prefill, 10.9 ms). Each warp computes exactly what attention_kernel
 * computes for its head (att_score, att_walk): the same bits. */
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
#define ATT_TC_KS 136 /* K / query row stride in halves: 272 bytes, conflict-free fragment loads */

template <int HD> struct att_tc_smem {
    quant_f16 qh[16][ATT_TC_KS]; /* the queries as F16: A of the mma */
    quant_f16 ks[CUDA_WARP][ATT_TC_KS];
    float sc[16][CUDA_WARP + 1];
    float4 wk[ATT_G_MAX][CUDA_WARP]; /* att_walk's factors */
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
                if constexpr (!TC)
                    att_stage_kf(S.u.kf[i], i, cch, v8);
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
                sc = -INFINITY;
                if (lane < cnt)
                    sc = att_score_kf<HD>(S.qf[wid], S.u.kf[lane], lane, a.scale);
                __syncthreads(); /* every warp has read the K rows: wk reuses them */
            }
            float4 *wk;
            if constexpr (TC)
                wk = S.wk[wid];
            else
                wk = S.u.wk[wid];
            if (cnt == 0)
                continue; /* (warp-uniform) another phase's row, or past this row's end */
            const bool any_new = att_factors<!TC>(m, sc, cnt, lane, wk);
            att_walk_f32<HD>(m, l, acc, wk, &vsf[0][DPL * lane], cnt, any_new);
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

/* attention_gqa_tc_kernel<HD, the configured scores, rows a block> (c->att_tc;
 * EXACT takes two rows a block from ATT_PAIR_MIN rows where 2 G warps fit) */
template <int HD>
static void att_gqa_tc_launch(struct cuda_ctx *c, int32_t n_rows, const float *q, const quant_f16 *kc,
                              const quant_f16 *vc, float *out, const int32_t *pos, const int32_t *seq,
                              const int32_t *block_table, const struct backend_attn *a)
{
    const int G = a->n_head / a->n_head_kv;
    if (c->att_tc)
        cuda_launch(c, attention_gqa_tc_kernel<HD, true, 1>, dim3(n_rows, a->n_head_kv), dim3(G * CUDA_WARP), 0, q,
                    kc, vc, out, pos, seq, block_table, *a, n_rows);
    else if (n_rows >= ATT_PAIR_MIN && 2 * G <= ATT_G_MAX && c->att_pair &&
             (a->n_seqs <= 0 || n_rows >= ATT_PAIR_ROWS_PER_SEQ * a->n_seqs))
        cuda_launch(c, attention_gqa_tc_kernel<HD, false, 2>, dim3(cuda_blocks(n_rows, 2), a->n_head_kv),
                    dim3(2 * G * CUDA_WARP), 0, q, kc, vc, out, pos, seq, block_table, *a, n_rows);
    else if (cuda_att_dec(c, HD, n_rows, q, kc, vc, out, pos, seq, block_table, a))
        ; /* a decode batch: scored apart from the walk (cuda/attention_dec.cu), the same bits */
    else
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
