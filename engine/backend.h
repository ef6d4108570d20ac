/* backend — the op table the forward pass (engine/graph.c) is written against.
 *
 * The graph is written once, as a sequence of calls through struct backend_ops;
 * the CPU backend (engine/cpu.c) and the CUDA backend (engine/cuda/) fill the
 * same table, so there is never a second graph.
 *
 * Memory: every float/int buffer an op touches is "backend memory", obtained
 * from ops->alloc (CPU: host memory; CUDA: device memory). Host data reaches it
 * through ops->upload and comes back through ops->download (synchronous) or
 * ops->download_async. Buffers are row-major matrices [rows][cols]; cols is
 * given per op. ops->host_alloc gives host memory the backend can copy from
 * and to while it computes (CUDA: pinned): a step's descriptor goes up from
 * it in one upload, its logits come down into it.
 *
 * Ordering: ops run in the order they are called (one queue, the CUDA
 * stream). An async backend (ops->async = 1, CUDA) queues work and returns;
 * ops->sync waits for everything queued. On a synchronous one (CPU) an op has
 * computed when it returns, and sync only reports.
 *
 * Weights: a struct backend_weight describes one GGUF tensor (ne1 rows of ne0
 * elements of a ggml type) and points at its bytes in the GGUF mapping; after
 * ops->weight_register the backend's copy is in `data` (CPU: a view of the
 * mapping, nothing copied; CUDA: uploaded once).
 *
 * KV cache: the backend owns it (struct backend_kv, from ops->kv_alloc): its
 * memory and its layout, which nobody else computes addresses in. Callers
 * name a K/V row by (layer, slot), slot = block * block_size + offset;
 * kv_store writes rows, attention reads them, kv_copy_blocks copies whole
 * blocks (copy-on-write) in queue order without waiting.
 *
 * Errors: ops do not return codes, so the graph reads like the model. A
 * backend remembers its first failure and ops->sync reports it: INF_ENOMEM
 * when memory ran out (recoverable: the request fails with a 503, the
 * backend keeps working after the report), INF_EINTERNAL for a call the
 * device refused without harm (a bad launch configuration: that step's
 * requests fail, the backend works after the report), anything else
 * (INF_EDEVICE) when the device or its context is lost: sticky, every
 * later sync says it again and the daemon exits (ROBUSTNESS 35). CPU ops
 * cannot fail once graph_new has reserved their scratch.
 *
 * Numerics every backend must keep (the scheduler relies on them):
 *  - batch invariance: the result for one row never depends on the other rows
 *    of the call (same arithmetic, same activation quantization, same
 *    reduction order at every batch size);
 *  - attention reads K/V only from the paged cache, after kv_store, so how a
 *    sequence is split into batches does not change its results.
 *
 * Threads: a backend belongs to the engine thread; it may run its own workers
 * inside an op.
 */
#ifndef INFERD_BACKEND_H
#define INFERD_BACKEND_H

#include <stddef.h>
#include <stdint.h>

struct backend;
/* A KV cache; each backend defines it (a handle only goes back to the backend
 * that made it). */
struct backend_kv;
/* Fused weights (ops->weight_fuse); each backend defines it. */
struct backend_wgroup;

/* A weight tensor: ne1 rows of ne0 elements of type `type` (enum quant_type).
 * 1-D tensors (norm weights, biases, rope factors) have ne1 = 1. */
struct backend_weight {
    char name[64];
    int type;
    int64_t ne0;
    int64_t ne1;
    size_t row_bytes;
    const void *host; /* bytes in the GGUF mapping; valid while the model lives */
    void *data;       /* backend's copy, set by weight_register (CPU: == host) */
    void *aux;        /* the backend's second layout, or NULL (CUDA: Q6_K expanded
                       * to int8 for the MMQ kernels); zero before weight_register */
    /* NULL: data (and aux) are this weight's own. Else they are a slice of
     * a fused allocation (ops->weight_fuse) that the backend owns and frees
     * at the weight_release of its last member; zero before weight_register. */
    struct backend_wgroup *group;
    /* Set by the model before weight_register where it will offer this
     * weight to ops->weight_fuse with its layer's neighbours (Q/K/V,
     * gate/up) once the layer is registered, by the members' types in the
     * file (engine/model.c model_fuse_hint, the fusion's own rule): a
     * backend may leave out the second layouts a fused group drops (CUDA:
     * the Q4_K and Q6_K planes). 0 where nothing will be fused. A hint
     * only: nothing may depend on it (a backend that then declines the
     * fusion leaves the weight alone without those layouts). */
    int fuse_next;
};

