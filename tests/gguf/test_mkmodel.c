/* test_mkmodel — `inferd mkmodel` and `inferd info`, run as processes.
 *
 * usage: test_mkmodel INFERD_EXE   (meson passes the built binary)
 *
 * For each preset: the file opens; the keys hold the preset's published
 * hyperparameters (written out here from the model cards, not taken from
 * mkmodel); the tokenizer keys are byte-identical to the vocab file's; the
 * tensor set, shapes and types follow llama.cpp's naming and quant-mix rules
 * (re-implemented here); dequantized weights (through quant.c) have mean ~0
 * and std ~1/sqrt(row length), norms are 1. `inferd info` on the output
 * names the architecture and the per-type tensor counts. The same seed gives
 * the same bytes whatever the thread count; another seed gives other bytes.
 * Exit codes of both commands on bad usage and bad files.
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "engine/gguf.h"
#include "engine/quant.h"
#include "tests/check.h"
#include "tests/read_file.h"


static const char *exe, *shared;
static char tmpdir[256];

/* Run exe with args; stdout/stderr to files in tmpdir; returns exit status. */
static int run(const char *const *args, const char *out_name)
{
    char outp[512], errp[512];
    const char *argv[32];
    int n = 0;
    argv[n++] = exe;
    for (; args[n - 1] && n < 31; n++)
        argv[n] = args[n - 1];
    argv[n] = NULL;
    snprintf(outp, sizeof(outp), "%s/%s.out", tmpdir, out_name);
    snprintf(errp, sizeof(errp), "%s/%s.err", tmpdir, out_name);
    pid_t pid = fork();
    if (pid == 0) {
        int fo = open(outp, O_WRONLY | O_CREAT | O_TRUNC, 0644), fe = open(errp, O_WRONLY | O_CREAT | O_TRUNC, 0644);
        dup2(fo, 1);
        dup2(fe, 2);
        execv(exe, (char *const *)argv);
        _exit(127);
    }
    int st = 0;
    waitpid(pid, &st, 0);
    return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
}

static char *slurp_tmp(const char *name, const char *ext)
{
    char p[512];
    snprintf(p, sizeof(p), "%s/%s.%s", tmpdir, name, ext);
    return test_read_file(p, NULL);
}

/* ---- expectations, independent of mkmodel.c ---------------------------- */

struct expect {
    const char *preset, *arch;
    int n_embd, n_layer, n_head, n_kv, head_dim, n_ff, n_ctx;
    float rope, eps;
    int bias, qk_norm, tied;
};

/* Qwen2.5-7B, Llama-3-8B, Qwen2.5-0.5B model cards; tiny ones per the task. */
static const struct expect presets[] = {
    {"qwen2.5-7b", "qwen2", 3584, 28, 28, 4, 128, 18944, 32768, 1e6f, 1e-6f, 1, 0, 0},
    {"llama3-8b", "llama", 4096, 32, 32, 8, 128, 14336, 8192, 500000.f, 1e-5f, 0, 0, 0},
    {"small-qwen2", "qwen2", 896, 24, 14, 2, 64, 4864, 32768, 1e6f, 1e-6f, 1, 0, 1},
    {"tiny-qwen2", "qwen2", 256, 2, 4, 2, 64, 768, 4096, 1e6f, 1e-6f, 1, 0, 1},
    {"tiny-qwen3", "qwen3", 256, 2, 4, 2, 64, 768, 4096, 1e6f, 1e-6f, 0, 1, 0},
    {"tiny-llama", "llama", 256, 2, 4, 2, 64, 768, 4096, 10000.f, 1e-5f, 0, 0, 0},
};

static const struct expect *find_preset(const char *name)
{
    for (size_t i = 0; i < sizeof(presets) / sizeof(presets[0]); i++)
        if (!strcmp(presets[i].preset, name))
            return &presets[i];
    return NULL;
}

static int is_norm_or_bias(const char *n)
{
    return strstr(n, "_norm.") || strstr(n, ".bias");
}

