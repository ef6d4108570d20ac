/* model — load a GGUF model: hyperparameters, weight views, tokenizer (see model.h).
 *
 * Invariants after model_load: every hyperparameter is in range and every
 * tensor the architecture needs exists with exactly the shape the
 * hyperparameters imply and a type the CPU engine computes with; each weight
 * is registered with the backend (on a backend with ops->weight_fuse, each
 * layer's Q/K/V and gate/up placed contiguously where their types allow,
 * unless INFERD_NO_FUSE=1). The model keeps the GGUF mapping open (the
 * weights and the tokenizer point into it) until model_free.
 * Threads: load/free on one thread; the loaded model is immutable.
 */
#include "model.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend.h"
#include "gguf.h"
#include "log.h"
#include "quant.h"
#include "tok.h"

/* Sanity bounds for hyperparameters read from an untrusted file. Real models
 * sit far inside them; anything outside is a broken or hostile file. */
#define MODEL_MAX_EMBD (1 << 16)
#define MODEL_MAX_LAYERS 1024
#define MODEL_MAX_HEADS 1024
#define MODEL_MAX_HEAD_DIM 1024
#define MODEL_MAX_FF (1 << 20)
#define MODEL_MAX_CTX (1 << 24)

struct model {
    struct gguf_file *gguf;
    struct tok *tok;
    struct backend *be;
    struct model_hparams hp;
    struct backend_weight *w; /* all tensors: [n_w] */
    int32_t n_w, cap_w;
    struct model_layer *layers;
    struct model_weights weights;
    float *rope_factors; /* backend memory, or NULL */
    int fuse;            /* model_fuse_enabled: the layers' Q/K/V and gate/up go to ops->weight_fuse */
};

/* ------------------------------------------------------------------------ */
/* Hyperparameters                                                          */
/* ------------------------------------------------------------------------ */

/* "<arch>.<suffix>" */
static void model_key(char *buf, size_t cap, const struct model_hparams *hp, const char *suffix)
{
    snprintf(buf, cap, "%s.%s", hp->arch_name, suffix);
}

/* Integer hyperparameter in [lo, hi]. Missing: *out = def when optional,
 * else an error naming the key. */
static int model_get_i32(const struct gguf_file *f, const struct model_hparams *hp,
                         const char *suffix, int required, int64_t def, int64_t lo, int64_t hi,
                         int32_t *out, struct inf_error *err)
{
    char key[128];
    int64_t v;
    model_key(key, sizeof(key), hp, suffix);
    int rc = gguf_get_int(f, key, &v);
    if (rc == INF_ENOTFOUND) {
        if (required)
            return inf_error_set(err, INF_EFORMAT, "model: missing hyperparameter '%s'", key);
        v = def;
    } else if (rc != 0) {
        return inf_error_set(err, INF_EFORMAT, "model: hyperparameter '%s' is not an integer",
                             key);
    }
    if (v < lo || v > hi)
        return inf_error_set(err, INF_ERANGE,
                             "model: hyperparameter '%s' = %lld is out of range [%lld, %lld]",
                             key, (long long)v, (long long)lo, (long long)hi);
    *out = (int32_t)v;
    return 0;
}

/* Float hyperparameter, finite and in [lo, hi] (NaN fails the test). */
static int model_get_f32(const struct gguf_file *f, const struct model_hparams *hp,
                         const char *suffix, int required, float def, float lo, float hi,
                         float *out, struct inf_error *err)
{
    char key[128];
    float v;
    model_key(key, sizeof(key), hp, suffix);
    int rc = gguf_get_f32(f, key, &v);
    if (rc == INF_ENOTFOUND) {
        if (required)
            return inf_error_set(err, INF_EFORMAT, "model: missing hyperparameter '%s'", key);
        v = def;
    } else if (rc != 0) {
        return inf_error_set(err, INF_EFORMAT, "model: hyperparameter '%s' is not a float",
                             key);
    }
    if (!(v >= lo && v <= hi))
        return inf_error_set(err, INF_ERANGE,
                             "model: hyperparameter '%s' = %g is out of range [%g, %g]", key,
                             (double)v, (double)lo, (double)hi);
    *out = v;
    return 0;
}

static void model_copy_str(char *dst, size_t cap, struct gguf_str s)
{
    size_t n = s.len < cap - 1 ? (size_t)s.len : cap - 1;
    memcpy(dst, s.ptr, n);
    dst[n] = '\0';
}

