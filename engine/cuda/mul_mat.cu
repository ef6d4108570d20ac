/* cuda/mul_mat — y[r][j] = dot(row j of w, x[r]) for every weight type.
 *
 * Two kernel families that give every row the same bits: the warp-per-row
 * product below (any batch; used up to MM_COLS rows: one warp per weight
 * row and up to MM_COLS activation rows, so a weight row is read once per
 * MM_COLS activation rows) and, past MM_COLS rows, the int8 tensor-core
 * kernels of cuda/mmq_*.cu.
 *  - quantized weights: the activations are quantized once per call to the
 *    CPU's vec_dot type (cuda/quantize.cu); lanes form the blocks' exact
 *    integer terms (cuda/qtypes.cuh) and one lane per activation row runs
 *    the float chain over the blocks in k order;
 *  - F32/F16/BF16 weights: the activations rounded to the weight's type as
 *    the CPU rounds them (F16/BF16), float products in a lane-strided order
 *    and a fixed butterfly sum.
 * Batch invariance: a row's arithmetic depends only on the row length,
 * never on n_rows or on which rows share the warp.
 */
#include <stdio.h>

#include "engine/cuda/mmq.cuh"
#include "engine/cuda/qtypes.cuh"

#define MM_COLS 8  /* activation rows per warp */
#define MM_WARPS 4 /* weight rows per thread block */

/* K-quants: one 128-thread block per weight row; 16 groups of 8 lanes take
 * 16 super-blocks at a time (lane j of a group: sub-block j, so a group
 * reads its 144-210 bytes together). A group's integer terms meet by an
 * exact shuffle sum and are parked in shared memory for up to MMV_SB
 * super-blocks; then thread c runs activation row c's float chain over them
 * in k order. No barrier inside the load loop: every super-block's loads
 * can be in flight at once, which is what a decode product needs (it is a
 * stream of the weight bytes). */
#define MMV_GROUPS 16
#define MMV_SB 128 /* super-blocks parked per pass: rows up to 32768 in one */

template <int T>
static __global__ void __launch_bounds__(MMV_GROUPS * 8)
mul_mat_qk_kernel(const uint8_t *__restrict__ w, size_t row_bytes, int32_t n_w_rows,
                  const typename cuda_qt<T>::xb *__restrict__ xq, int64_t nb, float *__restrict__ y,
                  int32_t n_rows)
{
    typedef cuda_qt<T> Q;
    __shared__ float4 terms[MMV_SB][MM_COLS];
    const int grp = threadIdx.x / 8, j = threadIdx.x % 8;
    const int32_t jr = blockIdx.x;
    const int32_t r0 = blockIdx.y * MM_COLS;
    const int ncols = n_rows - r0 < MM_COLS ? n_rows - r0 : MM_COLS;
    const uint8_t *row = w + (size_t)jr * row_bytes;
    const typename Q::xb *x0 = xq + (int64_t)r0 * nb;
    /* the group's own lanes: groups of one warp may run different trip counts */
    const unsigned gmask = 0xffu << (threadIdx.x % CUDA_WARP & ~7u);
    float acc = 0.0f; /* thread c < ncols: activation row r0 + c */
    for (int64_t pass = 0; pass < nb; pass += MMV_SB) {
        const int64_t end = nb - pass < MMV_SB ? nb : pass + MMV_SB;
        for (int64_t ib = pass + grp; ib < end; ib += MMV_GROUPS) {
            int v1[MM_COLS], v2[MM_COLS];
#pragma unroll
            for (int c = 0; c < MM_COLS; c++)
                v1[c] = v2[c] = 0;
            Q::template sub<MM_COLS>(row, ib, j, x0 + ib, nb, ncols, v1, v2);
#pragma unroll
            for (int c = 0; c < MM_COLS; c++)
                if (c < ncols) {
                    /* the group's 8 lanes are converged: same ib, same ncols */
#pragma unroll
                    for (int o = 1; o < 8; o <<= 1) {
                        v1[c] += __shfl_xor_sync(gmask, v1[c], o, 8);
                        if (Q::HAS_MIN)
                            v2[c] += __shfl_xor_sync(gmask, v2[c], o, 8);
                    }
                }
            if (j < ncols) {
                /* lane j of the group parks activation row j's terms */
                float p1 = 0.0f, p2 = 0.0f;
                Q::scales(row, ib, x0 + ib + j * nb, &p1, &p2);
                float t1 = 0.0f, t2 = 0.0f;
#pragma unroll
                for (int c = 0; c < MM_COLS; c++)
                    if (c == j) {
                        t1 = (float)v1[c];
                        t2 = (float)v2[c];
                    }
                terms[ib - pass][j] = make_float4(p1, t1, p2, t2);
            }
        }
        __syncthreads();
        if (threadIdx.x < ncols)
            for (int64_t k = 0; k < end - pass; k++) {
                const float4 t = terms[k][threadIdx.x];
                acc = __fmaf_rn(t.x, t.y, acc);
                if (Q::HAS_MIN)
                    acc = __fmaf_rn(t.z, t.w, acc);
            }
        __syncthreads();
    }
    if (threadIdx.x < ncols)
        y[(int64_t)(r0 + threadIdx.x) * n_w_rows + jr] = acc;
}

