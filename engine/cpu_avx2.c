/* cpu_avx2 — AVX2/FMA/F16C versions of the CPU backend's float ops (see
 * cpu_avx2.h): attention, expf, silu, rms_norm, rope, multi-row F32 dots.
 *
 * Compiled with -mavx2 -mfma -mf16c (engine_simd_src); cpu*.c call it only
 * when the CPU runs those instructions. Invariant: each result is
 * bit-identical to the plain C code of cpu_*.c. The rules that make that hold:
 *  - F16 <-> F32 with _mm256_cvtph_ps / _mm256_cvtps_ph in round-to-nearest-
 *    even: exactly quant_f16_to_f32 / quant_f32_to_f16;
 *  - _mm256_fmadd_ps where the plain code calls fmaf, separate mul and add
 *    where it does not (ISO C: GCC does not contract a*b+c here);
 *  - every sequential sum (the double tails of the F16 dot, rms_norm's
 *    double sum) is kept sequential per output: SIMD lanes run different
 *    outputs (positions, rows), never different terms of one sum;
 *  - expf is glibc's algorithm step for step (checked against libm on all
 *    2^32 inputs when it was written; test_ops re-checks a sample).
 * Pure functions: any thread.
 */
#include "cpu_avx2.h"

#include <immintrin.h>
#include <math.h>
#include <string.h>

#include "avx2_sums.h"

#ifdef INFERD_HAVE_AVX2

#define AINLINE static inline __attribute__((always_inline))
#define F16_RNE (_MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC)

/* ------------------------------------------------------------------ expf */

/* Bits of 2^(i/32) rounded to double, minus i << 47: adding k << 47 for
 * k = 32 m + i gives 2^m * 2^(i/32). */
static const uint64_t exp_tab[32] __attribute__((aligned(32))) = {
    0x3ff0000000000000, 0x3fefd9b0d3158574, 0x3fefb5586cf9890f, 0x3fef9301d0125b51,
    0x3fef72b83c7d517b, 0x3fef54873168b9aa, 0x3fef387a6e756238, 0x3fef1e9df51fdee1,
    0x3fef06fe0a31b715, 0x3feef1a7373aa9cb, 0x3feedea64c123422, 0x3feece086061892d,
    0x3feebfdad5362a27, 0x3feeb42b569d4f82, 0x3feeab07dd485429, 0x3feea47eb03a5585,
    0x3feea09e667f3bcd, 0x3fee9f75e8ec5f74, 0x3feea11473eb0187, 0x3feea589994cce13,
    0x3feeace5422aa0db, 0x3feeb737b0cdc5e5, 0x3feec49182a3f090, 0x3feed503b23e255d,
    0x3feee89f995ad3ad, 0x3feeff76f2fb5e47, 0x3fef199bdd85529c, 0x3fef3720dcef9069,
    0x3fef5818dcfba487, 0x3fef7c97337b9b5f, 0x3fefa4afa2a490da, 0x3fefd0765b6e4540,
};

/* exp(x) for 4 doubles converted from floats with |x| < 88: x * 32/ln2 =
 * k + r (k rounded to nearest by the 1.5 * 2^52 shift, r fused), then
 * 2^(k/32) from the table and 2^(r/32) ~ 1 + C2 r + C1 r^2 + C0 r^3. */
AINLINE __m256d exp_core_pd(__m256d xd)
{
    const __m256d inv_ln2_n = _mm256_set1_pd(0x1.71547652b82fep+5);
    const __m256d shift = _mm256_set1_pd(0x1.8p52);
    __m256d kd = _mm256_fmadd_pd(inv_ln2_n, xd, shift);
    const __m256i ki = _mm256_castpd_si256(kd);
    kd = _mm256_sub_pd(kd, shift);
    const __m256d r = _mm256_fmsub_pd(inv_ln2_n, xd, kd);
    __m256i t = _mm256_i64gather_epi64((const long long *)exp_tab,
                                       _mm256_and_si256(ki, _mm256_set1_epi64x(31)), 8);
    t = _mm256_add_epi64(t, _mm256_slli_epi64(ki, 47));
    const __m256d z = _mm256_fmadd_pd(_mm256_set1_pd(0x1.c6af84b912394p-20), r,
                                      _mm256_set1_pd(0x1.ebfce50fac4f3p-13));
    const __m256d r2 = _mm256_mul_pd(r, r);
    __m256d y = _mm256_fmadd_pd(_mm256_set1_pd(0x1.62e42ff0c52d6p-6), r, _mm256_set1_pd(1.0));
    y = _mm256_fmadd_pd(z, r2, y);
    return _mm256_mul_pd(y, _mm256_castsi256_pd(t));
}

/* expf of 8 floats; lanes with |x| >= 88 (or NaN) take glibc's special
 * cases: overflow to inf, underflow to 0 (x < -103.97) or to the smallest
 * subnormal (-103.97 <= x < -103.28), NaN and +inf as x + x. */
