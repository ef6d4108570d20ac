/* mkmodel — `inferd mkmodel`: write a GGUF with random but valid weights in
 * a real model's exact shapes and llama.cpp's tensor types for a quant mix.
 *
 * What it is for: benchmarks on machines a 4.4 GB model cannot be copied to,
 * and tests that need a model of a given shape (tiny-qwen3 for the QK-norm
 * path). The tokenizer is copied from a vocab GGUF (every `tokenizer.*` key);
 * n_vocab is its token count. Weights are random bytes with the block scales
 * chosen so the dequantized weights have mean ~0 and std ~1/sqrt(row length),
 * so activations neither vanish nor explode through the layers; norm weights
 * are 1.0, biases small. The output is a pure function of (preset, quant,
 * vocab, seed, layers): each row is generated from its own counter-based PRNG
 * state (splitmix64 of the seed, the tensor name and the row), so the thread
 * count does not change a byte.
 *
 * Quant mixes (llama.cpp's llama_tensor_get_type, for these architectures):
 *   f32     everything F32
 *   f16     matrices F16; norms and biases F32 (as in every mix)
 *   q8_0    matrices Q8_0
 *   q4_0    matrices Q4_0; output.weight Q6_K
 *   q6_k    matrices Q6_K
 *   q4_k_m  matrices Q4_K; output.weight Q6_K; attn_v and ffn_down Q6_K in the
 *           "more bits" layers i < n/8 || i >= 7n/8 || (i - n/8) % 3 == 2
 * With a tied output (no output.weight), token_embd gets output.weight's type,
 * as llama.cpp does (the shared tiny-qwen2-Q4_K_M.gguf has a Q6_K token_embd).
 * K-quants need rows that are multiples of 256: otherwise (small-qwen2's
 * n_embd 896) Q6_K falls back to Q8_0 as in llama.cpp, and Q4_K falls back
 * to Q4_0, NOT llama.cpp's Q5_0, which the engine does not compute with.
 *
 * Single-threaded front end; tensor data is produced by the writer's threads.
 */
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "engine/gguf.h"
#include "engine/gguf_write.h"
#include "engine/quant.h"
#include "tools/cmds.h"

struct mk_preset {
    const char *name;
    const char *arch;
    int n_embd, n_layer, n_head, n_head_kv, head_dim, n_ff, n_ctx;
    float rope_base, rms_eps;
    int qkv_bias; /* qwen2: q/k/v biases */
    int qk_norm;  /* qwen3: attn_q_norm / attn_k_norm [head_dim] */
    int tied;     /* no output.weight: token_embd is the output matrix */
};

static const struct mk_preset mk_presets[] = {
    /* Qwen2.5-7B(-Instruct) */
    {"qwen2.5-7b", "qwen2", 3584, 28, 28, 4, 128, 18944, 32768, 1e6f, 1e-6f, 1, 0, 0},
    /* Llama-3(.1)-8B */
    {"llama3-8b", "llama", 4096, 32, 32, 8, 128, 14336, 8192, 500000.f, 1e-5f, 0, 0, 0},
    /* Qwen2.5-0.5B */
    {"small-qwen2", "qwen2", 896, 24, 14, 2, 64, 4864, 32768, 1e6f, 1e-6f, 1, 0, 1},
    /* the shapes of ../shared/models/tiny-* */
    {"tiny-qwen2", "qwen2", 256, 2, 4, 2, 64, 768, 4096, 1e6f, 1e-6f, 1, 0, 1},
    {"tiny-qwen3", "qwen3", 256, 2, 4, 2, 64, 768, 4096, 1e6f, 1e-6f, 0, 1, 0},
    {"tiny-llama", "llama", 256, 2, 4, 2, 64, 768, 4096, 10000.f, 1e-5f, 0, 0, 0},
};

enum mk_quant { MK_F32, MK_F16, MK_Q8_0, MK_Q4_0, MK_Q6_K, MK_Q4_K_M };
static const struct {
    const char *name;
    uint32_t file_type; /* general.file_type (llama_ftype) */
} mk_quants[] = {
    [MK_F32] = {"f32", 0}, [MK_F16] = {"f16", 1},  [MK_Q8_0] = {"q8_0", 7},
    [MK_Q4_0] = {"q4_0", 2}, [MK_Q6_K] = {"q6_k", 18}, [MK_Q4_K_M] = {"q4_k_m", 15},
};

