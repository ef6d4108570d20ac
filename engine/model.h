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

struct model;

int model_load(const char *path, struct backend *be, struct model **out, struct inf_error *err);
void model_free(struct model *m); /* accepts NULL */

const struct model_hparams *model_hparams(const struct model *m);
const struct tok *model_tok(const struct model *m);
const struct gguf_file *model_gguf(const struct model *m);
struct backend *model_backend(const struct model *m);

#endif