AINLINE __m256 expf8(__m256 x)
{
    const __m256d lo = exp_core_pd(_mm256_cvtps_pd(_mm256_castps256_ps128(x)));
    const __m256d hi = exp_core_pd(_mm256_cvtps_pd(_mm256_extractf128_ps(x, 1)));
    __m256 y = _mm256_set_m128(_mm256_cvtpd_ps(hi), _mm256_cvtpd_ps(lo));
    const __m256i top = _mm256_and_si256(_mm256_srli_epi32(_mm256_castps_si256(x), 20),
                                         _mm256_set1_epi32(0x7ff));
    if (_mm256_movemask_epi8(_mm256_cmpgt_epi32(top, _mm256_set1_epi32(0x42a)))) {
        const __m256 inf = _mm256_set1_ps(INFINITY);
        y = _mm256_blendv_ps(y, inf, _mm256_cmp_ps(x, _mm256_set1_ps(0x1.62e42ep6f), _CMP_GT_OQ));
        y = _mm256_blendv_ps(y, _mm256_set1_ps(0x1p-149f),
                             _mm256_cmp_ps(x, _mm256_set1_ps(-0x1.9d1d9ep6f), _CMP_LT_OQ));
        y = _mm256_blendv_ps(y, _mm256_setzero_ps(),
                             _mm256_cmp_ps(x, _mm256_set1_ps(-0x1.9fe368p6f), _CMP_LT_OQ));
        const __m256 pass = _mm256_or_ps(_mm256_cmp_ps(x, x, _CMP_UNORD_Q),
                                         _mm256_cmp_ps(x, inf, _CMP_EQ_OQ));
        y = _mm256_blendv_ps(y, _mm256_add_ps(x, x), pass);
    }
    return y;
}

void cpu_avx2_expf(const float *x, float *y, int64_t n)
{
    int64_t i = 0;
    for (; i + 8 <= n; i += 8)
        _mm256_storeu_ps(y + i, expf8(_mm256_loadu_ps(x + i)));
    for (; i < n; i++)
        y[i] = expf(x[i]);
}

/* -------------------------------------------------------- silu, rms_norm */

/* ggml's vector expf, 8 lanes; see cpu_poly_expf (the same operations). */
AINLINE __m256 poly_expf8(__m256 x)
{
    const __m256 shift = _mm256_set1_ps(0x1.8p23f);
    const __m256 z = _mm256_fmadd_ps(x, _mm256_set1_ps(0x1.715476p+0f), shift);
    const __m256 n = _mm256_sub_ps(z, shift);
    const __m256 b = _mm256_fnmadd_ps(n, _mm256_set1_ps(0x1.7f7d1cp-20f),
                                      _mm256_fnmadd_ps(n, _mm256_set1_ps(0x1.62e4p-1f), x));
    const __m256i e = _mm256_slli_epi32(_mm256_castps_si256(z), 23);
    const __m256 k = _mm256_castsi256_ps(_mm256_add_epi32(e, _mm256_set1_epi32(0x3f800000)));
    const __m256 an = _mm256_andnot_ps(_mm256_set1_ps(-0.0f), n);
    const __m256 big = _mm256_cmp_ps(an, _mm256_set1_ps(126.0f), _CMP_GT_OQ);
    const __m256 u = _mm256_mul_ps(b, b);
    const __m256 j = _mm256_fmadd_ps(
        _mm256_fmadd_ps(_mm256_fmadd_ps(_mm256_set1_ps(0x1.0e4020p-7f), b, _mm256_set1_ps(0x1.573e2ep-5f)), u,
                        _mm256_fmadd_ps(_mm256_set1_ps(0x1.555e66p-3f), b, _mm256_set1_ps(0x1.fffdb6p-2f))),
        u, _mm256_mul_ps(_mm256_set1_ps(0x1.ffffecp-1f), b));
    const __m256 normal = _mm256_fmadd_ps(j, k, k);
    if (!_mm256_movemask_ps(big))
        return normal;
    const __m256i g = _mm256_and_si256(_mm256_castps_si256(_mm256_cmp_ps(n, _mm256_setzero_ps(), _CMP_LE_OQ)),
                                       _mm256_set1_epi32((int)0x82000000u));
    const __m256 s1 = _mm256_castsi256_ps(_mm256_add_epi32(g, _mm256_set1_epi32(0x7f000000)));
    const __m256 s2 = _mm256_castsi256_ps(_mm256_sub_epi32(e, g));
    const __m256 huge = _mm256_cmp_ps(an, _mm256_set1_ps(192.0f), _CMP_GT_OQ);
    const __m256 scaled = _mm256_mul_ps(_mm256_fmadd_ps(s2, j, s2), s1);
    const __m256 r = _mm256_blendv_ps(normal, scaled, big);
    return _mm256_blendv_ps(r, _mm256_mul_ps(s1, s1), huge);
}

