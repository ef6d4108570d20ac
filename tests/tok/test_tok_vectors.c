/* test_tok_vectors — llama.cpp's tokenizer test vectors in ../shared/vocab.
 *
 * For ggml-vocab-{llama-spm,llama-bpe,qwen2}.gguf: every case of the .inp file
 * (cases end with a line "__ggml_vocab_test__") must tokenize to the ids on
 * the same-numbered line of the .out file, with no BOS/EOS added and special
 * text not parsed. Decoding the ids (SPM: minus the space prefix) must give
 * the case back, all at once and through the streaming decoder.
 */
#include "tests/tok/tok_test.h"

static const char sep[] = "\n__ggml_vocab_test__\n";

static int run_vocab(const char *name)
{
    char rel[256], path[4096];
    struct gguf_file *f;
    struct tok *t;
    size_t inp_len, out_len;
    char *inp, *out;
    int rc, n_cases = 0, n_ok = 0, fails0 = fails;

    snprintf(rel, sizeof(rel), "vocab/%s.gguf", name);
    if ((rc = tt_open(rel, &f, &t)))
        return rc;
    snprintf(path, sizeof(path), "%s/vocab/%s.gguf.inp", tt_shared(), name);
    inp = test_read_file(path, &inp_len);
    snprintf(path, sizeof(path), "%s/vocab/%s.gguf.out", tt_shared(), name);
    out = test_read_file(path, &out_len);
    CHECK(inp && out);
    if (!inp || !out) {
        free(inp);
        free(out);
        tok_free(t);
        gguf_close(f);
        return 1;
    }

    char *p = inp, *line = out;
    for (;;) {
        char *end = strstr(p, sep), *eol;
        if (!end)
            break;
        size_t len = (size_t)(end - p), n = 0, n_exp = 0;
        int32_t exp[4096];
        CHECK(line && *line);
        if (!line || !*line)
            break;
        eol = strchr(line, '\n');
        if (!eol)
            eol = line + strlen(line);
        for (char *q = line; q < eol;) {
            char *e;
            long v = strtol(q, &e, 10);
            if (e == q)
                break;
            if (n_exp < 4096)
                exp[n_exp++] = (int32_t)v;
            q = e;
        }
        int32_t *ids = tt_encode(t, p, len, 0, 0, &n);
        int same = n == n_exp && (n == 0 || memcmp(ids, exp, n * sizeof(*ids)) == 0);
        if (!same) {
            fprintf(stderr, "%s case %d (\"%.*s\"): got", name, n_cases, (int)(len > 60 ? 60 : len), p);
            for (size_t i = 0; i < n; i++)
                fprintf(stderr, " %d", ids[i]);
            fprintf(stderr, "\n  expected");
            for (size_t i = 0; i < n_exp; i++)
                fprintf(stderr, " %d", exp[i]);
            fprintf(stderr, "\n");
            fails++;
        } else {
            n_ok++;
        }

        /* detokenize: lossless for these vocabs (byte fallback / byte-level) */
        size_t need = tok_decode(t, exp, n_exp, 0, 1, NULL, 0);
        char *txt = malloc(need + 1);
        CHECK(tok_decode(t, exp, n_exp, 0, 1, txt, need + 1) == need);
        if (need != len || memcmp(txt, p, len) != 0) {
            fprintf(stderr, "%s case %d: decode gives \"%.*s\"\n", name, n_cases, (int)need, txt);
            fails++;
        }
        /* streaming: concatenated pushes equal the whole decode (no strip) */
        size_t need2 = tok_decode(t, exp, n_exp, 0, 0, NULL, 0);
        char *whole = malloc(need2 + 1), *streamed = malloc(need2 + 64);
        tok_decode(t, exp, n_exp, 0, 0, whole, need2 + 1);
        struct tok_stream st;
        size_t so = 0, scap = tok_stream_cap(t);
        char *chunk = malloc(scap);
        tok_stream_init(&st, t, 0);
        for (size_t i = 0; i < n_exp; i++) {
            int k = tok_stream_push(&st, exp[i], chunk, scap);
            CHECK(k >= 0);
            if (k > 0 && so + (size_t)k <= need2 + 64) {
                memcpy(streamed + so, chunk, (size_t)k);
                so += (size_t)k;
            }
        }
        CHECK(tok_stream_flush(&st, chunk, scap) == 0); /* valid UTF-8 leaves nothing */
        CHECK(so == need2 && memcmp(streamed, whole, so) == 0);
        free(chunk);
        free(whole);
        free(streamed);
        free(txt);
        free(ids);

        n_cases++;
        p = end + sizeof(sep) - 1;
        line = *eol ? eol + 1 : eol;
    }
    CHECK(n_cases > 0 && *p == '\0'); /* every case consumed */
    printf("%s: %d/%d cases match\n", name, n_ok, n_cases);
    free(inp);
    free(out);
    tok_free(t);
    gguf_close(f);
    return fails > fails0;
}

int main(int argc, char **argv)
{
    const char *names[] = {"ggml-vocab-llama-spm", "ggml-vocab-llama-bpe", "ggml-vocab-qwen2"};
    int skipped = 0;
    for (size_t i = 0; i < 3; i++) {
        if (argc > 1 && strcmp(argv[1], names[i]) != 0)
            continue;
        if (run_vocab(names[i]) == 77)
            skipped++;
    }
    if (skipped == 3)
        return 77;
    printf("%s\n", fails ? "FAIL" : "ok");
    return fails ? 1 : 0;
}
