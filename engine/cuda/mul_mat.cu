/* cuda/mul_mat — y[r][j] = dot(row j of w, x[r]) for every weight type.
 *
 * This is the simple, correct product the MMQ issue replaces with tuned
 * tensor-core kernels: one warp per weight row and up to MM_COLS activation
 * rows, so each weight row is read once per MM_COLS activation rows.
 *  - quantized weights: the activations are quantized to q8_1 once per call
 *    (all rows), then lane l takes 32-element sub-blocks l, l+32, ... of the
 *    row (cuda_dot32, exact int32 sums) and the warp sums the lanes;
 *  - F32/F16/BF16 weights: float products of 4-element groups in the same
 *    lane pattern, activations kept in F32.
 * Batch invariance: what a lane adds, and in which order, depends only on
 * the row length, never on n_rows or on which other rows share the warp, and
 * the warp sum is a fixed butterfly; a row's result is the same bits at
 * every batch size and however the scheduler chunks a prompt.
 */
#include "engine/cuda/qtypes.cuh"

#define MM_COLS 8 /* activation rows per warp */
#define MM_WARPS 4 /* weight rows per thread block */

template <int T>
static __global__ void __launch_bounds__(MM_WARPS *CUDA_WARP)
mul_mat_q_kernel(const uint8_t *__restrict__ w, size_t row_bytes, int32_t n_w_rows,
                 const struct block_q8_1 *__restrict__ xq, int64_t n_sub, float *__restrict__ y,
                 int32_t n_rows)
{
    const int32_t j = blockIdx.x * MM_WARPS + threadIdx.x / CUDA_WARP;
    const int lane = threadIdx.x % CUDA_WARP;
    const int32_t r0 = blockIdx.y * MM_COLS;
    if (j >= n_w_rows)
        return;
    const int ncols = n_rows - r0 < MM_COLS ? n_rows - r0 : MM_COLS;
    const uint8_t *row = w + (size_t)j * row_bytes;
    float acc[MM_COLS];
#pragma unroll
    for (int c = 0; c < MM_COLS; c++)
        acc[c] = 0.0f;
    for (int64_t ib = lane; ib < n_sub; ib += CUDA_WARP) {
#pragma unroll
        for (int c = 0; c < MM_COLS; c++)
            if (c < ncols)
                acc[c] = __fadd_rn(acc[c], cuda_dot32<T>(row, ib, xq + (int64_t)(r0 + c) * n_sub + ib));
    }
#pragma unroll
    for (int c = 0; c < MM_COLS; c++) {
        const float s = cuda_warp_sum(acc[c]);
        if (lane == 0 && c < ncols)
            y[(int64_t)(r0 + c) * n_w_rows + j] = s;
    }
}

template <int T>
static __global__ void __launch_bounds__(MM_WARPS *CUDA_WARP)
mul_mat_f_kernel(const uint8_t *__restrict__ w, size_t row_bytes, int32_t n_w_rows,
                 const float *__restrict__ x, int64_t ne0, float *__restrict__ y, int32_t n_rows)
{
    const int32_t j = blockIdx.x * MM_WARPS + threadIdx.x / CUDA_WARP;
    const int lane = threadIdx.x % CUDA_WARP;
    const int32_t r0 = blockIdx.y * MM_COLS;
    if (j >= n_w_rows)
        return;
    const int ncols = n_rows - r0 < MM_COLS ? n_rows - r0 : MM_COLS;
    const uint8_t *row = w + (size_t)j * row_bytes;
    float acc[MM_COLS];
#pragma unroll
    for (int c = 0; c < MM_COLS; c++)
        acc[c] = 0.0f;
    for (int64_t i = lane; i < ne0; i += CUDA_WARP) {
        const float wv = cuda_dequant1<T>(row, i);
#pragma unroll
        for (int c = 0; c < MM_COLS; c++)
            if (c < ncols)
                acc[c] = __fmaf_rn(wv, x[(int64_t)(r0 + c) * ne0 + i], acc[c]);
    }
#pragma unroll
    for (int c = 0; c < MM_COLS; c++) {
        const float s = cuda_warp_sum(acc[c]);
        if (lane == 0 && c < ncols)
            y[(int64_t)(r0 + c) * n_w_rows + j] = s;
    }
}

void cuda_op_mul_mat(struct backend *be, const struct backend_weight *w, const float *x, float *y,
                     int32_t n_rows)
{
    struct cuda_ctx *c = cuda_ctx_of(be);
    if (cuda_op_begin(c) || n_rows <= 0)
        return;
    const dim3 grid(cuda_blocks(w->ne1, MM_WARPS), cuda_blocks(n_rows, MM_COLS));
    const dim3 block(MM_WARPS * CUDA_WARP);
    const uint8_t *wd = (const uint8_t *)w->data;
    const int32_t nw = (int32_t)w->ne1;
    const int64_t n_sub = w->ne0 / QK8_1;
    switch (w->type) {
    case QT_F32:
        mul_mat_f_kernel<QT_F32><<<grid, block, 0, c->stream>>>(wd, w->row_bytes, nw, x, w->ne0, y, n_rows);
        break;
    case QT_F16:
        mul_mat_f_kernel<QT_F16><<<grid, block, 0, c->stream>>>(wd, w->row_bytes, nw, x, w->ne0, y, n_rows);
        break;
    case QT_BF16:
        mul_mat_f_kernel<QT_BF16><<<grid, block, 0, c->stream>>>(wd, w->row_bytes, nw, x, w->ne0, y, n_rows);
        break;
#define MM_Q(TY)                                                                                   \
    case TY:                                                                                       \
        cuda_quantize_q8_1(c, x, c->xq, n_rows, w->ne0);                                           \
        mul_mat_q_kernel<TY><<<grid, block, 0, c->stream>>>(wd, w->row_bytes, nw, c->xq, n_sub, y, \
                                                            n_rows);                               \
        break;
        MM_Q(QT_Q4_0)
        MM_Q(QT_Q8_0)
        MM_Q(QT_Q4_K)
        MM_Q(QT_Q5_K)
        MM_Q(QT_Q6_K)
#undef MM_Q
    default:
        c->err = INF_EUNSUPPORTED;
        return;
    }
    CUDA_CHECK_LAUNCH(c, "mul_mat kernel");
}
