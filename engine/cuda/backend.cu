/* cuda/backend — the CUDA backend's op table (engine/backend.h): device
 * memory, scratch, the error state, and the table itself (the resident
 * weights: weights.cu).
 * The ops live one per file (get_rows.cu, norm.cu, rope.cu, attention.cu,
 * elementwise.cu, mul_mat.cu with mm_cublas.cu, kv.cu for the cache, sample.cu); this
 * file is the glue.
 *
 * Everything runs on one non-blocking stream owned by the backend; ops
 * queue work and return (ops->async = 1), ops->sync waits and reports the
 * first error. Host memory from host_alloc is pinned, so the graph's one
 * upload per step and its logits download run asynchronously.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/cuda/common.cuh"
#include "engine/cuda/mmq.cuh"
#include "engine/cuda/qtypes.cuh"

extern "C" {
#include "engine/cuda/cuda.h"
#include "engine/fault.h"
#include "engine/log.h"
#include "engine/quant.h"
}

int cuda_error_code(cudaError_t e)
{
    switch (e) {
    case cudaErrorMemoryAllocation:
        return INF_ENOMEM;
    /* refused before anything ran, or a recording that failed: CUDA clears
     * them (cudaGetLastError) and the context works on */
    case cudaErrorInvalidValue:
    case cudaErrorInvalidConfiguration:
    case cudaErrorInvalidPitchValue:
    case cudaErrorInvalidSymbol:
    case cudaErrorInvalidDevicePointer:
    case cudaErrorInvalidMemcpyDirection:
    case cudaErrorInvalidResourceHandle:
    case cudaErrorInvalidDeviceFunction:
    case cudaErrorNoKernelImageForDevice:
    case cudaErrorLaunchOutOfResources:
    case cudaErrorNotReady:
    case cudaErrorNotSupported:
    case cudaErrorStreamCaptureUnsupported:
    case cudaErrorStreamCaptureInvalidated:
    case cudaErrorStreamCaptureUnmatched:
    case cudaErrorStreamCaptureWrongThread:
    case cudaErrorCapturedEvent:
        return INF_EINTERNAL;
    /* sticky: "the process must be terminated and relaunched" (CUDA's
     * words); listed for the reader, the default says the same */
    case cudaErrorIllegalAddress:
    case cudaErrorLaunchFailure:
    case cudaErrorLaunchTimeout:
    case cudaErrorHardwareStackError:
    case cudaErrorIllegalInstruction:
    case cudaErrorMisalignedAddress:
    case cudaErrorInvalidAddressSpace:
    case cudaErrorInvalidPc:
    case cudaErrorAssert:
    case cudaErrorECCUncorrectable:
    case cudaErrorDevicesUnavailable:
    case cudaErrorContextIsDestroyed:
        return INF_EDEVICE;
    default:
        /* unknown: a restart is the answer that cannot be wrong for long */
        return INF_EDEVICE;
    }
}

int cuda_fail(struct cuda_ctx *c, cudaError_t e, const char *stmt, const char *file, int line)
{
    if (e == cudaSuccess)
        return 0;
    const int code = cuda_error_code(e);
    if (!c->err) {
        c->err = code;
        snprintf(c->err_msg, sizeof(c->err_msg), "%s failed: %s (%s, %s:%d, device %d)", stmt,
                 cudaGetErrorString(e), code == INF_EDEVICE ? "the device is lost" : "recoverable",
                 file, line, c->device);
        log_error("cuda: %s", c->err_msg);
    }
    if (code != INF_EDEVICE)
        cudaGetLastError(); /* not sticky: clear it so later calls can succeed */
    return 1;
}

cudaError_t cuda_malloc(struct cuda_ctx *c, void **p, size_t bytes)
{
    /* the budget refuses as the device would, before CUDA sees the call */
    if (c->budget_set && (bytes > c->budget || c->alloc_total > c->budget - bytes))
        return cudaErrorMemoryAllocation;
    const cudaError_t e = cudaMalloc(p, bytes);
    if (e == cudaSuccess)
        c->alloc_total += bytes;
    return e;
}

cudaError_t cuda_mem_info(const struct cuda_ctx *c, size_t *free_b, size_t *total)
{
    const cudaError_t e = cudaMemGetInfo(free_b, total);
    if (e == cudaSuccess && c->budget_set) {
        const size_t left = c->alloc_total < c->budget ? c->budget - c->alloc_total : 0;
        if (*free_b > left)
            *free_b = left;
    }
    return e;
}