static int model_read_hparams(const struct gguf_file *f, const char *path,
                              struct model_hparams *hp, struct inf_error *err)
{
    struct gguf_str s;
    int rc;
    memset(hp, 0, sizeof(*hp));

    if (gguf_get_str(f, "general.architecture", &s) != 0)
        return inf_error_set(err, INF_EFORMAT, "model: missing 'general.architecture'");
    if (gguf_str_eq(s, "llama"))
        hp->arch = MODEL_ARCH_LLAMA;
    else if (gguf_str_eq(s, "qwen2"))
        hp->arch = MODEL_ARCH_QWEN2;
    else if (gguf_str_eq(s, "qwen3"))
        hp->arch = MODEL_ARCH_QWEN3;
    else
        return inf_error_set(err, INF_EUNSUPPORTED,
                             "model: architecture '%.*s' is not supported (llama, qwen2, qwen3)",
                             (int)(s.len < 64 ? s.len : 64), s.ptr);
    model_copy_str(hp->arch_name, sizeof(hp->arch_name), s);

    if (gguf_get_str(f, "general.name", &s) == 0 && s.len > 0) {
        model_copy_str(hp->name, sizeof(hp->name), s);
    } else {
        const char *base = strrchr(path, '/');
        snprintf(hp->name, sizeof(hp->name), "%s", base ? base + 1 : path);
    }

    if ((rc = model_get_i32(f, hp, "context_length", 1, 0, 1, MODEL_MAX_CTX, &hp->n_ctx_train,
                            err)) ||
        (rc = model_get_i32(f, hp, "embedding_length", 1, 0, 1, MODEL_MAX_EMBD, &hp->n_embd,
                            err)) ||
        (rc = model_get_i32(f, hp, "block_count", 1, 0, 1, MODEL_MAX_LAYERS, &hp->n_layer,
                            err)) ||
        (rc = model_get_i32(f, hp, "feed_forward_length", 1, 0, 1, MODEL_MAX_FF, &hp->n_ff,
                            err)) ||
        (rc = model_get_i32(f, hp, "attention.head_count", 1, 0, 1, MODEL_MAX_HEADS,
                            &hp->n_head, err)) ||
        (rc = model_get_i32(f, hp, "attention.head_count_kv", 0, hp->n_head, 1, hp->n_head,
                            &hp->n_head_kv, err)))
        return rc;
    if (hp->n_head % hp->n_head_kv != 0)
        return inf_error_set(err, INF_ERANGE,
                             "model: head_count %d is not a multiple of head_count_kv %d",
                             hp->n_head, hp->n_head_kv);

    /* head_dim: attention.key_length, else n_embd / n_head (which must divide). */
    int32_t def_hd = hp->n_embd / hp->n_head;
    char key[128];
    model_key(key, sizeof(key), hp, "attention.key_length");
    if (!gguf_find_kv(f, key) && hp->n_embd % hp->n_head != 0)
        return inf_error_set(err, INF_ERANGE,
                             "model: embedding_length %d is not divisible by head_count %d",
                             hp->n_embd, hp->n_head);
    if ((rc = model_get_i32(f, hp, "attention.key_length", 0, def_hd, 2, MODEL_MAX_HEAD_DIM,
                            &hp->head_dim, err)))
        return rc;
    if (hp->head_dim % 2 != 0)
        return inf_error_set(err, INF_ERANGE, "model: head dimension %d is odd (RoPE pairs)",
                             hp->head_dim);
    /* set on every path that reaches their use, but GCC 12 at -O3 cannot see
     * that through the || chain (-Werror=maybe-uninitialized) */
    int32_t v_len = 0, n_rot = 0;
    if ((rc = model_get_i32(f, hp, "attention.value_length", 0, hp->head_dim, 1,
                            MODEL_MAX_HEAD_DIM, &v_len, err)) ||
        (rc = model_get_i32(f, hp, "rope.dimension_count", 0, hp->head_dim, 1,
                            MODEL_MAX_HEAD_DIM, &n_rot, err)))
        return rc;
    if (v_len != hp->head_dim)
        return inf_error_set(err, INF_EUNSUPPORTED,
                             "model: attention.value_length %d != key_length %d", v_len,
                             hp->head_dim);
    if (n_rot != hp->head_dim)
        return inf_error_set(err, INF_EUNSUPPORTED,
                             "model: rope.dimension_count %d != head dimension %d (partial "
                             "rotary embeddings are not supported)",
                             n_rot, hp->head_dim);

