/* graph — the batched forward pass of a llama-family model (see graph.h).
 *
 * One graph_forward runs the standard pre-norm llama block over a batch of
 * tokens from any number of sequences:
 *
 *   x  = tok_embd[tokens]
 *   per layer:
 *     h  = rmsnorm(x) * attn_norm
 *     q, k, v = Wq h (+bq), Wk h (+bk), Wv h (+bv)        qwen2: biases
 *     q, k = rmsnorm per head (* q_norm, k_norm)           qwen3: QK-norm
 *     q, k = rope(q, pos), rope(k, pos)
 *     K/V cache[slot(seq, pos)] = k, v
 *     x += Wo attention(q, cache of seq, positions 0..pos)
 *     h  = rmsnorm(x) * ffn_norm
 *     x += W_down (silu(W_gate h) * (W_up h))
 *   logits = W_out (rmsnorm(x) * output_norm)   for the requested rows only
 *
 * A step is graph_submit (check the batch, pack the step descriptor, ONE
 * upload, queue the launch sequence below and the logits download into
 * host_alloc memory) and graph_wait (sync, status, logits); on a synchronous
 * backend the launch sequence runs in graph_wait instead (see graph_submit).
 *
 * Invariants: all activation buffers, the descriptor and the logits staging
 * are allocated in graph_new for max_tokens rows; a step allocates nothing,
 * and every pointer a launch reads is fixed at graph_new. Attention reads
 * K/V only from the cache after kv_store, so a sequence gives bit-identical
 * logits whether it is prefilled alone, in chunks, or mixed with others (the backend
 * keeps every row's arithmetic independent of the batch). In the last layer
 * only the rows whose logits are wanted continue past kv_store (their K/V
 * was stored like every other row's), or, with late_out_rows, past the
 * attention output projection (llama.cpp's order); with no logits wanted
 * the last layer stops there.
 * The K/V cache is the backend's (ops->kv_alloc): the graph names a layer
 * and slots, never an address in it.
 * Thread: the engine thread only.
 */
#include "graph.h"

#include <assert.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "backend.h"
#include "fault.h"
#include "model.h"
#include "quant.h"

#define GRAPH_MAX_TOKENS (1 << 16)
#define GRAPH_RECS 16      /* recorded steps kept (least recently used goes) */
#define GRAPH_REC_ROWS 64  /* steps of at most this many rows are recorded:
                            * decode steps, where launch overhead is a large
                            * share of the step; a prefill chunk's kernels
                            * are long enough that it is not */

/* The step descriptor: everything a step needs in backend memory, packed
 * at fixed offsets (int32 units, T = max_tokens, L = max_logits, B = max_bt)
 * in one host_alloc buffer and sent in ONE upload. The offsets never change,
 * so the device pointers derived from them do not either (a launch sequence
 * that reads them can be captured once). Block tables have the fixed stride
 * B; entries past what a step needs hold the throw-away block. */
enum {
    STEP_TOKENS, /* [T] token ids */
    STEP_POS,    /* [T] position of each row in its sequence */
    STEP_SEQ,    /* [T] the row's sequence, renumbered densely (order of first appearance) */
    STEP_SLOTS,  /* [T] the row's K/V slot */
    STEP_KV_LEN, /* [T] per sequence: highest position of the step + 1 */
    STEP_Q_FIRST,/* [T] per sequence: its first row */
    STEP_Q_COUNT,/* [T] per sequence: its rows */
    STEP_N_T,    /* arrays of T entries above */
};
#define STEP_OUT_ROWS(T, L) ((size_t)STEP_N_T * (T))               /* [L] rows whose logits are wanted */
#define STEP_OUT_POS(T, L) (STEP_OUT_ROWS(T, L) + (size_t)(L))     /* [L] their positions */
#define STEP_OUT_SEQ(T, L) (STEP_OUT_ROWS(T, L) + 2 * (size_t)(L)) /* [L] their sequences */
#define STEP_BT(T, L) (STEP_OUT_ROWS(T, L) + 3 * (size_t)(L))      /* [T][B] block tables */

/* What the host knows about the step in flight without reading backend
 * memory: counts and maxima that size the launches. */
struct graph_step {
    int32_t n_rows;     /* rows of the batch */
    int32_t n_out;      /* rows whose logits are wanted */
    int32_t n_seqs;     /* sequences (dense ids 0..n_seqs-1) */
    int32_t max_kv;     /* longest KV length read by any row: max pos + 1 */
    int32_t max_kv_out; /* the same over the logits rows */
    size_t upload_bytes;
};

