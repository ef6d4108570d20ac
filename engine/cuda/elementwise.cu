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

/* g = silu(g) * u, rows of row_len (cuda_silu: the CPU's bits) */
static __global__ void silu_mul_kernel(float *g, const float *__restrict__ u, int64_t n,
                                       int64_t row_len, int32_t early)
{
    if (early) /* cuda_small_early */
        cuda_pdl_trigger();
    cuda_pdl_enter();
    const int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) {
        g[i] = __fmul_rn(cuda_silu(g[i], i % row_len, row_len), u[i]);
    }
}

void cuda_op_silu_mul(struct backend *be, float *gate, const float *up, int64_t n, int64_t row_len)
{
    struct cuda_ctx *c = cuda_ctx_of(be);
    if (cuda_op_begin(c) || n <= 0)
        return;
    /* the ffn-down product reads it next (engine/graph.c) */
    cuda_launch(c, silu_mul_kernel, cuda_blocks(n, 256), 256, 0, gate, up, n, row_len,
                (int32_t)cuda_small_early(c, (int32_t)(n / row_len)));
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
            kc[dst + i] = cuda_f2h(k[(int64_t)r * row_len + i]);
            vc[dst + i] = cuda_f2h(v[(int64_t)r * row_len + i]);
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