/* Rotary position embedding of one call. Angle of pair i (0 <= i < n_dims/2)
 * at position p: theta = freq_scale * p * freq_base^(-2i/n_dims) / ff[i],
 * where ff = freq_factors (NULL: all 1; Llama 3.1 "llama3" scaling). */
struct backend_rope {
    int32_t n_dims;  /* rotated dimensions per head (= head_dim) */
    int neox;        /* 0: pairs (2i, 2i+1) (llama); 1: pairs (i, i + n_dims/2) (qwen2/3) */
    float freq_base;
    float freq_scale;
    const float *freq_factors; /* backend memory [n_dims/2] or NULL */
};

/* Causal grouped-query attention over the paged cache. Row r of the call is a
 * token at position pos[r] of the sequence whose block table is
 * block_table + seq[r] * bt_stride; it attends to positions 0..pos[r] of that
 * sequence, whose K/V rows are at slot table[p / block_size] * block_size +
 * p % block_size of the layer's cache (rows of n_head_kv * head_dim).
 * Query head h uses KV head h / (n_head / n_head_kv). Scores scaled by
 * `scale`, softmax with the running maximum subtracted.
 * max_kv is known on the host without reading backend memory: an upper bound
 * of pos[r] + 1 over the call's rows (0: not known), so a kernel can be sized
 * from it; it never changes a result. */
struct backend_attn {
    int32_t n_head;
    int32_t n_head_kv;
    int32_t head_dim;
    int32_t block_size;
    int32_t bt_stride;
    float scale;
    int32_t max_kv;
    int32_t n_seqs; /* distinct sequences among the rows (0: not known); speed only */
};

/* The shape of a KV cache: n_layer layers, each with K and V rows of
 * row_len elements (n_head_kv * head_dim) of the backend's kv_type, for
 * n_blocks * block_size slots. */
struct backend_kv_shape {
    int32_t n_layer;
    int32_t n_blocks;
    int32_t block_size;
    int32_t row_len;
};

/* Sizes the graph will use, so a backend can allocate its scratch once. */
struct backend_reserve {
    int32_t max_rows;  /* rows of one op call */
    int64_t max_ne0;   /* longest weight row (elements) */
    int32_t max_ctx;   /* longest sequence attention may read */
    int32_t n_head;    /* query heads */
    int32_t head_dim;
};

/* ---- sampling on the backend (ops->sample) ------------------------------
 *
 * One request per sampled (or scored) token. A request reads logits row
 * `row` (several requests may read one row: the n > 1 choices of a prompt)
 * and, when it samples, the sequence's flat sampler state (engine/sample.h,
 * struct sample_state) in backend memory. The result comes back in a struct
 * backend_sample_out in host memory: the token, and when n_top >= 0 the
 * log-softmax of the (masked) raw logits at that token and the top n_top
 * tokens by logit (ties: lower id), exactly as sample_logprobs reports them. */
#include "engine/sample.h"

#define BACKEND_SAMPLE_MAX_TOP 20 /* = SCHED_MAX_TOP, the API's top_logprobs cap */
#define BACKEND_SAMPLE_MASKED 1   /* flags: apply the state's mask this step */

struct backend_sample_req {
    int32_t row;   /* logits row, < n_rows */
    int32_t token; /* -1: sample with `state`; >= 0: only score this token
                    * (prompt logprobs): no state is read or advanced */
    int32_t n_top; /* -1: no logprobs; 0..BACKEND_SAMPLE_MAX_TOP */
    int32_t flags; /* BACKEND_SAMPLE_MASKED: the state's mask ids are -inf
                    * before everything, logprobs included (min_tokens) */
    struct sample_state *state; /* backend memory; NULL when token >= 0 */
    /* NULL, or bits [(n_vocab + 31) / 32] in backend memory: token i is
     * -inf unless bit i % 32 of word i / 32 is set, before everything,
     * logprobs included, as a state's mask (a JSON constraint's allowed
     * tokens: the scheduler works them out on the host and uploads them,
     * so a constrained row needs neither its logits downloaded nor a host
     * sampler) */
    const uint32_t *allow;
};