struct graph {
    struct model *m;
    struct backend *be;
    struct graph_params p;
    int32_t max_pos;  /* positions must be < max_pos (cache size, training context) */
    int32_t max_bt;   /* block-table entries per sequence: ceil(max_pos / block_size) */
    int32_t q_dim, kv_dim;
    struct backend_rope rope;
    struct backend_attn attn;     /* rows of the whole batch */
    struct backend_attn attn_out; /* the logits rows (last layer) */

    /* Paged KV cache, owned by the backend: n_blocks + 1 blocks, the last
     * one (p.n_blocks) a throw-away block that nothing reads for a result
     * (unused block-table entries point at it; padding rows may write it). */
    struct backend_kv *kv;
    int32_t trash_block;

    /* Activations (backend memory), [max_tokens][...] unless noted. */
    float *x;      /* [E] residual stream */
    float *xn;     /* [E] normalized input of a sub-block */
    float *q;      /* [q_dim] */
    float *k, *v;  /* [kv_dim] */
    float *att;    /* [q_dim] attention output */
    float *tmp;    /* [E] projection output before the residual add */
    float *ffg;    /* [n_ff] gate, then silu(gate) * up */
    float *ffu;    /* [n_ff] up */
    float *xg;     /* [max_logits][E] residual rows that produce logits */
    float *tg;     /* [max_logits][E] their attention output (late_out_rows) */
    float *qg;     /* [max_logits][q_dim] their queries */
    float *logits; /* [max_logits][n_vocab] */

    /* The step descriptor: host_alloc'ed staging and its backend copy;
     * d_* point into d_step. */
    int32_t *h_step, *d_step;
    size_t step_ints;
    int32_t *d_tokens, *d_pos, *d_seq, *d_slots, *d_bt, *d_out_rows, *d_out_pos, *d_out_seq;
    /* host scratch of graph_prepare: original sequence id of each dense id,
     * blocks it needs this step */
    int32_t *h_seq_orig, *h_seq_nb;
    /* logits of the last step: host_alloc'ed [max_logits][n_vocab] */
    float *h_logits;

    /* the step between graph_submit and graph_wait */
    int inflight;
    /* Recorded steps (ops->capture_begin): a decode step's launches depend
     * only on its row, logits-row and sequence counts and on whether the
     * logits stay on the device (pointers are fixed at graph_new, the block
     * tables have a fixed stride, positions are read from the descriptor),
     * so a step with a key seen before replays the recording. */
    struct graph_rec {
        int32_t n_rows, n_out, n_seqs, on_dev;
        int hits;   /* 0: free entry; a key is recorded on its second step */
        void *exec; /* the recording, once made */
        uint64_t used;
    } rec[GRAPH_RECS];
    uint64_t rec_clock;
    int rec_off; /* recording refused (backend, INFERD_NO_CUDA_GRAPHS) */

    int logits_on_device; /* the step in flight skips the logits download */
    struct graph_step st;
    float *out_logits; /* the caller's copy (graph_batch.logits), or NULL */
    size_t act_bytes; /* what graph_alloc asked for (graph_memory's check) */
};

static void *graph_alloc(struct graph *g, size_t n, size_t elem, int *fail)
{
    if (n == 0)
        n = 1;
    if (n > SIZE_MAX / elem) {
        *fail = 1;
        return NULL;
    }
    g->act_bytes += n * elem;
    void *p = g->be->ops->alloc(g->be, n * elem);
    if (!p)
        *fail = 1;
    return p;
}

static size_t graph_mem_n(size_t n, size_t elem)
{
    return (n ? n : 1) * elem;
}

