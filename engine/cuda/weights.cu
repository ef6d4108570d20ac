/* cuda/weights — the resident weights (split from cuda/backend.cu, the op
 * table's glue): weight_register uploads a tensor and makes what its
 * readers need at load (Q4_0/Q8_0's aligned layout, cuBLASLt's algorithms,
 * the F16 copy, Q6_K's expanded copy, the planes under their budget);
 * weight_release frees all of it; weight_fuse moves a layer's Q/K/V or
 * gate/up into one allocation so one product reads them together. */
#include <stdlib.h>
#include <string.h>

#include "engine/cuda/common.cuh"
#include "engine/cuda/mmq.cuh"
#include "engine/cuda/qtypes.cuh"

extern "C" {
#include "engine/cuda/cuda.h"
#include "engine/log.h"
#include "engine/quant.h"
}

int cuda_be_weight_register(struct backend *be, struct backend_weight *w)
{
    struct cuda_ctx *c = cuda_ctx_of(be);
    if (cuda_op_begin(c))
        return c->err;
    switch (w->type) {
    case QT_F32: case QT_F16: case QT_BF16: case QT_Q4_0: case QT_Q8_0:
    case QT_Q4_K: case QT_Q5_K: case QT_Q6_K:
        break;
    default:
        return INF_EUNSUPPORTED;
    }
    const size_t bytes = w->row_bytes * (size_t)w->ne1;
    void *p = NULL;
    cudaError_t e = cuda_malloc(c, &p, bytes + CUDA_W_SLACK);
    if (e != cudaSuccess) {
        cudaGetLastError();
        size_t fr = 0, tot = 0;
        cuda_mem_info(c, &fr, &tot);
        log_error("cuda: tensor '%s' (%zu MiB) does not fit: %zu MiB free of %zu MiB after %zu MiB "
                  "of weights",
                  w->name, bytes >> 20, fr >> 20, tot >> 20, c->weight_bytes >> 20);
        return INF_ENOMEM;
    }
    /* on the backend's stream, then waited for: a plain cudaMemcpy from
     * pageable memory may return before the data has landed, and the ops
     * run on a non-blocking stream that would not wait for it */
    if (CUDA_CHECK_CTX(c, cudaMemcpyAsync(p, w->host, bytes, cudaMemcpyHostToDevice, c->stream)) ||
        CUDA_CHECK_CTX(c, cudaStreamSynchronize(c->stream))) {
        cudaFree(p);
        return c->err;
    }
    w->data = p;
    c->weight_bytes += bytes;
    /* a matrix one-row products would not give to mmvt (cuda_small_early) */
    if (w->ne1 > 1 && w->type != QT_Q4_K && w->type != QT_Q5_K && w->type != QT_Q6_K)
        c->mm_not_k++;
    /* Q4_0/Q8_0: the 16-byte aligned layout every GPU reader of them uses
     * (cuda/qtypes.cuh: cuda_q0_packed), rewritten in place; F32/F16/BF16
     * matrices: their cuBLASLt algorithms, chosen now (never inside a
     * recorded step; without cuBLASLt the float kernel serves) */
    {
        int rc = w->type == QT_Q4_0   ? cuda_q0_repack<QT_Q4_0>(c, w)
                 : w->type == QT_Q8_0 ? cuda_q0_repack<QT_Q8_0>(c, w)
                                      : cuda_mmc_weight_add(c, w);
        /* batch_invariant = false: a K-quant's F16 shape for its large
         * batches (cuda/mm_deq.cu) */
        if (!rc)
            rc = cuda_mmd_weight_add(c, w);
        if (rc) {
            cudaFree(p);
            w->data = NULL;
            c->weight_bytes -= bytes;
            return rc;
        }
    }
    /* Q6_K: the MMQ kernels' expanded copy (cuda/mmq_q6_k.cu), for every
     * tensor a matrix product may read past the decode batch (not the
     * embedding table, which only get_rows reads); without the memory the
     * raw kernels serve, slower, with the same results */
    if (w->type == QT_Q6_K && w->ne0 % QK_K == 0 && strncmp(w->name, "token_embd", 10) != 0 &&
        !getenv("INFERD_NO_Q6K_EXPAND")) {
        const int rc = cuda_mmq_expand_q6_K(c, w);
        if (rc == INF_ENOMEM)
            log_warn("cuda: no memory for the expanded copy of '%s' (%zu MiB): its prefill products "
                     "take the raw Q6_K kernels",
                     w->name, cuda_mmq_expand_q6_K_bytes(w) >> 20);
        else if (rc)
            return rc;
        else
            c->aux_bytes += cuda_mmq_expand_q6_K_bytes(w);
        /* and mmq6w's planes where the budget allows (cuda/q6planes.cu,
         * which also leaves out a weight the model will fuse): without
         * them its batches expand in the kernel, same bits */
        if (!rc) {
            const int prc = cuda_q6p_add(c, w, 0);
            if (prc < 0)
                return prc;
        }
    }
    /* Q4_K: mmq4p's planes under the same budget and rules (c->q4p;
     * cuda/mmq4p.cu; cuda_q6p_add says which weights qualify) */
    if (w->type == QT_Q4_K) {
        const int prc = cuda_q6p_add(c, w, 0);
        if (prc < 0)
            return prc;
    }
    return 0;
}

/* A fused allocation (ops->weight_fuse): the members' rows in order, their
 * expanded rows in the same order; freed when the last member goes. */