struct backend_sample_out {
    int32_t token;
    float logprob; /* when n_top >= 0 */
    int32_t top_ids[BACKEND_SAMPLE_MAX_TOP];
    float top_lps[BACKEND_SAMPLE_MAX_TOP];
};

/* One product of ops->mul_mat_ex: y = W x, then + bias (y[r][j] = acc +
 * b[j], add_bias's rounding) when bias is set, or with accumulate y[r][j]
 * = y[r][j] + acc (add's rounding, the residual stream). */
struct backend_mm_out {
    const struct backend_weight *w;
    float *y;
    const struct backend_weight *bias; /* F32 [w->ne1] or NULL */
    int accumulate;
};

struct backend_ops {
    const char *name;
    /* Element type of the K/V cache rows (enum quant_type; the CPU keeps F16
     * like llama.cpp). The graph sizes the cache with it. */
    int kv_type;
    /* 1: ops queue work and return (CUDA); 0: an op has computed when it
     * returns (CPU). graph_submit uses it to leave a synchronous backend's
     * computation to graph_wait, so host work placed between the two still
     * runs before the step, as it would without the split. */
    int async;
    void (*destroy)(struct backend *be);

    /* Scratch for the ops, sized by r; called by graph_new (may be called
     * again with larger sizes). 0 or INF_ENOMEM. */
    int (*reserve)(struct backend *be, const struct backend_reserve *r);

    /* Memory. alloc returns zeroed backend memory (NULL on failure). */
    void *(*alloc)(struct backend *be, size_t bytes);
    void (*free)(struct backend *be, void *p); /* accepts NULL */
    void (*upload)(struct backend *be, void *dst, const void *src_host, size_t bytes);
    void (*download)(struct backend *be, void *dst_host, const void *src, size_t bytes);
    void (*copy)(struct backend *be, void *dst, const void *src, size_t bytes);
    /* Host memory for transfers that overlap the computation (CPU: malloc;
     * CUDA: pinned). Zeroed; NULL on failure. upload from it is queued: the
     * bytes must not change until the next sync (from any other host memory
     * upload has read them when it returns). */
    void *(*host_alloc)(struct backend *be, size_t bytes);
    void (*host_free)(struct backend *be, void *p); /* accepts NULL; waits for queued work */
    /* Queue a copy into host_alloc memory; the bytes are there after the
     * next sync (download waits; this does not). */
    void (*download_async)(struct backend *be, void *dst_host, const void *src, size_t bytes);

    /* Make w->data usable by the ops below. 0 or a negative INF_E* code. */
    int (*weight_register)(struct backend *be, struct backend_weight *w);
    void (*weight_release)(struct backend *be, struct backend_weight *w);

    /* y[r] = dequant(row ids[r] of w), r < n  (y: [n][w->ne0]). */
    void (*get_rows)(struct backend *be, const struct backend_weight *w, const int32_t *ids,
                     int32_t n, float *y);
    /* y[r] = x[rows[r]], r < n  (row_len floats each; y must not alias x). */
    void (*gather)(struct backend *be, const float *x, const int32_t *rows, int32_t n,
                   int32_t row_len, float *y);
    /* y[r] = x[r] / sqrt(mean(x[r]^2) + eps) * w  over n_rows rows of n floats;
     * w is F32 [n] (NULL: no weight). y may equal x. */
    void (*rms_norm)(struct backend *be, const float *x, const struct backend_weight *w,
                     float *y, int32_t n_rows, int32_t n, float eps);
    /* y[r][j] = dot(row j of w, x[r])  (x: [n_rows][w->ne0], y: [n_rows][w->ne1]). */
    void (*mul_mat)(struct backend *be, const struct backend_weight *w, const float *x,
                    float *y, int32_t n_rows);
    /* y[r] += b  (b: F32 [n], y: [n_rows][n]). */
    void (*add_bias)(struct backend *be, float *y, const struct backend_weight *b,
                     int32_t n_rows);
    /* Rotate x ([n_rows][n_head][r->n_dims]) in place; row r is at position pos[r]. */
    void (*rope)(struct backend *be, float *x, int32_t n_rows, int32_t n_head,
                 const int32_t *pos, const struct backend_rope *r);

