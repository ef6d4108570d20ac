/* quant_avx2 — AVX2/FMA/F16C dot products and activation quantizers.
 *
 * Compiled with -mavx2 -mfma -mf16c (core_simd_src) and called by quant.c only
 * when the CPU runs those instructions. Each dot computes the same exact int32
 * sum per block as quant.c's reference, with _mm256_maddubs_epi16 (unsigned x
 * signed bytes -> int16 pairs: never saturates here, the largest pair sum is
 * 2*63*128 for Q6_K) and _mm256_madd_epi16 (-> int32); blocks are combined in
 * float FMA lanes, so results differ from the reference only by float
 * summation order. The quantizers reproduce the reference bytes exactly: the
 * same float operations and round-half-even conversion (the MXCSR default).
 *
 * Loads are unaligned: rows live in the GGUF mapping at any block offset.
 * Pure functions: any thread.
 */
#include "quant_avx2.h"

#include <immintrin.h>
#include <math.h>
#include <string.h>

#include "avx2_sums.h"

#ifdef INFERD_HAVE_AVX2

/* ---------------------------------------------------------------- helpers */

/* Exact integer horizontal sums (the order does not matter). */
static inline int32_t hsum_epi32x4(__m128i s)
{
    s = _mm_add_epi32(s, _mm_shuffle_epi32(s, 0x4e));
    s = _mm_add_epi32(s, _mm_shuffle_epi32(s, 0xb1));
    return _mm_cvtsi128_si32(s);
}

static inline int32_t hsum_epi32(__m256i v)
{
    return hsum_epi32x4(_mm_add_epi32(_mm256_castsi256_si128(v), _mm256_extracti128_si256(v, 1)));
}

/* The totals of four int32x8 vectors: [sum(v0), sum(v1), sum(v2), sum(v3)]. */
static inline __m128i hsum4_epi32(const __m256i v[4])
{
    const __m256i h8 = _mm256_hadd_epi32(_mm256_hadd_epi32(v[0], v[1]), _mm256_hadd_epi32(v[2], v[3]));
    return _mm_add_epi32(_mm256_castsi256_si128(h8), _mm256_extracti128_si256(h8, 1));
}

/* The total of an int32x4 / int32x8 vector converted to float (rounded to
 * nearest, as (float)hsum_epi32x4(s)), in lane 0 without a trip through a
 * general register: the canonical chains' per-block step (a sixth faster
 * on Q6_K's single row than the round trip). */
static inline float hsum_epi32x4_f(__m128i s)
{
    s = _mm_add_epi32(s, _mm_shuffle_epi32(s, 0x4e));
    s = _mm_add_epi32(s, _mm_shuffle_epi32(s, 0xb1));
    return _mm_cvtss_f32(_mm_cvtepi32_ps(s));
}

static inline float hsum_epi32_f(__m256i v)
{
    return hsum_epi32x4_f(_mm_add_epi32(_mm256_castsi256_si128(v), _mm256_extracti128_si256(v, 1)));
}

static inline float hmax_ps(__m256 v)
{
    __m128 s = _mm_max_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    s = _mm_max_ps(s, _mm_movehl_ps(s, s));
    s = _mm_max_ss(s, _mm_movehdup_ps(s));
    return _mm_cvtss_f32(s);
}

static inline float f16(quant_f16 h)
{
    return _cvtsh_ss(h);
}

/* Four int32x8 vectors (32 consecutive values) -> 32 int8 in order. The packs
 * interleave 128-bit lanes; the final permute restores element order. */
static inline __m256i pack_i32x4_i8(__m256i a, __m256i b, __m256i c, __m256i d)
{
    __m256i ab = _mm256_packs_epi32(a, b);
    __m256i cd = _mm256_packs_epi32(c, d);
    __m256i v = _mm256_packs_epi16(ab, cd);
    return _mm256_permutevar8x32_epi32(v, _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7));
}

/* Sum of each of 8 int32x8 vectors -> one int32x8 [sum(v0) .. sum(v7)]. */
static inline __m256i hsum8_epi32(const __m256i v[8])
{
    __m256i h01 = _mm256_hadd_epi32(v[0], v[1]);
    __m256i h23 = _mm256_hadd_epi32(v[2], v[3]);
    __m256i h45 = _mm256_hadd_epi32(v[4], v[5]);
    __m256i h67 = _mm256_hadd_epi32(v[6], v[7]);
    __m256i h0123 = _mm256_hadd_epi32(h01, h23);
    __m256i h4567 = _mm256_hadd_epi32(h45, h67);
    return _mm256_add_epi32(_mm256_permute2x128_si256(h0123, h4567, 0x20),
                            _mm256_permute2x128_si256(h0123, h4567, 0x31));
}

/* ------------------------------------------------------------ quantizers */

