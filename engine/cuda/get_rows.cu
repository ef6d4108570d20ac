/* cuda/get_rows — embedding rows: y[r] = dequant(row ids[r] of w), every
 * weight type (Q4_0/Q8_0 in the layout the backend keeps them: packed
 * where cuda_q0_packed says so), one thread block per row. */
#include "engine/cuda/qtypes.cuh"

template <int T>
static __global__ void get_rows_kernel(const uint8_t *__restrict__ w, size_t row_bytes, int64_t ne0,
                                       const int32_t *__restrict__ ids, float *__restrict__ y)
{
    cuda_pdl_enter();
    const int32_t r = blockIdx.x;
    const uint8_t *row = w + (size_t)ids[r] * row_bytes;
    if constexpr (T == QT_Q4_0 || T == QT_Q8_0) {
        if (cuda_q0_packed(T, ne0)) { /* the layout the products read */
            for (int64_t i = threadIdx.x; i < ne0; i += blockDim.x)
                y[(int64_t)r * ne0 + i] = cuda_q0_packed_elem<T>(row, ne0, i);
            return;
        }
    }
    for (int64_t i = threadIdx.x; i < ne0; i += blockDim.x)
        y[(int64_t)r * ne0 + i] = cuda_dequant1<T>(row, i);
}

void cuda_op_get_rows(struct backend *be, const struct backend_weight *w, const int32_t *ids,
                      int32_t n, float *y)
{
    struct cuda_ctx *c = cuda_ctx_of(be);
    if (cuda_op_begin(c) || n <= 0)
        return;
    const uint8_t *wd = (const uint8_t *)w->data;
    switch (w->type) {
#define GR(TY)                                                                                \
    case TY:                                                                                  \
        cuda_launch(c, get_rows_kernel<TY>, n, 256, 0, wd, w->row_bytes, w->ne0, ids, y);     \
        break;
        GR(QT_F32)
        GR(QT_F16)
        GR(QT_BF16)
        GR(QT_Q4_0)
        GR(QT_Q8_0)
        GR(QT_Q4_K)
        GR(QT_Q5_K)
        GR(QT_Q6_K)
#undef GR
    default:
        c->err = INF_EUNSUPPORTED;
        return;
    }
    CUDA_CHECK_LAUNCH(c, "get_rows_kernel");
}
