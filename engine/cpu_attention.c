/* cpu_attention — the CPU backend's KV cache (F16, as llama.cpp's default)
 * and attention (as llama.cpp's CPU flash-attention kernel: F16 query,
 * online softmax, F16 running accumulator; see cpu_impl.h).
 *
 * struct backend_kv is private to this file. Each (row, KV head) is one
 * chunk computed by one thread; the AVX2 kernel (cpu_avx2_attn) gives the
 * same bits. Threads: the backend's caller; chunks on its pool.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "cpu_avx2.h"
#include "cpu_impl.h"
#include "err.h"
#include "quant.h"

/* ------------------------------------------------------------------------ */
/* llama.cpp-compatible arithmetic                                          */
/* ------------------------------------------------------------------------ */
/* The attention kernel rounds to F16 where llama.cpp's does, and its F16
 * dot product sums in the same order as llama.cpp's 8-lane AVX2 code (fmaf:
 * glibc uses the FMA instruction when the CPU has it). This matters on small
 * models: measured on stories260K, llama.cpp's F16 accumulator alone moves
 * logprobs by ~1e-2 against an all-F32 attention, and a 1-ulp change of K
 * before its F16 rounding moves them by up to ~7e-3. */

static inline float cpu_f16_to_f32(quant_f16 h)
{
    return quant_f16_to_f32(h); /* exact */
}

static inline quant_f16 cpu_f32_to_f16(float f)
{
    return quant_f32_to_f16(f); /* round to nearest even, as F16C */
}

/* Dot of two F16 rows as ggml_vec_dot_f16: quant's F16 kernel (its plain C
 * reference; cpu_avx2_attn computes the same bits). */
static float cpu_dot_f16(const quant_f16 *a, const quant_f16 *b, int32_t n)
{
    return quant_kernel_dot_ref(QK_F16, n, a, b);
}

/* ------------------------------------------------------------------------ */
/* KV cache and attention                                                   */
/* ------------------------------------------------------------------------ */

/* The cache holds F16 rows (as llama.cpp's default cache type): half the
 * memory, and the attention below rounds exactly where llama.cpp does.
 * quant_quantize_row(QT_F16) gives the bytes of quant_f32_to_f16 on every
 * path. Layout: one allocation, per layer the K plane then the V plane, each
 * [n_blocks * block_size][row_len] F16, so a block is one contiguous run of
 * every plane. */
struct backend_kv {
    struct backend_kv_shape s;
    size_t row_bytes; /* row_len F16 */
    size_t plane;     /* bytes of one layer's K (or V) */
    char *data;       /* [n_layer][2][slots][row_len] */
};

static quant_f16 *cpu_kv_plane(const struct backend_kv *kv, int32_t layer, int v)
{
    return (quant_f16 *)(kv->data + ((size_t)layer * 2 + (size_t)v) * kv->plane);
}

int cpu_kv_alloc(struct backend *be, const struct backend_kv_shape *s,
                 struct backend_kv **out)
{
    *out = NULL;
    if (s->n_layer < 1 || s->n_blocks < 1 || s->block_size < 1 || s->row_len < 1)
        return INF_EINVAL;
    struct backend_kv *kv = calloc(1, sizeof(*kv));
    if (!kv)
        return INF_ENOMEM;
    kv->s = *s;
    kv->row_bytes = (size_t)s->row_len * sizeof(quant_f16);
    const size_t slots = (size_t)s->n_blocks * (size_t)s->block_size;
    if (slots > SIZE_MAX / kv->row_bytes ||
        slots * kv->row_bytes > SIZE_MAX / 2 / (size_t)s->n_layer) {
        free(kv);
        return INF_ENOMEM;
    }
    kv->plane = slots * kv->row_bytes;
    kv->data = cpu_alloc(be, kv->plane * 2 * (size_t)s->n_layer);
    if (!kv->data) {
        free(kv);
        return INF_ENOMEM;
    }
    *out = kv;
    return 0;
}

void cpu_kv_free(struct backend *be, struct backend_kv *kv)
{
    if (!kv)
        return;
    cpu_free(be, kv->data);
    free(kv);
}