void cpu_avx2_silu_mul(float *g, const float *u, int64_t n)
{
    const __m256 one = _mm256_set1_ps(1.0f), zero = _mm256_setzero_ps();
    int64_t i = 0;
    for (; i + 8 <= n; i += 8) {
        const __m256 gv = _mm256_loadu_ps(g + i);
        const __m256 e = poly_expf8(_mm256_sub_ps(zero, gv));
        _mm256_storeu_ps(g + i, _mm256_mul_ps(_mm256_div_ps(gv, _mm256_add_ps(one, e)),
                                              _mm256_loadu_ps(u + i)));
    }
    for (; i < n; i++)
        g[i] = g[i] / (1.0f + cpu_poly_expf(0.0f - g[i])) * u[i];
}

/* y = (x * scale) * w (or x * scale) for one row. */
AINLINE void rms_scale_row(const float *x, const float *w, float *y, int32_t n, float scale)
{
    const __m256 sv = _mm256_set1_ps(scale);
    int32_t i = 0;
    if (w) {
        for (; i + 8 <= n; i += 8)
            _mm256_storeu_ps(y + i, _mm256_mul_ps(_mm256_mul_ps(_mm256_loadu_ps(x + i), sv),
                                                  _mm256_loadu_ps(w + i)));
        for (; i < n; i++)
            y[i] = (x[i] * scale) * w[i];
    } else {
        for (; i + 8 <= n; i += 8)
            _mm256_storeu_ps(y + i, _mm256_mul_ps(_mm256_loadu_ps(x + i), sv));
        for (; i < n; i++)
            y[i] = x[i] * scale;
    }
}

void cpu_avx2_rms_norm(const float *x, const float *w, float *y, int64_t r0, int64_t r1,
                       int32_t n, float eps)
{
    int64_t r = r0;
    /* Four rows at a time: lane j of the double sum is row r + j, so each
     * row's squares are still added one after the other, in order. */
    for (; r + 4 <= r1; r += 4) {
        const float *x0 = x + r * n, *x1 = x0 + n, *x2 = x1 + n, *x3 = x2 + n;
        __m256d sum = _mm256_setzero_pd();
        int32_t i = 0;
        for (; i + 4 <= n; i += 4) {
            __m128 a = _mm_loadu_ps(x0 + i), b = _mm_loadu_ps(x1 + i);
            __m128 c = _mm_loadu_ps(x2 + i), d = _mm_loadu_ps(x3 + i);
            _MM_TRANSPOSE4_PS(a, b, c, d); /* a: element i of the 4 rows, b: i+1, ... */
            sum = _mm256_add_pd(sum, _mm256_cvtps_pd(_mm_mul_ps(a, a)));
            sum = _mm256_add_pd(sum, _mm256_cvtps_pd(_mm_mul_ps(b, b)));
            sum = _mm256_add_pd(sum, _mm256_cvtps_pd(_mm_mul_ps(c, c)));
            sum = _mm256_add_pd(sum, _mm256_cvtps_pd(_mm_mul_ps(d, d)));
        }
        for (; i < n; i++) {
            const __m128 a = _mm_setr_ps(x0[i], x1[i], x2[i], x3[i]);
            sum = _mm256_add_pd(sum, _mm256_cvtps_pd(_mm_mul_ps(a, a)));
        }
        double s[4];
        _mm256_storeu_pd(s, sum);
        for (int j = 0; j < 4; j++) {
            const float mean = (float)(s[j] / n);
            const float scale = 1.0f / sqrtf(mean + eps);
            rms_scale_row(x + (r + j) * n, w, y + (r + j) * n, n, scale);
        }
    }
    for (; r < r1; r++) {
        const float *xr = x + r * n;
        double sum = 0.0;
        for (int32_t i = 0; i < n; i++)
            sum += (double)(xr[i] * xr[i]);
        const float mean = (float)(sum / n);
        const float scale = 1.0f / sqrtf(mean + eps);
        rms_scale_row(xr, w, y + r * n, n, scale);
    }
}

/* ------------------------------------------------------------------ rope */

/* x0' = x0 c - x1 s and x1' = x0 s + x1 c, each product rounded, then one
 * add or subtract: the plain loop's operations (x1 c + x0 s is the same sum
 * as x0 s + x1 c). */
