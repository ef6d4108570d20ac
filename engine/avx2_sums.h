/* avx2_sums — internal: llama.cpp's AVX2 horizontal float sums, shared by
 * quant_avx2.c and cpu_avx2.c (the only includers, both compiled with
 * -mavx2 -mfma -mf16c). The order of each addition is part of the result:
 * every kernel that reproduces llama.cpp's bits sums through these.
 */
#ifndef INFERD_AVX2_SUMS_H
#define INFERD_AVX2_SUMS_H

#include <immintrin.h>

/* hsum_float_8: ((v0+v4)+(v2+v6)) + ((v1+v5)+(v3+v7)). */
static inline __attribute__((always_inline)) float avx2_hsum_ps(__m256 v)
{
    __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    s = _mm_add_ss(s, _mm_movehdup_ps(s));
    return _mm_cvtss_f32(s);
}

/* GGML_F32x8_REDUCE of four accumulators: (a0+a2)+(a1+a3) per lane, lanes
 * l+4 onto l, then (t0+t1)+(t2+t3). */
static inline __attribute__((always_inline)) float avx2_reduce4x8(__m256 a0, __m256 a1, __m256 a2,
                                                                  __m256 a3)
{
    const __m256 v = _mm256_add_ps(_mm256_add_ps(a0, a2), _mm256_add_ps(a1, a3));
    const __m128 t = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    const __m128 h = _mm_hadd_ps(t, t);
    return _mm_cvtss_f32(_mm_hadd_ps(h, h));
}

#endif
