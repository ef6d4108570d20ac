/* cmd_info — `inferd info --model M [--json] [--tensors]`: describe a GGUF file.
 *
 * Reads the keys directly through engine/gguf (not the model loader), so it
 * works on any valid GGUF, including vocab-only files and architectures the
 * engine cannot run. Prints the file size, GGUF version, architecture, name,
 * the `<arch>.*` hyperparameters, the vocabulary, the tensor count per type,
 * the parameter count and, with --tensors, every tensor. A file the reader
 * rejects gives one line on stderr (the problem and its byte offset) and
 * exit status 1. Single-threaded tool.
 */
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/gguf.h"
#include "engine/cuda/cuda.h"
#include "engine/quant.h"
#include "tools/cmds.h"

static void info_usage(FILE *out)
{
    fprintf(out,
            "usage: inferd info --model FILE [--json] [--tensors]\n"
            "       inferd info --devices\n"
            "\n"
            "Describe a GGUF model file: file size, GGUF version, architecture, name,\n"
            "hyperparameters (<arch>.* keys), vocabulary, tensor count by type, total\n"
            "parameters.\n"
            "\n"
            "  -m, --model FILE  the GGUF file (required)\n"
            "      --json        print one JSON object instead of text\n"
            "      --tensors     also list every tensor: name, type, shape, data offset\n"
            "      --devices     list the CUDA devices the GPU backend can use (no model needed)\n"
            "  -h, --help        this help\n"
            "\n"
            "exit status: 0 ok, 1 unreadable or invalid file (one error line on stderr\n"
            "naming the problem and the byte offset), 2 usage error\n");
}

/* The hyperparameters shown, as `<arch>.<suffix>` keys. */
static const struct {
    const char *suffix;
    const char *label;
} info_hparams[] = {
    {"context_length", "context length"},
    {"embedding_length", "embedding length"},
    {"block_count", "block count"},
    {"feed_forward_length", "feed forward length"},
    {"attention.head_count", "head count"},
    {"attention.head_count_kv", "head count kv"},
    {"attention.key_length", "key length"},
    {"attention.value_length", "value length"},
    {"rope.dimension_count", "rope dimensions"},
    {"rope.freq_base", "rope freq base"},
    {"attention.layer_norm_rms_epsilon", "rms norm eps"},
    {"vocab_size", "vocab size"},
};

/* ---- output helpers ---------------------------------------------------- */

/* Length of the valid UTF-8 sequence at p (n bytes left), 0 if invalid. */
static int utf8_len(const unsigned char *p, uint64_t n)
{
    int len;
    uint32_t cp;
    if (p[0] < 0x80)
        return 1;
    if ((p[0] & 0xe0) == 0xc0) { len = 2; cp = p[0] & 0x1f; }
    else if ((p[0] & 0xf0) == 0xe0) { len = 3; cp = p[0] & 0x0f; }
    else if ((p[0] & 0xf8) == 0xf0) { len = 4; cp = p[0] & 0x07; }
    else return 0;
    if ((uint64_t)len > n)
        return 0;
    for (int i = 1; i < len; i++) {
        if ((p[i] & 0xc0) != 0x80)
            return 0;
        cp = cp << 6 | (p[i] & 0x3f);
    }
    if ((len == 2 && cp < 0x80) || (len == 3 && cp < 0x800) || (len == 4 && (cp < 0x10000 || cp > 0x10ffff)) ||
        (cp >= 0xd800 && cp <= 0xdfff))
        return 0;
    return len;
}

/* A JSON string from untrusted bytes: escapes, invalid UTF-8 -> U+FFFD. */
static void json_str(FILE *o, const char *s, uint64_t n)
{
    const unsigned char *p = (const unsigned char *)s;
    fputc('"', o);
    for (uint64_t i = 0; i < n;) {
        unsigned char c = p[i];
        if (c == '"' || c == '\\') {
            fprintf(o, "\\%c", c);
            i++;
        } else if (c < 0x20 || c == 0x7f) {
            fprintf(o, "\\u%04x", c);
            i++;
        } else {
            int l = utf8_len(p + i, n - i);
            if (l == 0) {
                fputs("\\ufffd", o);
                i++;
            } else {
                fwrite(p + i, 1, (size_t)l, o);
                i += (uint64_t)l;
            }
        }
    }
    fputc('"', o);
}

