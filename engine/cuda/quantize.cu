/* cuda/quantize — activations to q8_1 (ggml's block: d = amax/127,
 * q = round(x/d), s = d * sum(q)), one warp per 32-element block.
 * The rounding is round-half-even (rintf) as the CPU's quantizers round. */
#include "engine/cuda/common.cuh"

static __global__ void quantize_q8_1_kernel(const float *__restrict__ x,
                                            struct block_q8_1 *__restrict__ y, int64_t n_blocks)
{
    const int64_t ib = (int64_t)blockIdx.x * (blockDim.x / CUDA_WARP) + threadIdx.x / CUDA_WARP;
    const int lane = threadIdx.x % CUDA_WARP;
    if (ib >= n_blocks)
        return;
    const float v = x[ib * QK8_1 + lane];
    const float amax = cuda_warp_max(fabsf(v));
    const float d = amax / 127.0f;
    const int q = amax == 0.0f ? 0 : (int)rintf(v / d);
    int sum = q;
#pragma unroll
    for (int o = 16; o > 0; o >>= 1)
        sum += __shfl_xor_sync(0xffffffffu, sum, o);
    y[ib].qs[lane] = (int8_t)q;
    if (lane == 0) {
        y[ib].d = __half_as_ushort(__float2half_rn(d));
        y[ib].s = __half_as_ushort(__float2half_rn(d * (float)sum));
    }
}

void cuda_quantize_q8_1(struct cuda_ctx *c, const float *x, struct block_q8_1 *dst,
                        int32_t n_rows, int64_t n)
{
    const int64_t n_blocks = (int64_t)n_rows * (n / QK8_1);
    const int per = 8; /* warps per thread block */
    quantize_q8_1_kernel<<<cuda_blocks(n_blocks, per), per * CUDA_WARP, 0, c->stream>>>(x, dst,
                                                                                        n_blocks);
    CUDA_CHECK_LAUNCH(c, "quantize_q8_1_kernel");
}
