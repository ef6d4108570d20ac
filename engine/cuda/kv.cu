/* cuda/kv — the KV cache the backend owns (backend.h ops kv_alloc, kv_free,
 * kv_copy_blocks, kv_read): one device allocation laid out as common.cuh's
 * struct backend_kv says. Block copies (copy-on-write) are queued on the
 * backend's stream, in order with the steps, and never wait: one strided
 * 2-D copy per block moves it in every plane of every layer.
 */
#include <stdlib.h>

#include "engine/cuda/common.cuh"

extern "C" {
#include "engine/log.h"
}

int cuda_kv_alloc(struct backend *be, const struct backend_kv_shape *s, struct backend_kv **out)
{
    struct cuda_ctx *c = cuda_ctx_of(be);
    *out = NULL;
    if (s->n_layer < 1 || s->n_blocks < 1 || s->block_size < 1 || s->row_len < 1)
        return INF_EINVAL;
    if (cuda_op_begin(c))
        return c->err == INF_ENOMEM ? INF_ENOMEM : INF_EDEVICE;
    const size_t row_bytes = (size_t)s->row_len * sizeof(quant_f16);
    const size_t slots = (size_t)s->n_blocks * (size_t)s->block_size;
    if (slots > SIZE_MAX / row_bytes || slots * row_bytes > SIZE_MAX / 2 / (size_t)s->n_layer)
        return INF_ENOMEM;
    struct backend_kv *kv = (struct backend_kv *)calloc(1, sizeof(*kv));
    if (!kv)
        return INF_ENOMEM;
    kv->s = *s;
    kv->row_bytes = row_bytes;
    kv->plane = slots * row_bytes;
    const size_t bytes = kv->plane * 2 * (size_t)s->n_layer;
    void *p = NULL;
    cudaError_t e = cuda_malloc(c, &p, bytes);
    if (e == cudaErrorMemoryAllocation) {
        /* an answer, not a broken backend: the caller may try a smaller one */
        size_t fr = 0, tot = 0;
        cudaGetLastError();
        cuda_mem_info(c, &fr, &tot);
        log_error("cuda: KV cache (%zu MiB) does not fit: %zu MiB free of %zu MiB", bytes >> 20,
                  fr >> 20, tot >> 20);
        free(kv);
        return INF_ENOMEM;
    }
    if (CUDA_CHECK_CTX(c, e)) {
        free(kv);
        return INF_EDEVICE;
    }
    kv->data = (char *)p;
    if (CUDA_CHECK_CTX(c, cudaMemsetAsync(p, 0, bytes, c->stream))) {
        const int rc = c->err;
        cudaFree(p);
        free(kv);
        return rc == INF_ENOMEM ? INF_ENOMEM : INF_EDEVICE;
    }
    *out = kv;
    return 0;
}

void cuda_kv_free(struct backend *be, struct backend_kv *kv)
{
    if (!kv)
        return;
    struct cuda_ctx *c = cuda_ctx_of(be);
    cudaSetDevice(c->device);
    cudaStreamSynchronize(c->stream); /* nothing queued may still use it */
    cudaFree(kv->data);
    free(kv);
}

void cuda_kv_copy_blocks(struct backend *be, struct backend_kv *kv, const int32_t *src,
                         const int32_t *dst, int32_t n)
{
    struct cuda_ctx *c = cuda_ctx_of(be);
    if (cuda_op_begin(c))
        return;
    const size_t bb = (size_t)kv->s.block_size * kv->row_bytes;
    for (int32_t i = 0; i < n; i++) {
        if (src[i] < 0 || src[i] >= kv->s.n_blocks || dst[i] < 0 || dst[i] >= kv->s.n_blocks) {
            c->err = INF_EINTERNAL; /* the caller checks the ids */
            return;
        }
        /* rows of the 2-D copy: the 2 * n_layer planes, `plane` bytes apart */
        if (CUDA_CHECK_CTX(c, cudaMemcpy2DAsync(kv->data + (size_t)dst[i] * bb, kv->plane,
                                                kv->data + (size_t)src[i] * bb, kv->plane, bb,
                                                2 * (size_t)kv->s.n_layer,
                                                cudaMemcpyDeviceToDevice, c->stream)))
            return;
    }
}

int cuda_kv_read(struct backend *be, struct backend_kv *kv, int32_t layer, int64_t slot0,
                 int64_t n, void *k_host, void *v_host)
{
    struct cuda_ctx *c = cuda_ctx_of(be);
    const int64_t slots = (int64_t)kv->s.n_blocks * kv->s.block_size;
    if (layer < 0 || layer >= kv->s.n_layer || slot0 < 0 || n < 0 || slot0 + n > slots)
        return INF_EINVAL;
    if (!cuda_op_begin(c) && n > 0) {
        const size_t off = (size_t)slot0 * kv->row_bytes, bytes = (size_t)n * kv->row_bytes;
        if (!CUDA_CHECK_CTX(c, cudaMemcpyAsync(k_host, (char *)cuda_kv_plane(kv, layer, 0) + off,
                                               bytes, cudaMemcpyDeviceToHost, c->stream)))
            CUDA_CHECK_CTX(c, cudaMemcpyAsync(v_host, (char *)cuda_kv_plane(kv, layer, 1) + off,
                                              bytes, cudaMemcpyDeviceToHost, c->stream));
    }
    return be->ops->sync(be);
}
