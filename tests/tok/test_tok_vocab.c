/* test_tok_vocab — crafted vocabularies (written with gguf_write, read back
 * with gguf_open_mem): every malformed tokenizer key of ROBUSTNESS.md 12 gets
 * a clear error and no leak; small hand-made SPM and BPE vocabs pin down the
 * merge order, byte fallback, unknown token, merge-only strings, special-token
 * matching (user-defined always, control only with parse_special, longer
 * tokens first), BOS/EOS rules and EOG detection. Runs under ASan/UBSan.
 */
#include <math.h>

#include "engine/gguf_write.h"
#include "tests/tok/tok_test.h"

#define SP "\xe2\x96\x81" /* U+2581, SPM's space */

/* The SPM test vocab: scores decide "▁a" vs "ab" (see spm_vocab()). */
static const char *spm_tokens[] = {"<unk>", "<s>",    "</s>",   SP,       "a",      "b",
                                   "ab",    SP "a",   "<0x63>", "<tool>", "<ctl>",  "xy",
                                   "yzw",   SP "xy",  "<0x2A>", "<|im_end|>"};
static const int32_t spm_types[] = {2, 3, 3, 1, 1, 1, 1, 1, 6, 4, 3, 3, 3, 1, 6, 1};
#define SPM_N 16

static struct gguf_writer *spm_vocab(float score_ab, float score_sp_a)
{
    struct gguf_writer *w;
    float scores[SPM_N];
    for (int i = 0; i < SPM_N; i++)
        scores[i] = -10.0f;
    scores[3] = -1.0f;
    scores[6] = score_ab;
    scores[7] = score_sp_a;
    if (gguf_writer_new(&w))
        return NULL;
    gguf_writer_set_str(w, "general.architecture", "llama");
    gguf_writer_set_str(w, "tokenizer.ggml.model", "llama");
    gguf_writer_set_arr_str(w, "tokenizer.ggml.tokens", spm_tokens, SPM_N);
    gguf_writer_set_arr(w, "tokenizer.ggml.scores", GGUF_T_FLOAT32, scores, SPM_N);
    gguf_writer_set_arr(w, "tokenizer.ggml.token_type", GGUF_T_INT32, spm_types, SPM_N);
    gguf_writer_set_u32(w, "tokenizer.ggml.bos_token_id", 1);
    gguf_writer_set_u32(w, "tokenizer.ggml.eos_token_id", 2);
    gguf_writer_set_u32(w, "tokenizer.ggml.unknown_token_id", 0);
    return w;
}

/* BPE test vocab, byte-level: "a" "b" "c" "d" "Ġ" (space) "abcd" "Ġa" and
 * merges whose intermediate strings "cd" and "ab" are not tokens. */
static const char *bpe_tokens[] = {"a", "b", "c", "d", "\xc4\xa0", "abcd", ("\xc4\xa0" "a"), "<|endoftext|>", "<u>"};
static const int32_t bpe_types[] = {1, 1, 1, 1, 1, 1, 1, 3, 4};
#define BPE_N 9
static const char *bpe_merges[] = {"c d", "a b", "ab cd", "\xc4\xa0 a"};

static struct gguf_writer *bpe_vocab(const char *pre)
{
    struct gguf_writer *w;
    if (gguf_writer_new(&w))
        return NULL;
    gguf_writer_set_str(w, "tokenizer.ggml.model", "gpt2");
    if (pre)
        gguf_writer_set_str(w, "tokenizer.ggml.pre", pre);
    gguf_writer_set_arr_str(w, "tokenizer.ggml.tokens", bpe_tokens, BPE_N);
    gguf_writer_set_arr(w, "tokenizer.ggml.token_type", GGUF_T_INT32, bpe_types, BPE_N);
    gguf_writer_set_arr_str(w, "tokenizer.ggml.merges", bpe_merges, 4);
    gguf_writer_set_u32(w, "tokenizer.ggml.eos_token_id", 7);
    return w;
}

/* Write w, open it, load its tokenizer; returns tok_load's code. *t is the
 * tokenizer on success (caller frees t, *f and *buf). */
