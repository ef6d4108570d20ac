/* rng — the tests' deterministic xorshift64 stream: rnd(n) in [0, n).
 * Header-only (static state): each test is one executable, one stream. */
#ifndef INFERD_TESTS_RNG_H
#define INFERD_TESTS_RNG_H

#include <stdint.h>

static uint64_t rng = 0x9e3779b97f4a7c15ull;

static inline uint32_t rnd(uint32_t n)
{
    rng ^= rng << 13;
    rng ^= rng >> 7;
    rng ^= rng << 17;
    return (uint32_t)(rng % n);
}

#endif