static void json_cstr(FILE *o, const char *s)
{
    json_str(o, s, strlen(s));
}

/* Text output of untrusted bytes: control characters shown as '?'. */
static void text_str(FILE *o, struct gguf_str s)
{
    for (uint64_t i = 0; i < s.len; i++) {
        unsigned char c = (unsigned char)s.ptr[i];
        fputc(c < 0x20 || c == 0x7f ? '?' : c, o);
    }
}

/* A kv's value as text or JSON; arrays as "[type x n]" / {"array":..}. */
static void print_value(FILE *o, const struct gguf_kv *kv, int json)
{
    int64_t i;
    float x;
    struct gguf_str s;
    if (gguf_kv_str(kv, &s) == 0) {
        if (json)
            json_str(o, s.ptr, s.len);
        else
            text_str(o, s);
    } else if (kv->type == GGUF_T_BOOL) {
        fputs(kv->data[0] ? "true" : "false", o);
    } else if (kv->type == GGUF_T_FLOAT64) {
        double d;
        memcpy(&d, kv->data, 8);
        if (json && !isfinite(d))
            fputs("null", o);
        else
            fprintf(o, "%.17g", d);
    } else if (gguf_kv_f32(kv, &x) == 0) {
        /* the shortest decimal that reads back as the same float */
        char b[32];
        for (int prec = 6; prec <= 9; prec++) {
            snprintf(b, sizeof(b), "%.*g", prec, (double)x);
            if (strtof(b, NULL) == x)
                break;
        }
        fputs(json && !isfinite(x) ? "null" : b, o);
    } else if (kv->type == GGUF_T_ARRAY) {
        if (json)
            fprintf(o, "{\"array\": \"%s\", \"n\": %" PRIu64 "}", gguf_vtype_name(kv->arr_type), kv->n);
        else
            fprintf(o, "[%s x %" PRIu64 "]", gguf_vtype_name(kv->arr_type), kv->n);
    } else if (gguf_kv_int(kv, &i) == 0) {
        fprintf(o, "%" PRId64, i);
    } else { /* a u64 above INT64_MAX */
        uint64_t u;
        memcpy(&u, kv->data, 8);
        fprintf(o, "%" PRIu64, u);
    }
}

static void print_key(FILE *o, const struct gguf_file *f, const char *key, const char *label, int json, int *first)
{
    const struct gguf_kv *kv = gguf_find_kv(f, key);
    if (json) {
        fprintf(o, "%s\n    ", *first ? "" : ",");
        json_cstr(o, label);
        fputs(": ", o);
        if (kv)
            print_value(o, kv, 1);
        else
            fputs("null", o);
    } else if (kv) {
        fprintf(o, "  %-22s ", label);
        print_value(o, kv, 0);
        fputc('\n', o);
    }
    *first = 0;
}

static void print_shape(FILE *o, const struct gguf_tensor *t)
{
    fputc('[', o);
    for (uint32_t j = 0; j < t->n_dims; j++)
        fprintf(o, "%s%" PRId64, j ? ", " : "", t->ne[j]);
    fputc(']', o);
}

/* ---- the command ------------------------------------------------------- */