static int load(struct gguf_writer *w, void **buf, struct gguf_file **f, struct tok **t, struct inf_error *err)
{
    size_t len;
    int rc;
    *t = NULL;
    *f = NULL;
    *buf = NULL;
    CHECK(w != NULL);
    if (!w)
        return INF_ENOMEM;
    rc = gguf_writer_write_mem(w, buf, &len, err);
    gguf_writer_free(w);
    CHECK(rc == 0);
    if (rc)
        return rc;
    rc = gguf_open_mem(*buf, len, f, err);
    CHECK(rc == 0);
    if (rc)
        return rc;
    return tok_load(*f, t, err);
}

static void unload(void *buf, struct gguf_file *f, struct tok *t)
{
    tok_free(t);
    gguf_close(f);
    free(buf);
}

/* Expect tok_load to fail with code, and the message to mention needle. */
static void expect_error(struct gguf_writer *w, int code, const char *needle, int line)
{
    void *buf;
    struct gguf_file *f;
    struct tok *t;
    struct inf_error err = {0, ""};
    int rc = load(w, &buf, &f, &t, &err);
    if (rc != code || !strstr(err.msg, needle) || t != NULL) {
        fprintf(stderr, "line %d: expected %s with \"%s\", got %s: \"%s\"\n", line, inf_strerror(code), needle,
                inf_strerror(rc), err.msg);
        fails++;
    }
    unload(buf, f, t);
}
#define EXPECT_ERROR(w, code, needle) expect_error(w, code, needle, __LINE__)

static int ids_eq(const struct tok *t, const char *s, int add_special, int parse_special, const int32_t *exp,
                  size_t n_exp, int line)
{
    size_t n;
    int32_t *ids = tt_encode(t, s, strlen(s), add_special, parse_special, &n);
    int ok = n == n_exp && (n == 0 || memcmp(ids, exp, n * sizeof(*ids)) == 0);
    if (!ok) {
        fprintf(stderr, "line %d: \"%s\" gives", line, s);
        for (size_t i = 0; i < n; i++)
            fprintf(stderr, " %d", ids[i]);
        fprintf(stderr, "\n");
        fails++;
    }
    free(ids);
    return ok;
}
#define IDS(t, s, as, ps, ...)                                                                        \
    do {                                                                                              \
        const int32_t exp_[] = {__VA_ARGS__};                                                         \
        ids_eq(t, s, as, ps, exp_, sizeof(exp_) / sizeof(exp_[0]), __LINE__);                          \
    } while (0)