/* What a tensor is, for its type and its initial values. */
enum mk_kind { K_NORM, K_BIAS, K_EMBD, K_OUTPUT, K_ATTN_V, K_FFN_DOWN, K_MATRIX };

#define MK_MAX_TENSORS 4096

struct mk_tensor {
    char name[GGUF_MAX_NAME];
    enum mk_kind kind;
    int64_t ne[2];
    uint32_t n_dims;
    uint32_t type;
};

struct mk_state {
    uint64_t seed;
};

/* ---- random numbers ---------------------------------------------------- */

static uint64_t splitmix64(uint64_t x)
{
    x += 0x9e3779b97f4a7c15ull;
    x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
    x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
    return x ^ (x >> 31);
}

static uint64_t mk_hash(const char *s)
{
    uint64_t h = 1469598103934665603ull;
    while (*s) {
        h ^= (unsigned char)*s++;
        h *= 1099511628211ull;
    }
    return h;
}

/* xorshift64* stream for one row */
struct mk_rng {
    uint64_t s;
};

static uint64_t rng_next(struct mk_rng *r)
{
    r->s ^= r->s >> 12;
    r->s ^= r->s << 25;
    r->s ^= r->s >> 27;
    return r->s * 0x2545f4914f6cdd1dull;
}

/* uniform integer in [lo, hi] */
static int rng_range(struct mk_rng *r, int lo, int hi)
{
    return lo + (int)((rng_next(r) >> 33) % (uint64_t)(hi - lo + 1));
}

/* uniform float in [-1, 1) */
static float rng_sym(struct mk_rng *r)
{
    return (float)((double)(rng_next(r) >> 11) * (2.0 / 9007199254740992.0) - 1.0);
}

static void rng_bytes(struct mk_rng *r, uint8_t *p, size_t n)
{
    size_t i = 0;
    for (; i + 8 <= n; i += 8) {
        uint64_t v = rng_next(r);
        memcpy(p + i, &v, 8);
    }
    if (i < n) {
        uint64_t v = rng_next(r);
        memcpy(p + i, &v, n - i);
    }
}

/* ---- quant mix --------------------------------------------------------- */

static int more_bits(int i, int n)
{
    return i < n / 8 || i >= 7 * n / 8 || (i - n / 8) % 3 == 2;
}

/* K-quant rows must be whole 256-blocks; the fallbacks are in the file comment. */
static uint32_t mk_fallback(uint32_t t, int64_t ne0)
{
    if (ne0 % QK_K == 0)
        return t;
    if (t == QT_Q6_K)
        return QT_Q8_0;
    if (t == QT_Q4_K)
        return QT_Q4_0;
    return t;
}

static uint32_t mk_type(enum mk_quant q, enum mk_kind k, int layer, int n_layer, int64_t ne0, int tied)
{
    uint32_t t;
    if (k == K_NORM || k == K_BIAS)
        return QT_F32;
    if (k == K_EMBD && tied)
        k = K_OUTPUT;
    switch (q) {
    case MK_F32: return QT_F32;
    case MK_F16: return QT_F16;
    case MK_Q8_0: return QT_Q8_0;
    case MK_Q4_0: t = k == K_OUTPUT ? QT_Q6_K : QT_Q4_0; break;
    case MK_Q6_K: t = QT_Q6_K; break;
    case MK_Q4_K_M:
    default:
        if (k == K_OUTPUT)
            t = QT_Q6_K;
        else if ((k == K_ATTN_V || k == K_FFN_DOWN) && more_bits(layer, n_layer))
            t = QT_Q6_K;
        else
            t = QT_Q4_K;
        break;
    }
    return mk_fallback(t, ne0);
}

/* ---- row generators ---------------------------------------------------- */

/* Standard deviation of the integer part of each type's dequantized value,
 * for the scale choices below (uniform quants; see mk_fill_row):
 *   q8_0: q uniform in [-128, 127]                      std 73.9
 *   q4_0: q - 8, q uniform in [0, 15]                   std 4.61
 *   q4_K: sc*q - 7.5*m, sc, m uniform in [16, 47], q in [0, 15]  std 180
 *   q6_K: sc*(q - 32), |sc| uniform in [16, 47], q in [0, 63]    std 606 */
#define MK_STD_Q8_0 73.9f
#define MK_STD_Q4_0 4.61f
#define MK_STD_Q4_K 180.2f
#define MK_STD_Q6_K 606.4f

