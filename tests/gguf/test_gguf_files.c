/* test_gguf_files — every GGUF in ../shared/models and ../shared/vocab opens,
 * and what the reader reports matches facts known independently of it:
 * the shared README (architectures, tensor types per matrix kind, layer and
 * head counts), the llama.cpp tensor naming scheme (shapes follow from the
 * hyperparameters), the token strings of the real vocabs, and the GGUF data
 * layout (tensors aligned, packed in order, ending at the end of the file).
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/gguf.h"
#include "engine/quant.h"
#include "tests/check.h"


static const char *shared;

static struct gguf_file *open_shared(const char *rel)
{
    char path[1024];
    struct gguf_file *f = NULL;
    struct inf_error e = {0};
    snprintf(path, sizeof(path), "%s/%s", shared, rel);
    int rc = gguf_open(path, &f, &e);
    if (rc)
        fprintf(stderr, "%s: %s\n", rel, e.msg);
    CHECK(rc == 0 && f);
    return f;
}

static uint32_t u32key(const struct gguf_file *f, const char *arch, const char *suffix)
{
    char key[128];
    uint32_t v = 0;
    snprintf(key, sizeof(key), "%s.%s", arch, suffix);
    CHECK(gguf_get_u32(f, key, &v) == 0);
    return v;
}

/* f16 bits are finite (exponent not all ones). */
static int f16_finite(const uint8_t *p)
{
    uint16_t h = (uint16_t)(p[0] | p[1] << 8);
    return (h & 0x7c00) != 0x7c00;
}

/* The block scale d of the first and last block is finite: a cheap check
 * that data pointers land on real blocks. */
static void check_blocks(const struct gguf_tensor *t)
{
    size_t bb = quant_block_bytes((int)t->type);
    const uint8_t *first = t->data, *last = first + t->n_bytes - bb;
    switch (t->type) {
    case QT_Q4_0: case QT_Q8_0: case QT_Q4_K: case QT_Q5_K:
        CHECK(f16_finite(first) && f16_finite(last));
        break;
    case QT_Q6_K: /* d is the last field */
        CHECK(f16_finite(first + bb - 2) && f16_finite(last + bb - 2));
        break;
    case QT_F32:
        for (uint64_t i = 0; i < t->n_elems; i++) {
            float x;
            memcpy(&x, first + 4 * i, 4);
            if (!isfinite(x) || fabsf(x) > 1000.f) {
                CHECK(!"f32 tensor holds a non-finite or absurd value");
                break;
            }
        }
        break;
    default:
        break;
    }
}

/* expected type of a tensor by its name, per file */
typedef int (*type_rule)(const char *name, int layer, int n_layer);

static int rule_stories(const char *n, int l, int nl) { (void)n; (void)l; (void)nl; return QT_F32; }

static int is_norm_or_bias(const char *n)
{
    return strstr(n, "_norm.") || strstr(n, ".bias");
}

/* llama.cpp Q4_K_M: attn_v/ffn_down in "more bits" layers get Q6_K. */
static int more_bits(int i, int n)
{
    return i < n / 8 || i >= 7 * n / 8 || (i - n / 8) % 3 == 2;
}

static int rule_q4km(const char *n, int l, int nl)
{
    if (is_norm_or_bias(n))
        return QT_F32;
    if (!strcmp(n, "output.weight"))
        return QT_Q6_K;
    if (!strcmp(n, "token_embd.weight"))
        return QT_Q4_K;
    if ((strstr(n, "attn_v.") || strstr(n, "ffn_down.")) && more_bits(l, nl))
        return QT_Q6_K;
    return QT_Q4_K;
}

/* tied output: llama.cpp gives token_embd the output's type (Q6_K) */
static int rule_q4km_tied(const char *n, int l, int nl)
{
    if (!strcmp(n, "token_embd.weight"))
        return QT_Q6_K;
    return rule_q4km(n, l, nl);
}

static int rule_mixed(const char *n, int l, int nl)
{
    (void)l; (void)nl;
    if (is_norm_or_bias(n)) return QT_F32;
    if (strstr(n, "attn_q.")) return QT_Q4_0;
    if (strstr(n, "attn_k.") || !strcmp(n, "token_embd.weight")) return QT_Q8_0;
    if (strstr(n, "attn_v.") || strstr(n, "ffn_down.") || !strcmp(n, "output.weight")) return QT_Q6_K;
    if (strstr(n, "attn_output.")) return QT_F16;
    if (strstr(n, "ffn_gate.")) return QT_Q4_K;
    if (strstr(n, "ffn_up.")) return QT_Q5_K;
    return -1;
}

static void check_shape(const struct gguf_tensor *t, int64_t a, int64_t b)
{
    int ok = t->ne[0] == a && t->ne[1] == b && t->ne[2] == 1 && t->ne[3] == 1 && t->n_dims == (b == 1 ? 1u : 2u);
    if (!ok)
        fprintf(stderr, "%s: shape [%lld, %lld] n_dims %u, expected [%lld, %lld]\n", t->name, (long long)t->ne[0],
                (long long)t->ne[1], t->n_dims, (long long)a, (long long)b);
    CHECK(ok);
}