void graph_memory(const struct model *m, const struct graph_params *p, size_t *kv_bytes,
                  size_t *act_bytes)
{
    const struct model_hparams *hp = model_hparams(m);
    const struct backend *be = model_backend((struct model *)m);
    *kv_bytes = *act_bytes = 0;
    if (p->max_tokens < 1 || p->max_logits < 0 || p->max_logits > p->max_tokens ||
        p->n_blocks < 1 || p->block_size < 1)
        return;
    /* the same sizes as graph_new's, in its order */
    const int64_t cache_tokens = (int64_t)p->n_blocks * p->block_size;
    const int32_t max_pos = (int32_t)(cache_tokens < hp->n_ctx_train ? cache_tokens : hp->n_ctx_train);
    const size_t max_bt = (size_t)((max_pos + p->block_size - 1) / p->block_size);
    const size_t qd = (size_t)hp->n_head * (size_t)hp->head_dim;
    const size_t kvd = (size_t)hp->n_head_kv * (size_t)hp->head_dim;
    const size_t T = (size_t)p->max_tokens, L = (size_t)(p->max_logits ? p->max_logits : 1);
    const size_t E = (size_t)hp->n_embd, F = (size_t)hp->n_ff, V = (size_t)hp->n_vocab;
    const size_t f = sizeof(float);
    *kv_bytes = 2 * (size_t)hp->n_layer * (size_t)(p->n_blocks + 1) * (size_t)p->block_size *
                quant_row_bytes(be->ops->kv_type, (int64_t)kvd);
    *act_bytes = 3 * graph_mem_n(T * E, f) + 2 * graph_mem_n(T * qd, f) +
                 2 * graph_mem_n(T * kvd, f) + 2 * graph_mem_n(T * F, f) +
                 2 * graph_mem_n(L * E, f) + graph_mem_n(L * qd, f) + graph_mem_n(L * V, f) +
                 graph_mem_n(STEP_BT(T, L) + T * max_bt, sizeof(int32_t));
}

static void *graph_host_alloc(struct graph *g, size_t n, size_t elem, int *fail)
{
    if (n == 0)
        n = 1;
    if (n > SIZE_MAX / elem) {
        *fail = 1;
        return NULL;
    }
    void *p = g->be->ops->host_alloc(g->be, n * elem);
    if (!p)
        *fail = 1;
    return p;
}

int graph_new(struct model *m, const struct graph_params *p, struct graph **out,
              struct inf_error *err)
{
    *out = NULL;
    const struct model_hparams *hp = model_hparams(m);
    if (p->max_tokens < 1 || p->max_tokens > GRAPH_MAX_TOKENS || p->max_logits < 0 ||
        p->max_logits > p->max_tokens || p->n_blocks < 1 || p->block_size < 1 ||
        (int64_t)(p->n_blocks + 1) * p->block_size > INT32_MAX)
        return inf_error_set(err, INF_EINVAL,
                             "graph: bad parameters (max_tokens %d, max_logits %d, n_blocks %d, "
                             "block_size %d)",
                             p->max_tokens, p->max_logits, p->n_blocks, p->block_size);
    struct graph *g = calloc(1, sizeof(*g));
    if (g) {
        g->rec_off = getenv("INFERD_NO_CUDA_GRAPHS") != NULL; /* A/B measurement, debugging */
    }
    if (!g)
        return inf_error_set(err, INF_ENOMEM, "graph: out of memory");
    g->m = m;
    g->be = model_backend(m);
    g->p = *p;
    if (g->p.max_logits == 0)
        g->p.max_logits = 1;
    const int64_t cache_tokens = (int64_t)p->n_blocks * p->block_size;
    g->max_pos = (int32_t)(cache_tokens < hp->n_ctx_train ? cache_tokens : hp->n_ctx_train);
    g->max_bt = (g->max_pos + p->block_size - 1) / p->block_size;
    g->q_dim = hp->n_head * hp->head_dim;
    g->kv_dim = hp->n_head_kv * hp->head_dim;
    g->trash_block = p->n_blocks;

    g->rope.n_dims = hp->head_dim;
    g->rope.neox = hp->rope_neox;
    g->rope.freq_base = hp->rope_base;
    g->rope.freq_scale = hp->rope_freq_scale;
    g->rope.freq_factors = model_weights(m)->rope_factors;
    g->attn.n_head = hp->n_head;
    g->attn.n_head_kv = hp->n_head_kv;
    g->attn.head_dim = hp->head_dim;
    g->attn.block_size = p->block_size;
    g->attn.bt_stride = g->max_bt;
    g->attn.scale = 1.0f / sqrtf((float)hp->head_dim);
    g->attn_out = g->attn;