void cpu_avx2_rope_row(float *x, int32_t n_head, int32_t n_dims, int neox, const float *cs)
{
    const int32_t half = n_dims / 2;
    const float *cosv = cs, *sinv = cs + half;
    for (int32_t h = 0; h < n_head; h++) {
        float *v = x + (size_t)h * n_dims;
        int32_t i = 0;
        if (neox) {
            for (; i + 8 <= half; i += 8) {
                const __m256 x0 = _mm256_loadu_ps(v + i), x1 = _mm256_loadu_ps(v + half + i);
                const __m256 c = _mm256_loadu_ps(cosv + i), s = _mm256_loadu_ps(sinv + i);
                _mm256_storeu_ps(v + i, _mm256_fmsub_ps(x0, c, _mm256_mul_ps(x1, s)));
                _mm256_storeu_ps(v + half + i, _mm256_fmadd_ps(x0, s, _mm256_mul_ps(x1, c)));
            }
            for (; i < half; i++) {
                const float x0 = v[i], x1 = v[half + i];
                v[i] = fmaf(x0, cosv[i], -(x1 * sinv[i]));
                v[half + i] = fmaf(x0, sinv[i], x1 * cosv[i]);
            }
        } else {
            /* 4 pairs (8 floats) at a time: even lanes x0, odd lanes x1;
             * x0's product is the fused one in both outputs */
            const __m256i dup = _mm256_setr_epi32(0, 0, 1, 1, 2, 2, 3, 3);
            for (; i + 4 <= half; i += 4) {
                const __m256 xv = _mm256_loadu_ps(v + 2 * i);
                const __m256 c = _mm256_permutevar8x32_ps(_mm256_castps128_ps256(_mm_loadu_ps(cosv + i)), dup);
                const __m256 s = _mm256_permutevar8x32_ps(_mm256_castps128_ps256(_mm_loadu_ps(sinv + i)), dup);
                const __m256 xs = _mm256_permute_ps(xv, 0xb1); /* pairs swapped */
                const __m256 even = _mm256_fmsub_ps(xv, c, _mm256_mul_ps(xs, s));
                const __m256 odd = _mm256_fmadd_ps(xs, s, _mm256_mul_ps(xv, c));
                _mm256_storeu_ps(v + 2 * i, _mm256_blend_ps(even, odd, 0xaa));
            }
            for (; i < half; i++) {
                const float x0 = v[2 * i], x1 = v[2 * i + 1];
                v[2 * i] = fmaf(x0, cosv[i], -(x1 * sinv[i]));
                v[2 * i + 1] = fmaf(x0, sinv[i], x1 * cosv[i]);
            }
        }
    }
}

/* ------------------------------------------------------------- F32 dots */

/* quant's F32 kernels for NX activation rows at once (the weight row is
 * loaded once); per row exactly the single-row arithmetic. TB = 0:
 * ggml_vec_dot_f32 (four FMA chains over 32-element steps, GGML_F32x8_REDUCE,
 * the n % 32 tail in float); TB = 1: tinyBLAS (one chain, hsum_float_8;
 * n % 8 == 0). */
AINLINE void dots_f32_nx(int64_t n, const float *w, const float *x, size_t xs, int NX, float *out,
                         const int TB)
{
    __m256 a[3][4];
#pragma GCC unroll 3
    for (int r = 0; r < NX; r++)
        a[r][0] = a[r][1] = a[r][2] = a[r][3] = _mm256_setzero_ps();
    if (TB) {
        for (int64_t i = 0; i < n; i += 8) {
            const __m256 wv = _mm256_loadu_ps(w + i);
#pragma GCC unroll 3
            for (int r = 0; r < NX; r++)
                a[r][0] = _mm256_fmadd_ps(wv, _mm256_loadu_ps(x + r * xs + i), a[r][0]);
        }
#pragma GCC unroll 3
        for (int r = 0; r < NX; r++)
            out[r] = avx2_hsum_ps(a[r][0]);
        return;
    }
    const int64_t np = n & ~(int64_t)31;
    for (int64_t i = 0; i < np; i += 32) {
#pragma GCC unroll 4
        for (int j = 0; j < 4; j++) {
            const __m256 wv = _mm256_loadu_ps(w + i + 8 * j);
#pragma GCC unroll 3
            for (int r = 0; r < NX; r++)
                a[r][j] = _mm256_fmadd_ps(wv, _mm256_loadu_ps(x + r * xs + i + 8 * j), a[r][j]);
        }
    }
#pragma GCC unroll 3
    for (int r = 0; r < NX; r++) {
        float s = avx2_reduce4x8(a[r][0], a[r][1], a[r][2], a[r][3]);
        for (int64_t k = np; k < n; k++)
            s += w[k] * x[r * xs + k];
        out[r] = s;
    }
}

void cpu_avx2_dots_f32(int64_t n, const float *w, const float *x, size_t xs, int nx, float *out,
                       int tinyblas)
{
    /* NX and TB constant in every call, so each kernel is specialized */
#define F32_NX(NX) (tinyblas ? dots_f32_nx(n, w, x, xs, NX, out, 1) : dots_f32_nx(n, w, x, xs, NX, out, 0))
    for (; nx >= 3; nx -= 3, x += 3 * xs, out += 3)
        F32_NX(3);
    if (nx == 2)
        F32_NX(2);
    else if (nx == 1)
        F32_NX(1);
#undef F32_NX
}

