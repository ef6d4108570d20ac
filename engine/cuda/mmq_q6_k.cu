/* cuda/mmq_q6_k — the Q6_K MMQ instantiations mmqk_kernel<Q6_K, KDR, EXP>,
 * KDR 1|2 x EXP false|true (cuda/mmqk_impl.cuh), mmqs_kernel<Q6_K, EXP>
 * (cuda/mmqs_impl.cuh), and the expansion that
 * makes the EXP kernels' copy of a weight at load.
 *
 * EXP: Q6_K's 210-byte blocks are only 2-byte aligned and pack each value
 * in two places (4 bits in ql, 2 in qh), so the raw kernels rebuild every
 * fragment word from two funnel-shifted loads and six logic ops; the
 * expanded copy (288 bytes per super-block: 1.37x the bytes) is read with
 * one aligned load per fragment word. It costs device memory, not
 * results: both give the same int8 values to the same mma. */
#include "engine/cuda/mmqk_impl.cuh"
#include "engine/cuda/mmqs_impl.cuh"
#include "engine/cuda/mmqt_impl.cuh"

MMQK_DEFINE(QT_Q6_K)
MMQS_DEFINE(QT_Q6_K)
MMQT_DEFINE(QT_Q6_K)

/* one warp per super-block, 8 values per lane (engine/quant.c's
 * dequant_q6_K order: half h, quarter t, l) */
static __global__ void mmq_expand_q6_K_kernel(const struct block_q6_K *__restrict__ src,
                                              uint8_t *__restrict__ dst, int64_t n_blocks)
{
    const int64_t ib = (int64_t)blockIdx.x * (blockDim.x / CUDA_WARP) + threadIdx.x / CUDA_WARP;
    const int lane = threadIdx.x % CUDA_WARP;
    if (ib >= n_blocks)
        return;
    const struct block_q6_K *b = src + ib;
    uint8_t *o = dst + ib * MMQ_Q6X_BYTES;
    uint32_t packed[2] = {0, 0};
#pragma unroll
    for (int k = 0; k < 8; k++) {
        const int e = 8 * lane + k, h = e / 128, t = (e % 128) / 32, l = e % 32;
        const uint8_t lo = b->ql[64 * h + 32 * (t & 1) + l];
        const int q = ((t < 2 ? (lo & 0x0f) : (lo >> 4)) | (((b->qh[32 * h + l] >> (2 * t)) & 3) << 4)) - 32;
        packed[k / 4] |= (uint32_t)(uint8_t)(int8_t)q << (8 * (k % 4));
    }
    *(uint2 *)(o + 8 * lane) = make_uint2(packed[0], packed[1]);
    if (lane < 16)
        o[256 + lane] = (uint8_t)b->scales[lane];
    if (lane == 16)
        *(float *)(o + 272) = cuda_h2f(b->d);
    if (lane > 16 && lane < 20)
        *(uint32_t *)(o + 276 + 4 * (lane - 17)) = 0;
}

size_t cuda_mmq_expand_q6_K_bytes(const struct backend_weight *w)
{
    return (size_t)(w->ne0 / QK_K) * MMQ_Q6X_BYTES * (size_t)w->ne1;
}

int cuda_mmq_expand_q6_K(struct cuda_ctx *c, struct backend_weight *w)
{
    if (w->type != QT_Q6_K || w->ne0 % QK_K || !w->data)
        return INF_EUNSUPPORTED;
    void *p = NULL;
    if (cuda_malloc(c, &p, cuda_mmq_expand_q6_K_bytes(w)) != cudaSuccess) {
        cudaGetLastError();
        return INF_ENOMEM;
    }
    const int64_t nb = (w->ne0 / QK_K) * w->ne1;
    const int per = 8;
    mmq_expand_q6_K_kernel<<<cuda_blocks(nb, per), per * CUDA_WARP, 0, c->stream>>>(
        (const struct block_q6_K *)w->data, (uint8_t *)p, nb);
    if (CUDA_CHECK_LAUNCH(c, "mmq_expand_q6_K kernel") || CUDA_CHECK_CTX(c, cudaStreamSynchronize(c->stream))) {
        cudaFree(p);
        return c->err;
    }
    w->aux = p;
    return 0;
}
