/* cuda/q6planes — mmq6w's weight planes made once at load (the design
 * card's EXP = true for the Q6_K int8 product; cuda/mmq6w.cu), and since
 * session 55 mmq4p's for Q4_K (cuda/mmq4p.cu: u = sc q = 32 P1 + P2, made
 * from the raw rows by mmq4p_word) in the same layout, table and budget.
 *
 * Why: mmq6w's consumers turn each fragment word of the expanded copy
 * into its two u8 planes (mmq6w_planes: ~12 instructions a word, 64 words
 * a thread a super-block) on the same schedulers that issue its wgmma and
 * run its chain. Session 50's lever sweep (bench/RESULTS.md: the kernel
 * with the raw words as the planes, wrong results, timing only) put that
 * expansion at 0.82x of mmq6w's time. Made at load, the planes come by
 * tensor copy and descriptor like the activations (wgmma's SS form, at the
 * pipe's rate with two warpgroups: session 51's probe), and the kernel has
 * no expansion. Measured (bench/RESULTS.md session 53, H100): q6_K 4096 x
 * 14336 x 512 141.7 -> 130.0 us (0.917x), the 7B's ffn-up / ffn-down at
 * 512 rows 0.869x / 0.897x, at 2048 0.84-0.93x. The price: 2 bytes a
 * weight beside the expanded copy's 1.125 and the raw 0.82 (a 7B Q4_K_M's
 * Q6_K matrices but the output head: ~1.9 GB), so it is a budget: config
 * q6_planes_percent of the device's memory (default CUDA_Q6P_PERCENT, 5;
 * only where mmq6w runs), or env INFERD_Q6P_MB in MiB (A/B runs).
 * Same planes, same wgmma sums, same chain: the same bits as the
 * expanded form (tests: cuda-ops' mm-variant rows, q7 GPU vs CPU).
 *
 * Layout: row r of a weight = plane 1's ne0 bytes (P1 + 128 of each weight,
 * k order) then plane 2's ne0 bytes (P2 - 1): a tensor map over rows of
 * 2 ne0 bytes picks any plane's 128-byte k range for 128 rows in one
 * copy, swizzled as wgmma reads it.
 *
 * The table: cuda/wcopies.cuh (c->q6p), as the resident F16 copies'. */
#include "engine/cuda/common.cuh"
#include "engine/cuda/mmq.cuh"
#include "engine/cuda/mmq6w_planes.cuh"
#include "engine/cuda/mmqk_impl.cuh" /* MMQ_Q6X_BYTES: the expanded copy's super-block */

extern "C" {
#include "engine/log.h"
}

static size_t q6p_bytes(const struct backend_weight *w)
{
    return (size_t)w->ne1 * 2 * (size_t)w->ne0;
}

/* one thread a fragment word (4 weights of one 16-element scale): the
 * expanded copy's word and scale through mmq6w_planes, the kernel's own
 * instructions, into both planes */
static __global__ void q6p_make_kernel(const uint8_t *__restrict__ aux, uint8_t *__restrict__ planes, int64_t ne0,
                                       int64_t n_words)
{
    const int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n_words)
        return;
    const int64_t wpr = ne0 / 4, r = i / wpr, k = 4 * (i % wpr), nbr = ne0 / QK_K;
    const uint8_t *sb = aux + ((size_t)r * (size_t)nbr + (size_t)(k / QK_K)) * MMQ_Q6X_BYTES;
    const int kk = (int)(k % QK_K);
    uint32_t p1, p2;
    mmq6w_planes(*(const uint32_t *)(sb + kk), (int)(int8_t)sb[QK_K + kk / 16], p1, p2);
    uint8_t *row = planes + (size_t)r * 2 * (size_t)ne0;
    *(uint32_t *)(row + k) = p1;
    *(uint32_t *)(row + ne0 + k) = p2;
}

/* Q4_K's (cuda/mmq4p.cu): one thread a word of four weights of one
 * sub-block, from the raw rows (mmq4p_word, the host check's), into both
 * planes in the same layout */