static void mk_fill_row(uint32_t type, enum mk_kind kind, int64_t n, float std, struct mk_rng *r, uint8_t *dst)
{
    int64_t nb;
    switch (type) {
    case QT_F32:
    case QT_F16:
        for (int64_t i = 0; i < n; i++) {
            /* uniform in [-a, a] has std a/sqrt(3) */
            float v = kind == K_NORM ? 1.0f : rng_sym(r) * std * 1.7320508f;
            if (type == QT_F32) {
                memcpy(dst + 4 * i, &v, 4);
            } else {
                quant_f16 h = quant_f32_to_f16(v);
                memcpy(dst + 2 * i, &h, 2);
            }
        }
        return;
    case QT_Q8_0: {
        struct block_q8_0 *b = (struct block_q8_0 *)dst;
        quant_f16 d = quant_f32_to_f16(std / MK_STD_Q8_0);
        rng_bytes(r, dst, (size_t)quant_row_bytes(type, n));
        for (nb = 0; nb < n / QK8_0; nb++)
            memcpy(&b[nb].d, &d, 2);
        return;
    }
    case QT_Q4_0: {
        struct block_q4_0 *b = (struct block_q4_0 *)dst;
        quant_f16 d = quant_f32_to_f16(std / MK_STD_Q4_0);
        rng_bytes(r, dst, (size_t)quant_row_bytes(type, n));
        for (nb = 0; nb < n / QK4_0; nb++)
            memcpy(&b[nb].d, &d, 2);
        return;
    }
    case QT_Q4_K: {
        /* w = d*sc*q - dmin*m per 32-element sub-block; dmin = 7.5 d centres
         * q in [0, 15] when m == sc, and m varies independently of sc so a
         * kernel that mixes up the two unpacked fields is caught. */
        struct block_q4_K *b = (struct block_q4_K *)dst;
        float d = std / MK_STD_Q4_K;
        quant_f16 hd = quant_f32_to_f16(d), hm = quant_f32_to_f16(7.5f * d);
        rng_bytes(r, dst, (size_t)quant_row_bytes(type, n));
        for (nb = 0; nb < n / QK_K; nb++) {
            uint8_t sc[8], m[8], *s = b[nb].scales;
            for (int j = 0; j < 8; j++) {
                sc[j] = (uint8_t)rng_range(r, 16, 47);
                m[j] = (uint8_t)rng_range(r, 16, 47);
            }
            /* ggml's 12-byte packing of eight 6-bit (scale, min) pairs */
            for (int j = 0; j < 4; j++) {
                s[j] = (uint8_t)((sc[j] & 63) | ((sc[j + 4] >> 4) << 6));
                s[j + 4] = (uint8_t)((m[j] & 63) | ((m[j + 4] >> 4) << 6));
                s[j + 8] = (uint8_t)((sc[j + 4] & 15) | ((m[j + 4] & 15) << 4));
            }
            memcpy(&b[nb].d, &hd, 2);
            memcpy(&b[nb].dmin, &hm, 2);
        }
        return;
    }
    case QT_Q6_K: {
        struct block_q6_K *b = (struct block_q6_K *)dst;
        quant_f16 hd = quant_f32_to_f16(std / MK_STD_Q6_K);
        rng_bytes(r, dst, (size_t)quant_row_bytes(type, n));
        for (nb = 0; nb < n / QK_K; nb++) {
            for (int j = 0; j < QK_K / 16; j++) {
                int v = rng_range(r, 16, 47);
                b[nb].scales[j] = (int8_t)(rng_next(r) >> 63 ? -v : v);
            }
            memcpy(&b[nb].d, &hd, 2);
        }
        return;
    }
    default:
        return; /* not produced by any mix */
    }
}

static enum mk_kind mk_kind_of(const char *name)
{
    if (strstr(name, "_norm."))
        return K_NORM;
    if (strstr(name, ".bias"))
        return K_BIAS;
    if (!strcmp(name, "token_embd.weight"))
        return K_EMBD;
    if (!strcmp(name, "output.weight"))
        return K_OUTPUT;
    if (strstr(name, "attn_v."))
        return K_ATTN_V;
    if (strstr(name, "ffn_down."))
        return K_FFN_DOWN;
    return K_MATRIX;
}

