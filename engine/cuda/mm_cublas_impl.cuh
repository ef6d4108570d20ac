/* cuda/mm_cublas_impl — what cuda/mm_cublas.cu (the product, per backend)
 * and cuda/mm_cublas_algo.cu (the library and the algorithm choice) share:
 * the dlopen'ed cuBLASLt entry points, a backend's shapes, and the small
 * helpers both use. Not for use elsewhere. */
#ifndef INFERD_CUDA_MM_CUBLAS_IMPL_CUH
#define INFERD_CUDA_MM_CUBLAS_IMPL_CUH

#include <pthread.h>

#include <cublasLt.h>

#include "engine/cuda/common.cuh"

#define MMC_SHAPES 32           /* distinct float weight shapes of one backend */
#define MMC_BUCKETS 13          /* batch_invariant = false: n <= 1, 2, 4, ..., 4096 */
#define MMC_REF_N 512           /* n of the one algorithm choice (batch invariant) */
#define MMC_WS_BYTES (32u << 20) /* cuBLASLt workspace (NVIDIA's advice for Hopper) */
#define MMC_CANDIDATES 8        /* heuristic results looked at */

/* ---- the library, loaded at run time (mm_cublas_algo.cu) ---- */

struct mmc_lib {
    const char *file;
    size_t version;
    decltype(&cublasLtCreate) create;
    decltype(&cublasLtDestroy) destroy;
    decltype(&cublasLtGetVersion) get_version;
    decltype(&cublasLtGetStatusString) status_string;
    decltype(&cublasLtMatmul) matmul;
    decltype(&cublasLtMatmulDescInit_internal) desc_init;
    decltype(&cublasLtMatmulDescSetAttribute) desc_set;
    decltype(&cublasLtMatrixLayoutInit_internal) layout_init;
    decltype(&cublasLtMatmulPreferenceInit_internal) pref_init;
    decltype(&cublasLtMatmulPreferenceSetAttribute) pref_set;
    decltype(&cublasLtMatmulAlgoGetHeuristic) heuristic;
    decltype(&cublasLtMatmulAlgoCheck) check;
    decltype(&cublasLtMatmulAlgoConfigGetAttribute) cfg_get;
    decltype(&cublasLtMatmulAlgoConfigSetAttribute) cfg_set;
    decltype(&cublasLtMatmulAlgoCapGetAttribute) cap_get;
};

extern struct mmc_lib mmc_L;       /* its entry points, once mmc_lib_ok */
extern int mmc_lib_ok;
extern pthread_once_t mmc_once;
void mmc_load(void);               /* pthread_once(&mmc_once, mmc_load) */

/* ---- per backend ---- */

/* One weight shape and the algorithms chosen for it. */
struct mmc_shape {
    int type;
    int64_t ne0, ne1;
    int refs;           /* registered weights of this shape; 0: free slot */
    const void *wptr;   /* one of them (prewarm launches on it), NULL when released */
    uint32_t b_align;   /* alignment the activation pointer must have to be used as is */
    uint32_t d_align;   /* alignment y must have to be written directly */
    cublasLtMatrixLayoutOpaque_t a;
    cublasLtMatmulAlgo_t inv;                  /* the batch-invariant choice */
    cublasLtMatmulAlgo_t bucket[MMC_BUCKETS];  /* batch_invariant = false */
};

struct cuda_mmc {
    cublasLtHandle_t h;
    cublasLtMatmulDescOpaque_t desc; /* f32 compute and scale, A transposed */
    void *ws;                        /* MMC_WS_BYTES */
    float *yd;                       /* output scratch of yd_bytes */
    size_t yd_bytes;
    int64_t max_ne1;                 /* largest ne1 registered */
    int full_logged;
    struct mmc_shape shapes[MMC_SHAPES];
};

/* Record a failed cuBLASLt call like cuda_fail (first one wins). */
int mmc_fail(struct cuda_ctx *c, cublasStatus_t st, const char *stmt, const char *file, int line);
#define CUBLAS_CHECK_CTX(c, stmt) mmc_fail((c), (stmt), #stmt, __FILE__, __LINE__)

static inline cudaDataType_t mmc_dtype(int type)
{
    return type == QT_F16 ? CUDA_R_16F : type == QT_BF16 ? CUDA_R_16BF : CUDA_R_32F;
}

static inline size_t mmc_esize(int type)
{
    return type == QT_F32 ? 4 : 2;
}

/* Largest power of two <= 16 dividing bytes (a leading dimension's). */
static inline uint32_t mmc_align_of(uint64_t bytes)
{
    uint32_t a = 16;
    while (a > 1 && bytes % a)
        a >>= 1;
    return a;
}

static inline void mmc_layouts(const struct mmc_shape *s, int64_t n, cublasLtMatrixLayoutOpaque_t *b,
                        cublasLtMatrixLayoutOpaque_t *d, cublasStatus_t *st)
{
    *st = mmc_L.layout_init(b, sizeof(*b), mmc_dtype(s->type), (uint64_t)s->ne0, (uint64_t)n, s->ne0);
    if (*st == CUBLAS_STATUS_SUCCESS)
        *st = mmc_L.layout_init(d, sizeof(*d), CUDA_R_32F, (uint64_t)s->ne1, (uint64_t)n, s->ne1);
}

/* Fill shape s (type and dims set) with its layout and algorithms: 0, or
 * -1 when cuBLAS has nothing for it (the float kernel serves it). */
int mmc_shape_init(struct cuda_ctx *c, struct cuda_mmc *m, struct mmc_shape *s);

#endif