/* Q8_0/Q4_0: lane l takes 32-element blocks l, l+32, ... (a warp reads 32
 * consecutive 18-34-byte blocks together); the warp parks their terms in
 * shared memory and lane c runs row c's float chain over them in k order. */
template <int T>
static __global__ void __launch_bounds__(MM_WARPS *CUDA_WARP)
mul_mat_q_kernel(const uint8_t *__restrict__ w, size_t row_bytes, int32_t n_w_rows,
                 const typename cuda_qt<T>::xb *__restrict__ xq, int64_t nb, float *__restrict__ y,
                 int32_t n_rows)
{
    typedef cuda_qt<T> Q;
    /* per warp: the terms of 32 blocks x MM_COLS rows (p1, v1) */
    __shared__ float2 terms[MM_WARPS][CUDA_WARP][MM_COLS];
    const int wid = threadIdx.x / CUDA_WARP, lane = threadIdx.x % CUDA_WARP;
    const int32_t j = blockIdx.x * MM_WARPS + wid;
    const int32_t r0 = blockIdx.y * MM_COLS;
    if (j >= n_w_rows)
        return; /* whole warps only: the __syncwarp below stays full */
    const int ncols = n_rows - r0 < MM_COLS ? n_rows - r0 : MM_COLS;
    const uint8_t *row = w + (size_t)j * row_bytes;
    const typename Q::xb *x0 = xq + (int64_t)r0 * nb;
    float acc = 0.0f; /* lane c < ncols: activation row r0 + c */
    for (int64_t base = 0; base < nb; base += CUDA_WARP) {
        const int64_t ib = base + lane;
        const int cnt = nb - base < CUDA_WARP ? (int)(nb - base) : CUDA_WARP;
        if (lane < cnt) {
            int v1[MM_COLS], v2[MM_COLS];
            Q::template terms<MM_COLS>(row, ib, x0 + ib, nb, ncols, v1, v2);
#pragma unroll
            for (int c = 0; c < MM_COLS; c++)
                if (c < ncols) {
                    float p1, p2;
                    Q::scales(row, ib, x0 + ib + c * nb, &p1, &p2);
                    terms[wid][lane][c] = make_float2(p1, (float)v1[c]);
                }
        }
        __syncwarp();
        if (lane < ncols)
            for (int k = 0; k < cnt; k++) {
                const float2 t = terms[wid][k][lane];
                acc = __fmaf_rn(t.x, t.y, acc);
            }
        __syncwarp();
    }
    if (lane < ncols)
        y[(int64_t)(r0 + lane) * n_w_rows + j] = acc;
}

/* activation element as the CPU's vec_dot type for weight type T holds it */
template <int T> static __device__ __forceinline__ float mm_act(float v)
{
    if (T == QT_F16)
        return __half2float(__float2half_rn(v));
    if (T == QT_BF16)
        return __bfloat162float(__float2bfloat16_rn(v));
    return v;
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
                acc[c] = __fmaf_rn(wv, mm_act<T>(x[(int64_t)(r0 + c) * ne0 + i]), acc[c]);
    }
