/* cuda/mmq_q4_k — the Q4_K MMQ instantiations mmqk_kernel<Q4_K, KDR, EXP>
 * (cuda/mmqk_impl.cuh), mmqs_kernel<Q4_K, false> (cuda/mmqs_impl.cuh), and
 * the expansion that makes the EXP kernels' copy of a weight at load; one
 * file per type so builds run in parallel.
 *
 * EXP: each value times its sub-block's scale (t = s * q, 10 bits) as two
 * int8 planes (cuda/mmqk_impl.cuh, mmqk_w<QT_Q4_K, KDR, true>), so MMQ
 * accumulates a super-block in the mma's C operands instead of scaling
 * each sub-block's sums by IMAD. 528 bytes per super-block (3.7x the
 * 144 of the raw blocks, which the decode kernels keep reading): device
 * memory for prefill speed, never for results. */
#include "engine/cuda/mmqk_impl.cuh"
#include "engine/cuda/mmqs_impl.cuh"

MMQK_DEFINE(QT_Q4_K)
MMQS_DEFINE(QT_Q4_K)

/* one warp per super-block, 8 values per lane (k order: sub-block lane / 4) */
static __global__ void mmq_expand_q4_K_kernel(const struct block_q4_K *__restrict__ src,
                                              uint8_t *__restrict__ dst, int64_t n_blocks)
{
    const int64_t ib = (int64_t)blockIdx.x * (blockDim.x / CUDA_WARP) + threadIdx.x / CUDA_WARP;
    const int lane = threadIdx.x % CUDA_WARP;
    if (ib >= n_blocks)
        return;
    const struct block_q4_K *b = src + ib;
    uint8_t *o = dst + ib * MMQ_Q4X_BYTES;
    const int j = lane / 4; /* sub-block */
    int sc, m;
    cuda_k4_scale_min(b->scales, j, &sc, &m);
    (void)m;
    uint32_t lo[2] = {0, 0}, hi[2] = {0, 0};
#pragma unroll
    for (int k = 0; k < 8; k++) {
        const int l = 8 * (lane % 4) + k; /* element 32 j + l */
        const uint8_t byte = b->qs[32 * (j / 2) + l];
        const int t = sc * ((j & 1) ? (byte >> 4) : (byte & 0x0f));
        lo[k / 4] |= (uint32_t)(t & 63) << (8 * (k % 4));
        hi[k / 4] |= (uint32_t)(t >> 6) << (8 * (k % 4));
    }
    *(uint2 *)(o + 8 * lane) = make_uint2(lo[0], lo[1]);
    *(uint2 *)(o + 256 + 8 * lane) = make_uint2(hi[0], hi[1]);
    if (lane < 8) { /* min `lane`, for the min term's mma */
        int s2, m2;
        cuda_k4_scale_min(b->scales, lane, &s2, &m2);
        o[520 + lane] = (uint8_t)m2;
    }
    if (lane == 8)
        *(float *)(o + 512) = cuda_h2f(b->d);
    if (lane == 9)
        *(float *)(o + 516) = cuda_h2f(b->dmin);
}

size_t cuda_mmq_expand_q4_K_bytes(const struct backend_weight *w)
{
    return (size_t)(w->ne0 / QK_K) * MMQ_Q4X_BYTES * (size_t)w->ne1;
}

int cuda_mmq_expand_q4_K(struct cuda_ctx *c, struct backend_weight *w)
{
    if (w->type != QT_Q4_K || w->ne0 % QK_K || !w->data)
        return INF_EUNSUPPORTED;
    void *p = NULL;
    if (cuda_malloc(c, &p, cuda_mmq_expand_q4_K_bytes(w)) != cudaSuccess) {
        cudaGetLastError();
        return INF_ENOMEM;
    }
    const int64_t nb = (w->ne0 / QK_K) * w->ne1;
    const int per = 8;
    mmq_expand_q4_K_kernel<<<cuda_blocks(nb, per), per * CUDA_WARP, 0, c->stream>>>(
        (const struct block_q4_K *)w->data, (uint8_t *)p, nb);
    if (CUDA_CHECK_LAUNCH(c, "mmq_expand_q4_K kernel") || CUDA_CHECK_CTX(c, cudaStreamSynchronize(c->stream))) {
        cudaFree(p);
        return c->err;
    }
    w->aux = p;
    return 0;
}