/* The mix rules as the task states them (llama.cpp's llama_tensor_get_type). */
static int want_type(const char *quant, const char *name, int layer, int n_layer, int64_t ne0, int tied)
{
    int out = !strcmp(name, "output.weight") || (tied && !strcmp(name, "token_embd.weight"));
    int t;
    if (is_norm_or_bias(name) || !strcmp(quant, "f32"))
        return QT_F32;
    if (!strcmp(quant, "f16"))
        return QT_F16;
    if (!strcmp(quant, "q8_0"))
        return QT_Q8_0;
    if (!strcmp(quant, "q4_0"))
        t = out ? QT_Q6_K : QT_Q4_0;
    else if (!strcmp(quant, "q6_k"))
        t = QT_Q6_K;
    else {
        int mb = layer < n_layer / 8 || layer >= 7 * n_layer / 8 || (layer - n_layer / 8) % 3 == 2;
        if (out || ((strstr(name, "attn_v.") || strstr(name, "ffn_down.")) && mb))
            t = QT_Q6_K;
        else
            t = QT_Q4_K;
    }
    if (ne0 % 256)
        t = t == QT_Q6_K ? QT_Q8_0 : QT_Q4_0;
    return t;
}

static uint32_t key_u32(const struct gguf_file *f, const char *arch, const char *suffix)
{
    char k[128];
    uint32_t v = 0;
    snprintf(k, sizeof(k), "%s.%s", arch, suffix);
    CHECK(gguf_get_u32(f, k, &v) == 0);
    return v;
}

static float key_f32(const struct gguf_file *f, const char *arch, const char *suffix)
{
    char k[128];
    float v = 0;
    snprintf(k, sizeof(k), "%s.%s", arch, suffix);
    CHECK(gguf_get_f32(f, k, &v) == 0);
    return v;
}

/* dequantize up to max_rows rows spread over the tensor: mean/std */
static void check_values(const struct gguf_tensor *t, int max_rows)
{
    int64_t n = t->ne[0], rows = t->ne[1] * t->ne[2] * t->ne[3];
    size_t rb = quant_row_bytes((int)t->type, n);
    float *x = malloc((size_t)n * sizeof(float));
    double s = 0, s2 = 0, cnt = 0;
    int bad = 0;
    int64_t step = rows / max_rows > 1 ? rows / max_rows : 1;
    for (int64_t r = 0; r < rows; r += step) {
        quant_dequant_row((int)t->type, (const uint8_t *)t->data + (size_t)r * rb, x, n);
        for (int64_t i = 0; i < n; i++) {
            if (!isfinite(x[i]))
                bad++;
            s += x[i];
            s2 += (double)x[i] * x[i];
            cnt++;
        }
    }
    double mean = s / cnt, sd = sqrt(s2 / cnt - mean * mean);
    if (strstr(t->name, "_norm.")) {
        if (!(mean == 1.0 && sd == 0))
            fprintf(stderr, "%s: norm mean %g sd %g\n", t->name, mean, sd);
        CHECK(mean == 1.0 && sd == 0);
    } else if (strstr(t->name, ".bias")) {
        CHECK(fabs(mean) < 0.02 && sd > 0.001 && sd < 0.1);
    } else {
        double want = 1.0 / sqrt((double)n);
        int ok = !bad && fabs(mean) < 0.25 * want && sd > 0.7 * want && sd < 1.4 * want;
        if (!ok)
            fprintf(stderr, "%s (%s): mean %g sd %g, want sd %g\n", t->name, quant_type_name((int)t->type), mean,
                    sd, want);
        CHECK(ok);
    }
    free(x);
}

