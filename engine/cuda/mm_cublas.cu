/* cuda/mm_cublas — y[r][j] = dot(row j of W, x[r]) for F32/F16/BF16 weights
 * through cuBLASLt (cublasLtMatmul), the fast path of cuda/mul_mat.cu for the
 * float weight types; mul_mat_f_kernel stays the fallback.
 *
 * The product, column-major as cuBLAS sees it: W as stored ([ne1 rows][ne0])
 * is the ne0 x ne1 matrix A (lda = ne0), used transposed; x ([n][ne0] f32) is
 * the ne0 x n matrix B; D = op(A) B is ne1 x n with ldd = ne1, i.e. y as
 * [n][ne1] row-major. B is x rounded to the weight's type first (F16:
 * __float2half_rn, BF16: __float2bfloat16_rn: the CPU's vec-dot rounding,
 * mm_act in mul_mat.cu) into the activation scratch c->xq; products of two
 * 16-bit floats are exact in f32, the accumulation is f32
 * (CUBLAS_COMPUTE_32F; F32 weights: FMA kernels only, never TF32 or an
 * emulated path, checked on the chosen algorithm).
 *
 * Epilogue (struct cuda_epi): beta = 0 always; the bias add or the residual
 * accumulate is a separate elementwise kernel doing exactly what add_bias /
 * add do (cuda_epi_store). cuBLAS documents D = alpha AB + beta C but not
 * how the two terms meet (fused, or after a split-K reduction), so beta = 1
 * is not relied on to round as y + acc does.
 *
 * Batch invariance (DESIGN gate 4). cuBLAS's own heuristic picks different
 * kernels, tile shapes and split-K factors for different n, and those sum
 * a row's K products in different orders. Here, by default, ONE algorithm
 * is chosen per (weight type, ne0, ne1) when the first weight of that shape
 * is registered (model load: never inside a CUDA graph recording), with
 * split-K forbidden (CUBLASLT_ALGO_CONFIG_SPLITK_NUM = 1, reduction scheme
 * NONE), and used for every n. In a fixed kernel without split-K each
 * output element is one CTA's K loop over the same tiles in the same order;
 * n only changes how many column tiles there are, never what a column's
 * loop does, so a row's bits do not depend on n_rows or on its neighbours.
 * The reference n of that choice is a constant (MMC_REF_N), not the
 * reserved max rows, so the bits do not depend on step_tokens either.
 * tests/cuda/test_cuda_ops.c (mm-invar, cublas-invar) proves it on the GPU.
 * With batch_invariant = false (cuda_backend_set_batch_invariant) the
 * algorithm is cuBLAS's heuristic pick per power-of-two bucket of n
 * (split-K allowed), all chosen at registration as well.
 *
 * Alignment: the algorithms are chosen for the alignment the shape itself
 * guarantees (A: cudaMalloc'd weights, lda = ne0; B: the scratch, or x when
 * aligned as well; D: ldd = ne1), so one algorithm fits every call; a y
 * that is not aligned like that, and every accumulate, goes through the
 * output scratch and the epilogue kernel (same kernel, same bits).
 *
 * Linking: libcublasLt is dlopen'ed ("libcublasLt.so.13", ".so.12", ".so",
 * then /usr/local/cuda/lib64's) at the first float weight, never linked: the device machine has it but
 * our binaries travel without their big libraries, and a package should not
 * depend on 600 MB of cuBLAS for F16 models. Without it (or with
 * INFERD_NO_CUBLAS=1) one line is logged and the float kernel serves.
 *
 * Threads: the library is loaded once per process (pthread_once); the rest
 * belongs to the backend's engine thread like every op.
 *
 * Files: this one holds a backend's cuBLASLt state, the registration of
 * shapes and the product; cuda/mm_cublas_algo.cu the library's loading and
 * each shape's algorithm choice; cuda/mm_cublas_impl.cuh what they share.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/cuda/mm_cublas_impl.cuh"

extern "C" {
#include "engine/log.h"
#include "engine/quant.h"
}

static int mmc_eligible(const struct backend_weight *w)
{
    /* ne1 = 1: norms and biases, never multiplied (and a quantized model
     * with F32 norms must not load cuBLAS) */
    return (w->type == QT_F32 || w->type == QT_F16 || w->type == QT_BF16) && w->ne1 > 1 &&
           w->ne0 > 0;
}