static void check_model(const char *rel, const char *arch, int n_layer_expect, int n_vocab_expect, int tied,
                        int bias, type_rule rule)
{
    struct gguf_file *f = open_shared(rel);
    struct gguf_str s;
    uint32_t et;
    uint64_t nv = 0;
    if (!f)
        return;
    printf("%s: v%u, %lld kv, %lld tensors\n", rel, gguf_version(f), (long long)gguf_n_kv(f),
           (long long)gguf_n_tensors(f));
    CHECK(gguf_version(f) == 3);
    CHECK(gguf_get_str(f, "general.architecture", &s) == 0 && gguf_str_eq(s, arch));
    uint32_t n_embd = u32key(f, arch, "embedding_length");
    uint32_t n_layer = u32key(f, arch, "block_count");
    uint32_t n_ff = u32key(f, arch, "feed_forward_length");
    uint32_t n_head = u32key(f, arch, "attention.head_count");
    uint32_t n_kv = u32key(f, arch, "attention.head_count_kv");
    CHECK((int)n_layer == n_layer_expect);
    CHECK(gguf_get_arr(f, "tokenizer.ggml.tokens", &et, &nv) == 0 && et == GGUF_T_STRING);
    CHECK((int)nv == n_vocab_expect);
    if (!n_head || !n_layer) {
        gguf_close(f);
        return;
    }
    int64_t hd = n_embd / n_head;
    int per_layer = 9 + (bias ? 3 : 0);
    CHECK(gguf_n_tensors(f) == (int64_t)n_layer * per_layer + 2 + (tied ? 0 : 1));
    CHECK((gguf_find_tensor(f, "output.weight") == NULL) == !!tied);

    /* every expected tensor is present with its shape; every tensor's type
     * follows the rule */
    static const char *const mats[] = {"attn_norm.weight", "attn_q.weight", "attn_k.weight", "attn_v.weight",
                                       "attn_output.weight", "ffn_norm.weight", "ffn_gate.weight",
                                       "ffn_up.weight", "ffn_down.weight"};
    for (uint32_t l = 0; l < n_layer; l++) {
        for (size_t m = 0; m < sizeof(mats) / sizeof(mats[0]); m++) {
            char name[64];
            snprintf(name, sizeof(name), "blk.%u.%s", l, mats[m]);
            const struct gguf_tensor *t = gguf_find_tensor(f, name);
            CHECK(t != NULL);
            if (!t)
                continue;
            if (strstr(name, "_norm")) check_shape(t, n_embd, 1);
            else if (strstr(name, "attn_q.") || strstr(name, "attn_output.")) check_shape(t, n_embd, n_embd);
            else if (strstr(name, "attn_k.") || strstr(name, "attn_v.")) check_shape(t, n_embd, hd * n_kv);
            else if (strstr(name, "ffn_down.")) check_shape(t, n_ff, n_embd);
            else check_shape(t, n_embd, n_ff);
        }
        if (bias) {
            char name[64];
            snprintf(name, sizeof(name), "blk.%u.attn_q.bias", l);
            CHECK(gguf_find_tensor(f, name) && gguf_find_tensor(f, name)->ne[0] == n_embd);
            snprintf(name, sizeof(name), "blk.%u.attn_k.bias", l);
            CHECK(gguf_find_tensor(f, name) && gguf_find_tensor(f, name)->ne[0] == hd * n_kv);
        }
    }
    const struct gguf_tensor *te = gguf_find_tensor(f, "token_embd.weight");
    CHECK(te != NULL);
    if (te)
        check_shape(te, n_embd, (int64_t)nv);

    /* types, layout: aligned, in order, packed (gap < alignment), the last
     * one ending at the end of the file */
    uint64_t end = 0;
    for (int64_t i = 0; i < gguf_n_tensors(f); i++) {
        const struct gguf_tensor *t = gguf_tensor_at(f, i);
        int layer = -1;
        sscanf(t->name, "blk.%d.", &layer);
        int want = rule(t->name, layer, (int)n_layer);
        if ((int)t->type != want)
            fprintf(stderr, "%s %s: type %s, expected %s\n", rel, t->name, quant_type_name((int)t->type),
                    quant_type_name(want));
        CHECK((int)t->type == want);
        CHECK(t->offset % gguf_alignment(f) == 0);
        CHECK(t->offset >= end && t->offset - end < gguf_alignment(f));
        CHECK(t->n_bytes == quant_row_bytes((int)t->type, t->ne[0]) * (uint64_t)(t->ne[1] * t->ne[2] * t->ne[3]));
        CHECK((const uint8_t *)t->data == (const uint8_t *)gguf_base(f) + gguf_data_offset(f) + t->offset);
        end = t->offset + t->n_bytes;
        check_blocks(t);
    }
    CHECK(gguf_data_offset(f) + end == gguf_file_size(f));
    CHECK(gguf_data_offset(f) % gguf_alignment(f) == 0);
    gguf_close(f);
}

