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
 * Invariants: all activation buffers are allocated in graph_new for
 * max_tokens rows; graph_forward allocates nothing. Attention reads K/V only
 * from the cache after kv_store, so a sequence gives bit-identical logits
 * whether it is prefilled alone, in chunks, or mixed with others (the backend
 * keeps every row's arithmetic independent of the batch). In the last layer
 * only the rows whose logits are wanted continue past kv_store (their K/V
 * was stored like every other row's), or, with late_out_rows, past the
 * attention output projection (llama.cpp's order); with no logits wanted
 * the last layer stops there.
 * Thread: the engine thread only.
 */
#include "graph.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "backend.h"
#include "model.h"
#include "quant.h"

#define GRAPH_MAX_TOKENS (1 << 16)

struct graph {
    struct model *m;
    struct backend *be;
    struct graph_params p;
    int32_t max_pos;  /* positions must be < max_pos (cache size, training context) */
    int32_t max_bt;   /* block-table entries per sequence: ceil(max_pos / block_size) */
    int32_t q_dim, kv_dim;
    struct backend_rope rope;
    struct backend_attn attn;

    /* Paged KV cache, per layer [n_blocks * block_size][kv_dim] of the
     * backend's kv_type (F16 on the CPU). */
    void **k_cache, **v_cache;
    size_t kv_row_bytes;

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

    /* Batch metadata: host staging and its backend copy. */
    int32_t *h_seq, *h_slots, *h_bt, *h_out_pos, *h_out_seq, *h_seq_orig, *h_seq_nb;
    int32_t *d_tokens, *d_pos, *d_seq, *d_slots, *d_bt, *d_out_rows, *d_out_pos, *d_out_seq;
};

static void *graph_alloc(struct graph *g, size_t n, size_t elem, int *fail)
{
    if (n == 0)
        n = 1;
    if (n > SIZE_MAX / elem) {
        *fail = 1;
        return NULL;
    }
    void *p = g->be->ops->alloc(g->be, n * elem);
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
        (int64_t)p->n_blocks * p->block_size > INT32_MAX)
        return inf_error_set(err, INF_EINVAL,
                             "graph: bad parameters (max_tokens %d, max_logits %d, n_blocks %d, "
                             "block_size %d)",
                             p->max_tokens, p->max_logits, p->n_blocks, p->block_size);
    struct graph *g = calloc(1, sizeof(*g));
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

    g->rope.n_dims = hp->head_dim;
    g->rope.neox = hp->rope_neox;
    g->rope.freq_base = hp->rope_base;
    g->rope.freq_scale = hp->rope_freq_scale;
    g->rope.freq_factors = model_weights(m)->rope_factors;
    g->attn.n_head = hp->n_head;
    g->attn.n_head_kv = hp->n_head_kv;
    g->attn.head_dim = hp->head_dim;
    g->attn.block_size = p->block_size;
    g->attn.scale = 1.0f / sqrtf((float)hp->head_dim);

    const size_t T = (size_t)p->max_tokens, L = (size_t)g->p.max_logits;
    const size_t E = (size_t)hp->n_embd, F = (size_t)hp->n_ff, V = (size_t)hp->n_vocab;
    int fail = 0;
    g->k_cache = calloc((size_t)hp->n_layer, sizeof(void *));
    g->v_cache = calloc((size_t)hp->n_layer, sizeof(void *));
    g->kv_row_bytes = quant_row_bytes(g->be->ops->kv_type, g->kv_dim);
    if (!g->k_cache || !g->v_cache) {
        graph_free(g);
        return inf_error_set(err, INF_ENOMEM, "graph: out of memory");
    }
    for (int il = 0; il < hp->n_layer && !fail; il++) {
        g->k_cache[il] = graph_alloc(g, (size_t)cache_tokens, g->kv_row_bytes, &fail);
        g->v_cache[il] = graph_alloc(g, (size_t)cache_tokens, g->kv_row_bytes, &fail);
    }
    if (fail) {
        graph_free(g);
        return inf_error_set(err, INF_ENOMEM,
                             "graph: cannot allocate the KV cache (%d layers x %lld tokens x %zu "
                             "bytes x 2)",
                             hp->n_layer, (long long)cache_tokens, g->kv_row_bytes);
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
    g->d_tokens = graph_alloc(g, T, sizeof(int32_t), &fail);
    g->d_pos = graph_alloc(g, T, sizeof(int32_t), &fail);
    g->d_seq = graph_alloc(g, T, sizeof(int32_t), &fail);
    g->d_slots = graph_alloc(g, T, sizeof(int32_t), &fail);
    g->d_bt = graph_alloc(g, T * (size_t)g->max_bt, sizeof(int32_t), &fail);
    g->d_out_rows = graph_alloc(g, L, sizeof(int32_t), &fail);
    g->d_out_pos = graph_alloc(g, L, sizeof(int32_t), &fail);
    g->d_out_seq = graph_alloc(g, L, sizeof(int32_t), &fail);
    g->h_seq = calloc(T, sizeof(int32_t));
    g->h_slots = calloc(T, sizeof(int32_t));
    g->h_bt = calloc(T * (size_t)g->max_bt, sizeof(int32_t));
    g->h_out_pos = calloc(L, sizeof(int32_t));
    g->h_out_seq = calloc(L, sizeof(int32_t));
    g->h_seq_orig = calloc(T, sizeof(int32_t));
    g->h_seq_nb = calloc(T, sizeof(int32_t));
    if (fail || !g->h_seq || !g->h_slots || !g->h_bt || !g->h_out_pos || !g->h_out_seq ||
        !g->h_seq_orig || !g->h_seq_nb) {
        graph_free(g);
        return inf_error_set(err, INF_ENOMEM, "graph: cannot allocate activations for %d tokens",
                             p->max_tokens);
    }

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
    int rc = g->be->ops->reserve(g->be, &r);
    if (rc) {
        graph_free(g);
        return inf_error_set(err, rc, "graph: backend scratch: %s", inf_strerror(rc));
    }
    *out = g;
    return 0;
}

void graph_free(struct graph *g)
{
    if (!g)
        return;
    struct backend *be = g->be;
    const int32_t n_layer = model_hparams(g->m)->n_layer;
    for (int il = 0; il < n_layer; il++) {
        if (g->k_cache)
            be->ops->free(be, g->k_cache[il]);
        if (g->v_cache)
            be->ops->free(be, g->v_cache[il]);
    }
    free(g->k_cache);
    free(g->v_cache);
    float *bufs[] = {g->x, g->xn, g->q, g->k, g->v, g->att, g->tmp, g->ffg, g->ffu,
                     g->xg, g->tg, g->qg, g->logits};
    for (size_t i = 0; i < sizeof(bufs) / sizeof(bufs[0]); i++)
        be->ops->free(be, bufs[i]);
    int32_t *ibufs[] = {g->d_tokens, g->d_pos, g->d_seq, g->d_slots,
                        g->d_bt, g->d_out_rows, g->d_out_pos, g->d_out_seq};
    for (size_t i = 0; i < sizeof(ibufs) / sizeof(ibufs[0]); i++)
        be->ops->free(be, ibufs[i]);
    free(g->h_seq);
    free(g->h_slots);
    free(g->h_bt);
    free(g->h_out_pos);
    free(g->h_out_seq);
    free(g->h_seq_orig);
    free(g->h_seq_nb);
    free(g);
}

const struct graph_params *graph_params(const struct graph *g)
{
    return &g->p;
}

/* Check the batch against the limits and lay out its metadata for the
 * backend: sequences renumbered densely in order of first appearance, their
 * block tables packed with a common stride, each token's cache slot. */
static int graph_prepare(struct graph *g, const struct graph_batch *b)
{
    const int32_t n = b->n_tokens, bs = g->p.block_size;
    const int32_t n_vocab = model_hparams(g->m)->n_vocab;
    if (n < 1 || n > g->p.max_tokens || !b->tokens || !b->pos || !b->seq || b->n_seqs < 1 ||
        !b->block_tables || b->n_logits < 0 || b->n_logits > g->p.max_logits ||
        (b->n_logits > 0 && (!b->logit_rows || !b->logits)))
        return INF_EINVAL;

    int32_t n_local = 0;
    for (int32_t t = 0; t < n; t++) {
        const int32_t s = b->seq[t], p = b->pos[t];
        if (b->tokens[t] < 0 || b->tokens[t] >= n_vocab || p < 0 || p >= g->max_pos || s < 0 ||
            s >= b->n_seqs || !b->block_tables[s])
            return INF_EINVAL;
        /* Tokens of one sequence usually sit together: try the previous first. */
        int32_t ls = -1;
        if (t > 0 && b->seq[t - 1] == s) {
            ls = g->h_seq[t - 1];
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
        }
        g->h_seq[t] = ls;
        if (p / bs + 1 > g->h_seq_nb[ls])
            g->h_seq_nb[ls] = p / bs + 1;
    }
    int32_t stride = 0;
    for (int32_t i = 0; i < n_local; i++)
        if (g->h_seq_nb[i] > stride)
            stride = g->h_seq_nb[i];
    for (int32_t i = 0; i < n_local; i++) {
        const int32_t *bt = b->block_tables[g->h_seq_orig[i]];
        for (int32_t j = 0; j < g->h_seq_nb[i]; j++) {
            if (bt[j] < 0 || bt[j] >= g->p.n_blocks)
                return INF_EINVAL;
            g->h_bt[(size_t)i * stride + j] = bt[j];
        }
    }
    for (int32_t t = 0; t < n; t++) {
        const int32_t p = b->pos[t];
        const int32_t blk = g->h_bt[(size_t)g->h_seq[t] * stride + p / bs];
        g->h_slots[t] = blk * bs + p % bs;
    }
    for (int32_t i = 0; i < b->n_logits; i++) {
        const int32_t r = b->logit_rows[i];
        if (r < 0 || r >= n)
            return INF_EINVAL;
        g->h_out_pos[i] = b->pos[r];
        g->h_out_seq[i] = g->h_seq[r];
    }
    g->attn.bt_stride = stride;

    struct backend *be = g->be;
    const size_t ni = (size_t)n * sizeof(int32_t), nl = (size_t)b->n_logits * sizeof(int32_t);
    be->ops->upload(be, g->d_tokens, b->tokens, ni);
    be->ops->upload(be, g->d_pos, b->pos, ni);
    be->ops->upload(be, g->d_seq, g->h_seq, ni);
    be->ops->upload(be, g->d_slots, g->h_slots, ni);
    be->ops->upload(be, g->d_bt, g->h_bt, (size_t)n_local * stride * sizeof(int32_t));
    be->ops->upload(be, g->d_out_rows, b->logit_rows, nl);
    be->ops->upload(be, g->d_out_pos, g->h_out_pos, nl);
    be->ops->upload(be, g->d_out_seq, g->h_out_seq, nl);
    return 0;
}

int graph_forward(struct graph *g, const struct graph_batch *b)
{
    int rc = graph_prepare(g, b);
    if (rc)
        return rc;
    const struct model_hparams *hp = model_hparams(g->m);
    const struct model_weights *W = model_weights(g->m);
    struct backend *be = g->be;
    const struct backend_ops *op = be->ops;
    const int32_t n = b->n_tokens, n_out = b->n_logits;
    const int32_t E = hp->n_embd, F = hp->n_ff, HD = hp->head_dim;
    const float eps = hp->rms_eps;

    op->get_rows(be, W->tok_embd, g->d_tokens, n, g->x);

    for (int32_t il = 0; il < hp->n_layer; il++) {
        const struct model_layer *L = &W->layers[il];

        /* attention: q, k, v of every row; K/V into the cache */
        op->rms_norm(be, g->x, L->attn_norm, g->xn, n, E, eps);
        op->mul_mat(be, L->wq, g->xn, g->q, n);
        op->mul_mat(be, L->wk, g->xn, g->k, n);
        op->mul_mat(be, L->wv, g->xn, g->v, n);
        if (L->bq)
            op->add_bias(be, g->q, L->bq, n);
        if (L->bk)
            op->add_bias(be, g->k, L->bk, n);
        if (L->bv)
            op->add_bias(be, g->v, L->bv, n);
        if (L->q_norm) {
            op->rms_norm(be, g->q, L->q_norm, g->q, n * hp->n_head, HD, eps);
            op->rms_norm(be, g->k, L->k_norm, g->k, n * hp->n_head_kv, HD, eps);
        }
        op->rope(be, g->q, n, hp->n_head, g->d_pos, &g->rope);
        op->rope(be, g->k, n, hp->n_head_kv, g->d_pos, &g->rope);
        op->kv_store(be, g->k_cache[il], g->v_cache[il], g->k, g->v, g->d_slots, n, g->kv_dim);

        /* The rows that go on: all of them, except in the last layer where
         * only the rows whose logits are wanted matter. */
        float *x = g->x, *q = g->q, *proj = g->tmp;
        int32_t nr = n;
        const int32_t *pos = g->d_pos, *seq = g->d_seq;
        const int last = il == hp->n_layer - 1;
        if (last && n_out == 0)
            break;
        if (last && g->p.late_out_rows) {
            op->attention(be, q, g->k_cache[il], g->v_cache[il], g->att, nr, pos, seq, g->d_bt,
                          &g->attn);
            op->mul_mat(be, L->wo, g->att, g->tmp, nr);
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
            }
            op->attention(be, q, g->k_cache[il], g->v_cache[il], g->att, nr, pos, seq, g->d_bt,
                          &g->attn);
            op->mul_mat(be, L->wo, g->att, g->tmp, nr);
        }
        op->add(be, x, proj, (int64_t)nr * E);

        /* feed-forward (SwiGLU) */
        op->rms_norm(be, x, L->ffn_norm, g->xn, nr, E, eps);
        op->mul_mat(be, L->ffn_gate, g->xn, g->ffg, nr);
        op->mul_mat(be, L->ffn_up, g->xn, g->ffu, nr);
        op->silu_mul(be, g->ffg, g->ffu, (int64_t)nr * F, F);
        op->mul_mat(be, L->ffn_down, g->ffg, g->tmp, nr);
        op->add(be, x, g->tmp, (int64_t)nr * E);

        if (last) {
            op->rms_norm(be, x, W->output_norm, g->xn, nr, E, eps);
            op->mul_mat(be, W->output, g->xn, g->logits, nr);
            op->download(be, b->logits, g->logits, (size_t)nr * hp->n_vocab * sizeof(float));
        }
    }
    /* a recoverable allocation failure stays INF_ENOMEM (the request gets a
     * 503, the daemon lives); anything else the backend reports is the device */
    rc = op->sync(be);
    return rc == INF_ENOMEM ? INF_ENOMEM : rc ? INF_EDEVICE : 0;
}

int graph_kv_copy_block(struct graph *g, int32_t src_block, int32_t dst_block)
{
    if (src_block < 0 || src_block >= g->p.n_blocks || dst_block < 0 ||
        dst_block >= g->p.n_blocks)
        return INF_EINVAL;
    if (src_block == dst_block)
        return 0;
    const size_t bytes = (size_t)g->p.block_size * g->kv_row_bytes;
    for (int32_t il = 0; il < model_hparams(g->m)->n_layer; il++) {
        char *k = g->k_cache[il], *v = g->v_cache[il];
        g->be->ops->copy(g->be, k + (size_t)dst_block * bytes, k + (size_t)src_block * bytes,
                         bytes);
        g->be->ops->copy(g->be, v + (size_t)dst_block * bytes, v + (size_t)src_block * bytes,
                         bytes);
    }
    return g->be->ops->sync(g->be) ? INF_EDEVICE : 0;
}