/* The library and this backend's handle, workspace and scratch; NULL when
 * cuBLASLt is not there (the float kernel serves). Startup only: it
 * allocates. */
static struct cuda_mmc *mmc_get(struct cuda_ctx *c)
{
    if (c->mmc || c->mmc_off)
        return c->mmc;
    pthread_once(&mmc_once, mmc_load);
    c->mmc_off = 1;
    if (!mmc_lib_ok)
        return NULL;
    struct cuda_mmc *m = (struct cuda_mmc *)calloc(1, sizeof(*m));
    if (!m) {
        log_warn("cuda: out of host memory for the cuBLASLt state: the float kernel serves");
        return NULL;
    }
    cublasStatus_t st = mmc_L.create(&m->h);
    if (st != CUBLAS_STATUS_SUCCESS) {
        log_warn("cuda: cublasLtCreate failed (%s): the float kernel serves", mmc_L.status_string(st));
        free(m);
        return NULL;
    }
    const int32_t ta = CUBLAS_OP_T, tb = CUBLAS_OP_N;
    st = mmc_L.desc_init(&m->desc, sizeof(m->desc), CUBLAS_COMPUTE_32F, CUDA_R_32F);
    if (st == CUBLAS_STATUS_SUCCESS)
        st = mmc_L.desc_set(&m->desc, CUBLASLT_MATMUL_DESC_TRANSA, &ta, sizeof(ta));
    if (st == CUBLAS_STATUS_SUCCESS)
        st = mmc_L.desc_set(&m->desc, CUBLASLT_MATMUL_DESC_TRANSB, &tb, sizeof(tb));
    const cudaError_t e = st == CUBLAS_STATUS_SUCCESS ? cuda_malloc(c, &m->ws, MMC_WS_BYTES) : cudaSuccess;
    if (st != CUBLAS_STATUS_SUCCESS || e != cudaSuccess) {
        cudaGetLastError();
        log_warn("cuda: cuBLASLt setup failed (%s): the float kernel serves",
                 st != CUBLAS_STATUS_SUCCESS ? mmc_L.status_string(st) : cudaGetErrorString(e));
        mmc_L.destroy(m->h);
        free(m);
        return NULL;
    }
    c->mmc = m;
    c->mmc_off = 0;
    return m;
}

static struct mmc_shape *mmc_find(struct cuda_mmc *m, int type, int64_t ne0, int64_t ne1)
{
    for (int i = 0; i < MMC_SHAPES; i++) {
        struct mmc_shape *s = &m->shapes[i];
        if (s->refs && s->type == type && s->ne0 == ne0 && s->ne1 == ne1)
            return s;
    }
    return NULL;
}

/* ---- scratch ---------------------------------------------------------------- */

size_t cuda_mmc_act_bytes(const struct cuda_ctx *c)
{
    /* the activation as F16/BF16, or an unaligned F32 one copied */
    return c->mmc ? (size_t)c->res_rows * (size_t)c->res_ne0 * sizeof(float) : 0;
}

int cuda_mmc_reserve(struct cuda_ctx *c)
{
    struct cuda_mmc *m = c->mmc;
    if (!m)
        return 0;
    /* accumulating products (ne1 = n_embd <= max_ne0) in one pass; wider
     * ones through it in chunks of rows */
    size_t need = (size_t)c->res_rows * (size_t)c->res_ne0;
    if ((size_t)m->max_ne1 > need)
        need = (size_t)m->max_ne1;
    return cuda_scratch_grow(c, (void **)&m->yd, &m->yd_bytes, need * sizeof(float));
}

void cuda_mmc_free(struct cuda_ctx *c)
{
    struct cuda_mmc *m = c->mmc;
    if (!m)
        return;
    cudaFree(m->yd);
    cudaFree(m->ws);
    mmc_L.destroy(m->h);
    free(m);
    c->mmc = NULL;
}

/* ---- registration ------------------------------------------------------------ */

/* Shape (type, ne0, ne1) with its algorithms, found or chosen now, one
 * more reference taken; NULL when the slots are full or cuBLAS has nothing
 * for it (name: the weight, for the log). */