int cuda_op_begin(struct cuda_ctx *c)
{
    if (c->err)
        return 1;
    int cur = -1;
    if (cudaGetDevice(&cur) != cudaSuccess || cur != c->device)
        return CUDA_CHECK_CTX(c, cudaSetDevice(c->device));
    return 0;
}

/* ---- memory -------------------------------------------------------------- */

static void *cuda_be_alloc(struct backend *be, size_t bytes)
{
    struct cuda_ctx *c = cuda_ctx_of(be);
    void *p = NULL;
    if (cuda_op_begin(c))
        return NULL;
    cudaError_t e = cuda_malloc(c, &p, bytes ? bytes : 1);
    if (e != cudaSuccess && e != cudaErrorMemoryAllocation) {
        CUDA_CHECK_CTX(c, e); /* not memory: the device (sync reports INF_EDEVICE) */
        return NULL;
    }
    if (e != cudaSuccess) {
        /* a failed allocation is an answer, not a broken backend */
        cudaGetLastError();
        size_t fr = 0, tot = 0;
        cuda_mem_info(c, &fr, &tot);
        log_error("cuda: cudaMalloc(%zu MiB) failed: %s (%zu MiB free of %zu MiB)", bytes >> 20,
                  cudaGetErrorString(e), fr >> 20, tot >> 20);
        return NULL;
    }
    if (CUDA_CHECK_CTX(c, cudaMemsetAsync(p, 0, bytes, c->stream))) {
        cudaFree(p);
        return NULL;
    }
    return p;
}

static void cuda_be_free(struct backend *be, void *p)
{
    if (!p)
        return;
    struct cuda_ctx *c = cuda_ctx_of(be);
    cudaSetDevice(c->device);
    cudaStreamSynchronize(c->stream); /* nothing queued may still use it */
    cudaFree(p);
}

static void cuda_be_upload(struct backend *be, void *dst, const void *src, size_t bytes)
{
    struct cuda_ctx *c = cuda_ctx_of(be);
    if (cuda_op_begin(c) || !bytes)
        return;
    /* pageable source: the copy is staged before the call returns, so the
     * caller may reuse src at once; pinned (host_alloc) source: queued, the
     * bytes must stay until the next sync (backend.h) */
    CUDA_CHECK_CTX(c, cudaMemcpyAsync(dst, src, bytes, cudaMemcpyHostToDevice, c->stream));
}

static void cuda_be_download(struct backend *be, void *dst, const void *src, size_t bytes)
{
    struct cuda_ctx *c = cuda_ctx_of(be);
    if (cuda_op_begin(c) || !bytes)
        return;
    if (CUDA_CHECK_CTX(c, cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToHost, c->stream)))
        return;
    CUDA_CHECK_CTX(c, cudaStreamSynchronize(c->stream));
}

static void cuda_be_copy(struct backend *be, void *dst, const void *src, size_t bytes)
{
    struct cuda_ctx *c = cuda_ctx_of(be);
    if (cuda_op_begin(c) || !bytes)
        return;
    CUDA_CHECK_CTX(c, cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToDevice, c->stream));
}

/* Pinned host memory: copies from and to it overlap the computation (a
 * step's descriptor goes up from it, its logits come down into it). */
static void *cuda_be_host_alloc(struct backend *be, size_t bytes)
{
    struct cuda_ctx *c = cuda_ctx_of(be);
    void *p = NULL;
    if (cuda_op_begin(c))
        return NULL;
    cudaError_t e = cudaHostAlloc(&p, bytes ? bytes : 1, cudaHostAllocDefault);
    if (e != cudaSuccess && e != cudaErrorMemoryAllocation) {
        CUDA_CHECK_CTX(c, e); /* not memory: the device (sync reports INF_EDEVICE) */
        return NULL;
    }
    if (e != cudaSuccess) {
        cudaGetLastError();
        log_error("cuda: cudaHostAlloc(%zu MiB) failed: %s", bytes >> 20, cudaGetErrorString(e));
        return NULL;
    }
    memset(p, 0, bytes);
    return p;
}

static void cuda_be_host_free(struct backend *be, void *p)
{
    if (!p)
        return;
    struct cuda_ctx *c = cuda_ctx_of(be);
    cudaSetDevice(c->device);
    cudaStreamSynchronize(c->stream); /* a queued copy may still use it */
    cudaFreeHost(p);
}

