/* quant_avx2 — internal: the AVX2/FMA/F16C paths of quant.c.
 *
 * Only quant.c includes this, and calls these only after quant_have_avx2()
 * said the CPU runs them. Block counts (nb) or element counts (n) as named.
 * The quantizers give the same bytes as quant_quantize_row_ref; the dots
 * differ from quant_vec_dot_ref only by float summation order.
 * Pure functions: any thread.
 */
#ifndef INFERD_QUANT_AVX2_H
#define INFERD_QUANT_AVX2_H

#include <stddef.h>
#include <stdint.h>

#include "quant.h"

#ifdef INFERD_HAVE_AVX2
void quant_avx2_quantize_q8_0(const float *x, struct block_q8_0 *y, int64_t nb);
void quant_avx2_quantize_q8_K(const float *x, struct block_q8_K *y, int64_t nb);
void quant_avx2_quantize_f16(const float *x, quant_f16 *y, int64_t n);

float quant_avx2_dot_f32(int64_t n, const void *w, const void *x);
float quant_avx2_dot_f16(int64_t n, const void *w, const void *x);
float quant_avx2_dot_bf16(int64_t n, const void *w, const void *x);
float quant_avx2_dot_q4_0(int64_t n, const void *w, const void *x);
/* One weight row against nx activation rows x + r*xs: out[r]; each result is
 * bit-identical to the single-row function's. */
void quant_avx2_dots_q8_0(int64_t n, const void *w, const void *x, size_t xs, int nx, float *out);
void quant_avx2_dots_q4_0(int64_t n, const void *w, const void *x, size_t xs, int nx, float *out);
void quant_avx2_dots_q4_K(int64_t n, const void *w, const void *x, size_t xs, int nx, float *out);
void quant_avx2_dots_q5_K(int64_t n, const void *w, const void *x, size_t xs, int nx, float *out);
void quant_avx2_dots_q6_K(int64_t n, const void *w, const void *x, size_t xs, int nx, float *out);
float quant_avx2_dot_q8_0(int64_t n, const void *w, const void *x);
float quant_avx2_dot_q4_K(int64_t n, const void *w, const void *x);
float quant_avx2_dot_q5_K(int64_t n, const void *w, const void *x);
float quant_avx2_dot_q6_K(int64_t n, const void *w, const void *x);
#endif

#endif