static void test_errors(void)
{
    struct gguf_writer *w;
    static const char *one[] = {"a"};
    int32_t i32[SPM_N];
    float f32[SPM_N];

    w = spm_vocab(-1, -2);
    gguf_writer_remove_kv(w, "tokenizer.ggml.model");
    EXPECT_ERROR(w, INF_EFORMAT, "missing tokenizer.ggml.model");

    w = spm_vocab(-1, -2);
    gguf_writer_set_u32(w, "tokenizer.ggml.model", 1);
    EXPECT_ERROR(w, INF_ETYPE, "tokenizer.ggml.model is not a string");

    w = spm_vocab(-1, -2);
    gguf_writer_set_str(w, "tokenizer.ggml.model", "bert");
    EXPECT_ERROR(w, INF_EUNSUPPORTED, "'bert' is not supported");

    w = spm_vocab(-1, -2);
    gguf_writer_remove_kv(w, "tokenizer.ggml.tokens");
    EXPECT_ERROR(w, INF_EFORMAT, "missing tokenizer.ggml.tokens");

    w = spm_vocab(-1, -2);
    gguf_writer_set_str(w, "tokenizer.ggml.tokens", "a");
    EXPECT_ERROR(w, INF_ETYPE, "tokenizer.ggml.tokens is str");

    w = spm_vocab(-1, -2);
    for (int i = 0; i < SPM_N; i++)
        i32[i] = i;
    gguf_writer_set_arr(w, "tokenizer.ggml.tokens", GGUF_T_INT32, i32, SPM_N);
    EXPECT_ERROR(w, INF_ETYPE, "not an array of strings");

    w = spm_vocab(-1, -2);
    gguf_writer_set_arr_str(w, "tokenizer.ggml.tokens", one, 0);
    EXPECT_ERROR(w, INF_EFORMAT, "empty vocab");

    w = spm_vocab(-1, -2);
    gguf_writer_set_arr(w, "tokenizer.ggml.scores", GGUF_T_FLOAT32, f32, SPM_N - 1);
    EXPECT_ERROR(w, INF_EFORMAT, "tokenizer.ggml.scores must be an array of 16");

    w = spm_vocab(-1, -2);
    gguf_writer_set_arr_str(w, "tokenizer.ggml.scores", spm_tokens, SPM_N);
    EXPECT_ERROR(w, INF_ETYPE, "scores holds str");

    w = spm_vocab(-1, -2);
    for (int i = 0; i < SPM_N; i++)
        f32[i] = 0;
    f32[5] = NAN;
    gguf_writer_set_arr(w, "tokenizer.ggml.scores", GGUF_T_FLOAT32, f32, SPM_N);
    EXPECT_ERROR(w, INF_EFORMAT, "score of token 5 is NaN");

    w = spm_vocab(-1, -2);
    gguf_writer_set_arr(w, "tokenizer.ggml.token_type", GGUF_T_INT32, spm_types, SPM_N + 0 - 3);
    EXPECT_ERROR(w, INF_EFORMAT, "token_type must be an array of 16");

    w = spm_vocab(-1, -2);
    memcpy(i32, spm_types, sizeof(i32));
    i32[4] = 7;
    gguf_writer_set_arr(w, "tokenizer.ggml.token_type", GGUF_T_INT32, i32, SPM_N);
    EXPECT_ERROR(w, INF_EFORMAT, "token 4 has unknown type 7");

    w = spm_vocab(-1, -2);
    gguf_writer_set_arr(w, "tokenizer.ggml.token_type", GGUF_T_FLOAT32, f32, SPM_N);
    EXPECT_ERROR(w, INF_ETYPE, "token_type holds f32");

    /* byte tokens that are not <0xHH> */
    {
        const char *bad[] = {"<0x-1>", "<0xZZ>", "<0x4>", "<0x411>", "0x41", ""};
        for (size_t b = 0; b < sizeof(bad) / sizeof(bad[0]); b++) {
            const char *toks[SPM_N];
            memcpy(toks, spm_tokens, sizeof(toks));
            toks[8] = bad[b];
            w = spm_vocab(-1, -2);
            gguf_writer_set_arr_str(w, "tokenizer.ggml.tokens", toks, SPM_N);
            EXPECT_ERROR(w, INF_EFORMAT, "byte token 8 is");
        }
    }

    /* special ids */
    w = spm_vocab(-1, -2);
    gguf_writer_set_u32(w, "tokenizer.ggml.bos_token_id", SPM_N);
    EXPECT_ERROR(w, INF_EFORMAT, "bos_token_id = 16 is out of range");
    w = spm_vocab(-1, -2);
    gguf_writer_set_i32(w, "tokenizer.ggml.eos_token_id", 99999);
    EXPECT_ERROR(w, INF_EFORMAT, "eos_token_id = 99999");
    w = spm_vocab(-1, -2);
    gguf_writer_set_i32(w, "tokenizer.ggml.eos_token_id", -5);
    EXPECT_ERROR(w, INF_EFORMAT, "eos_token_id = -5");
    w = spm_vocab(-1, -2);
    gguf_writer_set_str(w, "tokenizer.ggml.bos_token_id", "1");
    EXPECT_ERROR(w, INF_ETYPE, "bos_token_id is not an integer");
    w = spm_vocab(-1, -2);
    gguf_writer_set_u32(w, "tokenizer.ggml.unknown_token_id", 1u << 31);
    EXPECT_ERROR(w, INF_EFORMAT, "unknown_token_id");
    w = spm_vocab(-1, -2);
    gguf_writer_set_u32(w, "tokenizer.ggml.eot_token_id", SPM_N + 1);
    EXPECT_ERROR(w, INF_EFORMAT, "eot_token_id");
    w = spm_vocab(-1, -2);
    gguf_writer_set_u32(w, "tokenizer.ggml.add_bos_token", 1);
    EXPECT_ERROR(w, INF_ETYPE, "add_bos_token is not a bool");
    w = spm_vocab(-1, -2);
    gguf_writer_set_i32(w, "tokenizer.ggml.bos_token_id", -1);
    gguf_writer_set_bool(w, "tokenizer.ggml.add_bos_token", 1);
    EXPECT_ERROR(w, INF_EFORMAT, "no BOS token");
    w = spm_vocab(-1, -2);
    gguf_writer_set_u32(w, "tokenizer.ggml.eos_token_id", 0xFFFFFFFFu);
    gguf_writer_set_bool(w, "tokenizer.ggml.add_eos_token", 1);
    EXPECT_ERROR(w, INF_EFORMAT, "no EOS token");

    /* BPE keys */
    w = bpe_vocab("qwen2");
    gguf_writer_remove_kv(w, "tokenizer.ggml.merges");
    EXPECT_ERROR(w, INF_EFORMAT, "without tokenizer.ggml.merges");
    w = bpe_vocab("qwen2");
    gguf_writer_set_arr(w, "tokenizer.ggml.merges", GGUF_T_INT32, spm_types, 3);
    EXPECT_ERROR(w, INF_ETYPE, "merges is arr of i32");
    {
        const char *bad[] = {"ab", "a ", " a", "", "a"};
        for (size_t b = 0; b < sizeof(bad) / sizeof(bad[0]); b++) {
            const char *m[4];
            memcpy(m, bpe_merges, sizeof(m));
            m[2] = bad[b];
            w = bpe_vocab("qwen2");
            gguf_writer_set_arr_str(w, "tokenizer.ggml.merges", m, 4);
            EXPECT_ERROR(w, INF_EFORMAT, "merges[2] is not two tokens");
        }
    }
    w = bpe_vocab("no-such-pre");
    EXPECT_ERROR(w, INF_EUNSUPPORTED, "pre-tokenizer 'no-such-pre'");
    w = bpe_vocab(NULL);
    gguf_writer_set_u32(w, "tokenizer.ggml.pre", 3);
    EXPECT_ERROR(w, INF_ETYPE, "tokenizer.ggml.pre is not a string");
}