    const size_t T = (size_t)p->max_tokens, L = (size_t)g->p.max_logits;
    const size_t E = (size_t)hp->n_embd, F = (size_t)hp->n_ff, V = (size_t)hp->n_vocab;
    int fail = 0;
    const struct backend_kv_shape ks = {hp->n_layer, p->n_blocks + 1, p->block_size, g->kv_dim};
    int rc = g->be->ops->kv_alloc(g->be, &ks, &g->kv);
    if (rc) {
        const size_t rb = quant_row_bytes(g->be->ops->kv_type, g->kv_dim);
        graph_free(g);
        return inf_error_set(err, rc,
                             "graph: cannot allocate the KV cache (%d layers x %lld tokens x %zu "
                             "bytes x 2): %s",
                             hp->n_layer, (long long)cache_tokens, rb, inf_strerror(rc));
    }
    g->x = graph_alloc(g, T * E, sizeof(float), &fail);
    g->xn = graph_alloc(g, T * E, sizeof(float), &fail);
    g->q = graph_alloc(g, T * (size_t)g->q_dim, sizeof(float), &fail);
    g->k = graph_alloc(g, T * (size_t)g->kv_dim, sizeof(float), &fail);
    g->v = graph_alloc(g, T * (size_t)g->kv_dim, sizeof(float), &fail);
    g->att = graph_alloc(g, T * (size_t)g->q_dim, sizeof(float), &fail);
    g->tmp = graph_alloc(g, T * E, sizeof(float), &fail);
    g->ffg = graph_alloc(g, T * F, sizeof(float), &fail);
    g->ffu = graph_alloc(g, T * F, sizeof(float), &fail);
    g->xg = graph_alloc(g, L * E, sizeof(float), &fail);
    g->tg = graph_alloc(g, L * E, sizeof(float), &fail);
    g->qg = graph_alloc(g, L * (size_t)g->q_dim, sizeof(float), &fail);
    g->logits = graph_alloc(g, L * V, sizeof(float), &fail);
    g->step_ints = STEP_BT(T, L) + T * (size_t)g->max_bt;
    g->d_step = graph_alloc(g, g->step_ints, sizeof(int32_t), &fail);
    g->h_step = graph_host_alloc(g, g->step_ints, sizeof(int32_t), &fail);
    g->h_logits = graph_host_alloc(g, L * V, sizeof(float), &fail);
    g->h_seq_orig = calloc(T, sizeof(int32_t));
    g->h_seq_nb = calloc(T, sizeof(int32_t));
    if (fail || !g->h_seq_orig || !g->h_seq_nb) {
        /* out of memory (recoverable), unless the backend says the device failed */
        rc = g->be->ops->sync(g->be);
        rc = rc && rc != INF_ENOMEM ? INF_EDEVICE : INF_ENOMEM;
        graph_free(g);
        return inf_error_set(err, rc, "graph: cannot allocate activations for %d tokens: %s",
                             p->max_tokens, inf_strerror(rc));
    }
#ifndef NDEBUG
    {
        size_t kvb, actb;
        graph_memory(m, p, &kvb, &actb);
        assert(actb == g->act_bytes); /* graph_memory must say what graph_new takes */
    }
#endif
    g->d_tokens = g->d_step + STEP_TOKENS * T;
    g->d_pos = g->d_step + STEP_POS * T;
    g->d_seq = g->d_step + STEP_SEQ * T;
    g->d_slots = g->d_step + STEP_SLOTS * T;
    g->d_out_rows = g->d_step + STEP_OUT_ROWS(T, L);
    g->d_out_pos = g->d_step + STEP_OUT_POS(T, L);
    g->d_out_seq = g->d_step + STEP_OUT_SEQ(T, L);
    g->d_bt = g->d_step + STEP_BT(T, L);

    struct backend_reserve r;
    r.max_rows = p->max_tokens;
    r.max_ne0 = hp->n_embd;
    if (g->q_dim > r.max_ne0)
        r.max_ne0 = g->q_dim;
    if (hp->n_ff > r.max_ne0)
        r.max_ne0 = hp->n_ff;
    r.max_ctx = g->max_pos;
    r.n_head = hp->n_head;
    r.head_dim = hp->head_dim;
    rc = g->be->ops->reserve(g->be, &r);
    if (rc) {
        graph_free(g);
        return inf_error_set(err, rc, "graph: backend scratch: %s", inf_strerror(rc));
    }
    /* a failure the allocations above left in the backend (the zeroing of
     * CUDA memory is queued) shows here, not in the first step */
    rc = g->be->ops->sync(g->be);
    if (rc) {
        graph_free(g);
        return inf_error_set(err, rc == INF_ENOMEM ? INF_ENOMEM : INF_EDEVICE,
                             "graph: backend: %s", inf_strerror(rc));
    }
    *out = g;
    return 0;
}

