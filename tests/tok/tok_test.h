/* tok_test — helpers shared by the tokenizer tests: the CHECK macro, reading
 * files, opening a vocab from ../shared. Header-only (static functions) so
 * each test stays one self-contained executable.
 */
#ifndef INFERD_TOK_TEST_H
#define INFERD_TOK_TEST_H

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/gguf.h"
#include "engine/tok.h"
#include "tests/check.h"
#include "tests/read_file.h"

static inline const char *tt_shared(void)
{
    const char *s = getenv("INFERD_SHARED");
    return s && *s ? s : "../shared";
}

/* Open $INFERD_SHARED/rel and load its tokenizer; 0, or 77 (skip) when the
 * file is absent, or 1 on a load error (reported). */
static inline int tt_open(const char *rel, struct gguf_file **f, struct tok **t)
{
    char path[4096];
    struct inf_error err = {0, ""};
    snprintf(path, sizeof(path), "%s/%s", tt_shared(), rel);
    *f = NULL;
    *t = NULL;
    FILE *probe = fopen(path, "rb");
    if (!probe) {
        fprintf(stderr, "skip: %s not found\n", path);
        return 77;
    }
    fclose(probe);
    if (gguf_open(path, f, &err)) {
        fprintf(stderr, "%s: %s\n", path, err.msg);
        return 1;
    }
    if (tok_load(*f, t, &err)) {
        fprintf(stderr, "%s: tok_load: %s\n", path, err.msg);
        gguf_close(*f);
        *f = NULL;
        return 1;
    }
    return 0;
}

/* Encode with a buffer that grows as needed; returns a malloc'd array. */
static inline int32_t *tt_encode(const struct tok *t, const char *s, size_t len, int add_special, int parse_special,
                          size_t *n)
{
    size_t cap = len + 8;
    int32_t *ids = malloc(cap * sizeof(*ids));
    int rc = tok_encode(t, s, len, add_special, parse_special, ids, cap, n);
    if (rc == INF_ETOOBIG) {
        cap = *n;
        ids = realloc(ids, cap * sizeof(*ids));
        rc = tok_encode(t, s, len, add_special, parse_special, ids, cap, n);
    }
    if (rc) {
        fprintf(stderr, "tok_encode failed: %s\n", inf_strerror(rc));
        fails++;
        *n = 0;
    }
    return ids;
}

#endif
