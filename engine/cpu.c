/* cpu — the CPU backend (see cpu.h): the backend object (op table,
 * constructor), memory and weights, reserve(), sync() and sample(). The
 * thread pool and the ops live in the other cpu_*.c files (cpu_impl.h lists
 * them).
 *
 * Invariants: every output element is written by one thread running the same
 * code for every batch size and thread count, so results are bit-identical
 * whatever the batch or the pool (the scheduler's batch invariance rests on
 * this). Scratch is sized once by reserve(); ops allocate nothing.
 * Numerics follow llama.cpp's CPU backend where it matters for parity:
 * activations quantized to the weight's vec-dot type (engine/quant), the KV
 * cache in F16, attention as its flash-attention kernel (F16 query, online
 * softmax, F16 running accumulator; cpu_attention.c).
 * The float ops have AVX2 versions in cpu_avx2.c that give the same bits as
 * the plain C of cpu_*.c (cpu_backend_force_plain selects the plain C, for tests).
 * Threads: one caller thread (the engine thread) drives the backend; pool
 * workers run only inside an op.
 */
#include "cpu.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "backend.h"
#include "cpu_avx2.h"
#include "cpu_impl.h"
#include "err.h"
#include "quant.h"

/* ------------------------------------------------------------------------ */
/* Backend context                                                          */
/* ------------------------------------------------------------------------ */

/* Run chunks [0, n) of fn (two phases when n1 > 0). `work` estimates the
 * op's cost; small ops, and any op of a one-thread backend, run here. */
void cpu_run(struct cpu_ctx *c, cpu_chunk_fn fn, void *arg, int64_t n1, int64_t n, int64_t work)
{
    if (n <= 1 || work < CPU_PAR_MIN_WORK || c->pool.n <= 1) {
        for (int64_t i = 0; i < n; i++)
            fn(arg, i, 0);
        return;
    }
    cpu_pool_run(&c->pool, fn, arg, n1, n);
}

/* ------------------------------------------------------------------------ */
/* Memory and weights                                                       */
/* ------------------------------------------------------------------------ */

void *cpu_alloc(struct backend *be, size_t bytes)
{
    (void)be;
    size_t n = (bytes + 63) & ~(size_t)63;
    if (n < bytes)
        return NULL;
    if (n == 0)
        n = 64;
    void *p = aligned_alloc(64, n);
    if (p)
        memset(p, 0, n);
    return p;
}

void cpu_free(struct backend *be, void *p)
{
    (void)be;
    free(p);
}

static void cpu_memcpy(struct backend *be, void *dst, const void *src, size_t bytes)
{
    (void)be;
    if (bytes)
        memmove(dst, src, bytes);
}

/* Host memory is all the CPU has: host_alloc is alloc, and a download into
 * it is done when it returns. */
static void cpu_download_async(struct backend *be, void *dst, const void *src, size_t bytes)
{
    cpu_memcpy(be, dst, src, bytes);
}

static int cpu_weight_register(struct backend *be, struct backend_weight *w)
{
    (void)be;
    if (!quant_type_supported(w->type))
        return INF_EUNSUPPORTED;
    w->data = (void *)w->host; /* the mapping is read-only: ops never write weights */
    return 0;
}

static void cpu_weight_release(struct backend *be, struct backend_weight *w)
{
    (void)be;
    w->data = NULL;
}