/* ------------------------------------------------------------- attention */

AINLINE __m256 load_f16x8(const quant_f16 *p)
{
    return _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)p));
}

/* Round 8 floats to F16 and back (the F16 accumulator, held as floats). */
AINLINE __m256 round16(__m256 v)
{
    return _mm256_cvtph_ps(_mm256_cvtps_ph(v, F16_RNE));
}

AINLINE void transpose8(__m256 r[8])
{
    const __m256 t0 = _mm256_unpacklo_ps(r[0], r[1]), t1 = _mm256_unpackhi_ps(r[0], r[1]);
    const __m256 t2 = _mm256_unpacklo_ps(r[2], r[3]), t3 = _mm256_unpackhi_ps(r[2], r[3]);
    const __m256 t4 = _mm256_unpacklo_ps(r[4], r[5]), t5 = _mm256_unpackhi_ps(r[4], r[5]);
    const __m256 t6 = _mm256_unpacklo_ps(r[6], r[7]), t7 = _mm256_unpackhi_ps(r[6], r[7]);
    const __m256 s0 = _mm256_shuffle_ps(t0, t2, 0x44), s1 = _mm256_shuffle_ps(t0, t2, 0xee);
    const __m256 s2 = _mm256_shuffle_ps(t1, t3, 0x44), s3 = _mm256_shuffle_ps(t1, t3, 0xee);
    const __m256 s4 = _mm256_shuffle_ps(t4, t6, 0x44), s5 = _mm256_shuffle_ps(t4, t6, 0xee);
    const __m256 s6 = _mm256_shuffle_ps(t5, t7, 0x44), s7 = _mm256_shuffle_ps(t5, t7, 0xee);
    r[0] = _mm256_permute2f128_ps(s0, s4, 0x20);
    r[1] = _mm256_permute2f128_ps(s1, s5, 0x20);
    r[2] = _mm256_permute2f128_ps(s2, s6, 0x20);
    r[3] = _mm256_permute2f128_ps(s3, s7, 0x20);
    r[4] = _mm256_permute2f128_ps(s0, s4, 0x31);
    r[5] = _mm256_permute2f128_ps(s1, s5, 0x31);
    r[6] = _mm256_permute2f128_ps(s2, s6, 0x31);
    r[7] = _mm256_permute2f128_ps(s3, s7, 0x31);
}

/* Scores of every head of the group for 8 positions (kp[l]: K row of
 * position l), each as cpu_dot_f16(k, q16) * scale: the 32-element steps in
 * four FMA chains reduced to a float, then the remaining elements added in
 * double one by one. The double tails run with positions in the lanes: the
 * 8x8 block of K is transposed once for all heads, and each head multiplies
 * row i of it (element i of the 8 positions) by its q[i], so each
 * position's terms are still added in order. sc[h * CPU_ATTN_CHUNK + l]. */
AINLINE void scores8(const quant_f16 *const *kp, const float *qf, int32_t nq, int32_t hd,
                     float scale, float *sc)
{
    const int32_t np = hd & ~31;
    const __m256 vscale = _mm256_set1_ps(scale);
    __m256d tail[2 * 64]; /* per head: double sums of positions 0-3, 4-7 */
    for (int32_t h = 0; h < nq; h++) {
        const float *qh = qf + (size_t)h * hd;
        float part[8] __attribute__((aligned(32)));
        if (np > 0) {
            for (int l = 0; l < 8; l++) {
                __m256 a0 = _mm256_setzero_ps(), a1 = a0, a2 = a0, a3 = a0;
                for (int32_t i = 0; i < np; i += 32) {
                    a0 = _mm256_fmadd_ps(load_f16x8(kp[l] + i), _mm256_load_ps(qh + i), a0);
                    a1 = _mm256_fmadd_ps(load_f16x8(kp[l] + i + 8), _mm256_load_ps(qh + i + 8), a1);
                    a2 = _mm256_fmadd_ps(load_f16x8(kp[l] + i + 16), _mm256_load_ps(qh + i + 16), a2);
                    a3 = _mm256_fmadd_ps(load_f16x8(kp[l] + i + 24), _mm256_load_ps(qh + i + 24), a3);
                }
                part[l] = avx2_reduce4x8(a0, a1, a2, a3);
            }
        } else {
            memset(part, 0, sizeof(part));
        }
        if (np == hd) {
            _mm256_store_ps(sc + (size_t)h * CPU_ATTN_CHUNK, _mm256_mul_ps(_mm256_load_ps(part), vscale));
        } else {
            tail[2 * h] = _mm256_cvtps_pd(_mm_load_ps(part));
            tail[2 * h + 1] = _mm256_cvtps_pd(_mm_load_ps(part + 4));
        }
    }
    if (np == hd)
        return;
    for (int32_t c = np; c < hd; c += 8) {
        __m256 kt[8];
        for (int l = 0; l < 8; l++)
            kt[l] = load_f16x8(kp[l] + c);
        transpose8(kt); /* kt[i]: element c + i of the 8 positions */
        for (int32_t h = 0; h < nq; h++) {
            const float *qc = qf + (size_t)h * hd + c;
            __m256d slo = tail[2 * h], shi = tail[2 * h + 1];
            for (int i = 0; i < 8; i++) {
                const __m256 p = _mm256_mul_ps(kt[i], _mm256_broadcast_ss(qc + i));
                slo = _mm256_add_pd(slo, _mm256_cvtps_pd(_mm256_castps256_ps128(p)));
                shi = _mm256_add_pd(shi, _mm256_cvtps_pd(_mm256_extractf128_ps(p, 1)));
            }
            tail[2 * h] = slo;
            tail[2 * h + 1] = shi;
        }
    }
    for (int32_t h = 0; h < nq; h++) {
        const __m256 sv = _mm256_set_m128(_mm256_cvtpd_ps(tail[2 * h + 1]), _mm256_cvtpd_ps(tail[2 * h]));
        _mm256_store_ps(sc + (size_t)h * CPU_ATTN_CHUNK, _mm256_mul_ps(sv, vscale));
    }
}

