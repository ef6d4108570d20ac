/* quant_avx2 — internal: the AVX2/FMA/F16C paths of quant.c.
 *
 * Only quant.c includes this, and calls these only after quant_have_avx2()
 * said the CPU runs them. Block counts (nb) or element counts (n) as named.
 * The quantizers give the same bytes as quant_quantize_row_ref, the dots the
 * same bits as quant_kernel_dot_ref.
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

/* The AVX2 path of a kernel (enum quant_kernel), NULL if none. */
quant_vec_dot_fn quant_avx2_kernel_func(int kernel);
/* One weight row against nx activation rows x + r*xs through a kernel;
 * each out[r] has the bits of the single-row function. 0 when the kernel
 * has no multi-row path (the float ones). */
int quant_avx2_kernel_dots(int kernel, int64_t n, const void *w, const void *x, size_t xs, int nx,
                           float *out);
#endif

#endif