static void cuda_be_download_async(struct backend *be, void *dst, const void *src, size_t bytes)
{
    struct cuda_ctx *c = cuda_ctx_of(be);
    if (cuda_op_begin(c) || !bytes)
        return;
    CUDA_CHECK_CTX(c, cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToHost, c->stream));
}

/* ---- recorded steps (CUDA graphs) ------------------------------------------ */

/* Thread-local capture: only this thread's work on the stream is recorded;
 * ops that would synchronize inside a recording fail it (capture_end then
 * returns NULL and clears what the failed recording left behind). */
static int cuda_be_capture_begin(struct backend *be)
{
    struct cuda_ctx *c = cuda_ctx_of(be);
    if (cuda_op_begin(c))
        return c->err;
    return CUDA_CHECK_CTX(c, cudaStreamBeginCapture(c->stream, cudaStreamCaptureModeThreadLocal)) ? c->err : 0;
}

static void *cuda_be_capture_end(struct backend *be)
{
    struct cuda_ctx *c = cuda_ctx_of(be);
    cudaGraph_t graph = NULL;
    cudaGraphExec_t exec = NULL;
    const cudaError_t e = cudaStreamEndCapture(c->stream, &graph);
    if (e == cudaSuccess && !c->err && cudaGraphInstantiate(&exec, graph, 0) != cudaSuccess)
        exec = NULL;
    if (graph)
        cudaGraphDestroy(graph);
    if (!exec) {
        /* nothing was queued: forget the recording's errors, the caller
         * queues the same work op by op (a real fault shows up there) */
        cudaGetLastError();
        c->err = 0;
        c->err_msg[0] = 0;
        log_warn("cuda: recording a step failed (%s); steps run op by op", cudaGetErrorString(e));
    }
    return exec;
}

static int cuda_be_graph_run(struct backend *be, void *graph)
{
    struct cuda_ctx *c = cuda_ctx_of(be);
    if (cuda_op_begin(c))
        return c->err;
    return CUDA_CHECK_CTX(c, cudaGraphLaunch((cudaGraphExec_t)graph, c->stream)) ? c->err : 0;
}

static void cuda_be_graph_drop(struct backend *be, void *graph)
{
    struct cuda_ctx *c = cuda_ctx_of(be);
    if (graph) {
        cudaSetDevice(c->device);
        cudaStreamSynchronize(c->stream); /* not while a launch of it may be queued */
        cudaGraphExecDestroy((cudaGraphExec_t)graph);
    }
}

/* ---- scratch, sync, lifetime --------------------------------------------- */

int cuda_scratch_update(struct cuda_ctx *c)
{
    const size_t blk256 = (size_t)((c->res_ne0 + QK_K - 1) / QK_K);
    /* Q8_K or Q8_0 in planes (cuda/qtypes.cuh: cuda_q8k_bytes,
     * cuda_q80_bytes), or the cuBLAS path's F16/BF16 (or copied F32)
     * activation */
    size_t k_bytes = cuda_q8k_act_bytes(c->res_rows, (int64_t)blk256);
    /* a batch of 2-8 rows holds mmqt's fragment plane as well */
    const int32_t fr = c->res_rows < CUDA_Q8K_FRAG_ROWS ? c->res_rows : CUDA_Q8K_FRAG_ROWS;
    if (cuda_q8k_act_bytes(fr, (int64_t)blk256) > k_bytes)
        k_bytes = cuda_q8k_act_bytes(fr, (int64_t)blk256);
    const size_t o_bytes = cuda_q80_bytes((int64_t)c->res_rows * (int64_t)blk256 * (QK_K / QK8_0));
    const size_t f_bytes = cuda_mmc_act_bytes(c);
    size_t need = k_bytes > o_bytes ? k_bytes : o_bytes;
    need = f_bytes > need ? f_bytes : need;
    int rc = cuda_scratch_grow(c, &c->xq, &c->xq_bytes, need);
    c->x16p_ready = 0; /* either scratch may move */
    /* mmqh's f16 activations: the largest batch it takes */
    if (!rc && c->mmqh && c->res_rows >= c->mmqh)
        rc = cuda_scratch_grow(c, &c->x16, &c->x16_bytes, (size_t)c->res_rows * (size_t)(blk256 * QK_K) * 2);
    const int rc2 = rc ? rc : cuda_mmc_reserve(c);
    return rc2 ? rc2 : cuda_mmd_reserve(c);
}

