/* jsonc_check — the oracle the JSON-constraint tests share (test_jsonc,
 * fuzz_request): jsonc_allow's set against feeding every token alone.
 * Header-only (static), as tests/check.h. */
#ifndef INFERD_TESTS_JSONC_CHECK_H
#define INFERD_TESTS_JSONC_CHECK_H

#include <stdint.h>
#include <stdio.h>

#include "engine/jsonc.h"

static inline int jsonc_check_bit(const uint32_t *bits, int32_t id)
{
    return (bits[id / 32] >> (id % 32)) & 1;
}

/* bits / na: what jsonc_allow said from s. Every token of the nv is fed
 * alone from a copy of s; returns the disagreements (a count that differs
 * from na is one), the first few on stderr with `what`; *alone: the tokens
 * that fed. */
static int jsonc_check_allow(const struct jsonc *g, const struct jsonc_vocab *v, int32_t nv,
                             const struct jsonc_state *s, const uint32_t *bits, int32_t na,
                             int32_t *alone, const char *what)
{
    int bad = 0;
    int32_t count = 0;
    for (int32_t id = 0; id < nv; id++) {
        struct jsonc_state t = *s;
        int ok = jsonc_feed_token(g, v, &t, id) == 0;
        count += ok;
        if (ok != jsonc_check_bit(bits, id) && bad++ < 5)
            fprintf(stderr, "%s: token %d allowed %d, feeds alone %d\n", what, id,
                    jsonc_check_bit(bits, id), ok);
    }
    if (count != na) {
        fprintf(stderr, "%s: jsonc_allow counted %d, %d feed alone\n", what, na, count);
        bad++;
    }
    *alone = count;
    return bad;
}

#endif