static void check_model(const char *path, const struct expect *p, const char *quant, int n_layer,
                        const char *vocab_path, int values)
{
    struct gguf_file *f = NULL, *vf = NULL;
    struct inf_error e = {0};
    struct gguf_str s;
    if (gguf_open(path, &f, &e) || gguf_open(vocab_path, &vf, &e)) {
        fprintf(stderr, "%s: %s\n", path, e.msg);
        CHECK(!"generated model or vocab does not open");
        gguf_close(f);
        return;
    }
    const char *a = p->arch;
    CHECK(gguf_get_str(f, "general.architecture", &s) == 0 && gguf_str_eq(s, a));
    CHECK((int)key_u32(f, a, "embedding_length") == p->n_embd);
    CHECK((int)key_u32(f, a, "block_count") == n_layer);
    CHECK((int)key_u32(f, a, "attention.head_count") == p->n_head);
    CHECK((int)key_u32(f, a, "attention.head_count_kv") == p->n_kv);
    CHECK((int)key_u32(f, a, "feed_forward_length") == p->n_ff);
    CHECK((int)key_u32(f, a, "context_length") == p->n_ctx);
    CHECK(key_f32(f, a, "rope.freq_base") == p->rope);
    CHECK(key_f32(f, a, "attention.layer_norm_rms_epsilon") == p->eps);
    if (p->qk_norm)
        CHECK((int)key_u32(f, a, "attention.key_length") == p->head_dim);
    uint32_t al;
    CHECK(gguf_get_u32(f, "general.alignment", &al) == 0 && al == 32);

    /* every tokenizer.* key of the vocab, byte for byte */
    int n_tok_keys = 0;
    for (int64_t i = 0; i < gguf_n_kv(vf); i++) {
        const struct gguf_kv *vk = gguf_kv_at(vf, i);
        char key[256];
        if (vk->key.len < 10 || memcmp(vk->key.ptr, "tokenizer.", 10) || vk->key.len >= sizeof(key))
            continue;
        memcpy(key, vk->key.ptr, vk->key.len);
        key[vk->key.len] = '\0';
        const struct gguf_kv *mk = gguf_find_kv(f, key);
        CHECK(mk && mk->type == vk->type && mk->arr_type == vk->arr_type && mk->n == vk->n &&
              mk->size == vk->size && memcmp(mk->data, vk->data, vk->size) == 0);
        n_tok_keys++;
    }
    CHECK(n_tok_keys >= 4);
    uint32_t et;
    uint64_t n_vocab = 0;
    CHECK(gguf_get_arr(vf, "tokenizer.ggml.tokens", &et, &n_vocab) == 0);

    /* tensors */
    int64_t qd = (int64_t)p->n_head * p->head_dim, kvd = (int64_t)p->n_kv * p->head_dim;
    int per_layer = 9 + (p->bias ? 3 : 0) + (p->qk_norm ? 2 : 0);
    CHECK(gguf_n_tensors(f) == (int64_t)n_layer * per_layer + 3 - p->tied);
    struct {
        const char *suffix;
        int64_t a, b;
    } want[] = {
        {"attn_norm.weight", p->n_embd, 1}, {"attn_q.weight", p->n_embd, qd},
        {"attn_k.weight", p->n_embd, kvd},  {"attn_v.weight", p->n_embd, kvd},
        {"attn_output.weight", qd, p->n_embd}, {"ffn_norm.weight", p->n_embd, 1},
        {"ffn_gate.weight", p->n_embd, p->n_ff}, {"ffn_up.weight", p->n_embd, p->n_ff},
        {"ffn_down.weight", p->n_ff, p->n_embd}, {p->bias ? "attn_q.bias" : NULL, qd, 1},
        {p->bias ? "attn_k.bias" : NULL, kvd, 1}, {p->bias ? "attn_v.bias" : NULL, kvd, 1},
        {p->qk_norm ? "attn_q_norm.weight" : NULL, p->head_dim, 1},
        {p->qk_norm ? "attn_k_norm.weight" : NULL, p->head_dim, 1},
    };
    for (int l = 0; l < n_layer; l++)
        for (size_t i = 0; i < sizeof(want) / sizeof(want[0]); i++) {
            char nm[64];
            if (!want[i].suffix)
                continue;
            snprintf(nm, sizeof(nm), "blk.%d.%s", l, want[i].suffix);
            const struct gguf_tensor *t = gguf_find_tensor(f, nm);
            CHECK(t && t->ne[0] == want[i].a && t->ne[1] == want[i].b && t->n_dims == (want[i].b > 1 ? 2u : 1u));
        }
    const struct gguf_tensor *te = gguf_find_tensor(f, "token_embd.weight");
    CHECK(te && te->ne[0] == p->n_embd && te->ne[1] == (int64_t)n_vocab);
    const struct gguf_tensor *to = gguf_find_tensor(f, "output.weight");
    CHECK(p->tied ? to == NULL : (to && to->ne[0] == p->n_embd && to->ne[1] == (int64_t)n_vocab));
    CHECK(gguf_find_tensor(f, "output_norm.weight") != NULL);
    for (int64_t i = 0; i < gguf_n_tensors(f); i++) {
        const struct gguf_tensor *t = gguf_tensor_at(f, i);
        int layer = -1;
        sscanf(t->name, "blk.%d.", &layer);
        int wt = want_type(quant, t->name, layer, n_layer, t->ne[0], p->tied);
        if ((int)t->type != wt)
            fprintf(stderr, "%s %s %s: type %s, expected %s\n", p->preset, quant, t->name,
                    quant_type_name((int)t->type), quant_type_name(wt));
        CHECK((int)t->type == wt);
        if (values)
            check_values(t, 64);
    }
    gguf_close(f);
    gguf_close(vf);
}