static struct mmc_shape *mmc_shape_ref(struct cuda_ctx *c, struct cuda_mmc *m, int type, int64_t ne0, int64_t ne1,
                                       const char *name)
{
    struct mmc_shape *s = mmc_find(m, type, ne0, ne1);
    if (!s) {
        for (int i = 0; i < MMC_SHAPES && !s; i++)
            if (!m->shapes[i].refs)
                s = &m->shapes[i];
        if (!s) {
            if (!m->full_logged++)
                log_warn("cuda: more than %d cuBLASLt weight shapes: '%s' and later new shapes "
                         "take the int8 or float kernels",
                         MMC_SHAPES, name);
            return NULL;
        }
        memset(s, 0, sizeof(*s));
        s->type = type;
        s->ne0 = ne0;
        s->ne1 = ne1;
        if (mmc_shape_init(c, m, s)) {
            log_warn("cuda: no cuBLASLt algorithm for %s %lldx%lld ('%s'): the int8 or float kernels serve it",
                     quant_type_name(type), (long long)ne0, (long long)ne1, name);
            s->refs = 0;
            return NULL;
        }
    }
    s->refs++;
    if (ne1 > m->max_ne1)
        m->max_ne1 = ne1;
    return s;
}

int cuda_mmc_weight_add(struct cuda_ctx *c, const struct backend_weight *w)
{
    if (!mmc_eligible(w))
        return 0;
    struct cuda_mmc *m = mmc_get(c);
    if (!m)
        return 0;
    struct mmc_shape *s = mmc_shape_ref(c, m, w->type, w->ne0, w->ne1, w->name);
    if (!s)
        return 0;
    s->wptr = w->data;
    /* the scratch reserve sized, now with this path's needs (a weight may
     * come after reserve: tests, bench) */
    const int rc = cuda_scratch_update(c);
    if (rc)
        cuda_mmc_weight_drop(c, w); /* the caller frees w->data */
    return rc;
}

int cuda_mmc_f16_add(struct cuda_ctx *c, int64_t ne0, int64_t ne1, const char *name)
{
    struct cuda_mmc *m = mmc_get(c);
    if (!m || !mmc_shape_ref(c, m, QT_F16, ne0, ne1, name))
        return 1;
    return 0;
}

void cuda_mmc_f16_drop(struct cuda_ctx *c, int64_t ne0, int64_t ne1)
{
    struct mmc_shape *s = c->mmc ? mmc_find(c->mmc, QT_F16, ne0, ne1) : NULL;
    if (s)
        s->refs--;
}

void cuda_mmc_weight_drop(struct cuda_ctx *c, const struct backend_weight *w)
{
    if (!c->mmc || !mmc_eligible(w))
        return;
    struct mmc_shape *s = mmc_find(c->mmc, w->type, w->ne0, w->ne1);
    if (!s)
        return;
    if (s->wptr == w->data)
        s->wptr = NULL;
    s->refs--;
}

int cuda_mmc_set_batch_invariant(struct cuda_ctx *c, int on)
{
    if (c->mmc)
        for (int i = 0; i < MMC_SHAPES; i++)
            if (c->mmc->shapes[i].refs)
                return INF_EINVAL; /* algorithms already chosen */
    c->batch_variant = !on;
    return 0;
}

/* ---- the product ----------------------------------------------------------------- */

/* x (f32) rounded to the weight's 16-bit type as the CPU rounds it. */
template <int T>
static __global__ void mmc_convert_kernel(const float *__restrict__ x, void *__restrict__ dst, int64_t n)
{
    cuda_pdl_enter();
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n;
         i += (int64_t)gridDim.x * blockDim.x) {
        if (T == QT_F16)
            ((__half *)dst)[i] = __float2half_rn(x[i]);
        else
            ((__nv_bfloat16 *)dst)[i] = __float2bfloat16_rn(x[i]);
    }
}

