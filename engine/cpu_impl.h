/* cpu_impl — internal: what the CPU backend's files share (engine/cpu*.c
 * only; the public API is cpu.h).
 *
 * The backend is one module in several files, each a cohesive part:
 *   cpu.c            the backend object: op table, constructor, memory and
 *                    weights, reserve(), sync(), sample();
 *   cpu_pool.c       the thread pool;
 *   cpu_elementwise.c get_rows, gather, rms_norm, add_bias, add, silu_mul;
 *   cpu_mul_mat.c    the matrix products;
 *   cpu_rope.c       rope and its cos/sin cache;
 *   cpu_attention.c  the F16 KV cache and attention;
 *   cpu_avx2.c       the AVX2 versions of the float ops (same bits).
 * Every op runs on the thread that drives the backend; its chunks on the pool.
 */
#ifndef INFERD_CPU_IMPL_H
#define INFERD_CPU_IMPL_H

#include <stddef.h>
#include <stdint.h>

#include "backend.h"
#include "cpu_pool.h"

/* Below this much work (about one nanosecond each: multiply-adds / 16 or
 * elements) an op runs on the calling thread alone: posting it to the pool
 * costs more than it saves. Speed only. */
#define CPU_PAR_MIN_WORK 4096

/* Rope needs cos/sin of one position for n_dims/2 pairs; head_dim <= 1024 is
 * enforced by the model loader. */
#define CPU_MAX_ROPE_PAIRS 512
/* Largest cos/sin table kept for rope (floats); positions past it are
 * computed on the fly. */
#define CPU_ROPE_CACHE_FLOATS (1 << 21)

/* cos/sin of every position seen so far for one set of rope parameters:
 * each forward pass ropes q and k of every layer at the same positions, and
 * every request starts again at position 0. The table holds exactly what
 * the plain computation gives, so using it changes no result. */
struct cpu_rope_cache {
    float *cs;       /* [max_pos][cap_dims]: cos of the pairs, then sin */
    uint8_t *valid;  /* [max_pos] */
    int32_t max_pos; /* positions the table can hold (0: none) */
    int32_t cap_dims;
    /* parameters the table was filled for */
    int32_t n_dims;
    float base, scale;
    int has_ff;
    float ff[CPU_MAX_ROPE_PAIRS];
};

struct cpu_ctx {
    struct backend be;
    struct cpu_pool pool;
    int simd;            /* AVX2 paths of cpu_avx2.c */
    int numerics;        /* enum cpu_numerics */
    char *xq;            /* activation rows quantized for one mul_mat */
    size_t xq_bytes;
    float *att;          /* attention scratch: att_stride floats per thread */
    size_t att_stride;
    struct cpu_rope_cache rope;
    int error;
    /* ops->sample scratch: [smp_vocab] each */
    float *smp_work;
    uint64_t *smp_keys;
    float *smp_lp; /* the masked row for logprobs */
    int32_t smp_vocab;
};

static inline struct cpu_ctx *cpu_ctx(struct backend *be)
{
    return be->ctx;
}

/* Run chunks [0, n) of fn (two phases when n1 > 0). `work` estimates the
 * op's cost; small ops, and any op of a one-thread backend, run here (cpu.c). */
void cpu_run(struct cpu_ctx *c, cpu_chunk_fn fn, void *arg, int64_t n1, int64_t n, int64_t work);

/* Chunks for n items of `cost` each: enough for the threads to balance
 * (up to 4 per thread), none smaller than about CPU_PAR_MIN_WORK. */
static inline int64_t cpu_chunks(const struct cpu_ctx *c, int64_t n, int64_t cost)
{
    int64_t k = 4 * (int64_t)c->pool.n;
    const int64_t by_work = n * cost / CPU_PAR_MIN_WORK;
    if (k > by_work)
        k = by_work;
    if (k > n)
        k = n;
    return k < 1 ? 1 : k;
}

/* [*i0, *i1): chunk `ci` of n items split into k. */
static inline void cpu_split(int64_t n, int64_t ci, int64_t k, int64_t *i0, int64_t *i1)
{
    *i0 = n * ci / k;
    *i1 = n * (ci + 1) / k;
}

/* cpu.c: memory (64-byte aligned, zeroed) and the deferred error. */
void *cpu_alloc(struct backend *be, size_t bytes);
void cpu_free(struct backend *be, void *p);
int cpu_sync(struct backend *be);

/* The ops of backend.h (struct backend_ops has the contracts). */
/* cpu_elementwise.c */
void cpu_get_rows(struct backend *be, const struct backend_weight *w, const int32_t *ids,
                  int32_t n, float *y);
void cpu_gather(struct backend *be, const float *x, const int32_t *rows, int32_t n,
                int32_t row_len, float *y);
void cpu_rms_norm(struct backend *be, const float *x, const struct backend_weight *w, float *y,
                  int32_t n_rows, int32_t n, float eps);
void cpu_add_bias(struct backend *be, float *y, const struct backend_weight *b, int32_t n_rows);
void cpu_add(struct backend *be, float *y, const float *x, int64_t n);
void cpu_silu_mul(struct backend *be, float *gate, const float *up, int64_t n, int64_t row);
/* cpu_mul_mat.c */
void cpu_mul_mat(struct backend *be, const struct backend_weight *w, const float *x, float *y,
                 int32_t n_rows);
/* cpu_rope.c */
void cpu_rope(struct backend *be, float *x, int32_t n_rows, int32_t n_head, const int32_t *pos,
              const struct backend_rope *r);
/* cpu_attention.c */
int cpu_kv_alloc(struct backend *be, const struct backend_kv_shape *s, struct backend_kv **out);
void cpu_kv_free(struct backend *be, struct backend_kv *kv);
void cpu_kv_copy_blocks(struct backend *be, struct backend_kv *kv, const int32_t *src,
                        const int32_t *dst, int32_t n);
int cpu_kv_read(struct backend *be, struct backend_kv *kv, int32_t layer, int64_t slot0,
                int64_t n, void *k_host, void *v_host);
void cpu_kv_store(struct backend *be, struct backend_kv *kv, int32_t layer, const float *k,
                  const float *v, const int32_t *slots, int32_t n_rows);
void cpu_attention(struct backend *be, const float *q, struct backend_kv *kv, int32_t layer,
                   float *out, int32_t n_rows, const int32_t *pos, const int32_t *seq,
                   const int32_t *block_table, const struct backend_attn *a);

#endif