static void test_spm(void)
{
    void *buf;
    struct gguf_file *f;
    struct tok *t;
    struct inf_error err = {0, ""};
    char out[256];

    /* "ab" scores higher than "▁a": ▁ | ab */
    CHECK(load(spm_vocab(-0.5f, -3.0f), &buf, &f, &t, &err) == 0);
    if (t) {
        IDS(t, "ab", 0, 0, 3, 6);
        IDS(t, "ab", 1, 0, 1, 3, 6); /* BOS by default for SPM */
        IDS(t, "c", 0, 0, 3, 8);     /* byte fallback <0x63> */
        IDS(t, "*", 0, 0, 3, 14);
        IDS(t, "d", 0, 0, 3, 0); /* no <0x64>, no "d": unknown */
        /* user-defined tokens are always matched; a space prefix follows them */
        IDS(t, "a<tool>b", 0, 0, 7, 9, 3, 5);
        /* control tokens only with parse_special */
        IDS(t, "<s>a", 0, 1, 1, 7);
        IDS(t, "<ctl>", 0, 1, 10);
        {
            size_t n;
            int32_t *ids = tt_encode(t, "<ctl>", 5, 0, 0, &n);
            int has = 0;
            for (size_t i = 0; i < n; i++)
                has |= ids[i] == 10;
            CHECK(n > 1 && !has);
            free(ids);
        }
        /* longer special tokens win: "yzw" before "xy" in "xyzw" */
        IDS(t, "xyzw", 0, 1, 3, 0, 12); /* "x" is unknown, then <yzw> */
        IDS(t, "xyxy", 0, 1, 11, 11);
        CHECK(tok_is_eog(t, 2) && tok_is_eog(t, 15) && tok_eot(t) == 15);
        CHECK(tok_is_special(t, 15)); /* named EOG tokens become control, as in llama.cpp */
        CHECK(tok_is_special(t, 9) && !tok_is_special(t, 4));
        CHECK(tok_token_bytes(t, 10, 0, out, sizeof(out)) == 0);
        CHECK(tok_token_bytes(t, 9, 0, out, sizeof(out)) == 6 && memcmp(out, "<tool>", 6) == 0);
        CHECK(tok_token_bytes(t, 7, 0, out, sizeof(out)) == 2 && memcmp(out, " a", 2) == 0);
        CHECK(tok_token_bytes(t, 8, 0, out, sizeof(out)) == 1 && out[0] == 'c');
        {
            int32_t ids[] = {1, 7, 9, 3, 5};
            CHECK(tok_decode(t, ids, 5, 0, 1, out, sizeof(out)) == 9 && strcmp(out, "a<tool> b") == 0);
            CHECK(tok_decode(t, ids, 5, 1, 1, out, sizeof(out)) == 12 && strcmp(out, "<s>a<tool> b") == 0);
            CHECK(tok_decode(t, ids, 5, 0, 0, out, 3) == 10 && memcmp(out, " a<", 3) == 0);
        }
        CHECK(tok_lookup(t, "ab", 2) == 6 && tok_lookup(t, "zz", 2) == -1);
    }
    unload(buf, f, t);

    /* "▁a" scores higher: ▁a | b */
    CHECK(load(spm_vocab(-3.0f, -0.5f), &buf, &f, &t, &err) == 0);
    if (t)
        IDS(t, "ab", 0, 0, 7, 5);
    unload(buf, f, t);

    /* add_eos, no BOS, no space prefix */
    {
        struct gguf_writer *w = spm_vocab(-0.5f, -3.0f);
        gguf_writer_set_bool(w, "tokenizer.ggml.add_bos_token", 0);
        gguf_writer_set_bool(w, "tokenizer.ggml.add_eos_token", 1);
        gguf_writer_set_bool(w, "tokenizer.ggml.add_space_prefix", 0);
        CHECK(load(w, &buf, &f, &t, &err) == 0);
        if (t) {
            IDS(t, "ab", 1, 0, 6, 2);
            IDS(t, "ab", 0, 0, 6);
            CHECK(!tok_add_bos(t) && tok_add_eos(t) && !tok_add_space_prefix(t));
        }
        unload(buf, f, t);
    }
}