/* The same conversion eight elements a thread (the default where n % 8 ==
 * 0 and x and dst are 16-byte aligned; INFERD_MMC_CVT8=0 the scalar form,
 * A/B): two 16-byte loads, one 16-byte store. Why: ncu put the scalar
 * kernel at 16 us for 512 x 14336 (12 MB moved: 0.75 TB/s), a 4-byte load
 * and a 2-byte store an element; measured 2026-12-05 (H200) the F16 path's
 * q4_K 4096 x 14336 product 157.2 -> 148.8 us at n = 512 (0.95x). Each
 * element is rounded as above (__floats2half2_rn / __floats2bfloat162_rn
 * round each half). */
template <int T>
static __global__ void mmc_convert8_kernel(const float4 *__restrict__ x, uint4 *__restrict__ dst, int64_t n8)
{
    cuda_pdl_enter();
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n8;
         i += (int64_t)gridDim.x * blockDim.x) {
        const float4 a = x[2 * i], b = x[2 * i + 1];
        uint32_t o[4];
        if (T == QT_F16) {
            const __half2 p[4] = {__floats2half2_rn(a.x, a.y), __floats2half2_rn(a.z, a.w),
                                  __floats2half2_rn(b.x, b.y), __floats2half2_rn(b.z, b.w)};
            memcpy(o, p, sizeof(o));
        } else {
            const __nv_bfloat162 p[4] = {__floats2bfloat162_rn(a.x, a.y), __floats2bfloat162_rn(a.z, a.w),
                                         __floats2bfloat162_rn(b.x, b.y), __floats2bfloat162_rn(b.z, b.w)};
            memcpy(o, p, sizeof(o));
        }
        dst[i] = make_uint4(o[0], o[1], o[2], o[3]);
    }
}

/* y[i] = acc[i], then the bias or the accumulate of struct cuda_epi: the
 * bits of add_bias / add after a plain product. acc may be y (bias only). */
static __global__ void mmc_epi_kernel(const float *acc, float *y, int64_t n, int32_t ne1, struct cuda_epi E)
{
    cuda_pdl_enter();
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n;
         i += (int64_t)gridDim.x * blockDim.x)
        cuda_epi_store(y, (int32_t)(i / ne1), (int32_t)(i % ne1), ne1, acc[i], E); /* never segmented: mm_adjacent */
}

static int mmc_bucket(int64_t n)
{
    int b = 0;
    while (b < MMC_BUCKETS - 1 && ((int64_t)1 << b) < n)
        b++;
    return b;
}

static void mmc_matmul(struct cuda_ctx *c, struct cuda_mmc *m, const struct mmc_shape *s,
                       const cublasLtMatmulAlgo_t *fixed, const void *a, const void *b, float *d, int64_t n)
{
    cublasLtMatrixLayoutOpaque_t bl, dl;
    cublasStatus_t st;
    mmc_layouts(s, n, &bl, &dl, &st);
    if (CUBLAS_CHECK_CTX(c, st))
        return;
    const cublasLtMatmulAlgo_t *algo = fixed ? fixed : c->batch_variant ? &s->bucket[mmc_bucket(n)] : &s->inv;
    const float one = 1.0f, zero = 0.0f;
    CUBLAS_CHECK_CTX(c, mmc_L.matmul(m->h, &m->desc, &one, a, (cublasLtMatrixLayout_t)&s->a, b, &bl, &zero, d,
                                 &dl, d, &dl, algo, m->ws, MMC_WS_BYTES, c->stream));
}

/* The whole product of shape s (fixed: its algorithm for every n, else by
 * the mode); *held as in mul_mat.cu (what c->xq holds x as). */
