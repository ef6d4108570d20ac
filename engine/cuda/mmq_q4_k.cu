/* cuda/mmq_q4_k — the MMQ instantiation for Q4_K weights (cuda/mmq_impl.cuh). */
#include "engine/cuda/mmq_impl.cuh"

template void cuda_mmq<QT_Q4_K>(struct cuda_ctx *c, const struct backend_weight *w, const void *xq,
                              float *y, int32_t n_rows);