int cuda_scratch_grow(struct cuda_ctx *c, void **p, size_t *bytes, size_t need)
{
    if (need <= *bytes)
        return 0;
    void *q = NULL;
    if (cuda_malloc(c, &q, need) != cudaSuccess) {
        cudaGetLastError();
        return INF_ENOMEM;
    }
    if (*p) {
        cudaStreamSynchronize(c->stream);
        cudaFree(*p);
    }
    *p = q;
    *bytes = need;
    return 0;
}

static int cuda_be_reserve(struct backend *be, const struct backend_reserve *r)
{
    struct cuda_ctx *c = cuda_ctx_of(be);
    if (cuda_op_begin(c))
        return c->err;
    if (r->max_rows > c->res_rows)
        c->res_rows = r->max_rows;
    if (r->max_ne0 > c->res_ne0)
        c->res_ne0 = r->max_ne0;
    return cuda_scratch_update(c);
}

static int cuda_be_sync(struct backend *be)
{
    struct cuda_ctx *c = cuda_ctx_of(be);
    if (!c->err) {
        cudaSetDevice(c->device);
        CUDA_CHECK_CTX(c, cudaStreamSynchronize(c->stream));
    }
    const int rc = c->err;
    /* an allocation failure or a refused call is over once reported; a lost
     * device stays lost */
    if (rc == INF_ENOMEM || rc == INF_EINTERNAL) {
        c->err = 0;
        c->err_msg[0] = 0;
    }
    return rc;
}

static void cuda_be_destroy(struct backend *be)
{
    struct cuda_ctx *c = cuda_ctx_of(be);
    cudaSetDevice(c->device);
    cudaStreamSynchronize(c->stream);
    cudaFree(c->xq);
    cudaFree(c->x16);
    cudaFree(c->mmd_w);
    cuda_mmd_free(c);
    cuda_q6p_free(c);
    cudaFree(c->att_sc);
    for (int i = 0; i < c->att_sc_nold; i++)
        cudaFree(c->att_sc_old[i]);
    cuda_mmc_free(c);
    cuda_sample_free(c);
    cudaStreamDestroy(c->stream);
    free(c);
    free(be);
}

extern "C" int cuda_be_prewarm(struct backend *be,
                               void (*report)(void *ud, const char *name, double ms), void *ud);

static const struct backend_ops cuda_backend_ops = {
    /* .name */ "cuda",
    /* .kv_type */ QT_F16,
    /* .async */ 1,
    /* .destroy */ cuda_be_destroy,
    /* .reserve */ cuda_be_reserve,
    /* .alloc */ cuda_be_alloc,
    /* .free */ cuda_be_free,
    /* .upload */ cuda_be_upload,
    /* .download */ cuda_be_download,
    /* .copy */ cuda_be_copy,
    /* .host_alloc */ cuda_be_host_alloc,
    /* .host_free */ cuda_be_host_free,
    /* .download_async */ cuda_be_download_async,
    /* .weight_register */ cuda_be_weight_register,
    /* .weight_release */ cuda_be_weight_release,
    /* .get_rows */ cuda_op_get_rows,
    /* .gather */ cuda_op_gather,
    /* .rms_norm */ cuda_op_rms_norm,
    /* .mul_mat */ cuda_op_mul_mat,
    /* .add_bias */ cuda_op_add_bias,
    /* .rope */ cuda_op_rope,
    /* .kv_alloc */ cuda_kv_alloc,
    /* .kv_free */ cuda_kv_free,
    /* .kv_copy_blocks */ cuda_kv_copy_blocks,
    /* .kv_read */ cuda_kv_read,
    /* .kv_store */ cuda_op_kv_store_layer,
    /* .attention */ cuda_op_attention_layer,
    /* .silu_mul */ cuda_op_silu_mul,
    /* .add */ cuda_op_add,
    /* .sync */ cuda_be_sync,
    /* .prewarm */ cuda_be_prewarm,
    /* .sample */ cuda_op_sample,
    /* .mul_mat_ex */ cuda_op_mul_mat_ex,
    /* .capture_begin */ cuda_be_capture_begin,
    /* .capture_end */ cuda_be_capture_end,
    /* .graph_run */ cuda_be_graph_run,
    /* .graph_drop */ cuda_be_graph_drop,
    /* .weight_fuse */ cuda_be_weight_fuse,
    /* .mul_mat_swiglu */ cuda_op_mul_mat_swiglu,
    /* .rope_kv_store */ cuda_op_rope_kv_store,
};