    /* The KV cache. kv_alloc: a zeroed cache of shape *s; 0, INF_EINVAL (bad
     * shape), INF_ENOMEM (nothing allocated; recoverable) or INF_EDEVICE.
     * kv_free accepts NULL and waits for queued work. */
    int (*kv_alloc)(struct backend *be, const struct backend_kv_shape *s,
                    struct backend_kv **out);
    void (*kv_free)(struct backend *be, struct backend_kv *kv);
    /* For i < n, block dst[i] of every layer's K and V = block src[i]
     * (copy-on-write), queued after the ops before it and before the ops
     * after it, without waiting. src/dst are host arrays, read before the
     * call returns; ids are < n_blocks, dst blocks distinct and no dst is a
     * src. Errors are reported by sync. */
    void (*kv_copy_blocks)(struct backend *be, struct backend_kv *kv, const int32_t *src,
                           const int32_t *dst, int32_t n);
    /* Tests and tools: K and V rows [slot0, slot0 + n) of a layer to host
     * memory (n * row_len elements of kv_type each), after everything
     * queued; waits. 0 or the first error (as sync). */
    int (*kv_read)(struct backend *be, struct backend_kv *kv, int32_t layer, int64_t slot0,
                   int64_t n, void *k_host, void *v_host);
    /* Row r of k and v ([n_rows][row_len], F32) to slot slots[r] of the
     * layer's cache, converted to kv_type. */
    void (*kv_store)(struct backend *be, struct backend_kv *kv, int32_t layer, const float *k,
                     const float *v, const int32_t *slots, int32_t n_rows);
    /* out ([n_rows][n_head * head_dim]) = attention of q (same shape) over
     * the layer's cache; see struct backend_attn. */
    void (*attention)(struct backend *be, const float *q, struct backend_kv *kv, int32_t layer,
                      float *out, int32_t n_rows, const int32_t *pos, const int32_t *seq,
                      const int32_t *block_table, const struct backend_attn *a);
    /* gate[i] = silu(gate[i]) * up[i], i < n  (SwiGLU), over rows of row_len. */
    void (*silu_mul)(struct backend *be, float *gate, const float *up, int64_t n,
                     int64_t row_len);
    /* y[i] += x[i], i < n  (residual). */
    void (*add)(struct backend *be, float *y, const float *x, int64_t n);

    /* Wait for queued work; 0 or the first error since the last sync. */
    int (*sync)(struct backend *be);

    /* Optional (NULL: nothing to warm). Launch every kernel the backend's
     * dispatcher can choose once on scratch data, so the first request pays
     * no module load; report(ud, name, ms) for each, in order. 0, or the
     * first failure (nothing else is changed either way). */
    int (*prewarm)(struct backend *be, void (*report)(void *ud, const char *name, double ms),
                   void *ud);

    /* Optional (NULL: the caller downloads the logits and samples on the
     * host with engine/sample.c). Sample or score reqs[0..n_reqs) from
     * logits ([n_rows][n_vocab], backend memory) into out[0..n_reqs) (host
     * memory); returns once out is filled (it synchronizes), 0 or a negative
     * INF_E* code (INF_EINVAL for a request out of range, INF_ENOMEM, or the
     * backend's first error).
     *
     * Results: a sampled token equals sample_state_step's on the same state
     * and logits (the CPU op is sample_state_step); each state is updated
     * in place as that step updates it (RNG, then the token accepted as
     * generated). out[i].logprob/top_* equal sample_logprobs over the row
     * with the mask applied (CUDA: see engine/cuda/sample.cu for the last-
     * bit caveat of its exp/log in double). Rows and states are not
     * modified otherwise; requests sharing one state are not allowed.
     *
     * Scratch: a call with reqs == NULL reserves it for n_reqs requests of
     * n_vocab at once (later calls with more requests run in several
     * rounds); call it once at startup, so sampling allocates nothing per
     * step (a call without it reserves on first use).
     *
     * How the scheduler uses it: at admission, after sampler_new and the
     * prompt's sampler_accept calls (as today), sampler_export the sampler
     * with the request's mask (end-of-generation ids unless ignore_eos, then
     * its stop ids) and cap_hist = n_prompt + max_tokens into a pinned host
     * buffer and upload it once to a state slot it reserved at startup
     * (slots of sample_state_bytes(n_bias max, n_mask max, n_ctx) each);
     * each step, one request per logits row that samples (flags MASKED while
     * n_gen < min_tokens, or `allow` for a JSON-constrained choice; n_top =
     * the request's logprobs, or -1 and a second call that scores the
     * sampled token on the raw row when a mask applied), one per prompt
     * logprob row (token = the next prompt token, state NULL), then one call
     * after the forward pass. It calls sampler_accept on its host sampler
     * only if it still needs it; the device state is already advanced. */
    int (*sample)(struct backend *be, const float *logits, int32_t n_rows, int32_t n_vocab,
                  const struct backend_sample_req *reqs, int32_t n_reqs,
                  struct backend_sample_out *out);