static void test_bpe(void)
{
    void *buf;
    struct gguf_file *f;
    struct tok *t;
    struct inf_error err = {0, ""};
    char out[64];

    CHECK(load(bpe_vocab("qwen2"), &buf, &f, &t, &err) == 0);
    if (t) {
        /* cd and ab exist only as merge results, then ab+cd = abcd */
        IDS(t, "abcd", 0, 0, 5);
        /* a merge result that is not a token falls back to one-byte tokens */
        IDS(t, "ab", 0, 0, 0, 1);
        IDS(t, " a", 0, 0, 6);
        IDS(t, "ab", 1, 0, 0, 1); /* qwen2: no BOS key, no add_bos */
        IDS(t, "<u>a", 0, 0, 8, 0);
        IDS(t, "a<|endoftext|>", 0, 1, 0, 7);
        CHECK(tok_bos(t) == -1 && tok_eos(t) == 7 && tok_is_eog(t, 7));
        CHECK(tok_token_bytes(t, 6, 0, out, sizeof(out)) == 2 && memcmp(out, " a", 2) == 0);
        size_t ends[8], n;
        CHECK(tok_pre_split(t, "ab 12", 5, ends, 8, &n) == 0 && n == 4 && ends[0] == 2 && ends[1] == 3 &&
              ends[2] == 4 && ends[3] == 5);
    }
    unload(buf, f, t);

    /* GPT-2 split (pre "default"): " ?\p{N}+" keeps the space and all digits */
    CHECK(load(bpe_vocab("default"), &buf, &f, &t, &err) == 0);
    if (t) {
        size_t ends[8], n;
        CHECK(tok_pre_split(t, "ab 123'S", 8, ends, 8, &n) == 0 && n == 4 && ends[0] == 2 && ends[1] == 6 &&
              ends[2] == 7 && ends[3] == 8);
    }
    unload(buf, f, t);

    /* Llama 3: digits by three, case-insensitive contractions, BOS by default */
    {
        struct gguf_writer *w = bpe_vocab("llama-bpe");
        gguf_writer_set_u32(w, "tokenizer.ggml.bos_token_id", 7);
        CHECK(load(w, &buf, &f, &t, &err) == 0);
        if (t) {
            size_t ends[8], n;
            CHECK(tok_pre_split(t, "12345'S", 7, ends, 8, &n) == 0 && n == 3 && ends[0] == 3 && ends[1] == 5 &&
                  ends[2] == 7);
            CHECK(tok_add_bos(t));
            IDS(t, "abcd", 1, 0, 7, 5);
        }
        unload(buf, f, t);
    }
}

/* Every truncation of a small vocab file: the reader refuses it or the
 * tokenizer loads; nothing crashes (ASan). */
static void test_truncation(void)
{
    struct gguf_writer *w = spm_vocab(-1, -2);
    void *buf;
    size_t len;
    struct inf_error err;
    CHECK(gguf_writer_write_mem(w, &buf, &len, &err) == 0);
    gguf_writer_free(w);
    for (size_t n = 0; n < len; n++) {
        char *copy = malloc(n ? n : 1);
        struct gguf_file *f;
        struct tok *t;
        memcpy(copy, buf, n);
        if (gguf_open_mem(copy, n, &f, &err) == 0) {
            if (tok_load(f, &t, &err) == 0)
                tok_free(t);
            gguf_close(f);
        }
        free(copy);
    }
    free(buf);
}