static int info_print(FILE *o, const char *path, const struct gguf_file *f, int json, int tensors)
{
    struct gguf_str arch = {"", 0}, name = {"", 0};
    char archz[64] = "", key[160];
    int64_t count[QT_COUNT] = {0};
    uint64_t n_params = 0;
    int first = 1;

    if (gguf_get_str(f, "general.architecture", &arch) == 0 && arch.len < sizeof(archz) &&
        !memchr(arch.ptr, '\0', arch.len))
        memcpy(archz, arch.ptr, arch.len), archz[arch.len] = '\0';
    gguf_get_str(f, "general.name", &name);
    for (int64_t i = 0; i < gguf_n_tensors(f); i++) {
        const struct gguf_tensor *t = gguf_tensor_at(f, i);
        count[t->type]++; /* type < QT_COUNT: validated at open */
        n_params += t->n_elems;
    }

    if (json) {
        fputs("{\n  \"file\": ", o);
        json_cstr(o, path);
        fprintf(o, ",\n  \"file_size\": %" PRIu64 ",\n  \"version\": %u,\n  \"alignment\": %" PRIu64
                   ",\n  \"data_offset\": %" PRIu64 ",\n  \"n_kv\": %" PRId64 ",\n  \"architecture\": ",
                gguf_file_size(f), gguf_version(f), gguf_alignment(f), gguf_data_offset(f), gguf_n_kv(f));
        json_str(o, arch.ptr, arch.len);
        fputs(",\n  \"name\": ", o);
        json_str(o, name.ptr, name.len);
        fputs(",\n  \"hparams\": {", o);
    } else {
        fprintf(o, "file:         %s\n", path);
        fprintf(o, "file size:    %" PRIu64 " bytes (%.2f MiB)\n", gguf_file_size(f),
                (double)gguf_file_size(f) / (1024.0 * 1024.0));
        fprintf(o, "gguf version: %u (alignment %" PRIu64 ", data at offset %" PRIu64 ", %" PRId64 " keys)\n",
                gguf_version(f), gguf_alignment(f), gguf_data_offset(f), gguf_n_kv(f));
        fputs("architecture: ", o);
        text_str(o, arch);
        fputs("\nname:         ", o);
        text_str(o, name);
        fputs("\nhyperparameters:\n", o);
    }
    for (size_t i = 0; i < sizeof(info_hparams) / sizeof(info_hparams[0]); i++) {
        snprintf(key, sizeof(key), "%s.%s", archz, info_hparams[i].suffix);
        print_key(o, f, key, json ? info_hparams[i].suffix : info_hparams[i].label, json, &first);
    }

    /* vocabulary */
    uint32_t et;
    uint64_t n_tok = 0;
    int have_tok = gguf_get_arr(f, "tokenizer.ggml.tokens", &et, &n_tok) == 0;
    if (json) {
        fputs("\n  },\n  \"vocab\": {", o);
        first = 1;
        print_key(o, f, "tokenizer.ggml.model", "model", 1, &first);
        print_key(o, f, "tokenizer.ggml.pre", "pre", 1, &first);
        if (have_tok)
            fprintf(o, ",\n    \"n_tokens\": %" PRIu64, n_tok);
        else
            fputs(",\n    \"n_tokens\": null", o);
        print_key(o, f, "tokenizer.ggml.bos_token_id", "bos", 1, &first);
        print_key(o, f, "tokenizer.ggml.eos_token_id", "eos", 1, &first);
        fputs("\n  },\n", o);
    } else {
        fputs("vocab:\n", o);
        print_key(o, f, "tokenizer.ggml.model", "tokenizer model", 0, &first);
        print_key(o, f, "tokenizer.ggml.pre", "pre-tokenizer", 0, &first);
        if (have_tok)
            fprintf(o, "  %-22s %" PRIu64 "\n", "tokens", n_tok);
        else
            fprintf(o, "  %-22s none\n", "tokens");
        print_key(o, f, "tokenizer.ggml.bos_token_id", "bos token", 0, &first);
        print_key(o, f, "tokenizer.ggml.eos_token_id", "eos token", 0, &first);
    }

    /* tensors */
    if (json) {
        fprintf(o, "  \"n_tensors\": %" PRId64 ",\n  \"tensor_types\": {", gguf_n_tensors(f));
        first = 1;
        for (int t = 0; t < QT_COUNT; t++)
            if (count[t]) {
                fprintf(o, "%s\"%s\": %" PRId64, first ? "" : ", ", quant_type_name(t), count[t]);
                first = 0;
            }
        fprintf(o, "},\n  \"n_params\": %" PRIu64, n_params);
    } else {
        fprintf(o, "tensors:      %" PRId64, gguf_n_tensors(f));
        first = 1;
        for (int t = 0; t < QT_COUNT; t++)
            if (count[t]) {
                fprintf(o, "%s%s: %" PRId64, first ? " (" : ", ", quant_type_name(t), count[t]);
                first = 0;
            }
        fprintf(o, "%s\nparameters:   %" PRIu64 " (%.3f M)\n", first ? "" : ")", n_params, (double)n_params / 1e6);
    }
    if (tensors) {
        if (json)
            fputs(",\n  \"tensors\": [", o);
        for (int64_t i = 0; i < gguf_n_tensors(f); i++) {
            const struct gguf_tensor *t = gguf_tensor_at(f, i);
            if (json) {
                fprintf(o, "%s\n    {\"name\": ", i ? "," : "");
                json_cstr(o, t->name);
                fprintf(o, ", \"type\": \"%s\", \"shape\": ", quant_type_name((int)t->type));
                print_shape(o, t);
                fprintf(o, ", \"offset\": %" PRIu64 ", \"bytes\": %" PRIu64 "}", t->offset, t->n_bytes);
            } else {
                fprintf(o, "  %-32s %-6s ", t->name, quant_type_name((int)t->type));
                print_shape(o, t);
                fprintf(o, " @%" PRIu64 "\n", t->offset);
            }
        }
        if (json)
            fputs("\n  ]", o);
    }
    if (json)
        fputs("\n}\n", o);
    return ferror(o) ? CMD_FAIL : CMD_OK;
}