void cpu_kv_copy_blocks(struct backend *be, struct backend_kv *kv, const int32_t *src,
                        const int32_t *dst, int32_t n)
{
    struct cpu_ctx *c = cpu_ctx(be);
    const size_t bb = (size_t)kv->s.block_size * kv->row_bytes;
    for (int32_t i = 0; i < n; i++) {
        if (src[i] < 0 || src[i] >= kv->s.n_blocks || dst[i] < 0 || dst[i] >= kv->s.n_blocks) {
            c->error = INF_EINTERNAL; /* the caller checks the ids */
            return;
        }
        for (int32_t l = 0; l < kv->s.n_layer; l++)
            for (int v = 0; v < 2; v++) {
                char *p = (char *)cpu_kv_plane(kv, l, v);
                memcpy(p + (size_t)dst[i] * bb, p + (size_t)src[i] * bb, bb);
            }
    }
}

int cpu_kv_read(struct backend *be, struct backend_kv *kv, int32_t layer, int64_t slot0,
                int64_t n, void *k_host, void *v_host)
{
    const int64_t slots = (int64_t)kv->s.n_blocks * kv->s.block_size;
    if (layer < 0 || layer >= kv->s.n_layer || slot0 < 0 || n < 0 || slot0 + n > slots)
        return INF_EINVAL;
    memcpy(k_host, (char *)cpu_kv_plane(kv, layer, 0) + (size_t)slot0 * kv->row_bytes,
           (size_t)n * kv->row_bytes);
    memcpy(v_host, (char *)cpu_kv_plane(kv, layer, 1) + (size_t)slot0 * kv->row_bytes,
           (size_t)n * kv->row_bytes);
    return cpu_sync(be);
}

void cpu_kv_store(struct backend *be, struct backend_kv *kv, int32_t layer, const float *k,
                  const float *v, const int32_t *slots, int32_t n_rows)
{
    (void)be;
    const int32_t row_len = kv->s.row_len;
    quant_f16 *kc = cpu_kv_plane(kv, layer, 0), *vc = cpu_kv_plane(kv, layer, 1);
    for (int32_t r = 0; r < n_rows; r++) {
        quant_quantize_row(QT_F16, k + (size_t)r * row_len, kc + (size_t)slots[r] * row_len,
                           row_len);
        quant_quantize_row(QT_F16, v + (size_t)r * row_len, vc + (size_t)slots[r] * row_len,
                           row_len);
    }
}

/* One query head of one row, over positions 0..n_kv-1 of its sequence, the
 * way llama.cpp's CPU flash attention does it: the query rounded to F16;
 * scores s_p = dot_f16(q, k_p) * scale; an online softmax that keeps the
 * running maximum M, the running sum S and the weighted sum of V in an F16
 * accumulator (rescaled by exp(M_old - M) when the maximum grows);
 * out = acc / S. (cpu_avx2_attn computes the same bits.) */
static void cpu_attn_head(const struct cpu_attn_group *g, const float *q, quant_f16 *q16,
                          quant_f16 *acc, float *out)
{
    const int32_t hd = g->head_dim, bs = g->block_size;
    for (int32_t d = 0; d < hd; d++) {
        q16[d] = cpu_f32_to_f16(q[d]);
        acc[d] = 0;
    }
    float M = -INFINITY, S = 0.0f;
    for (int32_t p = 0; p < g->n_kv; p++) {
        const size_t slot = (size_t)g->bt[p / bs] * bs + (size_t)(p % bs);
        const quant_f16 *kp = g->k + slot * g->kv_stride;
        const quant_f16 *vp = g->v + slot * g->kv_stride;
        const float s = cpu_dot_f16(kp, q16, hd) * g->scale;
        float ms = 1.0f, vs = 1.0f;
        if (s > M) {
            const float m_old = M;
            M = s;
            ms = expf(m_old - M);
            for (int32_t d = 0; d < hd; d++)
                acc[d] = cpu_f32_to_f16(cpu_f16_to_f32(acc[d]) * ms);
        } else {
            vs = expf(s - M);
        }
        for (int32_t d = 0; d < hd; d++)
            acc[d] = cpu_f32_to_f16(fmaf(cpu_f16_to_f32(vp[d]), vs, cpu_f16_to_f32(acc[d])));
        S = fmaf(S, ms, vs); /* contracted in llama.cpp's build */
    }
    const float inv = S == 0.0f ? 0.0f : 1.0f / S;
    for (int32_t d = 0; d < hd; d++)
        out[d] = cpu_f16_to_f32(acc[d]) * inv;
}