    if ((rc = model_get_f32(f, hp, "attention.layer_norm_rms_epsilon", 1, 0, 1e-12f, 0.1f,
                            &hp->rms_eps, err)) ||
        (rc = model_get_f32(f, hp, "rope.freq_base", 0, 10000.0f, 1.0f, 1e12f, &hp->rope_base,
                            err)))
        return rc;
    hp->rope_neox = hp->arch == MODEL_ARCH_QWEN2 || hp->arch == MODEL_ARCH_QWEN3;

    /* Rope scaling: "linear" divides positions by the factor; "llama3"
     * (Llama 3.1) rescales the frequencies per dimension (model_rope_factors). */
    hp->rope_freq_scale = 1.0f;
    model_key(key, sizeof(key), hp, "rope.scaling.type");
    if (gguf_get_str(f, key, &s) == 0 && !gguf_str_eq(s, "none")) {
        float factor;
        if ((rc = model_get_f32(f, hp, "rope.scaling.factor", 1, 0, 1e-3f, 1e6f, &factor,
                                err)))
            return rc;
        if (gguf_str_eq(s, "linear")) {
            hp->rope_freq_scale = 1.0f / factor;
        } else if (gguf_str_eq(s, "llama3")) {
            hp->rope_scale_factor = factor;
            if ((rc = model_get_f32(f, hp, "rope.scaling.low_freq_factor", 0, 1.0f, 1e-6f, 1e6f,
                                    &hp->rope_low_freq_factor, err)) ||
                (rc = model_get_f32(f, hp, "rope.scaling.high_freq_factor", 0, 4.0f, 1e-6f,
                                    1e6f, &hp->rope_high_freq_factor, err)) ||
                (rc = model_get_i32(f, hp, "rope.scaling.original_context_length", 0, 8192, 1,
                                    MODEL_MAX_CTX, &hp->rope_orig_ctx, err)))
                return rc;
            if (!(hp->rope_high_freq_factor > hp->rope_low_freq_factor))
                return inf_error_set(err, INF_ERANGE,
                                     "model: rope.scaling high_freq_factor %g <= "
                                     "low_freq_factor %g",
                                     (double)hp->rope_high_freq_factor,
                                     (double)hp->rope_low_freq_factor);
        } else {
            return inf_error_set(err, INF_EUNSUPPORTED,
                                 "model: rope.scaling.type '%.*s' is not supported "
                                 "(none, linear, llama3)",
                                 (int)(s.len < 32 ? s.len : 32), s.ptr);
        }
    } else {
        /* Older files: a bare linear factor. */
        float lin;
        if ((rc = model_get_f32(f, hp, "rope.scale_linear", 0, 1.0f, 1e-3f, 1e6f, &lin, err)))
            return rc;
        hp->rope_freq_scale = 1.0f / lin;
    }
    return 0;
}

/* ------------------------------------------------------------------------ */
/* Tensors                                                                  */
/* ------------------------------------------------------------------------ */

/* Which of a layer's Q, K, V (bits 0-2) and gate, up (bits 3-4)
 * model_fuse_layer offers to ops->weight_fuse, from whether Q/K, K/V and
 * gate/up could share one product: all three of Q/K/V when both pairs
 * can, else the pair that can (Q4_K_M: V in Q6_K leaves Q/K). One rule for
 * the fusion and for the hint at registration (model_fuse_hint). */
static unsigned model_fuse_plan(int qk, int kv, int gu)
{
    const unsigned qkv = qk && kv ? 7u : kv ? 6u : qk ? 3u : 0u;
    return qkv | (gu ? 24u : 0u);
}

static const char *const model_fuse_sfx[5] = {".attn_q.weight", ".attn_k.weight", ".attn_v.weight",
                                              ".ffn_gate.weight", ".ffn_up.weight"};

/* what model_fusable will see, read from the file before any member is
 * registered: the same type and row length (the backend's second layouts,
 * aux, are not known yet: where one member gets one and the other not,
 * the hint says fused and the layer is not) */