/* The devices cuda_backend_new can open; 0 when none (that is an answer). */
static int info_devices(void)
{
    struct cuda_device_info d[16];
    if (!cuda_compiled()) {
        printf("CUDA backend: not built into this binary (CPU only)\n");
        return CMD_OK;
    }
    const int n = cuda_devices(d, 16);
    printf("CUDA devices: %d\n", n);
    for (int i = 0; i < n && i < 16; i++)
        printf("  %d: %s, sm_%d, %d SMs, %zu MiB\n", d[i].index, d[i].name, d[i].sm, d[i].n_sm,
               d[i].total_mem >> 20);
    return CMD_OK;
}

int cmd_info(int argc, char **argv)
{
    const char *model = NULL;
    int json = 0, tensors = 0;

    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
            info_usage(stdout);
            return CMD_OK;
        } else if (!strcmp(a, "--json")) {
            json = 1;
        } else if (!strcmp(a, "--tensors")) {
            tensors = 1;
        } else if (!strcmp(a, "--devices")) {
            return info_devices();
        } else if (!strcmp(a, "-m") || !strcmp(a, "--model")) {
            if (i + 1 >= argc) {
                fprintf(stderr, "inferd info: %s needs a file name\n", a);
                return CMD_USAGE;
            }
            model = argv[++i];
        } else if (!strncmp(a, "--model=", 8)) {
            model = a + 8;
        } else {
            fprintf(stderr, "inferd info: unknown argument '%s' (see inferd info --help)\n", a);
            return CMD_USAGE;
        }
    }
    if (!model) {
        fprintf(stderr, "inferd info: --model FILE is required (see inferd info --help)\n");
        return CMD_USAGE;
    }

    struct gguf_file *f;
    struct inf_error err = {0};
    if (gguf_open(model, &f, &err) != 0) {
        fprintf(stderr, "inferd info: %s: %s\n", model, err.msg);
        return CMD_FAIL;
    }
    int rc = info_print(stdout, model, f, json, tensors);
    gguf_close(f);
    if (fflush(stdout) != 0)
        rc = CMD_FAIL;
    return rc;
}