struct backend_wgroup {
    void *data;
    void *aux;  /* NULL: the members have no expanded copy */
    int refs;   /* members not yet released */
};

void cuda_be_weight_release(struct backend *be, struct backend_weight *w)
{
    struct cuda_ctx *c = cuda_ctx_of(be);
    if (w->data || w->aux) {
        cudaSetDevice(c->device);
        cudaStreamSynchronize(c->stream); /* nothing queued may still read it */
        cuda_mmc_weight_drop(c, w);
        cuda_mmd_weight_drop(c, w);
        cuda_q6p_drop(c, w);
    }
    if (w->data)
        c->weight_bytes -= w->row_bytes * (size_t)w->ne1;
    if (w->aux)
        c->aux_bytes -= cuda_mmq_expand_q6_K_bytes(w);
    if (w->group) {
        /* a slice: the group's memory goes with its last member */
        struct backend_wgroup *g = w->group;
        if (--g->refs == 0) {
            cudaFree(g->data);
            cudaFree(g->aux);
            free(g);
        }
    } else {
        cudaFree(w->data);
        cudaFree(w->aux);
    }
    w->data = NULL;
    w->aux = NULL;
    w->group = NULL;
}

/* cudaMalloc for weight_fuse: 0, INF_ENOMEM (an answer: the caller keeps
 * the weights unfused) or the device's error */
static int cuda_fuse_malloc(struct cuda_ctx *c, void **p, size_t bytes)
{
    const cudaError_t e = cuda_malloc(c, p, bytes);
    if (e == cudaSuccess)
        return 0;
    *p = NULL;
    if (e == cudaErrorMemoryAllocation) {
        cudaGetLastError();
        return INF_ENOMEM;
    }
    CUDA_CHECK_CTX(c, e);
    return c->err;
}

/* ops->weight_fuse: one allocation for n registered weights (and one for
 * their expanded copies), filled by device-to-device copies, then the
 * originals freed. Peak memory is the group twice, for one layer's Q/K/V
 * or gate/up at a time when model.c fuses as it loads. */
int cuda_be_weight_fuse(struct backend *be, struct backend_weight **w, int n)
{
    struct cuda_ctx *c = cuda_ctx_of(be);
    if (cuda_op_begin(c))
        return c->err;
    if (n < 2)
        return INF_EINVAL;
    /* F32/F16/BF16 are not fused: cuBLASLt has one algorithm per
     * registered weight shape (cuda/mm_cublas.cu), and one product over a
     * fused view would be another shape, whose algorithm would give its
     * rows other bits than the separate products' */
    if (w[0]->type == QT_F32 || w[0]->type == QT_F16 || w[0]->type == QT_BF16)
        return INF_EUNSUPPORTED;
    size_t bytes = 0, aux = 0;
    for (int i = 0; i < n; i++) {
        const struct backend_weight *a = w[i];
        if (!a->data || a->group || a->type != w[0]->type || a->ne0 != w[0]->ne0 ||
            a->row_bytes != w[0]->row_bytes || !a->aux != !w[0]->aux)
            return INF_EINVAL;
        for (int k = 0; k < i; k++)
            if (w[k] == a)
                return INF_EINVAL; /* one weight twice would be freed twice */
        bytes += a->row_bytes * (size_t)a->ne1;
        if (a->aux)
            aux += cuda_mmq_expand_q6_K_bytes(a);
    }
    struct backend_wgroup *g = (struct backend_wgroup *)calloc(1, sizeof(*g));
    if (!g)
        return INF_ENOMEM;
    int rc = cuda_fuse_malloc(c, &g->data, bytes + CUDA_W_SLACK);
    if (!rc && aux)
        rc = cuda_fuse_malloc(c, &g->aux, aux);
    size_t off = 0, aoff = 0;
    for (int i = 0; i < n && !rc; i++) {
        const size_t b = w[i]->row_bytes * (size_t)w[i]->ne1;
        if (CUDA_CHECK_CTX(c, cudaMemcpyAsync((char *)g->data + off, w[i]->data, b,
                                              cudaMemcpyDeviceToDevice, c->stream)))
            rc = c->err;
        off += b;
        if (!rc && w[i]->aux) {
            const size_t ab = cuda_mmq_expand_q6_K_bytes(w[i]);
            if (CUDA_CHECK_CTX(c, cudaMemcpyAsync((char *)g->aux + aoff, w[i]->aux, ab,
                                                  cudaMemcpyDeviceToDevice, c->stream)))
                rc = c->err;
            aoff += ab;
        }
    }
    if (!rc && CUDA_CHECK_CTX(c, cudaStreamSynchronize(c->stream)))
        rc = c->err;
    if (rc) {
        cudaStreamSynchronize(c->stream);
        cudaFree(g->data);
        cudaFree(g->aux);
        free(g);
        return rc;
    }
    off = aoff = 0;
    for (int i = 0; i < n; i++) {
        struct backend_weight *a = w[i];
        cuda_q6p_drop(c, a); /* mmq6w's planes: a product over the group is a view, which has none */
        cuda_mmd_rekey(c, a->data, (char *)g->data + off); /* its resident F16 copy, if any */
        cudaFree(a->data);
        a->data = (char *)g->data + off;
        off += a->row_bytes * (size_t)a->ne1;
        if (a->aux) {
            cudaFree(a->aux);
            a->aux = (char *)g->aux + aoff;
            aoff += cuda_mmq_expand_q6_K_bytes(a);
        }
        a->group = g;
    }
    g->refs = n;
    return 0;
}