static int model_gguf_fusable(const struct gguf_tensor *a, const struct gguf_tensor *b)
{
    return a && b && a->type == b->type && a->ne[0] == b->ne[0];
}

/* backend_weight.fuse_next of tensor `name`: whether model_fuse_layer will
 * offer it to weight_fuse, by the types of its layer's members in the
 * file. (By name alone, session 55-61's hint, every Q/K/V and gate/up of
 * a model whose neighbours differ in type was marked, and the CUDA
 * backend left the planes off weights that then ran alone.) */
static int model_fuse_hint(const struct model *m, const char *name)
{
    const size_t nl = strlen(name);
    for (int i = 0; i < 5; i++) {
        const size_t fl = strlen(model_fuse_sfx[i]);
        if (nl <= fl || strcmp(name + nl - fl, model_fuse_sfx[i]) != 0)
            continue;
        const struct gguf_tensor *t[5];
        for (int j = 0; j < 5; j++) {
            char key[GGUF_MAX_NAME];
            const int k = snprintf(key, sizeof(key), "%.*s%s", (int)(nl - fl), name, model_fuse_sfx[j]);
            t[j] = k > 0 && (size_t)k < sizeof(key) ? gguf_find_tensor(m->gguf, key) : NULL;
        }
        const unsigned plan = model_fuse_plan(model_gguf_fusable(t[0], t[1]), model_gguf_fusable(t[1], t[2]),
                                              model_gguf_fusable(t[3], t[4]));
        return (int)((plan >> i) & 1u);
    }
    return 0;
}

/* Find `name` and check it is [ne0] (ne1 == 0) or [ne0, ne1]; register it with
 * the backend. Missing: *out = NULL, an error only when required. */
static int model_tensor(struct model *m, const char *name, int64_t ne0, int64_t ne1,
                        int required, struct backend_weight **out, struct inf_error *err)
{
    *out = NULL;
    const struct gguf_tensor *t = gguf_find_tensor(m->gguf, name);
    if (!t) {
        if (required)
            return inf_error_set(err, INF_EFORMAT, "model: missing tensor '%s'", name);
        return 0;
    }
    const int want_dims = ne1 ? 2 : 1;
    const int64_t want1 = ne1 ? ne1 : 1;
    if (t->ne[0] != ne0 || t->ne[1] != want1 || t->ne[2] != 1 || t->ne[3] != 1 ||
        (int)t->n_dims > want_dims) {
        return inf_error_set(err, INF_EFORMAT,
                             "model: tensor '%s' has shape [%lld, %lld, %lld, %lld], "
                             "expected [%lld, %lld] from the hyperparameters",
                             name, (long long)t->ne[0], (long long)t->ne[1],
                             (long long)t->ne[2], (long long)t->ne[3], (long long)ne0,
                             (long long)want1);
    }
    if (!quant_type_supported((int)t->type)) {
        const char *tn = quant_type_name((int)t->type);
        return inf_error_set(err, INF_EUNSUPPORTED,
                             "model: tensor '%s' has type %s, which the engine does not "
                             "compute with",
                             name, tn ? tn : "unknown");
    }
    /* Vectors (norms, biases, rope factors) are used as plain floats. */
    if (want_dims == 1 && t->type != QT_F32)
        return inf_error_set(err, INF_EUNSUPPORTED, "model: tensor '%s' must be f32, not %s",
                             name, quant_type_name((int)t->type));
    if (m->n_w >= m->cap_w)
        return inf_error_set(err, INF_EINTERNAL, "model: too many tensors");
    struct backend_weight *w = &m->w[m->n_w];
    memset(w, 0, sizeof(*w));
    snprintf(w->name, sizeof(w->name), "%s", name);
    w->type = (int)t->type;
    w->ne0 = t->ne[0];
    w->ne1 = t->ne[1];
    w->row_bytes = quant_row_bytes(w->type, w->ne0);
    w->host = t->data;
    w->fuse_next = m->fuse && model_fuse_hint(m, name);
    int rc = m->be->ops->weight_register(m->be, w);
    if (rc != 0)
        return inf_error_set(err, rc, "model: backend %s cannot take tensor '%s': %s",
                             m->be->ops->name, name, inf_strerror(rc));
    m->n_w++;
    *out = w;
    return 0;
}