void quant_avx2_quantize_q8_0(const float *x, struct block_q8_0 *y, int64_t nb)
{
    const __m256 abs_mask = _mm256_castsi256_ps(_mm256_set1_epi32(0x7fffffff));
    for (int64_t i = 0; i < nb; i++, x += QK8_0) {
        __m256 v0 = _mm256_loadu_ps(x), v1 = _mm256_loadu_ps(x + 8);
        __m256 v2 = _mm256_loadu_ps(x + 16), v3 = _mm256_loadu_ps(x + 24);
        __m256 m = _mm256_max_ps(_mm256_max_ps(_mm256_and_ps(v0, abs_mask), _mm256_and_ps(v1, abs_mask)),
                                 _mm256_max_ps(_mm256_and_ps(v2, abs_mask), _mm256_and_ps(v3, abs_mask)));
        float amax = hmax_ps(m);
        float d = amax / 127.f;
        float id = amax != 0.f ? 127.f / amax : 0.f;
        y[i].d = _cvtss_sh(d, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
        __m256 vid = _mm256_set1_ps(id);
        __m256i q = pack_i32x4_i8(_mm256_cvtps_epi32(_mm256_mul_ps(v0, vid)),
                                  _mm256_cvtps_epi32(_mm256_mul_ps(v1, vid)),
                                  _mm256_cvtps_epi32(_mm256_mul_ps(v2, vid)),
                                  _mm256_cvtps_epi32(_mm256_mul_ps(v3, vid)));
        _mm256_storeu_si256((__m256i *)y[i].qs, q);
    }
}

void quant_avx2_quantize_q8_K(const float *x, struct block_q8_K *y, int64_t nb)
{
    const __m256 abs_mask = _mm256_castsi256_ps(_mm256_set1_epi32(0x7fffffff));
    for (int64_t i = 0; i < nb; i++, x += QK_K) {
        __m256 m = _mm256_setzero_ps();
        for (int k = 0; k < QK_K; k += 8)
            m = _mm256_max_ps(m, _mm256_and_ps(_mm256_loadu_ps(x + k), abs_mask));
        float amax = hmax_ps(m);
        if (amax == 0.f) {
            memset(&y[i], 0, sizeof(y[i]));
            continue;
        }
        /* the reference keeps the first element of largest magnitude */
        __m256 va = _mm256_set1_ps(amax);
        float max = 0.f;
        for (int k = 0; k < QK_K; k += 8) {
            __m256 a = _mm256_and_ps(_mm256_loadu_ps(x + k), abs_mask);
            int bits = _mm256_movemask_ps(_mm256_cmp_ps(a, va, _CMP_EQ_OQ));
            if (bits) {
                max = x[k + __builtin_ctz((unsigned)bits)];
                break;
            }
        }
        float iscale = -127.f / max;
        __m256 vs = _mm256_set1_ps(iscale);
        const __m256i v127 = _mm256_set1_epi32(127);
        __m256i g[16];
        for (int k = 0; k < QK_K / 32; k++) {
            const float *xk = x + 32 * k;
            __m256i q[4];
            for (int l = 0; l < 4; l++)
                q[l] = _mm256_min_epi32(_mm256_cvtps_epi32(_mm256_mul_ps(_mm256_loadu_ps(xk + 8 * l), vs)), v127);
            _mm256_storeu_si256((__m256i *)(y[i].qs + 32 * k), pack_i32x4_i8(q[0], q[1], q[2], q[3]));
            g[2 * k] = _mm256_add_epi32(q[0], q[1]);     /* group of 16: 2k */
            g[2 * k + 1] = _mm256_add_epi32(q[2], q[3]); /* group 2k+1 */
        }
        __m256i s0 = hsum8_epi32(g), s1 = hsum8_epi32(g + 8);
        __m256i s = _mm256_permute4x64_epi64(_mm256_packs_epi32(s0, s1), 0xd8);
        _mm256_storeu_si256((__m256i *)y[i].bsums, s);
        y[i].d = 1.f / iscale;
    }
}

void quant_avx2_quantize_f16(const float *x, quant_f16 *y, int64_t n)
{
    int64_t i = 0;
    for (; i + 8 <= n; i += 8)
        _mm_storeu_si128((__m128i *)(y + i),
                         _mm256_cvtps_ph(_mm256_loadu_ps(x + i), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
    for (; i < n; i++)
        y[i] = _cvtss_sh(x[i], _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
}

/* ------------------------------------------------------------ float dots */
/* quant.c's dot_f32_ref & co.: see there for llama.cpp's orders. */


static inline __m256 load_f16x8(const quant_f16 *p)
{
    return _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)p));
}

static inline __m256 load_bf16x8(const quant_bf16 *p)
{
    __m256i v = _mm256_cvtepu16_epi32(_mm_loadu_si128((const __m128i *)p));
    return _mm256_castsi256_ps(_mm256_slli_epi32(v, 16));
}

static inline float bf16f(quant_bf16 h)
{
    uint32_t a = (uint32_t)h << 16;
    float f;
    memcpy(&f, &a, 4);
    return f;
}

/* The three 4x8 float dots differ only in how an element is loaded. */
#define DOT4X8(LOAD, w, x, n, np)                                                   \
    __m256 a0 = _mm256_setzero_ps(), a1 = a0, a2 = a0, a3 = a0;                    \
    const int64_t np = (n) & ~(int64_t)31;                                          \
    for (int64_t i = 0; i < np; i += 32) {                                          \
        a0 = _mm256_fmadd_ps(LOAD((w) + i), LOAD((x) + i), a0);                     \
        a1 = _mm256_fmadd_ps(LOAD((w) + i + 8), LOAD((x) + i + 8), a1);             \
        a2 = _mm256_fmadd_ps(LOAD((w) + i + 16), LOAD((x) + i + 16), a2);           \
        a3 = _mm256_fmadd_ps(LOAD((w) + i + 24), LOAD((x) + i + 24), a3);           \
    }

static float dot_f32(int64_t n, const void *vw, const void *vx)
{
    const float *w = vw, *x = vx;
    DOT4X8(_mm256_loadu_ps, w, x, n, np)
    float s = avx2_reduce4x8(a0, a1, a2, a3);
    for (int64_t i = np; i < n; i++)
        s += w[i] * x[i];
    return s;
}

/* F16 and BF16: the n % 32 tail in double, rounded once. */
#define DOT4X8_DOUBLE_TAIL(name, T, LOAD, CVT)                      \
    static float name(int64_t n, const void *vw, const void *vx)   \
    {                                                              \
        const T *w = vw, *x = vx;                                  \
        DOT4X8(LOAD, w, x, n, np)                                  \
        double s = avx2_reduce4x8(a0, a1, a2, a3);                 \
        for (int64_t i = np; i < n; i++)                           \
            s += (double)(CVT(w[i]) * CVT(x[i]));                  \
        return (float)s;                                           \
    }
DOT4X8_DOUBLE_TAIL(dot_f16, quant_f16, load_f16x8, f16)
DOT4X8_DOUBLE_TAIL(dot_bf16, quant_bf16, load_bf16x8, bf16f)
#undef DOT4X8_DOUBLE_TAIL
#undef DOT4X8

/* tinyBLAS: one 8-lane chain, hsum_float_8 (n % 8 == 0). */
#define DOT_TB(name, T, LOAD)                                          \
    static float name(int64_t n, const void *vw, const void *vx)      \
    {                                                                 \
        const T *w = vw, *x = vx;                                     \
        __m256 a = _mm256_setzero_ps();                               \
        for (int64_t i = 0; i < n; i += 8)                            \
            a = _mm256_fmadd_ps(LOAD(w + i), LOAD(x + i), a);         \
        return avx2_hsum_ps(a);                                       \
    }
DOT_TB(dot_f32_tb, float, _mm256_loadu_ps)
DOT_TB(dot_f16_tb, quant_f16, load_f16x8)
#undef DOT_TB

/* ------------------------------------------------------------ block dots
 *
 * Each kernel takes one weight row and NX (1..4) activation rows, so a batch
 * decodes each weight block once for up to four tokens. The arithmetic for
 * one (weight, activation) pair is the same whatever NX is -- the same int32
 * block sums and the same float operations in the same order -- so a token's
 * result does not depend on the batch it came in (DESIGN.md gate 4). The
 * single-row entry points are these kernels with NX = 1.
 */
#define AINLINE static inline __attribute__((always_inline))
/* The per-row loops must unroll completely so acc[]/sumi[] live in registers
 * (at -O2 GCC would keep them in memory). Both GCC and clang take this. */
#define UNROLL _Pragma("GCC unroll 4")
#define XROW(x, stride, r) ((const void *)((const uint8_t *)(x) + (size_t)(r) * (stride)))

/* One 32-block (weight q as int8, scale dw) for each row: vec (RP = 0):
 * acc[r] = fma(d, lane sums, acc[r]); repacked q4_0 (RP = 1): the block's
 * total into the scalar chain accs[r]. */
AINLINE void block32_nx(__m256i q, float dw, const struct block_q8_0 *const *x, int64_t i, int NX, __m256 *acc,
                        float *accs, const int RP)
{
    __m256i aq = _mm256_sign_epi8(q, q); /* |q|, unsigned for maddubs */
    UNROLL
    for (int r = 0; r < NX; r++) {
        /* the activation takes q's sign, so |q| * that = q * x */
        __m256i a = _mm256_sign_epi8(_mm256_loadu_si256((const __m256i *)x[r][i].qs), q);
        __m256i s = _mm256_madd_epi16(_mm256_maddubs_epi16(aq, a), _mm256_set1_epi16(1));
        const float d = dw * f16(x[r][i].d);
        if (RP)
            accs[r] = fmaf(hsum_epi32_f(s), d, accs[r]);
        else
            acc[r] = _mm256_fmadd_ps(_mm256_set1_ps(d), _mm256_cvtepi32_ps(s), acc[r]);
    }
}

/* 16 bytes of Q4_0 nibbles -> 32 int8 in [-8, 7]: low nibbles are elements
 * 0-15, high nibbles 16-31. */
static inline __m256i unpack_q4_0(const uint8_t *qs)
{
    __m128i t = _mm_loadu_si128((const __m128i *)qs);
    __m256i v = _mm256_set_m128i(_mm_srli_epi16(t, 4), t);
    v = _mm256_and_si256(v, _mm256_set1_epi8(0x0f));
    return _mm256_sub_epi8(v, _mm256_set1_epi8(8));
}

/* The scalar chain of four consecutive blocks i..i+3 for each row: the
 * same block sums and fmas as four calls of block32_nx with RP, but the
 * four totals of a row come out of one horizontal sum (hsum4_epi32) and
 * one conversion: a third fewer instructions per block, where the 32-block
 * types spend most of theirs. */
AINLINE void chain32x4_nx(const int Q4, const struct block_q4_0 *w4, const struct block_q8_0 *w8,
                          const struct block_q8_0 *const *x, int64_t i, int NX, float *accs)
{
    __m256i q[4], aq[4];
    UNROLL
    for (int k = 0; k < 4; k++) {
        q[k] = Q4 ? unpack_q4_0(w4[k].qs) : _mm256_loadu_si256((const __m256i *)w8[k].qs);
        aq[k] = _mm256_sign_epi8(q[k], q[k]);
    }
    /* the four weight scales converted at once (exact, as f16() each) */
    const __m128 dw = _mm_cvtph_ps(Q4 ? _mm_setr_epi16((short)w4[0].d, (short)w4[1].d, (short)w4[2].d,
                                                       (short)w4[3].d, 0, 0, 0, 0)
                                      : _mm_setr_epi16((short)w8[0].d, (short)w8[1].d, (short)w8[2].d,
                                                       (short)w8[3].d, 0, 0, 0, 0));
    UNROLL
    for (int r = 0; r < NX; r++) {
        __m256i s[4];
        UNROLL
        for (int k = 0; k < 4; k++) {
            const __m256i a = _mm256_sign_epi8(_mm256_loadu_si256((const __m256i *)x[r][i + k].qs), q[k]);
            s[k] = _mm256_madd_epi16(_mm256_maddubs_epi16(aq[k], a), _mm256_set1_epi16(1));
        }
        const __m128 S = _mm_cvtepi32_ps(hsum4_epi32(s));
        const __m128 P = _mm_mul_ps(dw, _mm_cvtph_ps(_mm_setr_epi16((short)x[r][i].d, (short)x[r][i + 1].d,
                                                                     (short)x[r][i + 2].d, (short)x[r][i + 3].d,
                                                                     0, 0, 0, 0)));
        /* block k's (p, S) in lane 0 of each pair, then the four fmas in k order */
        float c = accs[r];
        c = fmaf(_mm_cvtss_f32(P), _mm_cvtss_f32(S), c);
        c = fmaf(_mm_cvtss_f32(_mm_movehdup_ps(P)), _mm_cvtss_f32(_mm_movehdup_ps(S)), c);
        c = fmaf(_mm_cvtss_f32(_mm_movehl_ps(P, P)), _mm_cvtss_f32(_mm_movehl_ps(S, S)), c);
        c = fmaf(_mm_cvtss_f32(_mm_shuffle_ps(P, P, 3)), _mm_cvtss_f32(_mm_shuffle_ps(S, S, 3)), c);
        accs[r] = c;
    }
}

/* Q8_0 and Q4_0 (Q4 = 1) against Q8_0 activations: one 8-lane chain per
 * row (llama.cpp keeps one; the chain's latency is the price of its bits),
 * or the repacked kernels' scalar chain (RP), which is also the canonical
 * chain (QK_Q8_0_CANON, QK_Q4_0_CANON). */
AINLINE void dot_32_nx(int64_t n, const void *vw, const void *vx, size_t xs, int NX, float *out, const int Q4,
                       const int RP)
{
    const struct block_q8_0 *x[4];
    __m256 acc[4];
    float accs[4];
    UNROLL
    for (int r = 0; r < NX; r++) {
        x[r] = XROW(vx, xs, r);
        acc[r] = _mm256_setzero_ps();
        accs[r] = 0.f;
    }
    const struct block_q4_0 *w4 = vw;
    const struct block_q8_0 *w8 = vw;
    const int64_t nb = n / QK8_0;
    int64_t i = 0;
    if (RP && NX == 4) {
        /* four rows: their totals of a block in one vector, then one
         * lane-wise fma (lane r is row r's scalar chain, bit for bit) */
        __m128 chain4 = _mm_setzero_ps();
        for (; i < nb; i++) {
            const __m256i q = Q4 ? unpack_q4_0(w4[i].qs) : _mm256_loadu_si256((const __m256i *)w8[i].qs);
            const __m256i aq = _mm256_sign_epi8(q, q);
            __m256i s[4];
            UNROLL
            for (int r = 0; r < 4; r++) {
                const __m256i a = _mm256_sign_epi8(_mm256_loadu_si256((const __m256i *)x[r][i].qs), q);
                s[r] = _mm256_madd_epi16(_mm256_maddubs_epi16(aq, a), _mm256_set1_epi16(1));
            }
            const __m128 xd = _mm_cvtph_ps(_mm_setr_epi16((short)x[0][i].d, (short)x[1][i].d, (short)x[2][i].d,
                                                          (short)x[3][i].d, 0, 0, 0, 0));
            const __m128 p1 = _mm_mul_ps(_mm_set1_ps(f16(Q4 ? w4[i].d : w8[i].d)), xd);
            chain4 = _mm_fmadd_ps(p1, _mm_cvtepi32_ps(hsum4_epi32(s)), chain4);
        }
        _mm_storeu_ps(accs, chain4);
    }
    if (RP)
        for (; i + 4 <= nb; i += 4)
            chain32x4_nx(Q4, w4 + i, w8 + i, x, i, NX, accs);
    for (; i < nb; i++)
        block32_nx(Q4 ? unpack_q4_0(w4[i].qs) : _mm256_loadu_si256((const __m256i *)w8[i].qs),
                   f16(Q4 ? w4[i].d : w8[i].d), x, i, NX, acc, accs, RP);
    UNROLL
    for (int r = 0; r < NX; r++)
        out[r] = RP ? accs[r] : avx2_hsum_ps(acc[r]);
}

/* Broadcast int16 lane s of a vector holding 8 int16 per 128-bit lane to all
 * 16 lanes (Q4_K/Q5_K: one scale per 32-element sub-block). */
static const uint8_t k_bcast16[8][32] __attribute__((aligned(32))) = {
#define B2(s) 2 * (s), 2 * (s) + 1
#define B16(s) B2(s), B2(s), B2(s), B2(s), B2(s), B2(s), B2(s), B2(s)
    {B16(0), B16(0)}, {B16(1), B16(1)}, {B16(2), B16(2)}, {B16(3), B16(3)},
    {B16(4), B16(4)}, {B16(5), B16(5)}, {B16(6), B16(6)}, {B16(7), B16(7)},
};

/* Q6_K: a 32-element chunk c spans two 16-element sub-blocks; the low 128-bit
 * lane (elements 0-15) takes int16 lane 2c', the high lane 2c'+1. */
static const uint8_t k_pair16[4][32] __attribute__((aligned(32))) = {
    {B16(0), B16(1)}, {B16(2), B16(3)}, {B16(4), B16(5)}, {B16(6), B16(7)},
#undef B16
#undef B2
};

/* Q4_K/Q5_K scale bytes -> 16 bytes: 8 scales, then 8 mins (see quant.c's
 * k4_scale_min for the layout; here four bytes at a time). */
static inline __m128i k4_unpack_scales(const uint8_t *q)
{
    uint32_t u0, u1, u2;
    memcpy(&u0, q, 4);
    memcpy(&u1, q + 4, 4);
    memcpy(&u2, q + 8, 4);
    uint32_t sc_lo = u0 & 0x3f3f3f3fu;
    uint32_t m_lo = u1 & 0x3f3f3f3fu;
    uint32_t sc_hi = (u2 & 0x0f0f0f0fu) | (((u0 >> 6) & 0x03030303u) << 4);
    uint32_t m_hi = ((u2 >> 4) & 0x0f0f0f0fu) | (((u1 >> 6) & 0x03030303u) << 4);
    return _mm_setr_epi32((int)sc_lo, (int)sc_hi, (int)m_lo, (int)m_hi);
}

/* The min term of Q4_K/Q5_K per pair of sub-blocks: lane k (0..3) of the
 * result = m_2k * xsum_2k + m_2k+1 * xsum_2k+1 (xsum = two bsums). */
static inline __m128i k4_min_pairs(__m128i scm, const int16_t *bsums)
{
    const __m256i b = _mm256_loadu_si256((const __m256i *)bsums);
    const __m128i xs = _mm_hadd_epi16(_mm256_castsi256_si128(b), _mm256_extracti128_si256(b, 1));
    const __m128i mins = _mm_cvtepu8_epi16(_mm_srli_si128(scm, 8));
    return _mm_madd_epi16(mins, xs);
}

/* Q4_K and Q5_K (HIGH = 1) in one of quant.c's K4 kinds (KIND: 0 vec,
 * 1 gemv, 2 gemm; see dot_k4_ref) or the canonical chain (KIND 3, see
 * canon_k4_ref). The integer work is shared: per pair j of sub-blocks,
 * pj[r] holds the 8 lanes of sc*(q.x) of that pair; the canonical chain
 * and the gemv take the super-block's total S and min term M. */
AINLINE void dot_k4_nx(int64_t n, const void *vw, const void *vx, size_t xs, int NX, float *out,
                       const int HIGH, const int KIND)
{
    const struct block_q8_K *x[4];
    __m256 acc[4];
    __m128 accm4[4];
    float chain[4], chainm[4];
    __m128 chain4 = _mm_setzero_ps(), chainm4 = _mm_setzero_ps();
    UNROLL
    for (int r = 0; r < NX; r++) {
        x[r] = XROW(vx, xs, r);
        acc[r] = _mm256_setzero_ps();
        accm4[r] = _mm_setzero_ps();
        chain[r] = chainm[r] = 0.f;
    }
    const __m256i m4 = _mm256_set1_epi8(0x0f);
    const __m256i b4 = _mm256_set1_epi8(0x10);
    const size_t bsz = HIGH ? sizeof(struct block_q5_K) : sizeof(struct block_q4_K);
    int64_t nb = n / QK_K;
    for (int64_t i = 0; i < nb; i++) {
        const uint8_t *blk = (const uint8_t *)vw + (size_t)i * bsz;
        /* d, dmin and scales sit at the same offsets in both structs */
        const struct block_q4_K *b4k = (const void *)blk;
        const uint8_t *q = HIGH ? ((const struct block_q5_K *)(const void *)blk)->qs : b4k->qs;
        __m256i qh = HIGH ? _mm256_loadu_si256((const __m256i *)((const struct block_q5_K *)(const void *)blk)->qh)
                          : _mm256_setzero_si256();
        float dw = f16(b4k->d), mw = f16(b4k->dmin);
        __m128i scm = k4_unpack_scales(b4k->scales);
        __m256i sc16 = _mm256_broadcastsi128_si256(_mm_cvtepu8_epi16(scm));
        __m256i sumi[4];
        UNROLL
        for (int r = 0; r < NX; r++)
            sumi[r] = _mm256_setzero_si256();
        for (int j = 0; j < QK_K / 64; j++, q += 32) {
            __m256i q4 = _mm256_loadu_si256((const __m256i *)q);
            __m256i lo = _mm256_and_si256(q4, m4);
            __m256i hi = _mm256_and_si256(_mm256_srli_epi16(q4, 4), m4);
            if (HIGH) {
                /* qh bit 2j / 2j+1 of byte l: the fifth bit of element l of
                 * sub-block 2j / 2j+1; qh shifts right 2 per step, and only
                 * bits 0-1 of each byte are read, so 16-bit shifts are safe */
                lo = _mm256_or_si256(lo, _mm256_and_si256(_mm256_slli_epi16(qh, 4), b4));
                hi = _mm256_or_si256(hi, _mm256_and_si256(_mm256_slli_epi16(qh, 3), b4));
                qh = _mm256_srli_epi16(qh, 2);
            }
            __m256i s0 = _mm256_shuffle_epi8(sc16, _mm256_load_si256((const __m256i *)k_bcast16[2 * j]));
            __m256i s1 = _mm256_shuffle_epi8(sc16, _mm256_load_si256((const __m256i *)k_bcast16[2 * j + 1]));
            UNROLL
            for (int r = 0; r < NX; r++) {
                const int8_t *a = x[r][i].qs + 64 * j;
                __m256i p0 = _mm256_maddubs_epi16(lo, _mm256_loadu_si256((const __m256i *)a));
                __m256i p1 = _mm256_maddubs_epi16(hi, _mm256_loadu_si256((const __m256i *)(a + 32)));
                __m256i pj = _mm256_add_epi32(_mm256_madd_epi16(p0, s0), _mm256_madd_epi16(p1, s1));
                if (KIND == 2) {
                    /* gemm: one fma per pair of sub-blocks */
                    chain[r] = fmaf((float)hsum_epi32(pj), dw * x[r][i].d, chain[r]);
                } else {
                    sumi[r] = _mm256_add_epi32(sumi[r], pj);
                }
            }
        }
        if ((KIND == 1 || KIND == 3) && NX == 4) {
            /* gemv and canonical chain for four rows: the whole-block sums
             * of the four rows in one vector, then lane-wise fmas (each
             * lane is the scalar chain of its row, bit for bit) */
            const __m128 S = _mm_cvtepi32_ps(hsum4_epi32(sumi));
            const __m128i M01 = _mm_hadd_epi32(k4_min_pairs(scm, x[0][i].bsums), k4_min_pairs(scm, x[1][i].bsums));
            const __m128i M23 = _mm_hadd_epi32(k4_min_pairs(scm, x[2][i].bsums), k4_min_pairs(scm, x[3][i].bsums));
            const __m128 M = _mm_cvtepi32_ps(_mm_hadd_epi32(M01, M23));
            const __m128 xd = _mm_setr_ps(x[0][i].d, x[1][i].d, x[2][i].d, x[3][i].d);
            const __m128 p1 = _mm_mul_ps(_mm_set1_ps(dw), xd), pm = _mm_mul_ps(_mm_set1_ps(mw), xd);
            if (KIND == 1) {
                chain4 = _mm_fmadd_ps(S, p1, chain4);
                chainm4 = _mm_fmadd_ps(M, pm, chainm4);
            } else {
                /* fnmadd: -(pm * M) + acc, rounded once = fma(-(pm), M, acc) */
                chain4 = _mm_fmadd_ps(p1, S, chain4);
                chain4 = _mm_fnmadd_ps(pm, M, chain4);
            }
            continue;
        }
        UNROLL
        for (int r = 0; r < NX; r++) {
            const __m128i mp = k4_min_pairs(scm, x[r][i].bsums);
            if (KIND == 0) {
                const float d = x[r][i].d * dw, dmin = -x[r][i].d * mw;
                acc[r] = _mm256_fmadd_ps(_mm256_set1_ps(d), _mm256_cvtepi32_ps(sumi[r]), acc[r]);
                if (HIGH)
                    chainm[r] = fmaf(dmin, (float)hsum_epi32x4(mp), chainm[r]);
                else
                    accm4[r] = _mm_fmadd_ps(_mm_set1_ps(dmin), _mm_cvtepi32_ps(mp), accm4[r]);
            } else if (KIND == 1) {
                chain[r] = fmaf((float)hsum_epi32(sumi[r]), dw * x[r][i].d, chain[r]);
                chainm[r] = fmaf((float)hsum_epi32x4(mp), mw * x[r][i].d, chainm[r]);
            } else if (KIND == 3) {
                chain[r] = fmaf(dw * x[r][i].d, hsum_epi32_f(sumi[r]), chain[r]);
                chain[r] = fmaf(-(mw * x[r][i].d), hsum_epi32x4_f(mp), chain[r]);
            } else {
                int32_t m[4];
                _mm_storeu_si128((__m128i *)m, mp);
                for (int k = 0; k < 4; k++)
                    chainm[r] = fmaf((float)m[k], mw * x[r][i].d, chainm[r]);
            }
        }
    }
    if ((KIND == 1 || KIND == 3) && NX == 4) {
        _mm_storeu_ps(chain, chain4);
        _mm_storeu_ps(chainm, chainm4);
    }
    UNROLL
    for (int r = 0; r < NX; r++) {
        if (KIND == 3) {
            out[r] = chain[r];
        } else if (KIND != 0) {
            out[r] = chain[r] - chainm[r];
        } else if (HIGH) {
            out[r] = avx2_hsum_ps(acc[r]) + chainm[r];
        } else {
            __m128 m = _mm_add_ps(accm4[r], _mm_movehl_ps(accm4[r], accm4[r]));
            m = _mm_add_ss(m, _mm_movehdup_ps(m));
            out[r] = avx2_hsum_ps(acc[r]) + _mm_cvtss_f32(m);
        }
    }
}

/* Q6_K (ggml_vec_dot_q6_K_q8_K): see dot_q6_K_ref; the -32 offset comes in
 * through the bsums, one madd per block. CANON: the canonical chain
 * (canon_q6_K_ref) over the same integers: the super-block's total, one
 * scalar fma. */
AINLINE void dot_q6_K_nx(int64_t n, const void *vw, const void *vx, size_t xs, int NX, float *out,
                         const int CANON)
{
    const struct block_q6_K *w = vw;
    const struct block_q8_K *x[4];
    __m256 acc[4];
    float chain[4];
    __m128 chain4 = _mm_setzero_ps();
    UNROLL
    for (int r = 0; r < NX; r++) {
        x[r] = XROW(vx, xs, r);
        acc[r] = _mm256_setzero_ps();
        chain[r] = 0.f;
    }
    const __m256i m4 = _mm256_set1_epi8(0x0f);
    const __m256i m2 = _mm256_set1_epi8(0x30);
    int64_t nb = n / QK_K;
    for (int64_t i = 0; i < nb; i++) {
        float dw = f16(w[i].d);
        __m256i sc = _mm256_cvtepi8_epi16(_mm_loadu_si128((const __m128i *)w[i].scales));
        __m256i sumi[4];
        UNROLL
        for (int r = 0; r < NX; r++) {
            const __m256i off = _mm256_madd_epi16(sc, _mm256_loadu_si256((const __m256i *)x[r][i].bsums));
            sumi[r] = _mm256_sub_epi32(_mm256_setzero_si256(), _mm256_slli_epi32(off, 5));
        }
        const uint8_t *ql = w[i].ql, *qhp = w[i].qh;
        for (int h = 0; h < 2; h++, ql += 64, qhp += 32) {
            /* scales of this half (sub-blocks 8h..8h+7) in both lanes */
            __m256i sch = h ? _mm256_permute2x128_si256(sc, sc, 0x11) : _mm256_permute2x128_si256(sc, sc, 0x00);
            __m256i qh = _mm256_loadu_si256((const __m256i *)qhp);
            __m256i la = _mm256_loadu_si256((const __m256i *)ql);
            __m256i lb = _mm256_loadu_si256((const __m256i *)(ql + 32));
            __m256i q[4];
            q[0] = _mm256_or_si256(_mm256_and_si256(la, m4), _mm256_and_si256(_mm256_slli_epi16(qh, 4), m2));
            q[1] = _mm256_or_si256(_mm256_and_si256(lb, m4), _mm256_and_si256(_mm256_slli_epi16(qh, 2), m2));
            q[2] = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(la, 4), m4), _mm256_and_si256(qh, m2));
            q[3] = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(lb, 4), m4),
                                   _mm256_and_si256(_mm256_srli_epi16(qh, 2), m2));
            UNROLL
            for (int c = 0; c < 4; c++) {
                __m256i s = _mm256_shuffle_epi8(sch, _mm256_load_si256((const __m256i *)k_pair16[c]));
                UNROLL
                for (int r = 0; r < NX; r++) {
                    const __m256i a = _mm256_loadu_si256((const __m256i *)(x[r][i].qs + 128 * h + 32 * c));
                    __m256i p = _mm256_maddubs_epi16(q[c], a);
                    sumi[r] = _mm256_add_epi32(sumi[r], _mm256_madd_epi16(p, s));
                }
            }
        }
        if (CANON && NX == 4) {
            /* the four rows' chains lane-wise, as dot_k4_nx's */
            const __m128 xd = _mm_setr_ps(x[0][i].d, x[1][i].d, x[2][i].d, x[3][i].d);
            const __m128 p1 = _mm_mul_ps(_mm_set1_ps(dw), xd);
            chain4 = _mm_fmadd_ps(p1, _mm_cvtepi32_ps(hsum4_epi32(sumi)), chain4);
            continue;
        }
        UNROLL
        for (int r = 0; r < NX; r++) {
            if (CANON)
                chain[r] = fmaf(dw * x[r][i].d, hsum_epi32_f(sumi[r]), chain[r]);
            else
                acc[r] = _mm256_fmadd_ps(_mm256_set1_ps(x[r][i].d * dw), _mm256_cvtepi32_ps(sumi[r]), acc[r]);
        }
    }
    if (CANON && NX == 4)
        _mm_storeu_ps(chain, chain4);
    UNROLL
    for (int r = 0; r < NX; r++)
        out[r] = CANON ? chain[r] : avx2_hsum_ps(acc[r]);
}