void graph_free(struct graph *g)
{
    if (!g)
        return;
    struct backend *be = g->be;
    if (g->inflight)
        (void)be->ops->sync(be);
    for (int i = 0; i < GRAPH_RECS; i++)
        if (g->rec[i].exec)
            be->ops->graph_drop(be, g->rec[i].exec);
    be->ops->kv_free(be, g->kv);
    float *bufs[] = {g->x, g->xn, g->q, g->k, g->v, g->att, g->tmp, g->ffg, g->ffu,
                     g->xg, g->tg, g->qg, g->logits};
    for (size_t i = 0; i < sizeof(bufs) / sizeof(bufs[0]); i++)
        be->ops->free(be, bufs[i]);
    be->ops->free(be, g->d_step);
    be->ops->host_free(be, g->h_step);
    be->ops->host_free(be, g->h_logits);
    free(g->h_seq_orig);
    free(g->h_seq_nb);
    free(g);
}

const struct graph_params *graph_params(const struct graph *g)
{
    return &g->p;
}

/* Check the batch against the limits and pack the step descriptor:
 * sequences renumbered densely in order of first appearance, their block
 * tables at the fixed stride max_bt (the rest of each table the throw-away
 * block), each row's cache slot, per sequence its KV length and rows; then
 * ONE upload. Nothing is queued when the batch is refused. */
static int graph_prepare(struct graph *g, const struct graph_batch *b)
{
    const int32_t n = b->n_tokens, bs = g->p.block_size, B = g->max_bt;
    const int32_t n_vocab = model_hparams(g->m)->n_vocab;
    if (n < 1 || n > g->p.max_tokens || !b->tokens || !b->pos || !b->seq || b->n_seqs < 1 ||
        !b->block_tables || b->n_logits < 0 || b->n_logits > g->p.max_logits ||
        (b->n_logits > 0 && !b->logit_rows))
        return INF_EINVAL;
    const size_t T = (size_t)g->p.max_tokens, L = (size_t)g->p.max_logits;
    int32_t *h = g->h_step;
    int32_t *tokens = h + STEP_TOKENS * T, *pos = h + STEP_POS * T, *seq = h + STEP_SEQ * T;
    int32_t *slots = h + STEP_SLOTS * T, *kv_len = h + STEP_KV_LEN * T;
    int32_t *q_first = h + STEP_Q_FIRST * T, *q_count = h + STEP_Q_COUNT * T;
    int32_t *out_rows = h + STEP_OUT_ROWS(T, L), *out_pos = h + STEP_OUT_POS(T, L);
    int32_t *out_seq = h + STEP_OUT_SEQ(T, L), *bt = h + STEP_BT(T, L);

    int32_t n_local = 0, max_kv = 0;
    for (int32_t t = 0; t < n; t++) {
        const int32_t s = b->seq[t], p = b->pos[t];
        if (b->tokens[t] < 0 || b->tokens[t] >= n_vocab || p < 0 || p >= g->max_pos || s < 0 ||
            s >= b->n_seqs || !b->block_tables[s])
            return INF_EINVAL;
        /* Tokens of one sequence usually sit together: try the previous first. */
        int32_t ls = -1;
        if (t > 0 && b->seq[t - 1] == s) {
            ls = seq[t - 1];
        } else {
            for (int32_t i = 0; i < n_local; i++)
                if (g->h_seq_orig[i] == s) {
                    ls = i;
                    break;
                }
        }
        if (ls < 0) {
            ls = n_local++;
            g->h_seq_orig[ls] = s;
            g->h_seq_nb[ls] = 0;
            kv_len[ls] = 0;
            q_first[ls] = t;
            q_count[ls] = 0;
        }
        seq[t] = ls;
        q_count[ls]++;
        if (p / bs + 1 > g->h_seq_nb[ls])
            g->h_seq_nb[ls] = p / bs + 1;
        if (p + 1 > kv_len[ls])
            kv_len[ls] = p + 1;
        if (p + 1 > max_kv)
            max_kv = p + 1;
    }
    for (int32_t i = 0; i < n_local; i++) {
        const int32_t *src = b->block_tables[g->h_seq_orig[i]];
        int32_t *dst = bt + (size_t)i * B;
        int32_t j = 0;
        for (; j < g->h_seq_nb[i]; j++) {
            if (src[j] < 0 || src[j] >= g->p.n_blocks)
                return INF_EINVAL;
            dst[j] = src[j];
        }
        for (; j < B; j++)
            dst[j] = g->trash_block;
    }
    for (int32_t t = 0; t < n; t++) {
        const int32_t p = b->pos[t];
        slots[t] = bt[(size_t)seq[t] * B + p / bs] * bs + p % bs;
    }
    int32_t max_kv_out = 0;
    for (int32_t i = 0; i < b->n_logits; i++) {
        const int32_t r = b->logit_rows[i];
        if (r < 0 || r >= n)
            return INF_EINVAL;
        out_rows[i] = r;
        out_pos[i] = b->pos[r];
        out_seq[i] = seq[r];
        if (b->pos[r] + 1 > max_kv_out)
            max_kv_out = b->pos[r] + 1;
    }
    memcpy(tokens, b->tokens, (size_t)n * sizeof(int32_t));
    memcpy(pos, b->pos, (size_t)n * sizeof(int32_t));

    g->st.n_rows = n;
    g->st.n_out = b->n_logits;
    g->st.n_seqs = n_local;
    g->st.max_kv = max_kv;
    g->st.max_kv_out = max_kv_out;
    g->st.upload_bytes = (STEP_BT(T, L) + (size_t)n_local * B) * sizeof(int32_t);
    g->attn.max_kv = max_kv;
    g->attn_out.max_kv = max_kv_out;
    /* distinct sequences among the rows (backend_attn.n_seqs: a backend's
     * choice of kernel shape); for the logits rows the runs of one
     * sequence, a bound from above */
    int32_t out_runs = 0;
    for (int32_t i = 0; i < b->n_logits; i++)
        out_runs += i == 0 || out_seq[i] != out_seq[i - 1];
    g->attn.n_seqs = n_local;
    g->attn_out.n_seqs = out_runs;

    return 0;
}