static int model_layer_tensor(struct model *m, int il, const char *suffix, int64_t ne0,
                              int64_t ne1, int required, struct backend_weight **out,
                              struct inf_error *err)
{
    char name[GGUF_MAX_NAME];
    snprintf(name, sizeof(name), "blk.%d.%s", il, suffix);
    return model_tensor(m, name, ne0, ne1, required, out, err);
}

/* Llama 3.1 frequency factors from the rope.scaling keys (the same rule the
 * reference converter uses to write rope_freqs.weight): wavelengths shorter
 * than orig_ctx/high_freq_factor keep their frequency, longer than
 * orig_ctx/low_freq_factor are divided by `factor`, and the band between is
 * interpolated smoothly. ff[i] divides theta_i. */
static void model_llama3_factors(const struct model_hparams *hp, float *ff)
{
    const double lo_wavelen = hp->rope_orig_ctx / (double)hp->rope_low_freq_factor;
    const double hi_wavelen = hp->rope_orig_ctx / (double)hp->rope_high_freq_factor;
    for (int32_t i = 0; i < hp->head_dim / 2; i++) {
        const double freq = 1.0 / pow(hp->rope_base, 2.0 * i / hp->head_dim);
        const double wavelen = 2.0 * M_PI / freq;
        double f;
        if (wavelen < hi_wavelen) {
            f = 1.0;
        } else if (wavelen > lo_wavelen) {
            f = hp->rope_scale_factor;
        } else {
            const double smooth = (hp->rope_orig_ctx / wavelen - hp->rope_low_freq_factor) /
                                  (hp->rope_high_freq_factor - hp->rope_low_freq_factor);
            f = 1.0 / ((1.0 - smooth) / hp->rope_scale_factor + smooth);
        }
        ff[i] = (float)f;
    }
}

/* ---- fused weights (ops->weight_fuse) --------------------------------
 * Q/K/V read one activation, and so do gate/up: placed contiguously on a
 * backend that can, the backend's mul_mat_ex runs each set as one product
 * over their rows (same bits, fewer and larger launches). Fused per layer
 * as it loads, so a backend that copies needs the extra memory of one
 * group at a time. INFERD_NO_FUSE=1 keeps every weight apart (A/B runs). */
struct model_fuse_stats {
    int groups, tensors;
    size_t bytes;
};

/* what weight_fuse requires of neighbours, checked here so that a model
 * with mixed types (Q4_K_M: V in Q6_K) fuses the pair that matches */
static int model_fusable(const struct backend_weight *a, const struct backend_weight *b)
{
    return a->type == b->type && a->ne0 == b->ne0 && a->row_bytes == b->row_bytes &&
           !a->aux == !b->aux;
}

/* 0 also when the backend declined (the weights stay apart and work as
 * they are); an error only when the backend failed otherwise (device). */
static int model_fuse(struct model *m, struct backend_weight **w, int n,
                      struct model_fuse_stats *st, struct inf_error *err)
{
    size_t bytes = 0;
    for (int i = 0; i < n; i++)
        bytes += w[i]->row_bytes * (size_t)w[i]->ne1;
    const int rc = m->be->ops->weight_fuse(m->be, w, n);
    if (rc == INF_EUNSUPPORTED) /* the backend does not fuse this type: nothing to say */
        return 0;
    if (rc == INF_ENOMEM || rc == INF_EINVAL) {
        log_warn("model: '%s'..'%s' (%.1f MiB) not fused (%s): separate products", w[0]->name,
                 w[n - 1]->name, (double)bytes / (1024.0 * 1024.0), inf_strerror(rc));
        return 0;
    }
    if (rc)
        return inf_error_set(err, rc, "model: backend %s cannot fuse '%s'..'%s': %s",
                             m->be->ops->name, w[0]->name, w[n - 1]->name, inf_strerror(rc));
    st->groups++;
    st->tensors += n;
    st->bytes += bytes;
    return 0;
}

static int model_fuse_layer(struct model *m, struct model_layer *L, struct model_fuse_stats *st,
                            struct inf_error *err)
{
    struct backend_weight *qkv[3] = {L->wq, L->wk, L->wv};
    struct backend_weight *gu[2] = {L->ffn_gate, L->ffn_up};
    const unsigned plan = model_fuse_plan(model_fusable(L->wq, L->wk), model_fusable(L->wk, L->wv),
                                          model_fusable(gu[0], gu[1]));
    int rc = 0;
    if ((plan & 7u) == 7u)
        rc = model_fuse(m, qkv, 3, st, err);
    else if ((plan & 7u) == 6u)
        rc = model_fuse(m, qkv + 1, 2, st, err);
    else if ((plan & 7u) == 3u)
        rc = model_fuse(m, qkv, 2, st, err);
    if (!rc && (plan & 24u))
        rc = model_fuse(m, gu, 2, st, err);
    return rc;
}

