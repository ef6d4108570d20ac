/* cuda/quantize — activations to the CPU backend's vec_dot types, byte for
 * byte what engine/quant.c's reference quantizers write, so the GPU's
 * integer sums equal the CPU's (cuda/qtypes.cuh):
 *  - Q8_K (K-quant weights): per 256, the first element of largest
 *    magnitude maps to -127, q = nearest(iscale * x) capped at 127, float
 *    d = 1/iscale, and the sums of each 32 (the CPU keeps each 16's; the
 *    products only ever add them in pairs);
 *  - Q8_0 (Q4_0/Q8_0 weights): per 32, d = amax/127 (stored F16), q =
 *    nearest(x * (127/amax)).
 * nearest() is round-half-even (rintf), and every product is rounded on
 * its own (__fmul_rn: no contraction the CPU does not do). */
#include "engine/cuda/qtypes.cuh"

/* One warp per 256-element block, 8 elements per lane; the block's bytes go
 * to the three planes of struct cuda_q8k (cuda/qtypes.cuh), and where frag
 * (batches of up to 8 rows of nbr blocks) to the B-fragment plane too: the
 * lane's two words, bytes 8 l and 8 l + 4 of row r's super-block sb, are
 * words (8 l / 16) % 4 of lanes 4 r + 2 (l % 2) and + 1 of quarter 8 l / 64
 * (cuda_q8k_frag). */
static __device__ __forceinline__ void quantize_frag(uint32_t *frag, int64_t ib, int64_t nbr, int lane, uint32_t w0,
                                                     uint32_t w1)
{
    if (!frag)
        return;
    const int64_t r = ib / nbr, sb = ib % nbr;
    uint32_t *f = frag + (((sb * 4 + (lane >> 3)) * CUDA_WARP + r * 4 + 2 * (lane & 1)) * 4 + ((lane >> 1) & 3));
    f[0] = w0;
    f[4] = w1;
}

/* x16 (mmqr's activations, cuda/mmqh_impl.cuh): the lane's 8 values as
 * f16 (exact: integers below 128) at their positions in mmqr's k order
 * (cuda_x16p_pos): four pairs of neighbours, a 4-byte store each */
static __device__ __forceinline__ void quantize_x16p(__half *x16, int64_t ib, int lane, uint32_t w0, uint32_t w1)
{
    if (!x16)
        return;
#pragma unroll
    for (int p = 0; p < 4; p++) {
        const uint32_t w = p < 2 ? w0 : w1;
        const int q0 = (int)(int8_t)(w >> (16 * (p & 1))), q1 = (int)(int8_t)(w >> (16 * (p & 1) + 8));
        *(__half2 *)(x16 + ib * QK_K + cuda_x16p_pos(lane, p)) = __halves2half2(__int2half_rn(q0), __int2half_rn(q1));
    }
}

static __global__ void quantize_q8_K_kernel(const float *__restrict__ x, cuda_q8k y, int64_t n_blocks, uint32_t *frag,
                                            int64_t nbr, int early, __half *x16)
{
    if (early)
        cuda_pdl_trigger();
    cuda_pdl_enter();
    const int64_t ib = (int64_t)blockIdx.x * (blockDim.x / CUDA_WARP) + threadIdx.x / CUDA_WARP;
    const int lane = threadIdx.x % CUDA_WARP;
    if (ib >= n_blocks)
        return;
    uint32_t packed[2];
    int sum;
    float d;
    cuda_q8k_warp(x + ib * QK_K, lane, packed, &sum, &d);
    cuda_q8k_put(y.qs ? y.qs + ib * QK_K : nullptr, y.hl + ib * CUDA_Q8K_HL, y.d + ib, lane, packed, sum, d);
    quantize_frag(frag, ib, nbr, lane, packed[0], packed[1]);
    quantize_x16p(x16, ib, lane, packed[0], packed[1]);
}

/* One warp per 32-element block, into the planes of struct cuda_q80
 * (cuda/qtypes.cuh): d is the F16 scale the CPU stores, held as float. */
static __global__ void quantize_q8_0_kernel(const float *__restrict__ x, cuda_q80 y, int64_t n_blocks)
{
    cuda_pdl_enter();
    const int64_t ib = (int64_t)blockIdx.x * (blockDim.x / CUDA_WARP) + threadIdx.x / CUDA_WARP;
    const int lane = threadIdx.x % CUDA_WARP;
    if (ib >= n_blocks)
        return;
    const float v = x[ib * QK8_0 + lane];
    const float amax = cuda_warp_max(fabsf(v));
    const float d = amax / 127.0f;
    const float id = amax != 0.0f ? 127.0f / amax : 0.0f;
    y.qs[ib * QK8_0 + lane] = (int8_t)(int)rintf(__fmul_rn(v, id));
    if (lane == 0)
        y.d[ib] = __half2float(__float2half_rn(d));
}

static void quantize_q8k(struct cuda_ctx *c, const float *x, void *dst, int32_t n_rows, int64_t n, int early,
                         __half *x16, bool no_qs = false)
{
    const int per = 8; /* warps per thread block */
    const int64_t nb = (int64_t)n_rows * (n / QK_K);
    cuda_q8k planes = cuda_q8k_planes(dst, nb);
    if (no_qs)
        planes.qs = nullptr;
    cuda_launch(c, quantize_q8_K_kernel, cuda_blocks(nb, per), per * CUDA_WARP, 0, x, planes, nb,
                (uint32_t *)cuda_q8k_frag(dst, n_rows, n / QK_K), (int64_t)(n / QK_K), early, x16);
}

void cuda_quantize_x16p(struct cuda_ctx *c, const float *x, void *dst, int32_t n_rows, int64_t n, void *x16,
                        int no_qs)
{
    quantize_q8k(c, x, dst, n_rows, n, 0, (__half *)x16, no_qs != 0);
    CUDA_CHECK_LAUNCH(c, "quantize kernel");
    c->x16p_ready = 1;
    c->xq_no_qs = no_qs != 0;
}

void cuda_quantize_act(struct cuda_ctx *c, int vec_dot_type, const float *x, void *dst,
                       int32_t n_rows, int64_t n, int before_mmvt)
{
    const int early = before_mmvt && c->pdl_early;
    const int per = 8; /* warps per thread block */
    c->x16p_ready = 0;
    c->xq_no_qs = 0;
    if (vec_dot_type == QT_Q8_K) {
        quantize_q8k(c, x, dst, n_rows, n, early, NULL);
    } else {
        const int64_t nb = (int64_t)n_rows * (n / QK8_0);
        cuda_launch(c, quantize_q8_0_kernel, cuda_blocks(nb, per), per * CUDA_WARP, 0, x,
                    cuda_q80_planes(dst, nb), nb);
    }
    CUDA_CHECK_LAUNCH(c, "quantize kernel");
}
