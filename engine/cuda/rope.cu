/* cuda/rope — rotary position embedding in place, llama (adjacent pairs) or
 * neox (pairs i, i + n_dims/2) order, Llama 3.1 frequency factors.
 * theta_i = p * base^(-2i/n_dims) is built by i repeated float
 * multiplications, as the CPU backend (and ggml) build it, so the angles
 * round the same way on both; cos and sin are computed in double and rounded
 * to float, the correctly rounded values glibc's cosf/sinf give the CPU.
 * One thread per (row, head, pair). */
#include "engine/cuda/common.cuh"

static __global__ void rope_kernel(float *x, int32_t n_rows, int32_t n_head, int32_t n_dims,
                                   const int32_t *__restrict__ pos, int neox, float theta_scale,
                                   float freq_scale, const float *__restrict__ ff)
{
    cuda_pdl_enter();
    const int32_t half = n_dims / 2;
    const int64_t t = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (t >= (int64_t)n_rows * n_head * half)
        return;
    const int32_t i = (int32_t)(t % half);
    const int64_t rh = t / half; /* row * n_head + head */
    const int32_t r = (int32_t)(rh / n_head);
    float theta = (float)pos[r];
    for (int32_t k = 0; k < i; k++)
        theta *= theta_scale;
    const float a = __fmul_rn(freq_scale, __fdiv_rn(theta, ff ? ff[i] : 1.0f));
    double sd, cd;
    sincos((double)a, &sd, &cd);
    const float s = (float)sd, co = (float)cd;
    float *h = x + rh * n_dims;
    const int32_t i0 = neox ? i : 2 * i, i1 = neox ? i + half : 2 * i + 1;
    const float x0 = h[i0], x1 = h[i1];
    /* as the CPU's build: x0's product fused, x1's rounded */
    h[i0] = __fmaf_rn(x0, co, -__fmul_rn(x1, s));
    h[i1] = __fmaf_rn(x0, s, __fmul_rn(x1, co));
}

void cuda_op_rope(struct backend *be, float *x, int32_t n_rows, int32_t n_head, const int32_t *pos,
                  const struct backend_rope *r)
{
    struct cuda_ctx *c = cuda_ctx_of(be);
    if (cuda_op_begin(c) || n_rows <= 0)
        return;
    if (r->n_dims <= 0 || r->n_dims % 2) {
        c->err = INF_EUNSUPPORTED;
        return;
    }
    const int64_t n = (int64_t)n_rows * n_head * (r->n_dims / 2);
    const float theta_scale = powf(r->freq_base, -2.0f / (float)r->n_dims);
    cuda_launch(c, rope_kernel, cuda_blocks(n, 256), 256, 0, x, n_rows, n_head, r->n_dims, pos, r->neox,
                theta_scale, r->freq_scale, r->freq_factors);
    CUDA_CHECK_LAUNCH(c, "rope_kernel");
}