/* The launch sequence of the step packed by graph_prepare, ending with the
 * logits download into h_logits. Queued on an async backend; computed on a
 * synchronous one. */
/* Products of one activation x: through ops->mul_mat_ex (the activation
 * quantized once, bias and residual adds where the product is stored) or,
 * on a backend without it, mul_mat then add_bias / add, the same bits.
 * Every product of the step goes through here, and each call is followed
 * by a small kernel (a norm, rope, silu_mul, gather or the sampler), which
 * the CUDA backend's one-row product lets launch early (cuda/common.cuh
 * cuda_mmvt_trig). */
static void graph_mm(struct graph *g, const float *x, int32_t n, const struct backend_mm_out *o, int k)
{
    struct backend *be = g->be;
    const struct backend_ops *op = be->ops;
    if (op->mul_mat_ex) {
        op->mul_mat_ex(be, x, n, o, k);
        return;
    }
    for (int i = 0; i < k; i++) {
        float *y = o[i].accumulate ? g->tmp : o[i].y;
        op->mul_mat(be, o[i].w, x, y, n);
        if (o[i].bias)
            op->add_bias(be, y, o[i].bias, n);
        if (o[i].accumulate)
            op->add(be, o[i].y, g->tmp, (int64_t)n * o[i].w->ne1);
    }
}