struct cpu_attn_job {
    struct cpu_ctx *c;
    const float *q;
    const quant_f16 *k_cache, *v_cache;
    float *out;
    const int32_t *pos, *seq, *block_table;
    const struct backend_attn *a;
    int simd;
};

/* One chunk = one (row, KV head): the query heads sharing that KV head read
 * each K/V row once. Each head's arithmetic is the same whatever the
 * grouping. */
static void cpu_attn_task(void *arg, int64_t ci, int ith)
{
    struct cpu_attn_job *j = arg;
    const struct backend_attn *a = j->a;
    const int32_t hd = a->head_dim, qdim = a->n_head * hd, kvdim = a->n_head_kv * hd;
    const int32_t group = a->n_head / a->n_head_kv;
    const int64_t r = ci / a->n_head_kv;
    const int32_t kvh = (int32_t)(ci % a->n_head_kv);
    float *scratch = j->c->att + (size_t)ith * j->c->att_stride;
    struct cpu_attn_group g = {
        .q = j->q + (size_t)r * qdim + (size_t)kvh * group * hd,
        .out = j->out + (size_t)r * qdim + (size_t)kvh * group * hd,
        .k = j->k_cache + (size_t)kvh * hd,
        .v = j->v_cache + (size_t)kvh * hd,
        .bt = j->block_table + (size_t)j->seq[r] * a->bt_stride,
        .n_kv = j->pos[r] + 1,
        .nq = group,
        .head_dim = hd,
        .block_size = a->block_size,
        .kv_stride = kvdim,
        .scale = a->scale,
        .scratch = scratch,
    };
#ifdef INFERD_HAVE_AVX2
    if (j->simd) {
        cpu_avx2_attn(&g);
        return;
    }
#endif
    quant_f16 *q16 = (quant_f16 *)scratch, *acc = q16 + hd;
    for (int32_t h = 0; h < group; h++)
        cpu_attn_head(&g, g.q + (size_t)h * hd, q16, acc, g.out + (size_t)h * hd);
}

void cpu_attention(struct backend *be, const float *q, struct backend_kv *kv,
                   int32_t layer, float *out, int32_t n_rows, const int32_t *pos,
                   const int32_t *seq, const int32_t *block_table,
                   const struct backend_attn *a)
{
    struct cpu_ctx *c = cpu_ctx(be);
    const int32_t group = a->n_head_kv > 0 ? a->n_head / a->n_head_kv : 0;
    const quant_f16 *k_cache = cpu_kv_plane(kv, layer, 0);
    const quant_f16 *v_cache = cpu_kv_plane(kv, layer, 1);
    if (group < 1 || group * a->n_head_kv != a->n_head ||
        kv->s.row_len != a->n_head_kv * a->head_dim || kv->s.block_size != a->block_size ||
        cpu_attn_scratch_floats(group, a->head_dim) > c->att_stride) {
        c->error = INF_EINTERNAL; /* reserve() was not told about this shape */
        return;
    }
    int64_t work = 0;
    for (int32_t r = 0; r < n_rows; r++)
        work += (int64_t)(pos[r] + 1) * a->n_head * a->head_dim * 2;
    struct cpu_attn_job j = {c, q, k_cache, v_cache, out, pos, seq, block_table, a, 0};
    j.simd = c->simd && a->head_dim % 8 == 0 && group <= 64;
    cpu_run(c, cpu_attn_task, &j, 0, (int64_t)n_rows * a->n_head_kv, work / 8);
}
