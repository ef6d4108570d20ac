/* cmd_tokenize — `inferd tokenize --model M [--add-special] [--parse-special]
 * [--detokenize]`: the model's tokenizer on stdin.
 *
 * Loads only the tokenizer (gguf_open + tok_load), never the weights, so it
 * is quick on any model file. Text mode tokenizes the exact bytes of stdin
 * (a trailing newline is part of the text) and prints the ids separated by
 * spaces and a newline. --detokenize reads ids (separated by spaces, commas,
 * newlines; brackets ignored, so a JSON array works) and writes their text.
 * Single-threaded tool.
 */
#include <errno.h>
#include <inttypes.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/gguf.h"
#include "engine/tok.h"
#include "tools/cmds.h"

static void tokenize_usage(FILE *out)
{
    fprintf(out,
            "usage: inferd tokenize --model FILE [--add-special] [--parse-special] [--detokenize]\n"
            "\n"
            "Tokenize the UTF-8 text on stdin (every byte, a final newline included) with the\n"
            "model's tokenizer and print the token ids, separated by spaces, on one line.\n"
            "\n"
            "  -m, --model FILE    the GGUF file whose tokenizer.ggml.* keys to use (required)\n"
            "      --add-special   add BOS/EOS as the model's add_bos_token/add_eos_token say\n"
            "      --parse-special match the text of control tokens (<|im_start|>, <s>) as\n"
            "                      those tokens; without it such text is plain text\n"
            "      --detokenize    the other way: ids on stdin (spaces, commas, newlines or a\n"
            "                      JSON array) -> text on stdout; control tokens are written\n"
            "                      only with --parse-special, and the SPM leading space is\n"
            "                      removed, so text -> ids -> text gives the text back\n"
            "  -h, --help          this help\n"
            "\n"
            "exit status: 0 ok, 1 failure (bad model file, bad id, I/O), 2 usage error\n");
}

static int tokenize_read_all(FILE *in, char **out, size_t *len)
{
    size_t cap = 1 << 16, n = 0;
    char *buf = malloc(cap);
    if (!buf)
        return INF_ENOMEM;
    for (;;) {
        size_t got;
        if (n == cap) {
            char *nb = realloc(buf, cap * 2);
            if (!nb) {
                free(buf);
                return INF_ENOMEM;
            }
            buf = nb;
            cap *= 2;
        }
        got = fread(buf + n, 1, cap - n, in);
        n += got;
        if (got == 0) {
            if (ferror(in)) {
                free(buf);
                return INF_EIO;
            }
            break;
        }
    }
    *out = buf;
    *len = n;
    return 0;
}

static int tokenize_text(const struct tok *t, const char *text, size_t len, int add_special, int parse_special)
{
    size_t cap = len + 16, n = 0;
    int32_t *ids = malloc(cap * sizeof(*ids));
    int rc;
    if (!ids)
        return INF_ENOMEM;
    rc = tok_encode(t, text, len, add_special, parse_special, ids, cap, &n);
    if (rc == INF_ETOOBIG) { /* byte fallback and specials can exceed one id per byte */
        int32_t *nb = realloc(ids, n * sizeof(*ids));
        if (!nb) {
            free(ids);
            return INF_ENOMEM;
        }
        ids = nb;
        cap = n;
        rc = tok_encode(t, text, len, add_special, parse_special, ids, cap, &n);
    }
    if (rc == 0) {
        for (size_t i = 0; i < n; i++)
            printf(i ? " %" PRId32 : "%" PRId32, ids[i]);
        putchar('\n');
    }
    free(ids);
    return rc;
}

