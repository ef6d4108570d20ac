/* cuda/elementwise — the small ops of a layer: residual add, bias add,
 * SwiGLU, row gather, K/V store into the paged cache (F32 -> F16; the
 * table's entry takes the layer's planes from the cache handle). */
#include "engine/cuda/common.cuh"

static __global__ void add_kernel(float *y, const float *__restrict__ x, int64_t n)
{
    cuda_pdl_enter();
    const int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n)
        y[i] += x[i];
}

void cuda_op_add(struct backend *be, float *y, const float *x, int64_t n)
{
    struct cuda_ctx *c = cuda_ctx_of(be);
    if (cuda_op_begin(c) || n <= 0)
        return;
    cuda_launch(c, add_kernel, cuda_blocks(n, 256), 256, 0, y, x, n);
    CUDA_CHECK_LAUNCH(c, "add_kernel");
}

static __global__ void add_bias_kernel(float *y, const float *__restrict__ b, int32_t n,
                                       int64_t total)
{
    cuda_pdl_enter();
    const int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < total)
        y[i] += b[i % n];
}

void cuda_op_add_bias(struct backend *be, float *y, const struct backend_weight *b, int32_t n_rows)
{
    struct cuda_ctx *c = cuda_ctx_of(be);
    if (cuda_op_begin(c) || n_rows <= 0)
        return;
    const int64_t total = (int64_t)n_rows * b->ne0;
    cuda_launch(c, add_bias_kernel, cuda_blocks(total, 256), 256, 0, y, (const float *)b->data,
                (int32_t)b->ne0, total);
    CUDA_CHECK_LAUNCH(c, "add_bias_kernel");
}

/* exp(x) as the CPU backend's SwiGLU computes it (engine/cpu_avx2.h
 * cpu_poly_expf: ggml's vector expf, the same operations, each rounded as
 * there), so SiLU gives the CPU's bits. */
static __device__ float silu_poly_expf(float x)
{
    const float shift = 0x1.8p23f;
    const float z = __fmaf_rn(x, 0x1.715476p+0f, shift);
    const float n = __fsub_rn(z, shift);
    const float b = __fmaf_rn(-n, 0x1.7f7d1cp-20f, __fmaf_rn(-n, 0x1.62e4p-1f, x));
    const uint32_t e = __float_as_uint(z) << 23;
    const float k = __uint_as_float(e + 0x3f800000u); /* 2^n for |n| <= 126 */
    const float u = __fmul_rn(b, b);
    const float j = __fmaf_rn(__fmaf_rn(__fmaf_rn(0x1.0e4020p-7f, b, 0x1.573e2ep-5f), u,
                                        __fmaf_rn(0x1.555e66p-3f, b, 0x1.fffdb6p-2f)),
                              u, __fmul_rn(0x1.ffffecp-1f, b));
    if (!(fabsf(n) > 126.0f))
        return __fmaf_rn(j, k, k);
    /* 2^n would leave the exponent range: scale in two steps */
    const uint32_t g = n <= 0.0f ? 0x82000000u : 0u;
    const float s1 = __uint_as_float(g + 0x7f000000u), s2 = __uint_as_float(e - g);
    if (fabsf(n) > 192.0f)
        return __fmul_rn(s1, s1);
    return __fmul_rn(__fmaf_rn(s2, j, s2), s1);
}

/* The CPU runs each full group of 8 of a row through the polynomial and the
 * row's last row_len % 8 elements through libm's expf (correctly rounded:
 * here exp in double, rounded to float). */
static __global__ void silu_mul_kernel(float *g, const float *__restrict__ u, int64_t n,
                                       int64_t row_len)
{
    cuda_pdl_enter();
    const int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) {
        const float v = g[i];
        const int64_t col = i % row_len;
        const float e = col < row_len - row_len % 8 ? silu_poly_expf(__fsub_rn(0.0f, v))
                                                    : (float)exp(-(double)v);
        g[i] = __fmul_rn(__fdiv_rn(v, __fadd_rn(1.0f, e)), u[i]);
    }
}

