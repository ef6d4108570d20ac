/* cuda/sample — ops->sample on the device: logit bias, penalties, greedy,
 * top-k, top-p, min-p, temperature, the seeded draw and the log-softmax
 * top-N for logprobs, one block per request; only the results come back.
 * This file is the op entry and its scratch; the kernels are in
 * sample_kernel.cu (with sample_block.cuh) and sample_logprob.cu.
 *
 * The oracle is engine/sample.c (the CPU op is sample_state_step), and the
 * sampled token is meant to be the same bits, not just the same
 * distribution. So every float step is the CPU's operation (explicit _rn
 * intrinsics: nvcc would otherwise contract a*b+c), expf is glibc's
 * (engine/sample_exp.h), logf(min_p) comes from the host's libm
 * (sample_state.log_min_p), and the parallel parts compute exact things:
 *  - max and argmax (ties: lowest id), counts, filters, the bias and
 *    penalty updates (per token, so order-free);
 *  - top-k and the top-p crossing bin by an exact radix select of the
 *    CPU's 64-bit keys (logit order, then id) and a bitonic sort of chunks
 *    of SMP_SORT keys in shared memory: a set of unique keys has one order;
 *  - the top-p bin masses with double atomics: every weight in one bin
 *    (bins span 1/32 nat) lies within a factor e^(1/32) of the others, so
 *    their double sum is exact in any order (< 2^18 values of 24 bits
 *    spanning 2 binades need 43 bits). The last bin (everything further
 *    than 32 nats) is not exact, but its mass only decides whether the
 *    mass crosses top_p there, which it always does (top_p < 1 - 2^-24 and
 *    the sums agree to ~1e-11);
 *  - the sums whose order matters (the softmax normalizers, the top-p
 *    cumulative mass, the draw) run sequentially in one thread in the
 *    CPU's order: index order over the vocabulary, or the sorted order of
 *    the survivors. Chunk partial sums are kept, so finding where a
 *    cumulative sum crosses a value is a parallel search over chunks and a
 *    rescan of one. This chain is the cost of exactness: one double add
 *    per vocabulary entry when no top-k bounds it (~0.3-0.7 ms per step at
 *    152k entries; all requests of a call run it concurrently).
 * The RNG is engine/sample.c's xoshiro256**, advanced once per draw exactly
 * when the CPU draws; the state stays on the device.
 *
 * Logprobs (smp_logprob_kernel, cuda/sample_logprob.cu): the top-N ids and their order are exact;
 * the values are (float)(l - lse) with lse = lmax + log(sum exp(l - lmax))
 * in double like sample_logprobs, but with CUDA's exp/log (not glibc's) and
 * a parallel sum, so lse can differ in its last bits and a logprob by one
 * float ulp in rare cases (tests/cuda/test_cuda_sample allows 2 ulp).
 *
 * Not mirrored: rows with +inf logits (the CPU's weights become NaN there;
 * models and the API's bias range never produce them).
 */
#include <stdlib.h>

#include "engine/cuda/sample.cuh"

static_assert(sizeof(struct backend_sample_req) == 32, "request layout shared with C");

/* ---- op entry -------------------------------------------------------------- */

struct cuda_sample {
    int32_t vocab, rows;          /* scratch: rows blocks of vocab */
    char *scratch;
    size_t block_bytes;
    struct backend_sample_req *d_jobs;
    struct backend_sample_out *d_out;
    int32_t cap_jobs;
};