    /* Optional (NULL: the graph calls mul_mat, then add_bias / add). One
     * activation x ([n_rows][ne0], every out[i].w of width ne0) through
     * n_out products (struct backend_mm_out): the same bits as the
     * separate ops, with the activation quantized once per vec-dot type
     * and no round trip of a product through memory before its add. */
    void (*mul_mat_ex)(struct backend *be, const float *x, int32_t n_rows,
                       const struct backend_mm_out *out, int n_out);

    /* Optional (NULL: every step is queued op by op). Record the work
     * queued between capture_begin and capture_end into a replayable graph
     * (CUDA graphs): while recording nothing runs. capture_end returns the
     * graph, or NULL when the recording failed (the backend is then as if
     * nothing had been queued: the caller queues the work again, op by
     * op). graph_run queues a recorded graph: the same launches with the
     * same arguments, reading the host memory the recorded uploads named
     * at the time it runs, so one recording serves every step whose
     * launch arguments are the same. graph_drop frees one (accepts NULL). */
    int (*capture_begin)(struct backend *be);
    void *(*capture_end)(struct backend *be);
    int (*graph_run)(struct backend *be, void *graph);
    void (*graph_drop)(struct backend *be, void *graph);

    /* Optional (NULL: weights stay where weight_register put them; the CPU).
     * Move n >= 2 registered weights of one type, ne0 and row_bytes, none
     * fused yet, all with aux or all without, into one allocation in the
     * order given: w[i+1]->data == (char *)w[i]->data + w[i]->ne1 *
     * w[i]->row_bytes, and the same for aux, so one product can run over
     * their rows together (mul_mat_ex does when consecutive outs are
     * adjacent slices of one group; the bits stay those of the separate
     * products). Each w[i]->group is set; weight_release of the members
     * frees the group after the last one, in any order. 0, or INF_EINVAL
     * (weights that cannot be fused), INF_ENOMEM or INF_EDEVICE with every
     * weight left as it was (the caller simply does not fuse). Load time
     * only: no product may be queued on the weights. */
    int (*weight_fuse)(struct backend *be, struct backend_weight **w, int n);

    /* Optional (NULL: the graph calls mul_mat_ex of gate and up, then
     * silu_mul). The SwiGLU half of a feed-forward layer: y[r][j] =
     * silu(gate_j . x_r) * (up_j . x_r) for j < gate->ne1 (= up->ne1), the
     * bits of mul_mat_ex({gate, y}, {up, u}) then silu_mul(y, u, n_rows *
     * ne1, ne1). u: [n_rows][ne1] scratch the backend may use or not (its
     * contents afterwards are unspecified). The CUDA backend computes
     * silu(gate) * up where the MMQ kernels store a fused gate/up weight's
     * products, so the gate and up products never reach memory. */
    void (*mul_mat_swiglu)(struct backend *be, const float *x, int32_t n_rows,
                           const struct backend_weight *gate, const struct backend_weight *up, float *y,
                           float *u);

    /* Optional (NULL: the graph calls rope on q and on k, then kv_store):
     * the three in one call, with their bits. q ([n_rows][n_head][r->n_dims])
     * and k ([n_rows][n_head_kv][r->n_dims]) rotated in place, then row i of
     * k and of v to slot slots[i] of the layer's cache. */
    void (*rope_kv_store)(struct backend *be, float *q, float *k, const float *v, int32_t n_rows,
                          int32_t n_head, int32_t n_head_kv, const int32_t *pos,
                          const struct backend_rope *r, struct backend_kv *kv, int32_t layer,
                          const int32_t *slots);
};

struct backend {
    const struct backend_ops *ops;
    void *ctx;
};

static inline void backend_free(struct backend *be)
{
    if (be)
        be->ops->destroy(be);
}

#endif