static int mk_fill(void *ctx, const struct gguf_writer_tensor *t, uint64_t row0, uint64_t n_rows, void *dst)
{
    const struct mk_state *st = ctx;
    enum mk_kind kind = mk_kind_of(t->name);
    uint64_t ts = splitmix64(st->seed ^ mk_hash(t->name));
    /* weights: std 1/sqrt(row length); biases: small, independent of shape */
    float std = kind == K_BIAS ? 0.02f : 1.0f / sqrtf((float)t->ne[0]);
    for (uint64_t i = 0; i < n_rows; i++) {
        struct mk_rng r = {splitmix64(ts + row0 + i) | 1};
        mk_fill_row(t->type, kind, t->ne[0], std, &r, (uint8_t *)dst + i * t->row_bytes);
    }
    return 0;
}

/* ---- building the tensor list ------------------------------------------ */

static int mk_cmp_name(const void *a, const void *b)
{
    return strcmp(((const struct mk_tensor *)a)->name, ((const struct mk_tensor *)b)->name);
}

static void mk_add(struct mk_tensor *ts, int *n, const char *name, enum mk_kind kind, int64_t ne0, int64_t ne1)
{
    struct mk_tensor *t = &ts[(*n)++];
    snprintf(t->name, sizeof(t->name), "%s", name);
    t->kind = kind;
    t->ne[0] = ne0;
    t->ne[1] = ne1;
    t->n_dims = ne1 > 1 ? 2 : 1;
}

/* llama.cpp's names and ggml shapes ([row length, rows]); the order is the
 * one convert_hf_to_gguf produces: globals, then each block, names sorted. */
static int mk_tensors(const struct mk_preset *p, int n_layer, int64_t n_vocab, enum mk_quant q,
                      struct mk_tensor *ts)
{
    int n = 0, start;
    char nm[GGUF_MAX_NAME];
    int64_t qd = (int64_t)p->n_head * p->head_dim, kvd = (int64_t)p->n_head_kv * p->head_dim;

    if (!p->tied)
        mk_add(ts, &n, "output.weight", K_OUTPUT, p->n_embd, n_vocab);
    mk_add(ts, &n, "output_norm.weight", K_NORM, p->n_embd, 1);
    mk_add(ts, &n, "token_embd.weight", K_EMBD, p->n_embd, n_vocab);
    for (int l = 0; l < n_layer; l++) {
        start = n;
#define BLK(suffix, kind, a, b)                                  \
    do {                                                         \
        snprintf(nm, sizeof(nm), "blk.%d." suffix, l);           \
        mk_add(ts, &n, nm, kind, a, b);                          \
    } while (0)
        BLK("attn_norm.weight", K_NORM, p->n_embd, 1);
        BLK("attn_q.weight", K_MATRIX, p->n_embd, qd);
        BLK("attn_k.weight", K_MATRIX, p->n_embd, kvd);
        BLK("attn_v.weight", K_ATTN_V, p->n_embd, kvd);
        BLK("attn_output.weight", K_MATRIX, qd, p->n_embd);
        if (p->qkv_bias) {
            BLK("attn_q.bias", K_BIAS, qd, 1);
            BLK("attn_k.bias", K_BIAS, kvd, 1);
            BLK("attn_v.bias", K_BIAS, kvd, 1);
        }
        if (p->qk_norm) {
            BLK("attn_q_norm.weight", K_NORM, p->head_dim, 1);
            BLK("attn_k_norm.weight", K_NORM, p->head_dim, 1);
        }
        BLK("ffn_norm.weight", K_NORM, p->n_embd, 1);
        BLK("ffn_gate.weight", K_MATRIX, p->n_embd, p->n_ff);
        BLK("ffn_up.weight", K_MATRIX, p->n_embd, p->n_ff);
        BLK("ffn_down.weight", K_FFN_DOWN, p->n_ff, p->n_embd);
#undef BLK
        qsort(ts + start, (size_t)(n - start), sizeof(*ts), mk_cmp_name);
        for (int i = start; i < n; i++)
            ts[i].type = mk_type(q, ts[i].kind, l, n_layer, ts[i].ne[0], p->tied);
    }
    for (int i = 0; i < 3 - p->tied; i++)
        ts[i].type = mk_type(q, ts[i].kind, 0, n_layer, ts[i].ne[0], p->tied);
    return n;
}

/* ---- command line ------------------------------------------------------ */