static void graph_launch(struct graph *g)
{
    const struct model_hparams *hp = model_hparams(g->m);
    const struct model_weights *W = model_weights(g->m);
    struct backend *be = g->be;
    const struct backend_ops *op = be->ops;
    const int32_t n = g->st.n_rows, n_out = g->st.n_out;
    const int32_t E = hp->n_embd, F = hp->n_ff, HD = hp->head_dim;
    const float eps = hp->rms_eps;

    op->get_rows(be, W->tok_embd, g->d_tokens, n, g->x);

    for (int32_t il = 0; il < hp->n_layer; il++) {
        const struct model_layer *L = &W->layers[il];

        /* attention: q, k, v of every row; K/V into the cache */
        op->rms_norm(be, g->x, L->attn_norm, g->xn, n, E, eps);
        const struct backend_mm_out qkv[3] = {
            {L->wq, g->q, L->bq, 0}, {L->wk, g->k, L->bk, 0}, {L->wv, g->v, L->bv, 0}};
        graph_mm(g, g->xn, n, qkv, 3);
        if (L->q_norm) {
            op->rms_norm(be, g->q, L->q_norm, g->q, n * hp->n_head, HD, eps);
            op->rms_norm(be, g->k, L->k_norm, g->k, n * hp->n_head_kv, HD, eps);
        }
        if (op->rope_kv_store) {
            op->rope_kv_store(be, g->q, g->k, g->v, n, hp->n_head, hp->n_head_kv, g->d_pos, &g->rope,
                              g->kv, il, g->d_slots);
        } else {
            op->rope(be, g->q, n, hp->n_head, g->d_pos, &g->rope);
            op->rope(be, g->k, n, hp->n_head_kv, g->d_pos, &g->rope);
            op->kv_store(be, g->kv, il, g->k, g->v, g->d_slots, n);
        }

        /* The rows that go on: all of them, except in the last layer where
         * only the rows whose logits are wanted matter. */
        float *x = g->x, *q = g->q, *proj = g->tmp;
        int32_t nr = n;
        const int32_t *pos = g->d_pos, *seq = g->d_seq;
        const struct backend_attn *attn = &g->attn;
        const int last = il == hp->n_layer - 1;
        if (last && n_out == 0)
            break;
        if (last && g->p.late_out_rows) {
            op->attention(be, q, g->kv, il, g->att, nr, pos, seq, g->d_bt, attn);
            const struct backend_mm_out o = {L->wo, g->tmp, NULL, 0};
            graph_mm(g, g->att, nr, &o, 1);
            op->gather(be, g->tmp, g->d_out_rows, n_out, E, g->tg);
            op->gather(be, g->x, g->d_out_rows, n_out, E, g->xg);
            x = g->xg;
            proj = g->tg;
            nr = n_out;
        } else {
            if (last) {
                op->gather(be, g->q, g->d_out_rows, n_out, g->q_dim, g->qg);
                op->gather(be, g->x, g->d_out_rows, n_out, E, g->xg);
                x = g->xg;
                q = g->qg;
                nr = n_out;
                pos = g->d_out_pos;
                seq = g->d_out_seq;
                attn = &g->attn_out;
            }
            op->attention(be, q, g->kv, il, g->att, nr, pos, seq, g->d_bt, attn);
            proj = NULL; /* x += Wo att, in one product */
            const struct backend_mm_out o = {L->wo, x, NULL, 1};
            graph_mm(g, g->att, nr, &o, 1);
        }
        if (proj)
            op->add(be, x, proj, (int64_t)nr * E);

        /* feed-forward (SwiGLU) */
        op->rms_norm(be, x, L->ffn_norm, g->xn, nr, E, eps);
        if (op->mul_mat_swiglu) {
            op->mul_mat_swiglu(be, g->xn, nr, L->ffn_gate, L->ffn_up, g->ffg, g->ffu);
        } else {
            const struct backend_mm_out gu[2] = {{L->ffn_gate, g->ffg, NULL, 0},
                                                 {L->ffn_up, g->ffu, NULL, 0}};
            graph_mm(g, g->xn, nr, gu, 2);
            op->silu_mul(be, g->ffg, g->ffu, (int64_t)nr * F, F);
        }
        const struct backend_mm_out down = {L->ffn_down, x, NULL, 1};
        graph_mm(g, g->ffg, nr, &down, 1);

        if (last) {
            op->rms_norm(be, x, W->output_norm, g->xn, nr, E, eps);
            const struct backend_mm_out out = {W->output, g->logits, NULL, 0};
            graph_mm(g, g->xn, nr, &out, 1);
            if (!g->logits_on_device) /* else ops->sample reads g->logits */
                op->download_async(be, g->h_logits, g->logits,
                                   (size_t)nr * hp->n_vocab * sizeof(float));
        }
    }
}

/* The step: the descriptor in one transfer (the fixed-size arrays, only
 * their first entries meaningful, and the tables in use), then the
 * launches. */
static void graph_queue(struct graph *g)
{
    g->be->ops->upload(g->be, g->d_step, g->h_step, g->st.upload_bytes);
    graph_launch(g);
}

/* Queue the packed step on an async backend: a recording of the same key
 * if there is one; else record it (small steps) and run the recording;
 * else op by op. Same launches either way, same bits. */
