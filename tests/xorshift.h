/* xorshift — the tests' deterministic xorshift64 step (13, 7, 17): each
 * test keeps its own state, seed and transform (tests/rng.h is one). */
#ifndef INFERD_TESTS_XORSHIFT_H
#define INFERD_TESTS_XORSHIFT_H

#include <stdint.h>

static inline uint64_t rng_step(uint64_t *s)
{
    *s ^= *s << 13;
    *s ^= *s >> 7;
    *s ^= *s << 17;
    return *s;
}

#endif
