/* cuda/rope — rotary position embedding in place, llama (adjacent pairs) or
 * neox (pairs i, i + n_dims/2) order, Llama 3.1 frequency factors.
 * theta_i = p * base^(-2i/n_dims) is built by i repeated float
 * multiplications, as the CPU backend (and ggml) build it, so the angles
 * round the same way on both; cos and sin are computed in double and rounded
 * to float, the correctly rounded values glibc's cosf/sinf give the CPU.
 * One thread per (row, head, pair). */
#include "engine/cuda/common.cuh"

/* cos and sin of pair i's angle at position p (the CPU's operations) */
static __device__ __forceinline__ void rope_cs(int32_t p, int32_t i, float theta_scale, float freq_scale,
                                               const float *__restrict__ ff, float *co, float *s)
{
    float theta = (float)p;
    for (int32_t k = 0; k < i; k++)
        theta *= theta_scale;
    const float a = __fmul_rn(freq_scale, __fdiv_rn(theta, ff ? ff[i] : 1.0f));
    double sd, cd;
    sincos((double)a, &sd, &cd);
    *s = (float)sd;
    *co = (float)cd;
}

/* pair i of the head at h rotated in place; its two indices in *i0, *i1 */
static __device__ __forceinline__ void rope_rot(float *h, int32_t i, int32_t half, int neox, float co, float s,
                                                int32_t *i0, int32_t *i1)
{
    *i0 = neox ? i : 2 * i;
    *i1 = neox ? i + half : 2 * i + 1;
    const float x0 = h[*i0], x1 = h[*i1];
    /* as the CPU's build: x0's product fused, x1's rounded */
    h[*i0] = __fmaf_rn(x0, co, -__fmul_rn(x1, s));
    h[*i1] = __fmaf_rn(x0, s, __fmul_rn(x1, co));
}

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
    float co, s;
    rope_cs(pos[rh / n_head], i, theta_scale, freq_scale, ff, &co, &s);
    int32_t i0, i1;
    rope_rot(x + rh * n_dims, i, half, neox, co, s, &i0, &i1);
}

/* rope of q and k, then k's and v's rows into the cache (F16): one thread
 * a (row, head, pair) of q's n_head and k's n_head_kv heads; a k thread
 * also converts its pair of the rotated k and of v, at the same indices
 * (cuda_f2h, kv_store_kernel's conversion) */
static __global__ void rope_kv_kernel(float *q, float *k, const float *__restrict__ v, quant_f16 *kc,
                                      quant_f16 *vc, const int32_t *__restrict__ slots, int32_t n_rows,
                                      int32_t n_head, int32_t n_head_kv, int32_t n_dims,
                                      const int32_t *__restrict__ pos, int neox, float theta_scale,
                                      float freq_scale, const float *__restrict__ ff, int32_t early)
{
    if (early) /* the attention launches at this kernel's start (cuda_small_early) */
        cuda_pdl_trigger();
    cuda_pdl_enter();
    const int32_t half = n_dims / 2, nh = n_head + n_head_kv;
    const int64_t t = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (t >= (int64_t)n_rows * nh * half)
        return;
    const int32_t i = (int32_t)(t % half);
    const int32_t r = (int32_t)(t / half / nh), hh = (int32_t)(t / half % nh);
    float co, s;
    rope_cs(pos[r], i, theta_scale, freq_scale, ff, &co, &s);
    int32_t i0, i1;
    if (hh < n_head) {
        rope_rot(q + ((int64_t)r * n_head + hh) * n_dims, i, half, neox, co, s, &i0, &i1);
        return;
    }
    const int32_t row_len = n_head_kv * n_dims, o = (hh - n_head) * n_dims;
    float *kh = k + (int64_t)r * row_len + o;
    rope_rot(kh, i, half, neox, co, s, &i0, &i1);
    const int64_t dst = (int64_t)slots[r] * row_len + o;
    const float *vh = v + (int64_t)r * row_len + o;
    kc[dst + i0] = cuda_f2h(kh[i0]);
    kc[dst + i1] = cuda_f2h(kh[i1]);
    vc[dst + i0] = cuda_f2h(vh[i0]);
    vc[dst + i1] = cuda_f2h(vh[i1]);
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

/* ops->rope_kv_store: rope(q), rope(k), kv_store in one launch, the same
 * bits (each element's operations are those of the three kernels). Two
 * kernels fewer a layer: at one row each is a launch and a completion in
 * the step's chain (bench/RESULTS.md 2026-12-04 20:30-, call 5). */
void cuda_op_rope_kv_store(struct backend *be, float *q, float *k, const float *v, int32_t n_rows,
                           int32_t n_head, int32_t n_head_kv, const int32_t *pos, const struct backend_rope *r,
                           struct backend_kv *kv, int32_t layer, const int32_t *slots)
{
    struct cuda_ctx *c = cuda_ctx_of(be);
    if (cuda_op_begin(c) || n_rows <= 0)
        return;
    if (r->n_dims <= 0 || r->n_dims % 2 || layer < 0 || layer >= kv->s.n_layer) {
        c->err = r->n_dims <= 0 || r->n_dims % 2 ? INF_EUNSUPPORTED : INF_EINTERNAL;
        return;
    }
    /* the three ops, as the graph would call them: where the cache's rows
     * are not k's heads, or INFERD_ROPE_KV=0 (A/B runs; the same bits) */
    if (kv->s.row_len != n_head_kv * r->n_dims || !c->rope_kv) {
        cuda_op_rope(be, q, n_rows, n_head, pos, r);
        cuda_op_rope(be, k, n_rows, n_head_kv, pos, r);
        cuda_op_kv_store(be, cuda_kv_plane(kv, layer, 0), cuda_kv_plane(kv, layer, 1), k, v, slots, n_rows,
                         kv->s.row_len);
        return;
    }
    const int64_t n = (int64_t)n_rows * (n_head + n_head_kv) * (r->n_dims / 2);
    const float theta_scale = powf(r->freq_base, -2.0f / (float)r->n_dims);
    const int32_t early = c->pdl_att == 2 && cuda_small_early(c, n_rows);
    cuda_launch(c, rope_kv_kernel, cuda_blocks(n, 256), 256, 0, q, k, v, cuda_kv_plane(kv, layer, 0),
                cuda_kv_plane(kv, layer, 1), slots, n_rows, n_head, n_head_kv, r->n_dims, pos, r->neox,
                theta_scale, r->freq_scale, r->freq_factors, early);
    CUDA_CHECK_LAUNCH(c, "rope_kv_kernel");
}