static void graph_queue_async(struct graph *g)
{
    struct backend *be = g->be;
    const struct backend_ops *op = be->ops;
    if (g->rec_off || !op->capture_begin || g->st.n_rows > GRAPH_REC_ROWS) {
        graph_queue(g);
        return;
    }
    const int32_t k[4] = {g->st.n_rows, g->st.n_out, g->st.n_seqs, g->logits_on_device};
    struct graph_rec *e = NULL, *victim = &g->rec[0];
    for (int i = 0; i < GRAPH_RECS && !e; i++) {
        struct graph_rec *r = &g->rec[i];
        if (r->hits && r->n_rows == k[0] && r->n_out == k[1] && r->n_seqs == k[2] && r->on_dev == k[3])
            e = r;
        else if (!r->hits || (victim->hits && r->used < victim->used))
            victim = r;
    }
    if (!e) { /* first step of this key: op by op, remembered */
        if (victim->exec)
            op->graph_drop(be, victim->exec);
        *victim = (struct graph_rec){k[0], k[1], k[2], k[3], 1, NULL, ++g->rec_clock};
        graph_queue(g);
        return;
    }
    e->used = ++g->rec_clock;
    if (!e->exec) { /* seen before: record it */
        e->hits++;
        if (op->capture_begin(be) == 0) {
            graph_queue(g);
            e->exec = op->capture_end(be);
        }
        if (!e->exec) {
            g->rec_off = 1; /* this backend cannot record these steps: stop trying */
            graph_queue(g);
            return;
        }
    }
    if (op->graph_run(be, e->exec) != 0)
        graph_queue(g); /* the error, if it is one, comes back from sync */
}

int graph_submit(struct graph *g, const struct graph_batch *b)
{
    if (g->inflight)
        return INF_EBUSY;
    if (b->logits_on_device && b->logits)
        return INF_EINVAL; /* nothing comes down to copy from */
    int rc = graph_prepare(g, b);
    if (rc)
        return rc;
    g->inflight = 1;
    g->logits_on_device = b->logits_on_device != 0;
    g->out_logits = b->n_logits > 0 ? b->logits : NULL;
    /* a synchronous backend computes in graph_wait: the host work the
     * caller does between the two then still comes first, as it did
     * before the split, instead of waiting for a whole step */
    if (g->be->ops->async)
        graph_queue_async(g);
    return 0;
}

int graph_wait(struct graph *g)
{
    if (!g->inflight)
        return INF_EINVAL;
    if (!g->be->ops->async)
        graph_queue(g);
    g->inflight = 0;
    /* a recoverable allocation failure stays INF_ENOMEM (the request gets a
     * 503, the daemon lives), a call the backend refused but survived
     * INF_EINTERNAL (a 500, the daemon lives); anything else the backend
     * reports is the device, lost for good (the daemon exits) */
    int rc = g->be->ops->sync(g->be);
    if (rc)
        return rc == INF_ENOMEM || rc == INF_EINTERNAL ? rc : INF_EDEVICE;
    if ((rc = fault_step_failure()) != 0) /* test builds: INFERD_FAULT_STEP (engine/fault.h) */
        return rc;
    if (g->out_logits)
        memcpy(g->out_logits, g->h_logits,
               (size_t)g->st.n_out * (size_t)model_hparams(g->m)->n_vocab * sizeof(float));
    return 0;
}

float *graph_logits(struct graph *g)
{
    return g->h_logits;
}

const float *graph_logits_device(struct graph *g)
{
    return g->logits;
}

int graph_forward(struct graph *g, const struct graph_batch *b)
{
    int rc = graph_submit(g, b);
    return rc ? rc : graph_wait(g);
}

int graph_kv_copy_blocks(struct graph *g, const int32_t *src, const int32_t *dst, int32_t n)
{
    if (g->inflight)
        return INF_EBUSY;
    if (n < 0)
        return INF_EINVAL;
    for (int32_t i = 0; i < n; i++) {
        if (src[i] < 0 || src[i] >= g->p.n_blocks || dst[i] < 0 || dst[i] >= g->p.n_blocks ||
            src[i] == dst[i])
            return INF_EINVAL;
        for (int32_t j = 0; j < n; j++)
            if (dst[j] == src[i] || (j < i && dst[j] == dst[i]))
                return INF_EINVAL;
    }
    if (n > 0)
        g->be->ops->kv_copy_blocks(g->be, g->kv, src, dst, n);
    return 0;
}

int graph_kv_copy_block(struct graph *g, int32_t src_block, int32_t dst_block)
{
    if (src_block == dst_block && src_block >= 0 && src_block < g->p.n_blocks && !g->inflight)
        return 0;
    return graph_kv_copy_blocks(g, &src_block, &dst_block, 1);
}

struct backend_kv *graph_kv(struct graph *g)
{
    return g->kv;
}