/* Kernel entry points: NX = 4 per group of rows, then the rest. */
#define KERNEL_NX(name, call)                                                                 \
    static void name(int64_t n, const void *w, const void *x, size_t xs, int nx, float *out) \
    {                                                                                        \
        for (; nx >= 4; nx -= 4, x = XROW(x, xs, 4), out += 4)                               \
            call(4);                                                                         \
        switch (nx) {                                                                        \
        case 3: call(3); break;                                                              \
        case 2: call(2); break;                                                              \
        case 1: call(1); break;                                                              \
        default: break;                                                                      \
        }                                                                                    \
    }
#define C_Q80(NX) dot_32_nx(n, w, x, xs, NX, out, 0, 0)
#define C_Q40(NX) dot_32_nx(n, w, x, xs, NX, out, 1, 0)
#define C_Q40RP(NX) dot_32_nx(n, w, x, xs, NX, out, 1, 1)
#define C_Q4K(NX) dot_k4_nx(n, w, x, xs, NX, out, 0, 0)
#define C_Q4KV(NX) dot_k4_nx(n, w, x, xs, NX, out, 0, 1)
#define C_Q4KM(NX) dot_k4_nx(n, w, x, xs, NX, out, 0, 2)
#define C_Q5K(NX) dot_k4_nx(n, w, x, xs, NX, out, 1, 0)
#define C_Q6K(NX) dot_q6_K_nx(n, w, x, xs, NX, out, 0)
#define C_Q80C(NX) dot_32_nx(n, w, x, xs, NX, out, 0, 1)
#define C_Q4KC(NX) dot_k4_nx(n, w, x, xs, NX, out, 0, 3)
#define C_Q5KC(NX) dot_k4_nx(n, w, x, xs, NX, out, 1, 3)
#define C_Q6KC(NX) dot_q6_K_nx(n, w, x, xs, NX, out, 1)
KERNEL_NX(dots_q8_0, C_Q80)
KERNEL_NX(dots_q4_0, C_Q40)
KERNEL_NX(dots_q4_0_rp, C_Q40RP)
KERNEL_NX(dots_q4_K, C_Q4K)
KERNEL_NX(dots_q4_K_gemv, C_Q4KV)
KERNEL_NX(dots_q4_K_gemm, C_Q4KM)
KERNEL_NX(dots_q5_K, C_Q5K)
KERNEL_NX(dots_q6_K, C_Q6K)
KERNEL_NX(dots_q8_0_canon, C_Q80C)
KERNEL_NX(dots_q4_K_canon, C_Q4KC)
KERNEL_NX(dots_q5_K_canon, C_Q5KC)
KERNEL_NX(dots_q6_K_canon, C_Q6KC)
#undef KERNEL_NX