static int model_fuse_enabled(const struct backend *be)
{
    const char *e = getenv("INFERD_NO_FUSE");
    return be->ops->weight_fuse && !(e && *e && strcmp(e, "0") != 0);
}

static int model_load_tensors(struct model *m, struct inf_error *err)
{
    struct model_hparams *hp = &m->hp;
    const int64_t E = hp->n_embd, V = hp->n_vocab, F = hp->n_ff, HD = hp->head_dim;
    const int64_t Q = (int64_t)hp->n_head * HD, KV = (int64_t)hp->n_head_kv * HD;
    int rc;

    m->cap_w = 4 + 16 * hp->n_layer;
    m->w = calloc((size_t)m->cap_w, sizeof(*m->w));
    m->layers = calloc((size_t)hp->n_layer, sizeof(*m->layers));
    if (!m->w || !m->layers)
        return inf_error_set(err, INF_ENOMEM, "model: out of memory");

    struct model_weights *mw = &m->weights;
    struct backend_weight *rope_freqs;
    if ((rc = model_tensor(m, "token_embd.weight", E, V, 1, &mw->tok_embd, err)) ||
        (rc = model_tensor(m, "output_norm.weight", E, 0, 1, &mw->output_norm, err)) ||
        (rc = model_tensor(m, "output.weight", E, V, 0, &mw->output, err)) ||
        (rc = model_tensor(m, "rope_freqs.weight", HD / 2, 0, 0, &rope_freqs, err)))
        return rc;
    if (!mw->output) {
        hp->tied_output = 1;
        mw->output = mw->tok_embd;
    }

    const int need_bias = hp->arch == MODEL_ARCH_QWEN2;
    const int need_qk_norm = hp->arch == MODEL_ARCH_QWEN3;
    const int fuse = model_fuse_enabled(m->be);
    m->fuse = fuse;
    struct model_fuse_stats fst = {0, 0, 0};
    for (int il = 0; il < hp->n_layer; il++) {
        struct model_layer *L = &m->layers[il];
        if ((rc = model_layer_tensor(m, il, "attn_norm.weight", E, 0, 1, &L->attn_norm, err)) ||
            (rc = model_layer_tensor(m, il, "attn_q.weight", E, Q, 1, &L->wq, err)) ||
            (rc = model_layer_tensor(m, il, "attn_k.weight", E, KV, 1, &L->wk, err)) ||
            (rc = model_layer_tensor(m, il, "attn_v.weight", E, KV, 1, &L->wv, err)) ||
            (rc = model_layer_tensor(m, il, "attn_output.weight", Q, E, 1, &L->wo, err)) ||
            (rc = model_layer_tensor(m, il, "attn_q.bias", Q, 0, need_bias, &L->bq, err)) ||
            (rc = model_layer_tensor(m, il, "attn_k.bias", KV, 0, need_bias, &L->bk, err)) ||
            (rc = model_layer_tensor(m, il, "attn_v.bias", KV, 0, need_bias, &L->bv, err)) ||
            (rc = model_layer_tensor(m, il, "attn_q_norm.weight", HD, 0, need_qk_norm,
                                     &L->q_norm, err)) ||
            (rc = model_layer_tensor(m, il, "attn_k_norm.weight", HD, 0, need_qk_norm,
                                     &L->k_norm, err)) ||
            (rc = model_layer_tensor(m, il, "ffn_norm.weight", E, 0, 1, &L->ffn_norm, err)) ||
            (rc = model_layer_tensor(m, il, "ffn_gate.weight", E, F, 1, &L->ffn_gate, err)) ||
            (rc = model_layer_tensor(m, il, "ffn_up.weight", E, F, 1, &L->ffn_up, err)) ||
            (rc = model_layer_tensor(m, il, "ffn_down.weight", F, E, 1, &L->ffn_down, err)))
            return rc;
        if (!L->q_norm != !L->k_norm)
            return inf_error_set(err, INF_EFORMAT,
                                 "model: layer %d has only one of attn_q_norm/attn_k_norm", il);
        if (fuse && (rc = model_fuse_layer(m, L, &fst, err)))
            return rc;
    }
    if (fst.groups)
        log_info("model: fused %d tensors into %d groups (%.1f MiB): one product per group",
                 fst.tensors, fst.groups, (double)fst.bytes / (1024.0 * 1024.0));
    mw->n_layer = hp->n_layer;
    mw->layers = m->layers;

    /* Frequency factors: the file's rope_freqs.weight wins over the keys. */
    if (rope_freqs || hp->rope_scale_factor > 0) {
        float ff[MODEL_MAX_HEAD_DIM / 2];
        if (rope_freqs) {
            memcpy(ff, rope_freqs->host, (size_t)(HD / 2) * sizeof(float));
            for (int64_t i = 0; i < HD / 2; i++)
                if (!(ff[i] > 0 && ff[i] < 1e9f))
                    return inf_error_set(err, INF_ERANGE,
                                         "model: rope_freqs.weight[%lld] = %g is not positive",
                                         (long long)i, (double)ff[i]);
        } else {
            model_llama3_factors(hp, ff);
        }
        m->rope_factors = m->be->ops->alloc(m->be, (size_t)(HD / 2) * sizeof(float));
        if (!m->rope_factors)
            return inf_error_set(err, INF_ENOMEM, "model: out of memory");
        m->be->ops->upload(m->be, m->rope_factors, ff, (size_t)(HD / 2) * sizeof(float));
        mw->rope_factors = m->rope_factors;
    }
    return 0;
}