static int files_equal(const char *a, const char *b)
{
    size_t la, lb;
    char *x = test_read_file(a, &la), *y = test_read_file(b, &lb);
    int eq = x && y && la == lb && memcmp(x, y, la) == 0;
    free(x);
    free(y);
    return eq;
}

static void gen(const char *preset, const char *quant, const char *vocab, const char *layers, const char *seed,
                const char *threads, const char *out)
{
    char vpath[512], opath[512];
    snprintf(vpath, sizeof(vpath), "%s/vocab/ggml-vocab-%s.gguf", shared, vocab);
    snprintf(opath, sizeof(opath), "%s/%s", tmpdir, out);
    const char *args[20] = {"mkmodel", "--preset", preset, "--quant", quant, "--vocab", vpath, "--out", opath,
                            "--seed", seed, "--threads", threads};
    int n = 13;
    if (layers) {
        args[n++] = "--layers";
        args[n++] = layers;
    }
    args[n] = NULL;
    int rc = run(args, out);
    if (rc) {
        char *err = slurp_tmp(out, "err");
        fprintf(stderr, "mkmodel %s %s: exit %d: %s\n", preset, quant, rc, err ? err : "");
        free(err);
    }
    CHECK(rc == 0);
}

static void rm_tmp(const char *name)
{
    char p[512];
    snprintf(p, sizeof(p), "%s/%s", tmpdir, name);
    unlink(p);
}

static void case_model(const char *preset, const char *quant, const char *vocab, int layers, int values)
{
    const struct expect *p = find_preset(preset);
    char out[128], lay[16], opath[512], vpath[512];
    snprintf(out, sizeof(out), "%s-%s.gguf", preset, quant);
    snprintf(lay, sizeof(lay), "%d", layers ? layers : p->n_layer);
    gen(preset, quant, vocab, layers ? lay : NULL, "7", "2", out);
    snprintf(opath, sizeof(opath), "%s/%s", tmpdir, out);
    snprintf(vpath, sizeof(vpath), "%s/vocab/ggml-vocab-%s.gguf", shared, vocab);
    check_model(opath, p, quant, layers ? layers : p->n_layer, vpath, values);

    /* inferd info reads it: architecture and per-type counts */
    const char *iargs[] = {"info", "--model", opath, NULL};
    CHECK(run(iargs, "info") == 0);
    char *txt = slurp_tmp("info", "out");
    char line[128];
    snprintf(line, sizeof(line), "architecture: %s\n", p->arch);
    CHECK(txt && strstr(txt, line));
    struct gguf_file *f;
    struct inf_error e;
    if (txt && gguf_open(opath, &f, &e) == 0) {
        int64_t cnt[QT_COUNT] = {0};
        for (int64_t i = 0; i < gguf_n_tensors(f); i++)
            cnt[gguf_tensor_at(f, i)->type]++;
        for (int t = 0; t < QT_COUNT; t++)
            if (cnt[t]) {
                snprintf(line, sizeof(line), "%s: %lld", quant_type_name(t), (long long)cnt[t]);
                CHECK(strstr(txt, line) != NULL);
            }
        gguf_close(f);
    }
    free(txt);
    printf("ok: %s %s (%s vocab, %s layers)\n", preset, quant, vocab, lay);
    rm_tmp(out);
}