static int cpu_reserve(struct backend *be, const struct backend_reserve *r)
{
    struct cpu_ctx *c = cpu_ctx(be);
    /* The widest activation row any vec-dot type needs is F32: 4 bytes/element. */
    size_t xq = (size_t)r->max_rows * ((size_t)r->max_ne0 * 4 + 64);
    if (xq > c->xq_bytes) {
        void *p = cpu_alloc(be, xq);
        if (!p)
            return INF_ENOMEM;
        free(c->xq);
        c->xq = p;
        c->xq_bytes = xq;
    }
    /* attention, per thread: the plain path needs an F16 query and
     * accumulator (2 x head_dim halves fit in head_dim floats), the AVX2
     * path the scratch of a group of up to n_head heads */
    size_t att = cpu_attn_scratch_floats(r->n_head, r->head_dim);
    att = (att + 15) & ~(size_t)15;
    if (att > c->att_stride) {
        void *p = cpu_alloc(be, att * sizeof(float) * (size_t)c->pool.n);
        if (!p)
            return INF_ENOMEM;
        free(c->att);
        c->att = p;
        c->att_stride = att;
    }
    /* rope table */
    if (r->head_dim <= 2 * CPU_MAX_ROPE_PAIRS && r->head_dim > 0) {
        int64_t pos = r->max_ctx;
        if (pos * r->head_dim > CPU_ROPE_CACHE_FLOATS)
            pos = CPU_ROPE_CACHE_FLOATS / r->head_dim;
        if (pos > c->rope.max_pos || r->head_dim > c->rope.cap_dims) {
            const int32_t dims = r->head_dim > c->rope.cap_dims ? r->head_dim : c->rope.cap_dims;
            if (pos < c->rope.max_pos)
                pos = c->rope.max_pos;
            float *cs = cpu_alloc(be, (size_t)pos * (size_t)dims * sizeof(float));
            uint8_t *valid = cpu_alloc(be, (size_t)pos);
            if (!cs || !valid) {
                free(cs);
                free(valid);
                return INF_ENOMEM;
            }
            free(c->rope.cs);
            free(c->rope.valid);
            c->rope.cs = cs;
            c->rope.valid = valid; /* zeroed: nothing cached */
            c->rope.max_pos = (int32_t)pos;
            c->rope.cap_dims = dims;
        }
    }
    return 0;
}

int cpu_sync(struct backend *be)
{
    struct cpu_ctx *c = cpu_ctx(be);
    int e = c->error;
    c->error = 0;
    return e;
}
/* ------------------------------------------------------------------------ */
/* The table                                                                */
/* ------------------------------------------------------------------------ */

/* ---- sample: engine/sample.c over the flat states (the reference) ---- */

static int cpu_sample_reserve(struct cpu_ctx *c, int32_t n_vocab)
{
    if (n_vocab <= c->smp_vocab)
        return 0;
    float *w = malloc((size_t)n_vocab * sizeof(float));
    uint64_t *k = malloc((size_t)n_vocab * sizeof(uint64_t));
    float *lp = malloc((size_t)n_vocab * sizeof(float));
    if (!w || !k || !lp) {
        free(w);
        free(k);
        free(lp);
        return INF_ENOMEM;
    }
    free(c->smp_work);
    free(c->smp_keys);
    free(c->smp_lp);
    c->smp_work = w;
    c->smp_keys = k;
    c->smp_lp = lp;
    c->smp_vocab = n_vocab;
    return 0;
}

static int cpu_sample(struct backend *be, const float *logits, int32_t n_rows, int32_t n_vocab,
                      const struct backend_sample_req *reqs, int32_t n_reqs,
                      struct backend_sample_out *out)
{
    struct cpu_ctx *c = cpu_ctx(be);
    if (n_vocab <= 0 || n_reqs < 0)
        return INF_EINVAL;
    int rc = cpu_sample_reserve(c, n_vocab);
    if (rc || !reqs)
        return rc;
    for (int32_t i = 0; i < n_reqs; i++) {
        const struct backend_sample_req *q = &reqs[i];
        if (q->row < 0 || q->row >= n_rows || q->n_top > BACKEND_SAMPLE_MAX_TOP ||
            q->token >= n_vocab || (q->token < 0 && !q->state))
            return INF_EINVAL;
    }
    for (int32_t i = 0; i < n_reqs; i++) {
        const struct backend_sample_req *q = &reqs[i];
        const float *L = logits + (size_t)q->row * (size_t)n_vocab;
        const int masked = q->state && (q->flags & BACKEND_SAMPLE_MASKED);
        struct backend_sample_out *o = &out[i];
        if (q->allow) { /* the allowed bits, on a copy (the scheduler's host masking) */
            for (int32_t k = 0; k < n_vocab; k++)
                c->smp_lp[k] = sample_allowed(q->allow, k) ? L[k] : -INFINITY;
            L = c->smp_lp;
        }
        o->token = q->token >= 0 ? q->token
                                 : sample_state_step(q->state, n_vocab, L, masked,
                                                     c->smp_work, c->smp_keys);
        o->logprob = 0.f;
        if (q->n_top < 0)
            continue;
        if (masked) { /* the scheduler's masking of the row, on a copy */
            const int32_t *m = sample_state_mask(q->state);
            if (L != c->smp_lp)
                memcpy(c->smp_lp, L, (size_t)n_vocab * sizeof(float));
            for (int32_t k = 0; k < q->state->n_mask; k++)
                if (m[k] >= 0 && m[k] < n_vocab)
                    c->smp_lp[m[k]] = -INFINITY;
            L = c->smp_lp;
        }
        o->logprob = sample_logprobs(L, n_vocab, o->token, q->n_top, o->top_ids, o->top_lps);
    }
    return 0;
}