static int tokenize_ids(const struct tok *t, const char *text, size_t len, int render_special)
{
    size_t cap = 1024, n = 0, i = 0, need;
    int32_t *ids = malloc(cap * sizeof(*ids));
    char *out;
    if (!ids)
        return INF_ENOMEM;
    while (i < len) {
        char c = text[i];
        long long v = 0;
        int digits = 0, neg = 0;
        if (c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == ',' || c == '[' || c == ']') {
            i++;
            continue;
        }
        if (c == '-') {
            neg = 1;
            i++;
        }
        while (i < len && text[i] >= '0' && text[i] <= '9' && digits < 12) {
            v = v * 10 + (text[i++] - '0');
            digits++;
        }
        if (!digits || (i < len && text[i] >= '0' && text[i] <= '9')) {
            fprintf(stderr, "inferd tokenize: bad token id at byte %zu of the input\n", i);
            free(ids);
            return INF_EINVAL;
        }
        if (neg || v >= tok_n_vocab(t)) {
            fprintf(stderr, "inferd tokenize: token id %s%lld is out of range (n_vocab %" PRId32 ")\n",
                    neg ? "-" : "", v, tok_n_vocab(t));
            free(ids);
            return INF_EINVAL;
        }
        if (n == cap) {
            int32_t *nb = realloc(ids, cap * 2 * sizeof(*ids));
            if (!nb) {
                free(ids);
                return INF_ENOMEM;
            }
            ids = nb;
            cap *= 2;
        }
        ids[n++] = (int32_t)v;
    }
    need = tok_decode(t, ids, n, render_special, 1, NULL, 0);
    out = malloc(need + 1);
    if (!out) {
        free(ids);
        return INF_ENOMEM;
    }
    tok_decode(t, ids, n, render_special, 1, out, need + 1);
    fwrite(out, 1, need, stdout);
    free(out);
    free(ids);
    return 0;
}

int cmd_tokenize(int argc, char **argv)
{
    const char *model = NULL;
    int add_special = 0, parse_special = 0, detok = 0, rc;
    struct gguf_file *f = NULL;
    struct tok *t = NULL;
    struct inf_error err = {0, ""};
    char *text = NULL;
    size_t len = 0;

    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
            tokenize_usage(stdout);
            return CMD_OK;
        } else if (!strcmp(a, "-m") || !strcmp(a, "--model")) {
            if (i + 1 >= argc) {
                fprintf(stderr, "inferd tokenize: %s needs a file name\n", a);
                return CMD_USAGE;
            }
            model = argv[++i];
        } else if (!strncmp(a, "--model=", 8)) {
            model = a + 8;
        } else if (!strcmp(a, "--add-special")) {
            add_special = 1;
        } else if (!strcmp(a, "--parse-special")) {
            parse_special = 1;
        } else if (!strcmp(a, "--detokenize")) {
            detok = 1;
        } else {
            fprintf(stderr, "inferd tokenize: unknown option '%s'\n", a);
            tokenize_usage(stderr);
            return CMD_USAGE;
        }
    }
    if (!model) {
        fprintf(stderr, "inferd tokenize: --model is required\n");
        tokenize_usage(stderr);
        return CMD_USAGE;
    }
    if (gguf_open(model, &f, &err)) {
        fprintf(stderr, "inferd tokenize: \"%s\": %s\n", model, err.msg);
        return CMD_FAIL;
    }
    if (tok_load(f, &t, &err)) {
        fprintf(stderr, "inferd tokenize: \"%s\": %s\n", model, err.msg);
        gguf_close(f);
        return CMD_FAIL;
    }
    rc = tokenize_read_all(stdin, &text, &len);
    if (rc) {
        fprintf(stderr, "inferd tokenize: reading stdin: %s\n", inf_strerror(rc));
    } else {
        rc = detok ? tokenize_ids(t, text, len, parse_special)
                   : tokenize_text(t, text, len, add_special, parse_special);
        if (rc && rc != INF_EINVAL)
            fprintf(stderr, "inferd tokenize: %s\n", inf_strerror(rc));
    }
    if (fflush(stdout) != 0 && !rc) {
        fprintf(stderr, "inferd tokenize: writing stdout: %s\n", strerror(errno));
        rc = INF_EIO;
    }
    free(text);
    tok_free(t);
    gguf_close(f);
    return rc ? CMD_FAIL : CMD_OK;
}
