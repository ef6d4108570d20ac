/* rng — the tests' deterministic xorshift64 stream: rnd(n) in [0, n).
 * Header-only (static state): each test is one executable, one stream; a
 * test with its own seed or its own transform keeps a state of its own and
 * steps it with rng_step (tests/xorshift.h). */
#ifndef INFERD_TESTS_RNG_H
#define INFERD_TESTS_RNG_H

#include "tests/xorshift.h"

static uint64_t rng = 0x9e3779b97f4a7c15ull;

static inline uint32_t rnd(uint32_t n)
{
    return (uint32_t)(rng_step(&rng) % n);
}

#endif
