/* vocabs — the three tokenizers the tok, detok and chat fuzz targets run on
 * (../shared/vocab: llama-spm, llama-bpe, qwen2), loaded once per process,
 * found through INFERD_SHARED (default ../shared). Header-only; define
 * FZ_NAME (the target's name, for messages) before including it. */
#ifndef INFERD_TESTS_FUZZ_VOCABS_H
#define INFERD_TESTS_FUZZ_VOCABS_H

#include <stdio.h>
#include <stdlib.h>

#include "engine/err.h"
#include "engine/gguf.h"
#include "engine/tok.h"

static const char *const fz_files[3] = {
    "vocab/ggml-vocab-llama-spm.gguf",
    "vocab/ggml-vocab-llama-bpe.gguf",
    "vocab/ggml-vocab-qwen2.gguf",
};
static struct gguf_file *fz_g[3];
static struct tok *fz_t[3];
static int fz_ready; /* 0 not tried, 1 ok, -1 missing */

/* 1 when all three loaded, -1 when one is missing (then the replay skips). */
static int fz_init(void)
{
    if (fz_ready)
        return fz_ready;
    const char *root = getenv("INFERD_SHARED");
    if (!root || !*root)
        root = "../shared";
    fz_ready = 1;
    for (int i = 0; i < 3; i++) {
        char path[4096];
        struct inf_error e = {0, ""};
        snprintf(path, sizeof(path), "%s/%s", root, fz_files[i]);
        if (gguf_open(path, &fz_g[i], &e) || tok_load(fz_g[i], &fz_t[i], &e)) {
            fprintf(stderr, FZ_NAME ": cannot load %s: %s\n", path, e.msg);
            fz_ready = -1;
            break;
        }
    }
    return fz_ready;
}

static inline void fz_vocabs_free(void) /* inline: libFuzzer builds have no main to call it */
{
    for (int i = 0; i < 3; i++) {
        tok_free(fz_t[i]);
        gguf_close(fz_g[i]);
    }
}

#endif