void cuda_op_silu_mul(struct backend *be, float *gate, const float *up, int64_t n, int64_t row_len)
{
    struct cuda_ctx *c = cuda_ctx_of(be);
    if (cuda_op_begin(c) || n <= 0)
        return;
    cuda_launch(c, silu_mul_kernel, cuda_blocks(n, 256), 256, 0, gate, up, n, row_len);
    CUDA_CHECK_LAUNCH(c, "silu_mul_kernel");
}

static __global__ void gather_kernel(const float *__restrict__ x, const int32_t *__restrict__ rows,
                                     int32_t n, int32_t row_len, float *__restrict__ y)
{
    cuda_pdl_enter();
    for (int32_t r = blockIdx.y; r < n; r += gridDim.y) {
        const float *src = x + (int64_t)rows[r] * row_len;
        for (int32_t i = blockIdx.x * blockDim.x + threadIdx.x; i < row_len;
             i += gridDim.x * blockDim.x)
            y[(int64_t)r * row_len + i] = src[i];
    }
}

void cuda_op_gather(struct backend *be, const float *x, const int32_t *rows, int32_t n,
                    int32_t row_len, float *y)
{
    struct cuda_ctx *c = cuda_ctx_of(be);
    if (cuda_op_begin(c) || n <= 0)
        return;
    const dim3 grid(cuda_blocks(row_len, 256) < 16 ? cuda_blocks(row_len, 256) : 16,
                    n < 65535 ? n : 65535);
    cuda_launch(c, gather_kernel, grid, 256, 0, x, rows, n, row_len, y);
    CUDA_CHECK_LAUNCH(c, "gather_kernel");
}

static __global__ void kv_store_kernel(quant_f16 *kc, quant_f16 *vc, const float *__restrict__ k,
                                       const float *__restrict__ v, const int32_t *__restrict__ slots,
                                       int32_t n_rows, int32_t row_len)
{
    cuda_pdl_enter();
    for (int32_t r = blockIdx.y; r < n_rows; r += gridDim.y) {
        const int64_t dst = (int64_t)slots[r] * row_len;
        for (int32_t i = blockIdx.x * blockDim.x + threadIdx.x; i < row_len;
             i += gridDim.x * blockDim.x) {
            kc[dst + i] = __half_as_ushort(__float2half_rn(k[(int64_t)r * row_len + i]));
            vc[dst + i] = __half_as_ushort(__float2half_rn(v[(int64_t)r * row_len + i]));
        }
    }
}

void cuda_op_kv_store(struct backend *be, void *k_cache, void *v_cache, const float *k,
                      const float *v, const int32_t *slots, int32_t n_rows, int32_t row_len)
{
    struct cuda_ctx *c = cuda_ctx_of(be);
    if (cuda_op_begin(c) || n_rows <= 0)
        return;
    const dim3 grid(cuda_blocks(row_len, 256) < 16 ? cuda_blocks(row_len, 256) : 16,
                    n_rows < 65535 ? n_rows : 65535);
    cuda_launch(c, kv_store_kernel, grid, 256, 0, (quant_f16 *)k_cache, (quant_f16 *)v_cache, k, v,
                slots, n_rows, row_len);
    CUDA_CHECK_LAUNCH(c, "kv_store_kernel");
}

void cuda_op_kv_store_layer(struct backend *be, struct backend_kv *kv, int32_t layer,
                            const float *k, const float *v, const int32_t *slots, int32_t n_rows)
{
    struct cuda_ctx *c = cuda_ctx_of(be);
    if (c->err)
        return;
    if (layer < 0 || layer >= kv->s.n_layer) {
        c->err = INF_EINTERNAL;
        return;
    }
    cuda_op_kv_store(be, cuda_kv_plane(kv, layer, 0), cuda_kv_plane(kv, layer, 1), k, v, slots,
                     n_rows, kv->s.row_len);
}