static void mmc_run(struct cuda_ctx *c, struct cuda_mmc *m, const struct mmc_shape *s,
                    const cublasLtMatmulAlgo_t *fixed, const void *wdata, const float *x, float *y,
                    int32_t n, int *held)
{
    const int T = s->type;
    const size_t esz = mmc_esize(T);
    const char *xb = (const char *)x;
    if (T != QT_F32 || (uintptr_t)x % s->b_align) {
        const size_t need = (size_t)n * (size_t)s->ne0 * esz;
        if (!c->xq || need > c->xq_bytes) {
            c->err = INF_EINTERNAL;
            snprintf(c->err_msg, sizeof(c->err_msg), "mul_mat: %d rows of %lld exceed the reserved scratch",
                     n, (long long)s->ne0);
            return;
        }
        if (*held != T) {
            const int64_t ne = (int64_t)n * s->ne0;
            c->x16p_ready = 0; /* c->xq no longer holds what x16 was made from */
            if (T == QT_F32) {
                if (CUDA_CHECK_CTX(c, cudaMemcpyAsync(c->xq, x, need, cudaMemcpyDeviceToDevice, c->stream)))
                    return;
            } else if (c->mmc_cvt8 && ne % 8 == 0 && (uintptr_t)x % 16 == 0 && (uintptr_t)c->xq % 16 == 0) {
                const float4 *x4 = (const float4 *)x;
                uint4 *d4 = (uint4 *)c->xq;
                if (T == QT_F16)
                    cuda_launch(c, mmc_convert8_kernel<QT_F16>, cuda_stride_grid(c, ne / 8), 256, 0, x4, d4, ne / 8);
                else
                    cuda_launch(c, mmc_convert8_kernel<QT_BF16>, cuda_stride_grid(c, ne / 8), 256, 0, x4, d4, ne / 8);
                if (CUDA_CHECK_LAUNCH(c, "mmc_convert8_kernel"))
                    return;
            } else {
                if (T == QT_F16)
                    cuda_launch(c, mmc_convert_kernel<QT_F16>, cuda_stride_grid(c, ne), 256, 0, x, c->xq, ne);
                else
                    cuda_launch(c, mmc_convert_kernel<QT_BF16>, cuda_stride_grid(c, ne), 256, 0, x, c->xq, ne);
                if (CUDA_CHECK_LAUNCH(c, "mmc_convert_kernel"))
                    return;
            }
            *held = T;
        }
        xb = (const char *)c->xq;
    }
    const struct cuda_epi E = c->epi;
    if (!E.accumulate && (uintptr_t)y % s->d_align == 0) {
        mmc_matmul(c, m, s, fixed, wdata, xb, y, n);
        if (E.bias && !c->err) {
            const int64_t ne = (int64_t)n * s->ne1;
            cuda_launch(c, mmc_epi_kernel, cuda_stride_grid(c, ne), 256, 0, y, y, ne, (int32_t)s->ne1, E);
            CUDA_CHECK_LAUNCH(c, "mmc_epi_kernel");
        }
        return;
    }
    /* through the output scratch, as many rows at a time as it holds (the
     * algorithm does not depend on how many: same bits) */
    const int64_t per = m->yd ? (int64_t)(m->yd_bytes / sizeof(float) / (size_t)s->ne1) : 0;
    if (per < 1) {
        c->err = INF_EINTERNAL;
        snprintf(c->err_msg, sizeof(c->err_msg), "mul_mat: rows of %lld exceed the reserved output scratch",
                 (long long)s->ne1);
        return;
    }
    for (int64_t r0 = 0; r0 < n && !c->err; r0 += per) {
        const int64_t k = n - r0 < per ? n - r0 : per;
        mmc_matmul(c, m, s, fixed, wdata, xb + (size_t)r0 * (size_t)s->ne0 * esz, m->yd, k);
        if (c->err)
            return;
        const int64_t ne = k * s->ne1;
        cuda_launch(c, mmc_epi_kernel, cuda_stride_grid(c, ne), 256, 0, m->yd, y + r0 * s->ne1, ne, (int32_t)s->ne1, E);
        CUDA_CHECK_LAUNCH(c, "mmc_epi_kernel");
    }
}

int cuda_mmc_try(struct cuda_ctx *c, const struct backend_weight *w, const float *x, float *y,
                 int32_t n_rows, int *held)
{
    struct cuda_mmc *m = c->mmc;
    if (!m)
        return 0;
    const struct mmc_shape *s = mmc_find(m, w->type, w->ne0, w->ne1);
    if (!s)
        return 0;
    mmc_run(c, m, s, NULL, w->data, x, y, n_rows, held);
    return 1;
}

int cuda_mmc_run_f16(struct cuda_ctx *c, int64_t ne0, int64_t ne1, const void *w16, const float *x, float *y,
                     int32_t n_rows, int *held)
{
    struct cuda_mmc *m = c->mmc;
    const struct mmc_shape *s = m ? mmc_find(m, QT_F16, ne0, ne1) : NULL;
    if (!s)
        return 0;
    mmc_run(c, m, s, NULL, w16, x, y, n_rows, held);
    return 1;
}

