/* cpu_avx2 — internal: the AVX2/FMA/F16C fast paths of the CPU backend.
 *
 * Only engine/cpu*.c (and tests/engine/test_ops.c) include this. They call
 * the cpu_avx2_* functions only when quant_have_avx2() said the CPU runs
 * them. Every function here gives results BIT-IDENTICAL to the plain C code
 * of cpu_*.c that it replaces (same operations, same rounding, same order per
 * output element; only independent elements are computed side by side), so
 * the fast and the plain path are interchangeable and batch invariance holds
 * on both. test_ops checks each against the plain path bit for bit.
 * Pure functions over caller memory: any thread.
 */
#ifndef INFERD_CPU_AVX2_H
#define INFERD_CPU_AVX2_H

#include <stddef.h>
#include <math.h>
#include <stdint.h>

#include "quant.h"

/* One unit of attention work: the query heads of one row that share one KV
 * head (GQA group), over positions 0..n_kv-1 of one sequence. */
struct cpu_attn_group {
    const float *q;         /* [nq][head_dim] queries (consecutive heads) */
    float *out;             /* [nq][head_dim] results */
    const quant_f16 *k, *v; /* caches, already offset to this KV head */
    const int32_t *bt;      /* the sequence's block table */
    int32_t n_kv;           /* positions 0..n_kv-1 */
    int32_t nq;             /* query heads in the group */
    int32_t head_dim;
    int32_t block_size;
    int32_t kv_stride;      /* elements between consecutive cache slots */
    float scale;
    float *scratch;         /* cpu_attn_scratch_floats() floats, 32-byte aligned */
};

/* Positions handled per pass of the AVX2 kernel. */
#define CPU_ATTN_CHUNK 32

/* Scratch floats one thread needs for a group of nq heads of head_dim. */
static inline size_t cpu_attn_scratch_floats(int32_t nq, int32_t head_dim)
{
    return (size_t)nq * (size_t)head_dim * 2 + (size_t)nq * CPU_ATTN_CHUNK +
           (size_t)head_dim + 64;
}

/* exp(x) as llama.cpp's AVX2+FMA build computes it inside SiLU: ggml's
 * vector expf (after Arm's optimized-routines design: x = n ln2 + b, n from
 * a shifted round, 2^n built in the exponent bits, a polynomial in b; within
 * ~1.5 ulp of exp and NOT libm's expf). llama.cpp's SwiGLU runs every full
 * group of 8 of a row through it, the last row_len % 8 through libm's expf,
 * so ours does too. One lane of the vector code, written scalar (lanes are
 * independent; cpu_avx2.c has the 8-lane form). */
static inline float cpu_poly_expf(float x)
{
    union { float f; uint32_t u; } z, k, s1, s2;
    const float shift = 0x1.8p23f;
    z.f = fmaf(x, 0x1.715476p+0f, shift);
    const float n = z.f - shift;
    const float b = fmaf(-n, 0x1.7f7d1cp-20f, fmaf(-n, 0x1.62e4p-1f, x));
    const uint32_t e = z.u << 23;
    k.u = e + 0x3f800000u; /* 2^n for |n| <= 126 */
    const float u = b * b;
    const float j = fmaf(fmaf(fmaf(0x1.0e4020p-7f, b, 0x1.573e2ep-5f), u,
                              fmaf(0x1.555e66p-3f, b, 0x1.fffdb6p-2f)),
                         u, 0x1.ffffecp-1f * b);
    if (!(fabsf(n) > 126.0f))
        return fmaf(j, k.f, k.f);
    /* 2^n would leave the exponent range: scale in two steps */
    const uint32_t g = n <= 0.0f ? 0x82000000u : 0u;
    s1.u = g + 0x7f000000u;
    s2.u = e - g;
    if (fabsf(n) > 192.0f)
        return s1.f * s1.f;
    return fmaf(s2.f, j, s2.f) * s1.f;
}

#ifdef INFERD_HAVE_AVX2
/* y[i] = expf(x[i]), bit-identical to glibc's expf on an FMA CPU (the same
 * algorithm: 32-entry 2^(i/32) table and a degree-3 polynomial in double,
 * with the same fused operations). y may equal x. */
void cpu_avx2_expf(const float *x, float *y, int64_t n);
/* g[i] = g[i] / (1 + cpu_poly_expf(0 - g[i])) * u[i] (the vector part of a
 * row of SwiGLU). */
void cpu_avx2_silu_mul(float *g, const float *u, int64_t n);
/* rms_norm of rows [r0, r1) as cpu_elementwise.c's plain loop (w may be NULL; y may
 * equal x). */
void cpu_avx2_rms_norm(const float *x, const float *w, float *y, int64_t r0, int64_t r1,
                       int32_t n, float eps);
/* Rope of one row of n_head heads of n_dims floats, in place, as cpu_rope.c's
 * plain loop: cs holds the cos of the n_dims/2 pairs, then their sin; neox
 * pairs (i, i + n_dims/2), else (2i, 2i+1). */
void cpu_avx2_rope_row(float *x, int32_t n_head, int32_t n_dims, int neox, const float *cs);
/* out[r] = the F32 dot of w (n floats) with x + r * xs, r < nx: the bits of
 * quant's kernel QK_F32 (tinyblas: QK_F32_TB). */
void cpu_avx2_dots_f32(int64_t n, const float *w, const float *x, size_t xs, int nx, float *out,
                       int tinyblas);
/* Attention of one group (see struct cpu_attn_group), as cpu_attention.c's plain
 * cpu_attn_head for each head. head_dim must be a multiple of 8. */
void cpu_avx2_attn(const struct cpu_attn_group *g);
#endif

#endif
