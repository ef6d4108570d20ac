/* cuda/mmq — int8 tensor-core products (mma.sync m16n8k32 / m16n8k16) for
 * the quantized weight types, for batches past the warp-per-row product's
 * range. Declarations shared by mul_mat.cu (dispatch) and mmq_<type>.cu (one
 * instantiation file per weight type, so builds run in parallel).
 *
 * Numerics: the same canonical arithmetic as cuda/qtypes.cuh (exact int32
 * block terms, the float chain over blocks in k order), so a row gets the
 * same bits from MMQ as from the warp-per-row kernel at any batch size.
 */
#ifndef INFERD_CUDA_MMQ_CUH
#define INFERD_CUDA_MMQ_CUH

#include "engine/cuda/common.cuh"

/* y[r][j] for n_rows activation rows already quantized (xq: the CPU's
 * vec_dot type of w, n_rows rows) against weight w. */
template <int T>
void cuda_mmq(struct cuda_ctx *c, const struct backend_weight *w, const void *xq, float *y,
              int32_t n_rows);

#endif