static void cpu_destroy(struct backend *be)
{
    struct cpu_ctx *c = cpu_ctx(be);
    free(c->smp_work);
    free(c->smp_keys);
    free(c->smp_lp);
    cpu_pool_destroy(&c->pool);
    free(c->xq);
    free(c->att);
    free(c->rope.cs);
    free(c->rope.valid);
    free(c);
}

static const struct backend_ops cpu_ops = {
    .name = "cpu",
    .kv_type = QT_F16,
    .async = 0,
    .destroy = cpu_destroy,
    .reserve = cpu_reserve,
    .alloc = cpu_alloc,
    .free = cpu_free,
    .upload = cpu_memcpy,
    .download = cpu_memcpy,
    .copy = cpu_memcpy,
    .host_alloc = cpu_alloc,
    .host_free = cpu_free,
    .download_async = cpu_download_async,
    .weight_register = cpu_weight_register,
    .weight_release = cpu_weight_release,
    .get_rows = cpu_get_rows,
    .gather = cpu_gather,
    .rms_norm = cpu_rms_norm,
    .mul_mat = cpu_mul_mat,
    .add_bias = cpu_add_bias,
    .rope = cpu_rope,
    .kv_alloc = cpu_kv_alloc,
    .kv_free = cpu_kv_free,
    .kv_copy_blocks = cpu_kv_copy_blocks,
    .kv_read = cpu_kv_read,
    .kv_store = cpu_kv_store,
    .attention = cpu_attention,
    .silu_mul = cpu_silu_mul,
    .add = cpu_add,
    .sync = cpu_sync,
    .sample = cpu_sample,
};

struct backend *cpu_backend_new(int n_threads)
{
    if (n_threads <= 0)
        n_threads = 2;
    if (n_threads > 256)
        n_threads = 256;
    struct cpu_ctx *c = calloc(1, sizeof(*c));
    if (!c)
        return NULL;
    c->be.ops = &cpu_ops;
    c->be.ctx = c;
#ifdef INFERD_HAVE_AVX2
    c->simd = quant_have_avx2();
#endif
    if (cpu_pool_init(&c->pool, n_threads) != 0) {
        cpu_pool_destroy(&c->pool);
        free(c);
        return NULL;
    }
    return &c->be;
}

void cpu_backend_set_numerics(struct backend *be, enum cpu_numerics mode)
{
    struct cpu_ctx *c = be->ctx;
    c->numerics = mode;
}

int cpu_backend_threads(const struct backend *be)
{
    const struct cpu_ctx *c = be->ctx;
    return c->pool.n;
}

void cpu_backend_force_plain(struct backend *be, int on)
{
    struct cpu_ctx *c = be->ctx;
#ifdef INFERD_HAVE_AVX2
    c->simd = !on && quant_have_avx2();
#else
    (void)on;
    c->simd = 0;
#endif
}