/* The SPM word-by-word shortcut (no token has U+2581 after another
 * character) must give what merging the whole text gives: the real Llama-2
 * vocab plus one token "x▁y" (which turns the shortcut off) encodes random
 * text without "x" exactly as the plain vocab does. */
static void test_spm_split_equivalence(void)
{
    char path[4096];
    struct gguf_file *src;
    struct inf_error err = {0, ""};
    snprintf(path, sizeof(path), "%s/vocab/ggml-vocab-llama-spm.gguf", tt_shared());
    if (gguf_open(path, &src, &err)) {
        fprintf(stderr, "skip split equivalence: %s\n", err.msg);
        return;
    }
    const struct gguf_kv *tk = gguf_find_kv(src, "tokenizer.ggml.tokens");
    const struct gguf_kv *sk = gguf_find_kv(src, "tokenizer.ggml.scores");
    const struct gguf_kv *yk = gguf_find_kv(src, "tokenizer.ggml.token_type");
    CHECK(tk && sk && yk);
    if (!tk || !sk || !yk) {
        gguf_close(src);
        return;
    }
    uint64_t n = tk->n;
    struct gguf_str *toks = malloc((n + 1) * sizeof(*toks));
    float *scores = malloc((n + 1) * sizeof(*scores));
    int32_t *types = malloc((n + 1) * sizeof(*types));
    gguf_arr_strs(tk, toks);
    for (uint64_t i = 0; i < n; i++) {
        int64_t v = 0;
        gguf_arr_f32(sk, i, &scores[i]);
        gguf_arr_int(yk, i, &v);
        types[i] = (int32_t)v;
    }
    toks[n].ptr = "x" SP "y";
    toks[n].len = 5;
    scores[n] = -1000.0f;
    types[n] = 1;
    struct gguf_writer *w;
    gguf_writer_new(&w);
    gguf_writer_copy_kvs(w, src, "");
    gguf_writer_set_arr_gstr(w, "tokenizer.ggml.tokens", toks, n + 1);
    gguf_writer_set_arr(w, "tokenizer.ggml.scores", GGUF_T_FLOAT32, scores, n + 1);
    gguf_writer_set_arr(w, "tokenizer.ggml.token_type", GGUF_T_INT32, types, n + 1);
    void *buf;
    struct gguf_file *f;
    struct tok *whole, *split;
    CHECK(load(w, &buf, &f, &whole, &err) == 0);
    CHECK(tok_load(src, &split, &err) == 0);
    if (whole && split) {
        static const char *parts[] = {" ", "  ", "   ", "\n", "\t", "the", "The", "ing", "Hello", "world", ",", ".",
                                      "don't", "12", "3", "\xc3\xa9", "\xe4\xb8\xad\xe6\x96\x87", "\xf0\x9f\x98\x80",
                                      "a", "b", "re", "tion", "\xe2\x96\x81", "\xff", "\xe2\x96"};
        uint64_t rng = 12345;
        int differ = 0;
        for (int i = 0; i < 2000; i++) {
            char text[512];
            size_t len = 0, na, nb;
            int k = (int)(rng % 30) + 1;
            for (int j = 0; j < k; j++) {
                rng = rng * 6364136223846793005ull + 1442695040888963407ull;
                const char *p = parts[(rng >> 33) % (sizeof(parts) / sizeof(parts[0]))];
                memcpy(text + len, p, strlen(p));
                len += strlen(p);
            }
            int32_t *a = tt_encode(whole, text, len, 1, 0, &na);
            int32_t *b = tt_encode(split, text, len, 1, 0, &nb);
            differ += na != nb || memcmp(a, b, na * sizeof(*a)) != 0;
            free(a);
            free(b);
        }
        CHECK(differ == 0);
        printf("spm word-by-word vs whole-text merging: %d of 2000 texts differ\n", differ);
    }
    tok_free(split);
    unload(buf, f, whole);
    gguf_close(src);
    free(toks);
    free(scores);
    free(types);
}

int main(void)
{
    test_errors();
    test_spm();
    test_bpe();
    test_truncation();
    test_spm_split_equivalence();
    printf("%s\n", fails ? "FAIL" : "ok");
    return fails ? 1 : 0;
}