#define ONE(name, call)                                                  \
    static float name(int64_t n, const void *w, const void *x)          \
    {                                                                   \
        const size_t xs = 0;                                            \
        float out[1];                                                   \
        call(1);                                                        \
        return out[0];                                                  \
    }
ONE(dot_q8_0, C_Q80)
ONE(dot_q4_0, C_Q40)
ONE(dot_q4_0_rp, C_Q40RP)
ONE(dot_q4_K, C_Q4K)
ONE(dot_q4_K_gemv, C_Q4KV)
ONE(dot_q4_K_gemm, C_Q4KM)
ONE(dot_q5_K, C_Q5K)
ONE(dot_q6_K, C_Q6K)
ONE(dot_q8_0_canon, C_Q80C)
ONE(dot_q4_K_canon, C_Q4KC)
ONE(dot_q5_K_canon, C_Q5KC)
ONE(dot_q6_K_canon, C_Q6KC)
#undef ONE

quant_vec_dot_fn quant_avx2_kernel_func(int kernel)
{
    switch (kernel) {
    case QK_F32: return dot_f32;
    case QK_F32_TB: return dot_f32_tb;
    case QK_F16: return dot_f16;
    case QK_F16_TB: return dot_f16_tb;
    case QK_BF16: return dot_bf16;
    case QK_Q8_0: return dot_q8_0;
    case QK_Q4_0: return dot_q4_0;
    case QK_Q4_0_RP: return dot_q4_0_rp;
    case QK_Q4_K: return dot_q4_K;
    case QK_Q4_K_GEMV: return dot_q4_K_gemv;
    case QK_Q4_K_GEMM: return dot_q4_K_gemm;
    case QK_Q5_K: return dot_q5_K;
    case QK_Q6_K: return dot_q6_K;
    case QK_Q8_0_CANON: return dot_q8_0_canon;
    case QK_Q4_0_CANON: return dot_q4_0_rp; /* the same chain */
    case QK_Q4_K_CANON: return dot_q4_K_canon;
    case QK_Q5_K_CANON: return dot_q5_K_canon;
    case QK_Q6_K_CANON: return dot_q6_K_canon;
    default: return NULL;
    }
}