/* Lanes shifted up by k (lane l takes lane l - k; lanes below k take `fill`). */
AINLINE __m256 shift_up(__m256 x, const int k, __m256 fill)
{
    switch (k) { /* the blend mask must be a literal */
    case 1:
        return _mm256_blend_ps(_mm256_permutevar8x32_ps(x, _mm256_setr_epi32(0, 0, 1, 2, 3, 4, 5, 6)),
                               fill, 0x01);
    case 2:
        return _mm256_blend_ps(_mm256_permutevar8x32_ps(x, _mm256_setr_epi32(0, 0, 0, 1, 2, 3, 4, 5)),
                               fill, 0x03);
    default:
        return _mm256_blend_ps(_mm256_permutevar8x32_ps(x, _mm256_setr_epi32(0, 0, 0, 0, 0, 1, 2, 3)),
                               fill, 0x0f);
    }
}

/* The plain loop's running maximum over 8 scores s (n of them valid), from
 * *m: per position, the maximum before it, mp, decides which exponential
 * that loop takes: up (s > mp: the maximum grows) -> expf(mp - s), else
 * expf(s - mp). Returns those arguments, sets the up bits and *m.
 * vmaxps(a, b) returns b unless a > b (ties, zeros of either sign and NaN
 * included), which is the loop's update "m = s if s > m" with the earlier
 * value as b; NaN scores never raise the maximum, so they enter the scan as
 * -inf (and still give NaN arguments, as in the loop). */
AINLINE __m256 runmax8(__m256 s, int n, float *m, unsigned *up)
{
    const __m256 ninf = _mm256_set1_ps(-INFINITY);
    __m256 x = _mm256_blendv_ps(s, ninf, _mm256_cmp_ps(s, s, _CMP_UNORD_Q));
    if (n < 8) /* padding lanes must not raise the maximum */
        x = _mm256_blendv_ps(x, ninf, _mm256_castsi256_ps(_mm256_cmpgt_epi32(
                                          _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7),
                                          _mm256_set1_epi32(n - 1))));
    x = _mm256_max_ps(x, shift_up(x, 1, ninf));
    x = _mm256_max_ps(x, shift_up(x, 2, ninf));
    x = _mm256_max_ps(x, shift_up(x, 4, ninf));
    const __m256 vm = _mm256_set1_ps(*m);
    const __m256 incl = _mm256_max_ps(x, vm);      /* maximum up to and with l */
    const __m256 mp = shift_up(incl, 1, vm);       /* maximum before l */
    const __m256 grow = _mm256_cmp_ps(s, mp, _CMP_GT_OQ);
    *up = (unsigned)_mm256_movemask_ps(grow);
    *m = _mm256_cvtss_f32(_mm256_permutevar8x32_ps(incl, _mm256_set1_epi32(7)));
    return _mm256_blendv_ps(_mm256_sub_ps(s, mp), _mm256_sub_ps(mp, s), grow);
}

/* The online-softmax update of one head over np positions, with the
 * exponentials already computed: e[p] is ms when bit p of up is set (the
 * maximum grew), else vs. acc (NV x 8 floats, each exactly an F16 value)
 * stays in registers for a constant NV. */