int cuda_mmc_has_f16(const struct cuda_ctx *c, int64_t ne0, int64_t ne1)
{
    return c->mmc && mmc_find(c->mmc, QT_F16, ne0, ne1) != NULL;
}

int cuda_mmc_uses(struct cuda_ctx *c, const struct backend_weight *w)
{
    return c->mmc && mmc_find(c->mmc, w->type, w->ne0, w->ne1) != NULL;
}

int cuda_mmc_variant(struct cuda_ctx *c, const struct backend_weight *w, const float *x, float *y,
                     int32_t n_rows)
{
    if (!mmc_eligible(w))
        return INF_EUNSUPPORTED;
    const int had = c->mmc != NULL;
    struct cuda_mmc *m = mmc_get(c);
    if (!m)
        return 1; /* no cuBLASLt here: the dispatcher never picks it */
    if (!had) {
        const int rc = cuda_scratch_update(c);
        if (rc)
            return rc;
    }
    int held = -1;
    const struct mmc_shape *s = mmc_find(m, w->type, w->ne0, w->ne1);
    if (s) {
        mmc_run(c, m, s, NULL, w->data, x, y, n_rows, &held);
        return c->err;
    }
    /* a shape no registered weight has (prewarm's scratch weight): chosen
     * here, for this call only (startup: the query is allowed) */
    struct mmc_shape *t = (struct mmc_shape *)calloc(1, sizeof(*t));
    if (!t)
        return INF_ENOMEM;
    t->type = w->type;
    t->ne0 = w->ne0;
    t->ne1 = w->ne1;
    t->refs = 1;
    int rc = INF_EUNSUPPORTED;
    if (mmc_shape_init(c, m, t) == 0) {
        mmc_run(c, m, t, &t->inv, w->data, x, y, n_rows, &held);
        rc = c->err;
    }
    free(t);
    return rc;
}

int cuda_mmc_prewarm(struct cuda_ctx *c, void (*report)(void *ud, const char *name, double ms), void *ud,
                     double (*now)(void))
{
    struct cuda_mmc *m = c->mmc;
    if (!m)
        return 0;
    int64_t mx0 = 0, mx1 = 0;
    for (int i = 0; i < MMC_SHAPES; i++) {
        const struct mmc_shape *s = &m->shapes[i];
        if (s->refs && s->wptr) {
            mx0 = s->ne0 > mx0 ? s->ne0 : mx0;
            mx1 = s->ne1 > mx1 ? s->ne1 : mx1;
        }
    }
    if (!mx0)
        return 0;
    float *x = NULL, *y = NULL;
    if (CUDA_CHECK_CTX(c, cudaMalloc(&x, sizeof(float) * (size_t)mx0)) ||
        CUDA_CHECK_CTX(c, cudaMalloc(&y, sizeof(float) * (size_t)mx1)) ||
        CUDA_CHECK_CTX(c, cudaMemsetAsync(x, 0, sizeof(float) * (size_t)mx0, c->stream))) {
        cudaFree(x);
        return c->err;
    }
    int rc = 0;
    for (int i = 0; i < MMC_SHAPES && !rc; i++) {
        const struct mmc_shape *s = &m->shapes[i];
        if (!s->refs || !s->wptr || (size_t)s->ne0 * sizeof(float) > c->xq_bytes)
            continue;
        /* one decode-sized product: the default mode's one kernel for the
         * shape (batch_invariant = false: the n = 1 bucket's; the others
         * load at their first use) */
        const double t0 = now();
        int held = -1;
        mmc_run(c, m, s, NULL, s->wptr, x, y, 1, &held);
        if (!c->err)
            CUDA_CHECK_CTX(c, cudaStreamSynchronize(c->stream));
        rc = c->err;
        char name[80];
        snprintf(name, sizeof(name), "mul_mat<%s> cublas %lldx%lld", quant_type_name(s->type),
                 (long long)s->ne0, (long long)s->ne1);
        if (!rc)
            report(ud, name, now() - t0);
    }
    cudaFree(x);
    cudaFree(y);
    return rc;
}