extern "C" struct backend *cuda_backend_new(int device, struct inf_error *err)
{
    int n = 0;
    if (cudaGetDeviceCount(&n) != cudaSuccess || n == 0) {
        cudaGetLastError();
        inf_error_set(err, INF_EUNSUPPORTED, "cuda: no CUDA device (driver missing or no GPU)");
        return NULL;
    }
    if (device < 0 || device >= n) {
        inf_error_set(err, INF_EINVAL, "cuda: device %d does not exist (%d device%s)", device, n,
                      n == 1 ? "" : "s");
        return NULL;
    }
    cudaDeviceProp p;
    cudaError_t e = cudaSetDevice(device);
    if (e == cudaSuccess)
        e = cudaGetDeviceProperties(&p, device);
    struct cuda_ctx *c = (struct cuda_ctx *)calloc(1, sizeof(*c));
    struct backend *be = (struct backend *)calloc(1, sizeof(*be));
    if (e == cudaSuccess && c)
        e = cudaStreamCreateWithFlags(&c->stream, cudaStreamNonBlocking);
    if (e != cudaSuccess || !c || !be) {
        inf_error_set(err, e != cudaSuccess ? INF_EDEVICE : INF_ENOMEM, "cuda: device %d: %s",
                      device, e != cudaSuccess ? cudaGetErrorString(e) : "out of memory");
        free(c);
        free(be);
        return NULL;
    }
    c->device = device;
    unsigned long long budget = 0;
    if (fault_device_free(&budget)) {
        c->budget_set = 1;
        c->budget = (size_t)budget;
    }
    c->sm = p.major * 10 + p.minor;
    c->n_sm = p.multiProcessorCount;
    c->mem_total = p.totalGlobalMem;
    cuda_knobs_read(c); /* the A/B switches (cuda/knobs.cu), after c->sm */
    cuda_q6p_budget(c, CUDA_Q6P_PERCENT);
    be->ops = &cuda_backend_ops;
    be->ctx = c;
    log_info("cuda: device %d: %s, sm_%d, %d SMs, %zu MiB%s", device, p.name, c->sm, c->n_sm,
             (size_t)(p.totalGlobalMem >> 20), c->pdl ? ", programmatic dependent launch" : "");
    return be;
}

extern "C" void cuda_backend_set_attention_tc(struct backend *be, int on)
{
    cuda_ctx_of(be)->att_tc = on != 0;
}

extern "C" int cuda_backend_attention_tc(const struct backend *be)
{
    return cuda_ctx_of((struct backend *)be)->att_tc;
}

extern "C" int cuda_backend_set_batch_invariant(struct backend *be, int on)
{
    return cuda_mmc_set_batch_invariant(cuda_ctx_of(be), on);
}

extern "C" int cuda_backend_mm_cublas(struct backend *be, const struct backend_weight *w)
{
    return cuda_mmc_uses(cuda_ctx_of(be), w);
}

extern "C" int cuda_backend_mm_deq_min(struct backend *be, const struct backend_weight *w)
{
    return cuda_mmd_min_rows(cuda_ctx_of(be), w);
}

extern "C" int cuda_backend_mmqh_min(struct backend *be)
{
    return cuda_ctx_of(be)->mmqh;
}

extern "C" int cuda_backend_mmq6w_min(struct backend *be)
{
    return cuda_ctx_of(be)->mmq6w;
}

extern "C" int cuda_backend_mm_deq_resident(struct backend *be, const struct backend_weight *w)
{
    return cuda_mmd_resident(cuda_ctx_of(be), w);
}

extern "C" int cuda_backend_set_f16_weights(struct backend *be, size_t bytes)
{
    struct cuda_ctx *c = cuda_ctx_of(be);
    if (c->weight_bytes)
        return INF_EINVAL; /* weights already registered without copies */
    c->f16w.budget = bytes;
    return 0;
}

extern "C" int cuda_backend_set_q6_planes(struct backend *be, int percent)
{
    struct cuda_ctx *c = cuda_ctx_of(be);
    if (c->weight_bytes || percent < 0 || percent > 100)
        return INF_EINVAL; /* weights already registered */
    cuda_q6p_budget(c, percent);
    return 0;
}