int quant_avx2_kernel_dots(int kernel, int64_t n, const void *w, const void *x, size_t xs, int nx,
                           float *out)
{
    switch (kernel) {
    case QK_Q8_0: dots_q8_0(n, w, x, xs, nx, out); return 1;
    case QK_Q4_0: dots_q4_0(n, w, x, xs, nx, out); return 1;
    case QK_Q4_0_RP: dots_q4_0_rp(n, w, x, xs, nx, out); return 1;
    case QK_Q4_K: dots_q4_K(n, w, x, xs, nx, out); return 1;
    case QK_Q4_K_GEMV: dots_q4_K_gemv(n, w, x, xs, nx, out); return 1;
    case QK_Q4_K_GEMM: dots_q4_K_gemm(n, w, x, xs, nx, out); return 1;
    case QK_Q5_K: dots_q5_K(n, w, x, xs, nx, out); return 1;
    case QK_Q6_K: dots_q6_K(n, w, x, xs, nx, out); return 1;
    case QK_Q8_0_CANON: dots_q8_0_canon(n, w, x, xs, nx, out); return 1;
    case QK_Q4_0_CANON: dots_q4_0_rp(n, w, x, xs, nx, out); return 1;
    case QK_Q4_K_CANON: dots_q4_K_canon(n, w, x, xs, nx, out); return 1;
    case QK_Q5_K_CANON: dots_q5_K_canon(n, w, x, xs, nx, out); return 1;
    case QK_Q6_K_CANON: dots_q6_K_canon(n, w, x, xs, nx, out); return 1;
    default: return 0; /* float kernels: one row at a time */
    }
}
#undef C_Q80
#undef C_Q40
#undef C_Q40RP
#undef C_Q4K
#undef C_Q4KV
#undef C_Q4KM
#undef C_Q5K
#undef C_Q6K
#undef C_Q80C
#undef C_Q4KC
#undef C_Q5KC
#undef C_Q6KC

#endif /* INFERD_HAVE_AVX2 */
