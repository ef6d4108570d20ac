/* cuda/mm_cublas_algo — cuBLASLt for cuda/mm_cublas.cu: the library,
 * dlopen'ed once a process, and each weight shape's algorithms: the one
 * batch-invariant choice and, with batch_invariant = false, one a bucket
 * of n (cuBLAS's first candidate, or with INFERD_MMC_TUNE=1 the fastest
 * of them timed at load). Why and how: cuda/mm_cublas.cu's comment.
 * Threads: mmc_load once a process (pthread_once); the rest belongs to the
 * backend's engine thread, at weight registration (startup).
 */
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/cuda/mm_cublas_impl.cuh"

extern "C" {
#include "engine/log.h"
#include "engine/quant.h"
}

struct mmc_lib mmc_L;
int mmc_lib_ok;
pthread_once_t mmc_once = PTHREAD_ONCE_INIT;

void mmc_load(void)
{
    const char *off = getenv("INFERD_NO_CUBLAS");
    if (off && *off && *off != '0') {
        log_info("cuda: INFERD_NO_CUBLAS set: F32/F16/BF16 products take the float kernel");
        return;
    }
    /* the loader's path first; last the toolkit's own directory, which a
     * machine with the toolkit but no ld.so.conf entry for it still has */
    static const char *const files[] = {"libcublasLt.so.13", "libcublasLt.so.12", "libcublasLt.so",
                                        "/usr/local/cuda/lib64/libcublasLt.so.13"};
    void *dl = NULL;
    char why[256] = "not found"; /* the first name's dlerror: the one that matters */
    for (size_t i = 0; i < sizeof(files) / sizeof(files[0]) && !dl; i++) {
        dl = dlopen(files[i], RTLD_NOW | RTLD_LOCAL);
        const char *e = dl ? NULL : dlerror();
        if (dl)
            mmc_L.file = files[i];
        else if (i == 0 && e)
            snprintf(why, sizeof(why), "%s", e);
    }
    if (!dl) {
        log_warn("cuda: cuBLASLt not loaded (%s): F32/F16/BF16 products take the float kernel", why);
        return;
    }
    int ok = 1;
#define MMC_SYM(field, sym)                                                                        \
    ok &= (mmc_L.field = reinterpret_cast<decltype(mmc_L.field)>(dlsym(dl, #sym))) != NULL
    MMC_SYM(create, cublasLtCreate);
    MMC_SYM(destroy, cublasLtDestroy);
    MMC_SYM(get_version, cublasLtGetVersion);
    MMC_SYM(status_string, cublasLtGetStatusString);
    MMC_SYM(matmul, cublasLtMatmul);
    MMC_SYM(desc_init, cublasLtMatmulDescInit_internal);
    MMC_SYM(desc_set, cublasLtMatmulDescSetAttribute);
    MMC_SYM(layout_init, cublasLtMatrixLayoutInit_internal);
    MMC_SYM(pref_init, cublasLtMatmulPreferenceInit_internal);
    MMC_SYM(pref_set, cublasLtMatmulPreferenceSetAttribute);
    MMC_SYM(heuristic, cublasLtMatmulAlgoGetHeuristic);
    MMC_SYM(check, cublasLtMatmulAlgoCheck);
    MMC_SYM(cfg_get, cublasLtMatmulAlgoConfigGetAttribute);
    MMC_SYM(cfg_set, cublasLtMatmulAlgoConfigSetAttribute);
    MMC_SYM(cap_get, cublasLtMatmulAlgoCapGetAttribute);
#undef MMC_SYM
    if (!ok) {
        log_warn("cuda: %s lacks a cublasLt entry point: F32/F16/BF16 products take the float "
                 "kernel", mmc_L.file);
        dlclose(dl);
        return;
    }
    mmc_L.version = mmc_L.get_version();
    log_info("cuda: cuBLASLt %zu loaded from %s for the F32/F16/BF16 products", mmc_L.version, mmc_L.file);
    mmc_lib_ok = 1; /* dl stays open for the life of the process */
}

int mmc_fail(struct cuda_ctx *c, cublasStatus_t st, const char *stmt, const char *file, int line)
{
    if (st == CUBLAS_STATUS_SUCCESS)
        return 0;
    if (!c->err) {
        c->err = st == CUBLAS_STATUS_ALLOC_FAILED ? INF_ENOMEM : INF_EDEVICE;
        snprintf(c->err_msg, sizeof(c->err_msg), "%s failed: %s (%s:%d, device %d)", stmt,
                 mmc_L.status_string ? mmc_L.status_string(st) : "?", file, line, c->device);
        log_error("cuda: %s", c->err_msg);
    }
    return 1;
}

/* Does algo run shape s at n rows within the workspace? */
static int mmc_runs(struct cuda_mmc *m, const struct mmc_shape *s, const cublasLtMatmulAlgo_t *algo, int64_t n)
{
    cublasLtMatrixLayoutOpaque_t b, d;
    cublasStatus_t st;
    mmc_layouts(s, n, &b, &d, &st);
    cublasLtMatmulHeuristicResult_t r;
    memset(&r, 0, sizeof(r));
    return st == CUBLAS_STATUS_SUCCESS &&
           mmc_L.check(m->h, &m->desc, (cublasLtMatrixLayout_t)&s->a, &b, &d, &d, algo, &r) ==
               CUBLAS_STATUS_SUCCESS &&
           r.workspaceSize <= MMC_WS_BYTES;
}

/* The numerics every choice must have: f32 accumulation; for F32 weights
 * no tensor-core path (TF32 or an emulation would round the inputs). An
 * algorithm that does not say rests on the descriptor (CUBLAS_COMPUTE_32F,
 * never _FAST_TF32) and, for F32, the preference's IMPL_MASK. */
static int mmc_numerics_ok(const struct mmc_shape *s, const cublasLtMatmulAlgo_t *algo)
{
    uint64_t fl = 0;
    size_t wr = 0;
    if (mmc_L.cap_get(algo, CUBLASLT_ALGO_CAP_NUMERICAL_IMPL_FLAGS, &fl, sizeof(fl), &wr) !=
        CUBLAS_STATUS_SUCCESS)
        return 1;
    if ((fl & CUBLASLT_NUMERICAL_IMPL_FLAGS_ACCUMULATOR_TYPE_MASK) != CUBLASLT_NUMERICAL_IMPL_FLAGS_ACCUMULATOR_32F)
        return 0;
    if (s->type == QT_F32 && ((fl & CUBLASLT_NUMERICAL_IMPL_FLAGS_TENSOR_OP_MASK) ||
                              (fl & CUBLASLT_NUMERICAL_IMPL_FLAGS_INPUT_TF32)))
        return 0;
    return 1;
}

/* Algorithms for shape s, in cuBLAS's heuristic order at n rows, into
 * out[0..max): with invariant, only candidates without split-K (or forced
 * to SPLITK_NUM = 1 / no reduction, if cuBLAS still accepts them, after
 * those), which must also run at n = 1 (one will serve every n). How many;
 * -1 when cuBLAS answers nothing. */
static int mmc_candidates(struct cuda_mmc *m, const struct mmc_shape *s, int64_t n, int invariant,
                          cublasLtMatmulAlgo_t *out, int max)
{
    cublasLtMatrixLayoutOpaque_t b, d;
    cublasStatus_t st;
    mmc_layouts(s, n, &b, &d, &st);
    if (st != CUBLAS_STATUS_SUCCESS)
        return -1;
    cublasLtMatmulPreferenceOpaque_t p;
    if (mmc_L.pref_init(&p, sizeof(p)) != CUBLAS_STATUS_SUCCESS)
        return -1;
    const uint64_t ws = MMC_WS_BYTES;
    const uint32_t a_al = mmc_align_of((uint64_t)s->ne0 * mmc_esize(s->type));
    mmc_L.pref_set(&p, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws, sizeof(ws));
    mmc_L.pref_set(&p, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, &a_al, sizeof(a_al));
    mmc_L.pref_set(&p, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES, &s->b_align, sizeof(s->b_align));
    mmc_L.pref_set(&p, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, &s->d_align, sizeof(s->d_align));
    mmc_L.pref_set(&p, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES, &s->d_align, sizeof(s->d_align));
    if (s->type == QT_F32) {
        const uint64_t mask = ~(uint64_t)(CUBLASLT_NUMERICAL_IMPL_FLAGS_TENSOR_OP_MASK |
                                          CUBLASLT_NUMERICAL_IMPL_FLAGS_INPUT_TF32);
        mmc_L.pref_set(&p, CUBLASLT_MATMUL_PREF_IMPL_MASK, &mask, sizeof(mask));
    }
    cublasLtMatmulHeuristicResult_t r[MMC_CANDIDATES];
    int got = 0, k = 0;
    memset(r, 0, sizeof(r));
    if (mmc_L.heuristic(m->h, &m->desc, (cublasLtMatrixLayout_t)&s->a, &b, &d, &d, &p, MMC_CANDIDATES, r,
                    &got) != CUBLAS_STATUS_SUCCESS)
        return -1;
    /* pass 0: as cuBLAS configured it; pass 1 (invariant only): split-K
     * switched off by hand */
    for (int pass = 0; pass < (invariant ? 2 : 1); pass++)
        for (int i = 0; i < got; i++) {
            if (r[i].state != CUBLAS_STATUS_SUCCESS || r[i].workspaceSize > MMC_WS_BYTES)
                continue;
            cublasLtMatmulAlgo_t a = r[i].algo;
            if (!mmc_numerics_ok(s, &a))
                continue;
            if (invariant) {
                int32_t splitk = 0;
                uint32_t red = 0;
                size_t wr = 0;
                if (mmc_L.cfg_get(&a, CUBLASLT_ALGO_CONFIG_SPLITK_NUM, &splitk, sizeof(splitk), &wr) ||
                    mmc_L.cfg_get(&a, CUBLASLT_ALGO_CONFIG_REDUCTION_SCHEME, &red, sizeof(red), &wr))
                    continue;
                const int split = splitk > 1 || red != CUBLASLT_REDUCTION_SCHEME_NONE;
                if (split && pass == 0)
                    continue;
                if (split) {
                    const int32_t one = 1;
                    const uint32_t none = CUBLASLT_REDUCTION_SCHEME_NONE;
                    if (mmc_L.cfg_set(&a, CUBLASLT_ALGO_CONFIG_SPLITK_NUM, &one, sizeof(one)) ||
                        mmc_L.cfg_set(&a, CUBLASLT_ALGO_CONFIG_REDUCTION_SCHEME, &none, sizeof(none)))
                        continue;
                }
                if (!mmc_runs(m, s, &a, 1))
                    continue;
            }
            if (!mmc_runs(m, s, &a, n))
                continue;
            out[k++] = a;
            if (k == max)
                return k;
        }
    return k;
}

/* One algorithm for shape s: the first of mmc_candidates. 0, or -1. */
static int mmc_choose(struct cuda_mmc *m, const struct mmc_shape *s, int64_t n, int invariant,
                      cublasLtMatmulAlgo_t *out)
{
    return mmc_candidates(m, s, n, invariant, out, 1) == 1 ? 0 : -1;
}

/* INFERD_MMC_TUNE=1 (batch_invariant = false only; A/B, written 2026-12-05
 * with no device lent): the bucket's algorithm timed among cuBLAS's
 * candidates instead of its first. Why: the F16 path's 4096 x 14336 n = 512
 * GEMM ran 101 us in cuBLAS's first pick (nvjet hss 128x128, F32 out)
 * where the ceilings file's cublasGemmEx F16 figure is 69.2 us. Each
 * candidate: one launch to warm, then the least of three, on scratch
 * operands (t: A, B, D for the largest n tuned; values do not matter for
 * speed but are finite). Startup only. */
struct mmc_tune_bufs {
    void *a, *b;
    float *d;
};

static void mmc_tune(struct cuda_ctx *c, struct cuda_mmc *m, const struct mmc_shape *s, int64_t n,
                     const struct mmc_tune_bufs *t, cublasLtMatmulAlgo_t *best)
{
    cublasLtMatmulAlgo_t cand[MMC_CANDIDATES];
    const int k = mmc_candidates(m, s, n, 0, cand, MMC_CANDIDATES);
    if (k < 2)
        return;
    cudaEvent_t e0, e1;
    if (cudaEventCreate(&e0) != cudaSuccess) {
        cudaGetLastError();
        return;
    }
    if (cudaEventCreate(&e1) != cudaSuccess) {
        cudaGetLastError();
        cudaEventDestroy(e0);
        return;
    }
    cublasLtMatrixLayoutOpaque_t bl, dl;
    cublasStatus_t st;
    mmc_layouts(s, n, &bl, &dl, &st);
    const float one = 1.0f, zero = 0.0f;
    float best_ms = -1.0f, first_ms = -1.0f;
    int best_i = 0;
    for (int i = 0; st == CUBLAS_STATUS_SUCCESS && i < k; i++) {
        float least = -1.0f;
        for (int rep = 0; rep < 4; rep++) {
            cudaEventRecord(e0, c->stream);
            const cublasStatus_t rs = mmc_L.matmul(m->h, &m->desc, &one, t->a, (cublasLtMatrixLayout_t)&s->a, t->b,
                                               &bl, &zero, t->d, &dl, t->d, &dl, &cand[i], m->ws,
                                               MMC_WS_BYTES, c->stream);
            cudaEventRecord(e1, c->stream);
            float ms = 0.0f;
            if (rs != CUBLAS_STATUS_SUCCESS || cudaEventSynchronize(e1) != cudaSuccess ||
                cudaEventElapsedTime(&ms, e0, e1) != cudaSuccess) {
                cudaGetLastError();
                least = -1.0f;
                break;
            }
            if (rep > 0 && (least < 0.0f || ms < least))
                least = ms;
        }
        if (i == 0)
            first_ms = least;
        if (least >= 0.0f && (best_ms < 0.0f || least < best_ms)) {
            best_ms = least;
            best_i = i;
        }
    }
    cudaEventDestroy(e0);
    cudaEventDestroy(e1);
    if (best_ms < 0.0f)
        return;
    *best = cand[best_i];
    log_info("cuda: cublasLt %s %lldx%lld n=%lld tuned: candidate %d of %d, %.1f us (cuBLAS's first %.1f us)",
             quant_type_name(s->type), (long long)s->ne0, (long long)s->ne1, (long long)n, best_i + 1, k,
             best_ms * 1e3, first_ms * 1e3);
}

static void mmc_algo_log(const struct mmc_shape *s, const cublasLtMatmulAlgo_t *a, const char *what)
{
    int32_t id = -1, splitk = -1;
    uint32_t tile = 0, stages = 0;
    size_t wr = 0;
    mmc_L.cfg_get(a, CUBLASLT_ALGO_CONFIG_ID, &id, sizeof(id), &wr);
    mmc_L.cfg_get(a, CUBLASLT_ALGO_CONFIG_TILE_ID, &tile, sizeof(tile), &wr);
    mmc_L.cfg_get(a, CUBLASLT_ALGO_CONFIG_STAGES_ID, &stages, sizeof(stages), &wr);
    mmc_L.cfg_get(a, CUBLASLT_ALGO_CONFIG_SPLITK_NUM, &splitk, sizeof(splitk), &wr);
    log_debug("cuda: cublasLt %s %lldx%lld %s: algo %d tile %u stages %u split-k %d",
              quant_type_name(s->type), (long long)s->ne0, (long long)s->ne1, what, id, tile, stages,
              splitk);
}

int mmc_shape_init(struct cuda_ctx *c, struct cuda_mmc *m, struct mmc_shape *s)
{
    s->b_align = mmc_align_of((uint64_t)s->ne0 * mmc_esize(s->type));
    s->d_align = mmc_align_of((uint64_t)s->ne1 * sizeof(float));
    if (mmc_L.layout_init(&s->a, sizeof(s->a), mmc_dtype(s->type), (uint64_t)s->ne0, (uint64_t)s->ne1,
                      s->ne0) != CUBLAS_STATUS_SUCCESS ||
        mmc_choose(m, s, MMC_REF_N, 1, &s->inv))
        return -1;
    mmc_algo_log(s, &s->inv, "batch-invariant");
    for (int b = 0; b < MMC_BUCKETS; b++) {
        if (!c->batch_variant || mmc_choose(m, s, (int64_t)1 << b, 0, &s->bucket[b]))
            s->bucket[b] = s->inv;
    }
    if (c->batch_variant && c->mmc_tune) { /* buckets from 64 rows (A/B knob) */
        const int64_t nmax = (int64_t)1 << (MMC_BUCKETS - 1);
        const size_t es = mmc_esize(s->type);
        struct mmc_tune_bufs t = {NULL, NULL, NULL};
        if (cudaMalloc(&t.a, (size_t)s->ne0 * (size_t)s->ne1 * es) == cudaSuccess &&
            cudaMalloc(&t.b, (size_t)nmax * (size_t)s->ne0 * es) == cudaSuccess &&
            cudaMalloc((void **)&t.d, (size_t)nmax * (size_t)s->ne1 * sizeof(float)) == cudaSuccess &&
            cudaMemsetAsync(t.a, 0x1c, (size_t)s->ne0 * (size_t)s->ne1 * es, c->stream) == cudaSuccess &&
            cudaMemsetAsync(t.b, 0x1c, (size_t)nmax * (size_t)s->ne0 * es, c->stream) == cudaSuccess) {
            for (int b = 6; b < MMC_BUCKETS; b++)
                mmc_tune(c, m, s, (int64_t)1 << b, &t, &s->bucket[b]);
        } else {
            log_warn("cuda: INFERD_MMC_TUNE: no room for the scratch operands of %s %lldx%lld: untuned",
                     quant_type_name(s->type), (long long)s->ne0, (long long)s->ne1);
        }
        cudaGetLastError();
        cudaStreamSynchronize(c->stream);
        cudaFree(t.a);
        cudaFree(t.b);
        cudaFree(t.d);
    }
    return 0;
}