extern "C" size_t cuda_backend_f16_bytes(const struct backend *be)
{
    return ((const struct cuda_ctx *)be->ctx)->f16w.bytes;
}

extern "C" size_t cuda_backend_aux_bytes(const struct backend *be)
{
    const struct cuda_ctx *c = (const struct cuda_ctx *)be->ctx;
    return c->aux_bytes;
}

extern "C" size_t cuda_backend_q6p_bytes(const struct backend *be)
{
    return ((const struct cuda_ctx *)be->ctx)->q6p.bytes;
}

extern "C" int cuda_backend_mem(const struct backend *be, size_t *weights, size_t *free_b,
                                size_t *total)
{
    const struct cuda_ctx *c = (const struct cuda_ctx *)be->ctx;
    *weights = c->weight_bytes;
    *free_b = *total = 0;
    cudaSetDevice(c->device);
    return cuda_mem_info(c, free_b, total) == cudaSuccess ? 0 : INF_EDEVICE;
}

/* cuda/wcopies.cuh's table on the host (tests/cuda/test_cuda_host.c),
 * entries without device memory (cudaFree(NULL) does nothing): the budget
 * (and force past it), the key (rows, ne0, ne1: a view with more rows
 * finds nothing), re-keying, dropping, growth past the first 64 slots,
 * freeing. Returns the checks that failed (the first into msg). */
extern "C" int64_t cuda_wcopies_host_check(char *msg, size_t cap)
{
    int64_t bad = 0;
    auto expect = [&](bool ok, const char *what) {
        if (!ok && bad++ == 0 && msg && cap)
            snprintf(msg, cap, "%s", what);
    };
    static char rows[300];
    struct cuda_wcopies t;
    memset(&t, 0, sizeof(t));
    t.budget = 100;
    expect(cuda_wcopy_room(&t, 60, 0) == 1, "room for 60 of 100");
    cuda_wcopy_put(&t, rows, 4, 2, NULL, 60);
    expect(cuda_wcopy_room(&t, 50, 0) == 0, "no room for 50 more");
    expect(cuda_wcopy_room(&t, 50, 1) == 1, "forced room for 50 more");
    expect(cuda_wcopy_room(&t, 40, 0) == 1, "room for 40 more");
    cuda_wcopy_put(&t, rows + 1, 4, 2, NULL, 40);
    expect(t.n == 2 && t.bytes == 100, "two entries, 100 bytes");
    expect(cuda_wcopy_find(&t, rows, 4, 2) != NULL, "found by its key");
    expect(cuda_wcopy_find(&t, rows, 4, 3) == NULL, "a view of more rows finds none");
    expect(cuda_wcopy_find(&t, rows, 8, 2) == NULL, "another ne0 finds none");
    cuda_wcopy_rekey(&t, rows, rows + 2);
    expect(cuda_wcopy_find(&t, rows, 4, 2) == NULL && cuda_wcopy_find(&t, rows + 2, 4, 2) != NULL,
           "re-keyed to its new rows");
    cuda_wcopy_drop(&t, rows + 2, 4, 2);
    expect(t.n == 1 && t.bytes == 40 && cuda_wcopy_find(&t, rows + 2, 4, 2) == NULL &&
               cuda_wcopy_find(&t, rows + 1, 4, 2) != NULL,
           "dropped one, kept the other");
    cuda_wcopy_drop(&t, rows + 2, 4, 2); /* twice: nothing */
    expect(t.n == 1 && t.bytes == 40, "a second drop does nothing");
    for (int i = 3; i < 203; i++) {
        expect(cuda_wcopy_room(&t, 1, 1) == 1, "forced room while growing");
        cuda_wcopy_put(&t, rows + i, 4, 2, NULL, 1);
    }
    expect(t.n == 201 && t.cap >= 201 && t.bytes == 240, "201 entries after growing");
    int found = 0;
    for (int i = 3; i < 203; i++)
        found += cuda_wcopy_find(&t, rows + i, 4, 2) != NULL;
    expect(found == 200, "every grown entry found");
    cuda_wcopy_free(&t);
    expect(t.n == 0 && t.cap == 0 && t.bytes == 0 && t.e == NULL && t.budget == 100, "freed, budget kept");
    cudaGetLastError(); /* cudaFree(NULL) without a device may leave an error */
    return bad;
}