#pragma unroll
    for (int c = 0; c < MM_COLS; c++) {
        const float s = cuda_warp_sum(acc[c]);
        if (lane == 0 && c < ncols)
            y[(int64_t)(r0 + c) * n_w_rows + j] = s;
    }
}

template <int T>
static void mul_mat_q(struct cuda_ctx *c, const struct backend_weight *w, const float *x, float *y,
                      int32_t n_rows, dim3 grid, dim3 block)
{
    typedef cuda_qt<T> Q;
    const int vdt = Q::QK == QK_K ? QT_Q8_K : QT_Q8_0;
    /* the activation scratch is sized by ops->reserve */
    const size_t need = (size_t)n_rows * (size_t)(w->ne0 / Q::QK) * sizeof(typename Q::xb);
    if (!c->xq || need > c->xq_bytes) {
        c->err = INF_EINTERNAL;
        snprintf(c->err_msg, sizeof(c->err_msg), "mul_mat: %d rows of %lld exceed the reserved scratch",
                 n_rows, (long long)w->ne0);
        return;
    }
    cuda_quantize_act(c, vdt, x, c->xq, n_rows, w->ne0);
    /* Past MM_COLS rows the tensor-core kernel (same bits, see qtypes.cuh);
     * it steps 256 elements at a time. */
    if (n_rows > MM_COLS && w->ne0 % 256 == 0) {
        cuda_mmq<T>(c, w, c->xq, y, n_rows);
        return;
    }
    if constexpr (Q::QK == QK_K)
        mul_mat_qk_kernel<T><<<dim3((unsigned)w->ne1, grid.y), MMV_GROUPS * 8, 0, c->stream>>>(
            (const uint8_t *)w->data, w->row_bytes, (int32_t)w->ne1,
            (const typename Q::xb *)c->xq, w->ne0 / Q::QK, y, n_rows);
    else
        mul_mat_q_kernel<T><<<grid, block, 0, c->stream>>>(
            (const uint8_t *)w->data, w->row_bytes, (int32_t)w->ne1,
            (const typename Q::xb *)c->xq, w->ne0 / Q::QK, y, n_rows);
}

template <int T>
static void mul_mat_f(struct cuda_ctx *c, const struct backend_weight *w, const float *x, float *y,
                      int32_t n_rows, dim3 grid, dim3 block)
{
    mul_mat_f_kernel<T><<<grid, block, 0, c->stream>>>((const uint8_t *)w->data, w->row_bytes,
                                                        (int32_t)w->ne1, x, w->ne0, y, n_rows);
}

void cuda_op_mul_mat(struct backend *be, const struct backend_weight *w, const float *x, float *y,
                     int32_t n_rows)
{
    struct cuda_ctx *c = cuda_ctx_of(be);
    if (cuda_op_begin(c) || n_rows <= 0)
        return;
    const dim3 grid(cuda_blocks(w->ne1, MM_WARPS), cuda_blocks(n_rows, MM_COLS));
    const dim3 block(MM_WARPS * CUDA_WARP);
    switch (w->type) {
    case QT_F32: mul_mat_f<QT_F32>(c, w, x, y, n_rows, grid, block); break;
    case QT_F16: mul_mat_f<QT_F16>(c, w, x, y, n_rows, grid, block); break;
    case QT_BF16: mul_mat_f<QT_BF16>(c, w, x, y, n_rows, grid, block); break;
    case QT_Q4_0: mul_mat_q<QT_Q4_0>(c, w, x, y, n_rows, grid, block); break;
    case QT_Q8_0: mul_mat_q<QT_Q8_0>(c, w, x, y, n_rows, grid, block); break;
    case QT_Q4_K: mul_mat_q<QT_Q4_K>(c, w, x, y, n_rows, grid, block); break;
    case QT_Q5_K: mul_mat_q<QT_Q5_K>(c, w, x, y, n_rows, grid, block); break;
    case QT_Q6_K: mul_mat_q<QT_Q6_K>(c, w, x, y, n_rows, grid, block); break;
    default:
        c->err = INF_EUNSUPPORTED;
        return;
    }
    CUDA_CHECK_LAUNCH(c, "mul_mat kernel");
}
