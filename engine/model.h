/* model — hyperparameters and weight views of a GGUF model (llama, qwen2, qwen3).
 *
 * model_load opens the GGUF, reads and validates the hyperparameters
 * (ROBUSTNESS 11), finds every tensor the architecture needs with the shape the
 * hyperparameters imply, builds the tokenizer, and hands each weight to the
 * backend (CPU: views into the mapping; CUDA later: uploaded once).
 * Immutable after load: any thread may read it.
 */
#ifndef INFERD_MODEL_H
#define INFERD_MODEL_H

#include <stdint.h>

#include "err.h"

struct gguf_file;
struct tok;
struct backend;
struct backend_weight;

enum model_arch { MODEL_ARCH_LLAMA = 1, MODEL_ARCH_QWEN2 = 2, MODEL_ARCH_QWEN3 = 3 };

struct model_hparams {
    int arch;                /* enum model_arch */
    char arch_name[32];
    char name[128];          /* general.name, or the file's base name */
    int32_t n_vocab;
    int32_t n_ctx_train;
    int32_t n_embd;
    int32_t n_layer;
    int32_t n_head;
    int32_t n_head_kv;
    int32_t head_dim;        /* n_embd_head_k */
    int32_t n_ff;
    float rms_eps;
    float rope_base;
    int rope_neox;           /* 1: qwen2/qwen3 (NEOX pairing), 0: llama (adjacent pairs) */
    /* Llama 3.1 style rope scaling (rope.scaling.type "llama3"), 0 factor = off */
    float rope_scale_factor;
    float rope_low_freq_factor;
    float rope_high_freq_factor;
    int32_t rope_orig_ctx;
    float rope_freq_scale;   /* linear scaling: positions multiplied by this (1 = off) */
    int tied_output;         /* output.weight absent: token_embd used */
};

/* The weights of one block, as the backend sees them. Shapes are GGUF's
 * [ne0, ne1] (ne0 = row length): with q_dim = n_head * head_dim and
 * kv_dim = n_head_kv * head_dim. */
struct model_layer {
    struct backend_weight *attn_norm;  /* F32 [n_embd] */
    struct backend_weight *wq;         /* [n_embd, q_dim] */
    struct backend_weight *wk;         /* [n_embd, kv_dim] */
    struct backend_weight *wv;         /* [n_embd, kv_dim] */
    struct backend_weight *wo;         /* [q_dim, n_embd] */
    struct backend_weight *bq, *bk, *bv; /* F32 biases (qwen2; optional for llama), or NULL */
    struct backend_weight *q_norm;     /* F32 [head_dim] (qwen3), or NULL */
    struct backend_weight *k_norm;     /* F32 [head_dim] (qwen3), or NULL */
    struct backend_weight *ffn_norm;   /* F32 [n_embd] */
    struct backend_weight *ffn_gate;   /* [n_embd, n_ff] */
    struct backend_weight *ffn_up;     /* [n_embd, n_ff] */
    struct backend_weight *ffn_down;   /* [n_ff, n_embd] */
};

struct model_weights {
    struct backend_weight *tok_embd;    /* [n_embd, n_vocab] */
    struct backend_weight *output_norm; /* F32 [n_embd] */
    struct backend_weight *output;      /* [n_embd, n_vocab]; == tok_embd when tied */
    const float *rope_factors;          /* backend memory [head_dim/2], or NULL:
                                           llama3 scaling (rope_freqs.weight or keys) */
    int32_t n_layer;
    const struct model_layer *layers;   /* [n_layer] */
};

struct model;

/* Load the model at path onto backend be (which must outlive the model).
 * On error *out is NULL and err names the problem (for a bad hyperparameter
 * or tensor: which key or tensor, and what was expected). */
int model_load(const char *path, struct backend *be, struct model **out, struct inf_error *err);
/* The same over an open GGUF file, which the model takes over (closed on
 * error too); path only names the model in messages (may be NULL). */
int model_load_gguf(struct gguf_file *f, const char *path, struct backend *be,
                    struct model **out, struct inf_error *err);
void model_free(struct model *m); /* accepts NULL */

const struct model_hparams *model_hparams(const struct model *m);
const struct tok *model_tok(const struct model *m);
const struct gguf_file *model_gguf(const struct model *m);
struct backend *model_backend(const struct model *m);
const struct model_weights *model_weights(const struct model *m);

#endif