static void mk_usage(FILE *out)
{
    fprintf(out,
            "usage: inferd mkmodel --preset P --quant Q --vocab V.gguf --out F\n"
            "                      [--seed N] [--layers N] [--threads N]\n"
            "\n"
            "Write a GGUF with random but valid weights in a real model's exact shapes and\n"
            "llama.cpp's tensor types for the quant mix, the tokenizer copied from V.gguf.\n"
            "\n"
            "  --preset P   qwen2.5-7b | llama3-8b | small-qwen2 (Qwen2.5-0.5B) |\n"
            "               tiny-qwen2 | tiny-qwen3 | tiny-llama (n_embd 256, 2 layers)\n"
            "  --quant Q    q4_k_m | q6_k | q8_0 | q4_0 | f16 | f32\n"
            "  --vocab V    a GGUF holding tokenizer.* keys (e.g. ../shared/vocab/*.gguf)\n"
            "  --out F      output file (written to F.tmp.<pid>, then renamed)\n"
            "  --seed N     PRNG seed (default 1); same arguments + seed = same bytes\n"
            "  --layers N   override the preset's block count (1..1024)\n"
            "  --threads N  threads producing tensor data (default: online CPUs, max 4)\n"
            "  -h, --help   this help\n"
            "\n"
            "exit status: 0 ok, 1 failure (bad vocab file, I/O), 2 usage error\n");
}

static int mk_parse_u64(const char *s, uint64_t max, uint64_t *out)
{
    char *end;
    unsigned long long v;
    if (!*s || *s == '-')
        return -1;
    v = strtoull(s, &end, 0);
    if (*end || v > max)
        return -1;
    *out = v;
    return 0;
}

static double mk_now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

int cmd_mkmodel(int argc, char **argv)
{
    const char *preset = NULL, *quant = NULL, *vocab = NULL, *out = NULL;
    uint64_t seed = 1, layers = 0, threads = 0;
    const struct mk_preset *p = NULL;
    int q = -1;

    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        const char **sv = NULL;
        uint64_t *nv = NULL, max = 0;
        if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
            mk_usage(stdout);
            return CMD_OK;
        }
        if (!strcmp(a, "--preset")) sv = &preset;
        else if (!strcmp(a, "--quant")) sv = &quant;
        else if (!strcmp(a, "--vocab")) sv = &vocab;
        else if (!strcmp(a, "--out")) sv = &out;
        else if (!strcmp(a, "--seed")) nv = &seed, max = UINT64_MAX;
        else if (!strcmp(a, "--layers")) nv = &layers, max = 1024;
        else if (!strcmp(a, "--threads")) nv = &threads, max = 64;
        else {
            fprintf(stderr, "inferd mkmodel: unknown argument '%s' (see inferd mkmodel --help)\n", a);
            return CMD_USAGE;
        }
        if (i + 1 >= argc) {
            fprintf(stderr, "inferd mkmodel: %s needs a value\n", a);
            return CMD_USAGE;
        }
        if (sv) {
            *sv = argv[++i];
        } else if (mk_parse_u64(argv[++i], max, nv) || (nv != &seed && *nv == 0)) {
            fprintf(stderr, "inferd mkmodel: bad value '%s' for %s\n", argv[i], a);
            return CMD_USAGE;
        }
    }
    if (!preset || !quant || !vocab || !out) {
        fprintf(stderr, "inferd mkmodel: --preset, --quant, --vocab and --out are required (see --help)\n");
        return CMD_USAGE;
    }
    for (size_t i = 0; i < sizeof(mk_presets) / sizeof(mk_presets[0]); i++)
        if (!strcmp(preset, mk_presets[i].name))
            p = &mk_presets[i];
    for (size_t i = 0; i < sizeof(mk_quants) / sizeof(mk_quants[0]); i++)
        if (!strcmp(quant, mk_quants[i].name))
            q = (int)i;
    if (!p) {
        fprintf(stderr, "inferd mkmodel: unknown preset '%s' (see --help)\n", preset);
        return CMD_USAGE;
    }
    if (q < 0) {
        fprintf(stderr, "inferd mkmodel: unknown quant '%s' (see --help)\n", quant);
        return CMD_USAGE;
    }
    if (!threads) {
        long nc = sysconf(_SC_NPROCESSORS_ONLN);
        threads = nc < 1 ? 1 : nc > 4 ? 4 : (uint64_t)nc; /* more only contend in the page cache */
    }
    int n_layer = layers ? (int)layers : p->n_layer;

    /* the vocab */
    struct gguf_file *vf = NULL;
    struct inf_error err = {0};
    struct gguf_writer *w = NULL;
    struct mk_tensor *ts = NULL;
    struct mk_state st = {seed};
    uint32_t et;
    uint64_t n_vocab = 0;
    int rc = CMD_FAIL, n;
    char key[128];
    double t0 = mk_now();

    if (gguf_open(vocab, &vf, &err)) {
        fprintf(stderr, "inferd mkmodel: %s: %s\n", vocab, err.msg);
        return CMD_FAIL;
    }
    if (gguf_get_arr(vf, "tokenizer.ggml.tokens", &et, &n_vocab) || et != GGUF_T_STRING || n_vocab == 0 ||
        n_vocab > INT32_MAX) {
        fprintf(stderr, "inferd mkmodel: %s: no usable tokenizer.ggml.tokens string array\n", vocab);
        goto done;
    }
    ts = calloc(MK_MAX_TENSORS, sizeof(*ts));
    if (!ts || gguf_writer_new(&w)) {
        fprintf(stderr, "inferd mkmodel: out of memory\n");
        goto done;
    }

    /* keys: general, hyperparameters, then the tokenizer */
    int krc = 0;
    char mname[96];
    snprintf(mname, sizeof(mname), "synthetic-%s-%s", p->name, mk_quants[q].name);
    krc |= gguf_writer_set_str(w, "general.architecture", p->arch);
    krc |= gguf_writer_set_str(w, "general.name", mname);
    krc |= gguf_writer_set_u32(w, "general.alignment", GGUF_DEFAULT_ALIGNMENT);
    krc |= gguf_writer_set_u32(w, "general.file_type", mk_quants[q].file_type);
    if (q != MK_F32 && q != MK_F16)
        krc |= gguf_writer_set_u32(w, "general.quantization_version", 2);