static __global__ void q4p_make_kernel(const uint8_t *__restrict__ wq, size_t row_bytes, uint8_t *__restrict__ planes,
                                       int64_t ne0, int64_t n_words)
{
    const int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n_words)
        return;
    const int64_t wpr = ne0 / 4, r = i / wpr, k = 4 * (i % wpr);
    uint32_t p1, p2;
    mmq4p_word(wq + (size_t)r * row_bytes + (size_t)(k / QK_K) * 144, (int)(k % QK_K), p1, p2);
    uint8_t *row = planes + (size_t)r * 2 * (size_t)ne0;
    *(uint32_t *)(row + k) = p1;
    *(uint32_t *)(row + ne0 + k) = p2;
}

void cuda_q6p_budget(struct cuda_ctx *c, int percent)
{
    if (c->q6p_env) /* INFERD_Q6P_MB (A/B runs) */
        return;
    /* where a kernel reads them: mmq6w (Q6_K) or mmq4p (Q4_K, mmqh's wgmma
     * form on) */
    const bool reader = c->mmq6w || (c->q4p && c->mmqh && c->mmqw >= 2);
    c->q6p.budget = c->sm != 90 || !cuda_mmqw_built() || !reader || percent <= 0
                        ? 0
                        : c->mem_total / 100 * (size_t)percent;
}

int cuda_q6p_add(struct cuda_ctx *c, const struct backend_weight *w, int force)
{
    /* Q6_K from its expanded copy; Q4_K (c->q4p) from its raw rows */
    const bool q6 = w->type == QT_Q6_K;
    if (!(q6 ? w->aux != NULL : w->type == QT_Q4_K && c->q4p && w->row_bytes % 16 == 0) || !w->data ||
        w->ne0 % QK_K)
        return 0;
    /* at load, not for the embedding table (only get_rows reads it), nor
     * for a weight the model will fuse (backend_weight.fuse_next, by the
     * members' types): weight_fuse drops a member's planes, as a product
     * over the group reads none, and made first they cost load time (the
     * 7B-shaped load ~0.4-0.8 s, session 55) and hold budget until then */
    if (!force && (w->fuse_next || strncmp(w->name, "token_embd", 10) == 0))
        return 0;
    const size_t bytes = q6p_bytes(w);
    if ((!force && bytes > ((size_t)512 << 20)) || !cuda_wcopy_room(&c->q6p, bytes, force))
        return 0;
    void *p = NULL;
    if (cuda_malloc(c, &p, bytes) != cudaSuccess) {
        cudaGetLastError();
        if (!c->q6p.full)
            log_warn("cuda: q6_planes: no device memory for the planes of '%s' (%zu MiB): its batches "
                     "expand in the kernel (further refusals not logged)",
                     w->name, bytes >> 20);
        c->q6p.full = 1;
        return 0;
    }
    const int64_t n_words = w->ne1 * (w->ne0 / 4);
    if (q6)
        q6p_make_kernel<<<(unsigned)((n_words + 255) / 256), 256, 0, c->stream>>>((const uint8_t *)w->aux,
                                                                                  (uint8_t *)p, w->ne0, n_words);
    else
        q4p_make_kernel<<<(unsigned)((n_words + 255) / 256), 256, 0, c->stream>>>(
            (const uint8_t *)w->data, w->row_bytes, (uint8_t *)p, w->ne0, n_words);
    if (CUDA_CHECK_LAUNCH(c, "q6p_make kernel") || CUDA_CHECK_CTX(c, cudaStreamSynchronize(c->stream))) {
        cudaStreamSynchronize(c->stream);
        cudaFree(p);
        return c->err ? c->err : INF_EDEVICE;
    }
    cuda_wcopy_put(&c->q6p, w->data, w->ne0, w->ne1, p, bytes);
    return 1;
}

void cuda_q6p_drop(struct cuda_ctx *c, const struct backend_weight *w)
{
    cuda_wcopy_drop(&c->q6p, w->data, w->ne0, w->ne1);
}

void cuda_q6p_free(struct cuda_ctx *c)
{
    cuda_wcopy_free(&c->q6p);
}