AINLINE void attn_pv(const int NV, const quant_f16 *const *vp, int np, const float *e,
                     uint32_t up, float *accm, float *Sp)
{
    __m256 acc[16];
#pragma GCC unroll 16
    for (int d = 0; d < NV; d++)
        acc[d] = _mm256_load_ps(accm + 8 * d);
    float S = *Sp;
    for (int p = 0; p < np; p++) {
        float ms = 1.0f, vs = e[p];
        if ((up >> p) & 1) {
            ms = e[p];
            vs = 1.0f;
            const __m256 m = _mm256_set1_ps(ms);
#pragma GCC unroll 16
            for (int d = 0; d < NV; d++)
                acc[d] = round16(_mm256_mul_ps(acc[d], m));
        }
        const __m256 v = _mm256_set1_ps(vs);
#pragma GCC unroll 16
        for (int d = 0; d < NV; d++)
            acc[d] = round16(_mm256_fmadd_ps(load_f16x8(vp[p] + 8 * d), v, acc[d]));
        S = fmaf(S, ms, vs);
    }
#pragma GCC unroll 16
    for (int d = 0; d < NV; d++)
        _mm256_store_ps(accm + 8 * d, acc[d]);
    *Sp = S;
}

/* Two heads at once for small heads (NV <= 4): one V load for both, and two
 * independent F16-rounding chains instead of one latency-bound chain. Each
 * head's operations are attn_pv's. */
AINLINE void attn_pv2(const int NV, const quant_f16 *const *vp, int np, const float *e0,
                      const float *e1, uint32_t up0, uint32_t up1, float *acc0m, float *acc1m,
                      float *S0p, float *S1p)
{
    __m256 a0[4], a1[4];
#pragma GCC unroll 4
    for (int d = 0; d < NV; d++) {
        a0[d] = _mm256_load_ps(acc0m + 8 * d);
        a1[d] = _mm256_load_ps(acc1m + 8 * d);
    }
    float S0 = *S0p, S1 = *S1p;
    for (int p = 0; p < np; p++) {
        float ms0 = 1.0f, vs0 = e0[p], ms1 = 1.0f, vs1 = e1[p];
        if ((up0 >> p) & 1) {
            ms0 = e0[p];
            vs0 = 1.0f;
            const __m256 m = _mm256_set1_ps(ms0);
#pragma GCC unroll 4
            for (int d = 0; d < NV; d++)
                a0[d] = round16(_mm256_mul_ps(a0[d], m));
        }
        if ((up1 >> p) & 1) {
            ms1 = e1[p];
            vs1 = 1.0f;
            const __m256 m = _mm256_set1_ps(ms1);
#pragma GCC unroll 4
            for (int d = 0; d < NV; d++)
                a1[d] = round16(_mm256_mul_ps(a1[d], m));
        }
        const __m256 v0 = _mm256_set1_ps(vs0), v1 = _mm256_set1_ps(vs1);
#pragma GCC unroll 4
        for (int d = 0; d < NV; d++) {
            const __m256 v = load_f16x8(vp[p] + 8 * d);
            a0[d] = round16(_mm256_fmadd_ps(v, v0, a0[d]));
            a1[d] = round16(_mm256_fmadd_ps(v, v1, a1[d]));
        }
        S0 = fmaf(S0, ms0, vs0);
        S1 = fmaf(S1, ms1, vs1);
    }
#pragma GCC unroll 4
    for (int d = 0; d < NV; d++) {
        _mm256_store_ps(acc0m + 8 * d, a0[d]);
        _mm256_store_ps(acc1m + 8 * d, a1[d]);
    }
    *S0p = S0;
    *S1p = S1;
}

/* The same as attn_pv for any head_dim (accumulator in memory). */
static void attn_pv_any(int32_t nv, const quant_f16 *const *vp, int np, const float *e,
                        uint32_t up, float *accm, float *Sp)
{
    float S = *Sp;
    for (int p = 0; p < np; p++) {
        float ms = 1.0f, vs = e[p];
        if ((up >> p) & 1) {
            ms = e[p];
            vs = 1.0f;
            const __m256 m = _mm256_set1_ps(ms);
            for (int32_t d = 0; d < nv; d++)
                _mm256_store_ps(accm + 8 * d, round16(_mm256_mul_ps(_mm256_load_ps(accm + 8 * d), m)));
        }
        const __m256 v = _mm256_set1_ps(vs);
        for (int32_t d = 0; d < nv; d++)
            _mm256_store_ps(accm + 8 * d, round16(_mm256_fmadd_ps(load_f16x8(vp[p] + 8 * d), v,
                                                                  _mm256_load_ps(accm + 8 * d))));
        S = fmaf(S, ms, vs);
    }
    *Sp = S;
}