/* `inferd info` on every shared model: architecture and per-type counts as
 * ../shared/README.md describes the files (counted from its description:
 * e.g. tiny-llama-mixed has Q8_0 token_embd + attn_k in 2 layers = 3). */
static void check_shared_info(void)
{
    static const struct {
        const char *file, *arch, *counts;
    } m[] = {
        {"stories260K.gguf", "llama", "tensors:      48 (f32: 48)"},
        {"tiny-llama-Q4_K_M.gguf", "llama", "tensors:      21 (f32: 5, q4_K: 13, q6_K: 3)"},
        {"tiny-llama-mixed.gguf", "llama",
         "tensors:      21 (f32: 5, f16: 2, q4_0: 2, q8_0: 3, q4_K: 2, q5_K: 2, q6_K: 5)"},
        {"tiny-qwen2-Q4_K_M.gguf", "qwen2", "tensors:      26 (f32: 11, q4_K: 12, q6_K: 3)"},
    };
    for (size_t i = 0; i < sizeof(m) / sizeof(m[0]); i++) {
        char path[512], line[128];
        snprintf(path, sizeof(path), "%s/models/%s", shared, m[i].file);
        const char *args[] = {"info", "--model", path, "--tensors", NULL};
        CHECK(run(args, "shared_info") == 0);
        char *txt = slurp_tmp("shared_info", "out");
        snprintf(line, sizeof(line), "architecture: %s\n", m[i].arch);
        int ok = txt && strstr(txt, line) && strstr(txt, m[i].counts) && strstr(txt, "blk.1.ffn_down.weight");
        if (!ok)
            fprintf(stderr, "inferd info %s:\n%s\n", m[i].file, txt ? txt : "(no output)");
        CHECK(ok);
        free(txt);
    }
    printf("ok: inferd info on the shared models\n");
}

