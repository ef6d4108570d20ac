/* cuda/norm — RMSNorm: y[r] = x[r] / sqrt(mean(x[r]^2) + eps) * w, with the
 * CPU backend's (ggml's) rounding: squares in float, summed in double, the
 * mean rounded to float, 1/sqrtf (not rsqrtf), (x * scale) * w.
 * One warp per row for short rows (the per-head QK-norm of qwen3, head_dim
 * 64-128) and a 256-thread block for model-width rows; the reduction order
 * depends only on the row length, so results are batch invariant. */
#include "engine/cuda/common.cuh"

#define RMS_PT 16 /* elements per thread held in registers: rows to 4096 (256 threads) */

/* NT threads per row: CUDA_WARP (4 rows per 128-thread block) or 256 (one row) */
template <int NT>
static __global__ void __launch_bounds__(NT == CUDA_WARP ? 4 * CUDA_WARP : NT)
rms_norm_kernel(const float *x, const float *__restrict__ w, float *y, int32_t n, /* y may be x */
                float eps, int32_t n_rows, int32_t early)
{
    if (early) /* cuda_small_early */
        cuda_pdl_trigger();
    const int32_t r = NT == CUDA_WARP ? blockIdx.x * 4 + threadIdx.y : blockIdx.x;
    const float *xr = x + (int64_t)r * n;
    float *yr = y + (int64_t)r * n;
    double ss = 0.0;
    /* Rows up to NT * RMS_PT: the thread's elements (and weights) loaded
     * into registers first, all loads in flight at once (a loop of
     * dependent adds waited on each one: 9 µs for one 3584-wide row on the
     * H200), then the same adds in the same order. The weights are loaded
     * before the wait for the kernel that writes x (cuda/common.cuh). */
    float xv[RMS_PT], wv[RMS_PT];
    const bool regs = n <= NT * RMS_PT;
    if (regs) {
#pragma unroll
        for (int k = 0; k < RMS_PT; k++) {
            const int32_t i = threadIdx.x + k * NT;
            wv[k] = i < n && w ? w[i] : 1.0f;
        }
    }
    cuda_pdl_wait();
    if (r >= n_rows)
        return;
    if (regs) {
#pragma unroll
        for (int k = 0; k < RMS_PT; k++) {
            const int32_t i = threadIdx.x + k * NT;
            xv[k] = i < n ? xr[i] : 0.0f;
        }
#pragma unroll
        for (int k = 0; k < RMS_PT; k++)
            if (threadIdx.x + k * NT < n)
                ss += (double)__fmul_rn(xv[k], xv[k]);
    } else {
        for (int32_t i = threadIdx.x; i < n; i += NT)
            ss += (double)__fmul_rn(xr[i], xr[i]);
    }
#pragma unroll
    for (int o = 16; o > 0; o >>= 1)
        ss += __shfl_xor_sync(0xffffffffu, ss, o);
    if (NT > CUDA_WARP) {
        __shared__ double part[NT / CUDA_WARP];
        const int wid = threadIdx.x / CUDA_WARP, lane = threadIdx.x % CUDA_WARP;
        if (lane == 0)
            part[wid] = ss;
        __syncthreads();
        ss = lane < NT / CUDA_WARP ? part[lane] : 0.0;
#pragma unroll
        for (int o = 16; o > 0; o >>= 1)
            ss += __shfl_xor_sync(0xffffffffu, ss, o);
    }
    const float mean = (float)(ss / n);
    const float scale = __fdiv_rn(1.0f, __fsqrt_rn(__fadd_rn(mean, eps)));
    if (regs) {
#pragma unroll
        for (int k = 0; k < RMS_PT; k++) {
            const int32_t i = threadIdx.x + k * NT;
            if (i < n) {
                const float v = __fmul_rn(xv[k], scale);
                yr[i] = w ? __fmul_rn(v, wv[k]) : v;
            }
        }
        return;
    }
    for (int32_t i = threadIdx.x; i < n; i += NT) {
        const float v = __fmul_rn(xr[i], scale);
        yr[i] = w ? __fmul_rn(v, w[i]) : v;
    }
}

void cuda_op_rms_norm(struct backend *be, const float *x, const struct backend_weight *w,
                      float *y, int32_t n_rows, int32_t n, float eps)
{
    struct cuda_ctx *c = cuda_ctx_of(be);
    if (cuda_op_begin(c) || n_rows <= 0)
        return;
    const float *wd = w ? (const float *)w->data : NULL;
    if (n <= 256) {
        cuda_launch(c, rms_norm_kernel<CUDA_WARP>, cuda_blocks(n_rows, 4), dim3(CUDA_WARP, 4), 0, x, wd, y, n,
                    eps, n_rows, 0);
    } else {
        /* a model-width norm: a product reads it next (engine/graph.c) */
        cuda_launch(c, rms_norm_kernel<256>, n_rows, 256, 0, x, wd, y, n, eps, n_rows,
                    (int32_t)cuda_small_early(c, n_rows));
    }
    CUDA_CHECK_LAUNCH(c, "rms_norm_kernel");
}