#define AK(suffix) (snprintf(key, sizeof(key), "%s." suffix, p->arch), key)
    krc |= gguf_writer_set_u32(w, AK("context_length"), (uint32_t)p->n_ctx);
    krc |= gguf_writer_set_u32(w, AK("embedding_length"), (uint32_t)p->n_embd);
    krc |= gguf_writer_set_u32(w, AK("block_count"), (uint32_t)n_layer);
    krc |= gguf_writer_set_u32(w, AK("feed_forward_length"), (uint32_t)p->n_ff);
    krc |= gguf_writer_set_u32(w, AK("attention.head_count"), (uint32_t)p->n_head);
    krc |= gguf_writer_set_u32(w, AK("attention.head_count_kv"), (uint32_t)p->n_head_kv);
    krc |= gguf_writer_set_f32(w, AK("rope.freq_base"), p->rope_base);
    krc |= gguf_writer_set_f32(w, AK("attention.layer_norm_rms_epsilon"), p->rms_eps);
    krc |= gguf_writer_set_u32(w, AK("rope.dimension_count"), (uint32_t)p->head_dim);
    if (p->qk_norm) {
        krc |= gguf_writer_set_u32(w, AK("attention.key_length"), (uint32_t)p->head_dim);
        krc |= gguf_writer_set_u32(w, AK("attention.value_length"), (uint32_t)p->head_dim);
    }
#undef AK
    krc |= gguf_writer_copy_kvs(w, vf, "tokenizer.");
    if (krc) {
        fprintf(stderr, "inferd mkmodel: cannot build the key/values (%s)\n", inf_strerror(krc));
        goto done;
    }

    n = mk_tensors(p, n_layer, (int64_t)n_vocab, (enum mk_quant)q, ts);
    for (int i = 0; i < n; i++) {
        int trc = gguf_writer_add_tensor_fill(w, ts[i].name, ts[i].n_dims, ts[i].ne, ts[i].type, mk_fill, &st);
        if (trc) {
            fprintf(stderr, "inferd mkmodel: tensor %s: %s\n", ts[i].name, inf_strerror(trc));
            goto done;
        }
    }
    gguf_writer_set_threads(w, (int)threads);
    if (gguf_writer_write_file(w, out, &err)) {
        fprintf(stderr, "inferd mkmodel: %s\n", err.msg);
        goto done;
    }
    double dt = mk_now() - t0;
    uint64_t size = gguf_writer_size(w);
    printf("wrote %s: %s %s, %d layers, n_vocab %" PRIu64 ", %d tensors, %" PRIu64 " bytes in %.2f s (%.0f MB/s, %d threads)\n",
           out, p->name, mk_quants[q].name, n_layer, n_vocab, n, size, dt, (double)size / 1e6 / (dt > 0 ? dt : 1e-9),
           (int)threads);
    rc = CMD_OK;
done:
    gguf_writer_free(w);
    free(ts);
    gguf_close(vf);
    return rc;
}