int main(int argc, char **argv)
{
    if (argc < 2) {
        fprintf(stderr, "usage: test_mkmodel INFERD_EXE\n");
        return 2;
    }
    exe = argv[1];
    shared = getenv("INFERD_SHARED");
    if (!shared || access(exe, X_OK) != 0)
        return 77;
    char probe[512];
    snprintf(probe, sizeof(probe), "%s/vocab/ggml-vocab-qwen2.gguf", shared);
    if (access(probe, R_OK) != 0)
        return 77;
    const char *td = getenv("TMPDIR");
    snprintf(tmpdir, sizeof(tmpdir), "%s/test_mkmodel.XXXXXX", td ? td : "/tmp");
    if (!mkdtemp(tmpdir)) {
        perror("mkdtemp");
        return 1;
    }

    check_shared_info();

    /* every preset's shape, the quant mixes on the tiny ones */
    static const char *const quants[] = {"q4_k_m", "q6_k", "q8_0", "q4_0", "f16", "f32"};
    for (size_t q = 0; q < 6; q++)
        case_model("tiny-llama", quants[q], "llama-spm", 0, 1);
    case_model("tiny-qwen2", "q4_k_m", "qwen2", 0, 1);
    case_model("tiny-qwen3", "q4_k_m", "qwen2", 0, 1);
    case_model("tiny-qwen3", "f32", "llama-spm", 0, 1);
    case_model("small-qwen2", "q4_k_m", "qwen2", 2, 1); /* n_embd 896: K-quant fallbacks */
    case_model("small-qwen2", "q4_0", "qwen2", 1, 0);
    /* 8 layers: the Q4_K_M "more bits" layer rule has every branch */
    case_model("tiny-llama", "q4_k_m", "llama-spm", 8, 0);
    if (getenv("INFERD_TEST_BIG")) { /* ~1 GB each: opt-in */
        case_model("qwen2.5-7b", "q4_k_m", "qwen2", 1, 0);
        case_model("llama3-8b", "q4_k_m", "llama-bpe", 1, 0);
    }

    /* determinism: same seed, any thread count -> same bytes; other seed differs */
    char a[512], b[512], c[512];
    gen("tiny-qwen3", "q4_k_m", "llama-spm", NULL, "42", "1", "det1.gguf");
    gen("tiny-qwen3", "q4_k_m", "llama-spm", NULL, "42", "3", "det2.gguf");
    gen("tiny-qwen3", "q4_k_m", "llama-spm", NULL, "43", "2", "det3.gguf");
    snprintf(a, sizeof(a), "%s/det1.gguf", tmpdir);
    snprintf(b, sizeof(b), "%s/det2.gguf", tmpdir);
    snprintf(c, sizeof(c), "%s/det3.gguf", tmpdir);
    CHECK(files_equal(a, b));
    CHECK(!files_equal(a, c));
    struct stat sa, sc;
    CHECK(stat(a, &sa) == 0 && stat(c, &sc) == 0 && sa.st_size == sc.st_size);

    /* exit codes */
    const char *h1[] = {"mkmodel", "--help", NULL};
    CHECK(run(h1, "u") == 0);
    const char *u1[] = {"mkmodel", "--preset", "gpt-5", "--quant", "q8_0", "--vocab", a, "--out", c, NULL};
    CHECK(run(u1, "u") == 2);
    const char *u2[] = {"mkmodel", "--preset", "tiny-llama", "--quant", "q3_k", "--vocab", a, "--out", c, NULL};
    CHECK(run(u2, "u") == 2);
    const char *u3[] = {"mkmodel", "--preset", "tiny-llama", "--quant", "q8_0", "--vocab", a, NULL};
    CHECK(run(u3, "u") == 2);
    const char *u4[] = {"mkmodel", "--preset", "tiny-llama", "--quant", "q8_0", "--vocab", a, "--out", c,
                        "--layers", "0", NULL};
    CHECK(run(u4, "u") == 2);
    const char *f1[] = {"mkmodel", "--preset", "tiny-llama", "--quant", "q8_0", "--vocab", "/nonexistent.gguf",
                        "--out", c, NULL};
    CHECK(run(f1, "u") == 1);
    /* info: help, usage, a bad file gives exit 1 and one line naming the offset */
    const char *i1[] = {"info", "--help", NULL};
    CHECK(run(i1, "u") == 0);
    const char *i2[] = {"info", NULL};
    CHECK(run(i2, "u") == 2);
    const char *i3[] = {"info", "--model", a, "--frobnicate", NULL};
    CHECK(run(i3, "u") == 2);
    FILE *bf = fopen(c, "r+b"); /* break det3's version field */
    if (bf) {
        fseek(bf, 4, SEEK_SET);
        fputc(9, bf);
        fclose(bf);
    }
    const char *i4[] = {"info", "--model", c, NULL};
    CHECK(run(i4, "bad") == 1);
    char *err = slurp_tmp("bad", "err");
    CHECK(err && strstr(err, "unsupported version 9") && strstr(err, "at offset 4") &&
          strchr(err, '\n') == err + strlen(err) - 1);
    free(err);
    const char *j1[] = {"info", "--model", a, "--json", "--tensors", NULL};
    CHECK(run(j1, "json") == 0);
    char *js = slurp_tmp("json", "out");
    CHECK(js && strstr(js, "\"architecture\": \"qwen3\"") && strstr(js, "\"blk.1.attn_k_norm.weight\""));
    free(js);

    /* the temporary directory holds only what this test wrote */
    DIR *d = opendir(tmpdir);
    struct dirent *de;
    while (d && (de = readdir(d)))
        if (de->d_name[0] != '.')
            rm_tmp(de->d_name);
    if (d)
        closedir(d);
    if (rmdir(tmpdir) != 0)
        fprintf(stderr, "note: %s not empty (%s)\n", tmpdir, strerror(errno));
    printf("%s\n", fails ? "FAIL" : "ok");
    return fails ? 1 : 0;
}