void cpu_avx2_attn(const struct cpu_attn_group *g)
{
    enum { PB = CPU_ATTN_CHUNK };
    _Static_assert(PB <= 32 && PB % 8 == 0, "up bits of a chunk live in one uint32_t");
    const int32_t hd = g->head_dim, nq = g->nq, bs = g->block_size, nv = hd / 8;
    /* scratch: F16-rounded queries, accumulators, scores (then their
     * exponentials), a zero K/V row for padding lanes */
    float *qf = g->scratch;
    float *acc = qf + (size_t)nq * hd;
    float *sc = acc + (size_t)nq * hd;
    quant_f16 *zero = (quant_f16 *)(sc + (size_t)nq * PB);
    float M[64], S[64]; /* per head; nq <= 64 is checked by cpu_attention.c */
    uint32_t up[64];
    const quant_f16 *kp[PB], *vp[PB];

    for (int32_t h = 0; h < nq; h++) {
        for (int32_t d = 0; d < hd; d += 8) {
            _mm256_store_ps(qf + h * hd + d, round16(_mm256_loadu_ps(g->q + h * hd + d)));
            _mm256_store_ps(acc + h * hd + d, _mm256_setzero_ps());
        }
        M[h] = -INFINITY;
        S[h] = 0.0f;
    }
    memset(zero, 0, sizeof(quant_f16) * (size_t)hd);

    for (int32_t p0 = 0; p0 < g->n_kv; p0 += PB) {
        const int np = g->n_kv - p0 < PB ? (int)(g->n_kv - p0) : PB;
        /* K/V rows of the chunk's positions, walking the block table */
        int32_t blk = p0 / bs, off = p0 % bs;
        size_t row = ((size_t)g->bt[blk] * bs + (size_t)off) * g->kv_stride;
        for (int l = 0; l < np; l++) {
            kp[l] = g->k + row;
            vp[l] = g->v + row;
            row += g->kv_stride;
            if (++off == bs && l + 1 < np) {
                off = 0;
                row = (size_t)g->bt[++blk] * bs * g->kv_stride;
            }
        }
        for (int l = np; l < PB; l++)
            kp[l] = vp[l] = zero; /* padding lanes: computed, never used */

        for (int l = 0; l < np; l += 8)
            scores8(kp + l, qf, nq, hd, g->scale, sc + l);

        /* per head: the exponentials the plain loop takes, in place of the
         * scores, and which positions raise the maximum */
        for (int32_t h = 0; h < nq; h++) {
            float *sh = sc + (size_t)h * PB;
            up[h] = 0;
            for (int l = 0; l < np; l += 8) {
                unsigned bits;
                const __m256 arg = runmax8(_mm256_load_ps(sh + l), np - l, &M[h], &bits);
                _mm256_store_ps(sh + l, expf8(arg));
                up[h] |= (uint32_t)bits << l;
            }
        }

        int32_t h = 0;
        if (nv <= 4) {
            for (; h + 2 <= nq; h += 2) {
                const float *e0 = sc + (size_t)h * PB, *e1 = e0 + PB;
                float *a0 = acc + (size_t)h * hd, *a1 = a0 + hd;
                switch (nv) {
                case 1: attn_pv2(1, vp, np, e0, e1, up[h], up[h + 1], a0, a1, &S[h], &S[h + 1]); break;
                case 2: attn_pv2(2, vp, np, e0, e1, up[h], up[h + 1], a0, a1, &S[h], &S[h + 1]); break;
                case 3: attn_pv2(3, vp, np, e0, e1, up[h], up[h + 1], a0, a1, &S[h], &S[h + 1]); break;
                default: attn_pv2(4, vp, np, e0, e1, up[h], up[h + 1], a0, a1, &S[h], &S[h + 1]); break;
                }
            }
        }
        for (; h < nq; h++) {
            const float *e = sc + (size_t)h * PB;
            float *ah = acc + (size_t)h * hd;
            switch (nv) {
            case 1: attn_pv(1, vp, np, e, up[h], ah, &S[h]); break;
            case 2: attn_pv(2, vp, np, e, up[h], ah, &S[h]); break;
            case 4: attn_pv(4, vp, np, e, up[h], ah, &S[h]); break;
            case 8: attn_pv(8, vp, np, e, up[h], ah, &S[h]); break;
            case 16: attn_pv(16, vp, np, e, up[h], ah, &S[h]); break;
            default: attn_pv_any(nv, vp, np, e, up[h], ah, &S[h]); break;
            }
        }
    }
    for (int32_t h = 0; h < nq; h++) {
        const float inv = S[h] == 0.0f ? 0.0f : 1.0f / S[h];
        const __m256 iv = _mm256_set1_ps(inv);
        for (int32_t d = 0; d < hd; d += 8)
            _mm256_storeu_ps(g->out + h * hd + d, _mm256_mul_ps(_mm256_load_ps(acc + h * hd + d), iv));
    }
}

#endif /* INFERD_HAVE_AVX2 */
