/* test_model_load — ROBUSTNESS 11: a model whose hyperparameters are out of
 * range, whose tensors are missing or misshapen, is refused with an error
 * that names the key or tensor. Each bad file is stories260K.gguf rewritten
 * with engine/gguf_write with one thing broken; the unbroken rewrite loads.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/backend.h"
#include "engine/cpu.h"
#include "engine/gguf.h"
#include "engine/gguf_write.h"
#include "engine/model.h"
#include "tests/check.h"


static struct gguf_file *src;
static struct backend *be;

enum edit { E_NONE, E_U32, E_F32, E_STR, E_DROP_KV, E_DROP_TENSOR, E_SHAPE };

/* Rewrite src with one edit; load it; return the code, err filled. */
static int load_edited(enum edit ed, const char *name, uint32_t u, float f, const char *str,
                       struct inf_error *err)
{
    struct gguf_writer *w;
    CHECK(gguf_writer_new(&w) == 0);
    CHECK(gguf_writer_copy_kvs(w, src, "") == 0);
    float *junk = NULL;
    for (int64_t i = 0; i < gguf_n_tensors(src); i++) {
        const struct gguf_tensor *t = gguf_tensor_at(src, i);
        if ((ed == E_DROP_TENSOR || ed == E_SHAPE) && strcmp(t->name, name) == 0) {
            if (ed == E_SHAPE) {
                int64_t ne[2] = {t->ne[0], t->ne[1] + 1};
                junk = calloc((size_t)(ne[0] * ne[1]), sizeof(float));
                CHECK(gguf_writer_add_tensor(w, t->name, 2, ne, t->type, junk) == 0);
            }
            continue;
        }
        CHECK(gguf_writer_copy_tensor(w, t) == 0);
    }
    if (ed == E_U32)
        CHECK(gguf_writer_set_u32(w, name, u) == 0);
    else if (ed == E_F32)
        CHECK(gguf_writer_set_f32(w, name, f) == 0);
    else if (ed == E_STR)
        CHECK(gguf_writer_set_str(w, name, str) == 0);
    else if (ed == E_DROP_KV)
        CHECK(gguf_writer_remove_kv(w, name) == 0);
    void *buf = NULL;
    size_t len = 0;
    CHECK(gguf_writer_write_mem(w, &buf, &len, err) == 0);
    gguf_writer_free(w);
    free(junk);
    struct gguf_file *gf;
    int rc = gguf_open_mem(buf, len, &gf, err);
    if (rc == 0) {
        struct model *m = NULL;
        rc = model_load_gguf(gf, "edited.gguf", be, &m, err);
        CHECK((rc == 0) == (m != NULL));
        model_free(m);
    }
    free(buf);
    return rc;
}

static void expect(int rc, const struct inf_error *err, const char *needle)
{
    if (rc == 0 || !strstr(err->msg, needle)) {
        fprintf(stderr, "expected an error naming '%s', got rc %d: %s\n", needle, rc, err->msg);
        fails++;
    } else {
        printf("refused: %s\n", err->msg);
    }
}

int main(void)
{
    const char *shared = getenv("INFERD_SHARED");
    if (!shared)
        return 77;
    char path[1024];
    snprintf(path, sizeof(path), "%s/models/stories260K.gguf", shared);
    struct inf_error err = {0, ""};
    if (gguf_open(path, &src, &err)) {
        fprintf(stderr, "skip: %s\n", err.msg);
        return 77;
    }
    be = cpu_backend_new(1);

    /* the faithful rewrite loads: the harness itself breaks nothing */
    CHECK(load_edited(E_NONE, NULL, 0, 0, NULL, &err) == 0);

    expect(load_edited(E_U32, "llama.block_count", 0, 0, NULL, &err), &err, "block_count");
    expect(load_edited(E_U32, "llama.block_count", 100000, 0, NULL, &err), &err, "block_count");
    expect(load_edited(E_U32, "llama.block_count", 6, 0, NULL, &err), &err, "blk.5.");
    expect(load_edited(E_U32, "llama.attention.head_count", 0, 0, NULL, &err), &err,
           "head_count");
    expect(load_edited(E_U32, "llama.attention.head_count_kv", 3, 0, NULL, &err), &err,
           "head_count_kv");
    expect(load_edited(E_U32, "llama.attention.head_count", 12, 0, NULL, &err), &err,
           "not divisible");
    expect(load_edited(E_U32, "llama.feed_forward_length", 170, 0, NULL, &err), &err,
           "blk.0.ffn_gate.weight");
    expect(load_edited(E_U32, "llama.feed_forward_length", 0, 0, NULL, &err), &err,
           "feed_forward_length");
    expect(load_edited(E_U32, "llama.context_length", 0, 0, NULL, &err), &err,
           "context_length");
    expect(load_edited(E_F32, "llama.attention.layer_norm_rms_epsilon", 0, 0.0f / 0.0f, NULL,
                       &err),
           &err, "layer_norm_rms_epsilon");
    expect(load_edited(E_DROP_KV, "llama.embedding_length", 0, 0, NULL, &err), &err,
           "embedding_length");
    expect(load_edited(E_STR, "general.architecture", 0, 0, "gpt-j", &err), &err, "gpt-j");
    expect(load_edited(E_DROP_TENSOR, "blk.2.ffn_up.weight", 0, 0, NULL, &err), &err,
           "blk.2.ffn_up.weight");
    expect(load_edited(E_DROP_TENSOR, "output_norm.weight", 0, 0, NULL, &err), &err,
           "output_norm.weight");
    expect(load_edited(E_SHAPE, "blk.1.attn_k.weight", 0, 0, NULL, &err), &err,
           "blk.1.attn_k.weight");
    /* qwen2 needs the QKV biases stories260K does not have */
    expect(load_edited(E_STR, "general.architecture", 0, 0, "qwen2", &err), &err,
           "qwen2.");

    /* tied output: without output.weight the embedding is used */
    {
        struct gguf_writer *w;
        gguf_writer_new(&w);
        gguf_writer_copy_kvs(w, src, "");
        for (int64_t i = 0; i < gguf_n_tensors(src); i++)
            if (strcmp(gguf_tensor_at(src, i)->name, "output.weight") != 0)
                gguf_writer_copy_tensor(w, gguf_tensor_at(src, i));
        void *buf;
        size_t len;
        CHECK(gguf_writer_write_mem(w, &buf, &len, &err) == 0);
        gguf_writer_free(w);
        struct gguf_file *f;
        struct model *m = NULL;
        CHECK(gguf_open_mem(buf, len, &f, &err) == 0);
        CHECK(model_load_gguf(f, NULL, be, &m, &err) == 0);
        if (m) {
            CHECK(model_hparams(m)->tied_output == 1);
            CHECK(model_weights(m)->output == model_weights(m)->tok_embd);
        }
        model_free(m);
        free(buf);
    }

    /* a missing file: an error, no crash */
    CHECK(model_load("/nonexistent/model.gguf", be, &(struct model *){NULL}, &err) != 0);

    gguf_close(src);
    backend_free(be);
    printf("%s\n", fails ? "FAIL" : "ok");
    return fails ? 1 : 0;
}