/* Vocab-only files: token strings known from the real tokenizers. */
static void check_vocab(const char *rel, const char *model, uint64_t n_tokens, uint64_t n_merges, uint32_t id,
                        const char *tok)
{
    struct gguf_file *f = open_shared(rel);
    struct gguf_str s;
    uint32_t et, v;
    uint64_t n;
    if (!f)
        return;
    CHECK(gguf_n_tensors(f) == 0);
    CHECK(gguf_data_offset(f) <= gguf_file_size(f));
    CHECK(gguf_get_str(f, "tokenizer.ggml.model", &s) == 0 && gguf_str_eq(s, model));
    CHECK(gguf_get_arr(f, "tokenizer.ggml.tokens", &et, &n) == 0 && et == GGUF_T_STRING && n == n_tokens);
    CHECK(gguf_get_arr(f, "tokenizer.ggml.token_type", &et, &n) == 0 && et == GGUF_T_INT32 && n == n_tokens);
    if (n_merges)
        CHECK(gguf_get_arr(f, "tokenizer.ggml.merges", &et, &n) == 0 && et == GGUF_T_STRING && n == n_merges);
    else
        CHECK(gguf_get_arr(f, "tokenizer.ggml.scores", &et, &n) == 0 && et == GGUF_T_FLOAT32 && n == n_tokens);
    const struct gguf_kv *kv = gguf_find_kv(f, "tokenizer.ggml.tokens");
    struct gguf_str *toks = calloc(n_tokens, sizeof(*toks));
    CHECK(kv && toks && gguf_arr_strs(kv, toks) == 0);
    if (kv && toks) {
        CHECK(gguf_str_eq(toks[id], tok));
        /* the last string ends exactly where the next kv's key begins */
        const struct gguf_str *lt = &toks[n_tokens - 1];
        CHECK((const uint8_t *)lt->ptr + lt->len == kv->data + kv->size);
    }
    free(toks);
    /* the token type of a special token is 3 (control) */
    int64_t tt = 0;
    kv = gguf_find_kv(f, "tokenizer.ggml.token_type");
    CHECK(kv && gguf_arr_int(kv, id, &tt) == 0 && tt == 3);
    CHECK(kv && gguf_arr_int(kv, n_tokens, &tt) == INF_ERANGE);
    /* typed getters: missing vs wrong type */
    CHECK(gguf_get_u32(f, "tokenizer.ggml.bos_token_id", &v) == 0 && v < n_tokens);
    CHECK(gguf_get_u32(f, "no.such.key", &v) == INF_ENOTFOUND);
    CHECK(gguf_get_u32(f, "tokenizer.ggml.model", &v) == INF_ETYPE);
    CHECK(gguf_get_str(f, "tokenizer.ggml.bos_token_id", &s) == INF_ETYPE);
    CHECK(gguf_get_f32(f, "tokenizer.ggml.tokens", &(float){0}) == INF_ETYPE);
    CHECK(gguf_get_arr(f, "tokenizer.ggml.model", &et, &n) == INF_ETYPE);
    gguf_close(f);
}

int main(void)
{
    shared = getenv("INFERD_SHARED");
    if (!shared) {
        fprintf(stderr, "INFERD_SHARED not set\n");
        return 77;
    }
    char probe[1024];
    snprintf(probe, sizeof(probe), "%s/models/stories260K.gguf", shared);
    FILE *pf = fopen(probe, "rb");
    if (!pf) {
        fprintf(stderr, "%s missing: skip\n", probe);
        return 77;
    }
    fclose(pf);

    check_model("models/stories260K.gguf", "llama", 5, 512, 0, 0, rule_stories);
    check_model("models/tiny-llama-Q4_K_M.gguf", "llama", 2, 32000, 0, 0, rule_q4km);
    check_model("models/tiny-llama-mixed.gguf", "llama", 2, 32000, 0, 0, rule_mixed);
    check_model("models/tiny-qwen2-Q4_K_M.gguf", "qwen2", 2, 151936, 1, 1, rule_q4km_tied);

    /* stories260K's hyperparameters from the README: 8 heads / 4 KV heads */
    struct gguf_file *f = open_shared("models/stories260K.gguf");
    if (f) {
        float eps = 0;
        uint32_t v;
        CHECK(gguf_get_u32(f, "llama.attention.head_count", &v) == 0 && v == 8);
        CHECK(gguf_get_u32(f, "llama.attention.head_count_kv", &v) == 0 && v == 4);
        CHECK(gguf_get_f32(f, "llama.attention.layer_norm_rms_epsilon", &eps) == 0 && eps > 0 && eps < 1e-3f);
        CHECK(gguf_alignment(f) == 32);
        gguf_close(f);
    }

    check_vocab("vocab/ggml-vocab-llama-spm.gguf", "llama", 32000, 0, 1, "<s>");
    check_vocab("vocab/ggml-vocab-llama-bpe.gguf", "gpt2", 128256, 280147, 128000, "<|begin_of_text|>");
    check_vocab("vocab/ggml-vocab-qwen2.gguf", "gpt2", 151936, 151387, 151643, "<|endoftext|>");

    printf("%s\n", fails ? "FAIL" : "ok");
    return fails ? 1 : 0;
}