/* ------------------------------------------------------------------------ */
/* Load / free                                                              */
/* ------------------------------------------------------------------------ */

int model_load_gguf(struct gguf_file *f, const char *path, struct backend *be, struct model **out,
                    struct inf_error *err)
{
    int rc;
    *out = NULL;
    struct model *m = calloc(1, sizeof(*m));
    if (!m) {
        gguf_close(f);
        return inf_error_set(err, INF_ENOMEM, "model: out of memory");
    }
    m->gguf = f;
    m->be = be;
    if ((rc = model_read_hparams(f, path ? path : "model", &m->hp, err)))
        goto fail;
    if ((rc = tok_load(f, &m->tok, err)))
        goto fail;
    m->hp.n_vocab = tok_n_vocab(m->tok);
    if (m->hp.n_vocab <= 0) {
        rc = inf_error_set(err, INF_EFORMAT, "model: empty vocabulary");
        goto fail;
    }
    if ((rc = model_load_tensors(m, err)))
        goto fail;
    log_debug("model: %s (%s): %d layers, n_embd %d, %d/%d heads of %d, n_ff %d, vocab %d, "
              "ctx %d%s",
              m->hp.name, m->hp.arch_name, m->hp.n_layer, m->hp.n_embd, m->hp.n_head,
              m->hp.n_head_kv, m->hp.head_dim, m->hp.n_ff, m->hp.n_vocab, m->hp.n_ctx_train,
              m->hp.tied_output ? ", tied output" : "");
    *out = m;
    return 0;
fail:
    model_free(m);
    return rc;
}

int model_load(const char *path, struct backend *be, struct model **out, struct inf_error *err)
{
    struct gguf_file *f;
    *out = NULL;
    int rc = gguf_open(path, &f, err);
    if (rc)
        return rc;
    return model_load_gguf(f, path, be, out, err);
}

void model_free(struct model *m)
{
    if (!m)
        return;
    for (int32_t i = 0; i < m->n_w; i++)
        m->be->ops->weight_release(m->be, &m->w[i]);
    if (m->rope_factors)
        m->be->ops->free(m->be, m->rope_factors);
    free(m->w);
    free(m->layers);
    tok_free(m->tok);
    gguf_close(m->gguf);
    free(m);
}

const struct model_hparams *model_hparams(const struct model *m)
{
    return &m->hp;
}

const struct tok *model_tok(const struct model *m)
{
    return m->tok;
}

const struct gguf_file *model_gguf(const struct model *m)
{
    return m->gguf;
}

struct backend *model_backend(const struct model *m)
{
    return m->be;
}

const struct model_weights *model_weights(const struct model *m)
{
    return &m->weights;
}