static int smp_reserve(struct cuda_ctx *c, int32_t V, int32_t rows, int32_t jobs)
{
    struct cuda_sample *s = (struct cuda_sample *)c->smp;
    if (!s) {
        s = (struct cuda_sample *)calloc(1, sizeof(*s));
        if (!s)
            return INF_ENOMEM;
        c->smp = s;
    }
    if (V > s->vocab || rows > s->rows) {
        const int32_t nv = V > s->vocab ? V : s->vocab, nr = rows > s->rows ? rows : s->rows;
        const size_t bb = smp_block_bytes(nv);
        char *p = NULL;
        if (cuda_malloc(c, (void **)&p, bb * (size_t)nr) != cudaSuccess) {
            cudaGetLastError();
            return INF_ENOMEM;
        }
        cudaStreamSynchronize(c->stream);
        cudaFree(s->scratch);
        s->scratch = p;
        s->block_bytes = bb;
        s->vocab = nv;
        s->rows = nr;
    }
    if (jobs > s->cap_jobs) {
        struct backend_sample_req *dj = NULL;
        struct backend_sample_out *dout = NULL;
        if (cuda_malloc(c, (void **)&dj, sizeof(*dj) * (size_t)jobs) != cudaSuccess ||
            cuda_malloc(c, (void **)&dout, sizeof(*dout) * (size_t)jobs) != cudaSuccess) {
            cudaGetLastError();
            cudaFree(dj);
            return INF_ENOMEM;
        }
        cudaStreamSynchronize(c->stream);
        cudaFree(s->d_jobs);
        cudaFree(s->d_out);
        s->d_jobs = dj;
        s->d_out = dout;
        s->cap_jobs = jobs;
    }
    return 0;
}

void cuda_sample_free(struct cuda_ctx *c)
{
    struct cuda_sample *s = (struct cuda_sample *)c->smp;
    if (!s)
        return;
    cudaFree(s->scratch);
    cudaFree(s->d_jobs);
    cudaFree(s->d_out);
    free(s);
    c->smp = NULL;
}

int cuda_op_sample(struct backend *be, const float *logits, int32_t n_rows, int32_t n_vocab,
                   const struct backend_sample_req *reqs, int32_t n_reqs,
                   struct backend_sample_out *out)
{
    struct cuda_ctx *c = cuda_ctx_of(be);
    if (cuda_op_begin(c))
        return c->err;
    if (n_vocab <= 0 || n_reqs < 0)
        return INF_EINVAL;
    if (!reqs) /* reserve */
        return smp_reserve(c, n_vocab, n_reqs > 0 ? n_reqs : 1, n_reqs > 0 ? n_reqs : 1);
    if (n_reqs == 0)
        return 0;
    for (int32_t i = 0; i < n_reqs; i++) {
        const struct backend_sample_req *q = &reqs[i];
        if (q->row < 0 || q->row >= n_rows || q->n_top > BACKEND_SAMPLE_MAX_TOP ||
            q->token >= n_vocab || (q->token < 0 && !q->state))
            return INF_EINVAL;
    }
    struct cuda_sample *s = (struct cuda_sample *)c->smp;
    const int32_t rows = s && s->rows > 0 ? s->rows : (n_reqs < 64 ? n_reqs : 64);
    int rc = smp_reserve(c, n_vocab, rows, n_reqs);
    if (rc)
        return rc;
    s = (struct cuda_sample *)c->smp;
    if (CUDA_CHECK_CTX(c, cudaMemcpyAsync(s->d_jobs, reqs, sizeof(*reqs) * (size_t)n_reqs,
                                          cudaMemcpyHostToDevice, c->stream)))
        return c->err;
    for (int32_t j0 = 0; j0 < n_reqs; j0 += s->rows) {
        const int32_t nb = n_reqs - j0 < s->rows ? n_reqs - j0 : s->rows;
        if (smp_sample_launch(c, logits, n_vocab, s->d_jobs, j0, nb, s->scratch, s->block_bytes,
                              s->d_out))
            return c->err;
    }
    if (smp_logprob_launch(c, logits, n_vocab, s->d_jobs, n_reqs, s->d_out) ||
        CUDA_CHECK_CTX(c, cudaMemcpyAsync(out, s->d_out, sizeof(*out) * (size_t)n_reqs,
                                          cudaMemcpyDeviceToHost, c->stream)) ||
        CUDA_CHECK_CTX(c, cudaStreamSynchronize(c->stream)))
        return c->err;
    return 0;
}
