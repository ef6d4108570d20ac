/* sample_cases — the parameter sets and logits rows that the sample-op tests
 * share (tests/unit/test_sample_op.c: the CPU op against sampler_sample;
 * tests/cuda/test_cuda_sample.c: the CUDA op against the CPU op).
 *
 * sc_params(i) walks every combination of temperature (greedy, tiny, 0.7,
 * 1, 1.5), top-k (off, 1, 40, 600, 5000: more than one sorted chunk of the
 * device's, n_vocab - 1), top-p (off, 0.5, 0.9, 0.999), min-p (off, 0.05),
 * penalties (off, repetition, presence + frequency, all three) and bias
 * (off, on: a ban, a boost, a duplicate entry, an id out of range) as i
 * runs over 0..SC_N_PARAMS-1. sc_logits(kind) fills a row: random, ties on
 * a coarse grid, all equal, NaN and -inf sprinkled, one token far ahead, a
 * wide range (+-80: tiny weights, the far top-p bin), all but a few -inf.
 * Header-only, static functions: each test is one executable.
 */
#ifndef INFERD_TESTS_SAMPLE_CASES_H
#define INFERD_TESTS_SAMPLE_CASES_H

#include <math.h>
#include <stdint.h>
#include <string.h>

#include "engine/sample.h"
#include "tests/xorshift.h"

#define SC_N_PARAMS (5 * 6 * 4 * 2 * 4 * 2)
#define SC_N_KINDS 7

static uint64_t sc_rng = 0x243F6A8885A308D3ull;
static uint64_t sc_next(void)
{
    return rng_step(&sc_rng);
}
static double sc_unif(void) /* [0, 1) */
{
    return (double)(sc_next() >> 11) * 0x1p-53;
}

static struct sample_bias sc_bias[5];

/* Parameters of combination i (seed: any; bias points at sc_bias). */
static void sc_params(int i, int32_t n_vocab, uint64_t seed, struct sample_params *p)
{
    static const float temps[5] = {0.f, 1e-5f, 0.7f, 1.f, 1.5f};
    static const float tops_p[4] = {1.f, 0.5f, 0.9f, 0.999f};
    const int32_t tops_k[6] = {0, 1, 40, 600, 5000, n_vocab - 1};
    sample_params_default(p);
    p->temperature = temps[i % 5];
    i /= 5;
    p->top_k = tops_k[i % 6];
    i /= 6;
    p->top_p = tops_p[i % 4];
    i /= 4;
    p->min_p = i % 2 ? 0.05f : 0.f;
    i /= 2;
    const int pen = i % 4;
    i /= 4;
    if (pen & 1)
        p->repetition_penalty = 1.3f;
    if (pen & 2) {
        p->presence_penalty = 0.4f;
        p->frequency_penalty = 0.25f;
    }
    if (i % 2) {
        sc_bias[0] = (struct sample_bias){3, 4.5f};
        sc_bias[1] = (struct sample_bias){n_vocab / 2, -100.f};
        sc_bias[2] = (struct sample_bias){3, -1.25f}; /* duplicate: applied in order */
        sc_bias[3] = (struct sample_bias){n_vocab + 7, 50.f}; /* out of range: ignored */
        sc_bias[4] = (struct sample_bias){n_vocab - 1, 2.f};
        p->bias = sc_bias;
        p->n_bias = 5;
    }
    p->seed = seed;
}

static void sc_logits(int kind, float *l, int32_t n)
{
    for (int32_t i = 0; i < n; i++) {
        const double u = sc_unif() * 2 - 1;
        switch (kind) {
        case 0: l[i] = (float)(u * 6); break;                  /* random */
        case 1: l[i] = (float)floor(u * 4) * 0.5f; break;      /* ties: 8 levels */
        case 2: l[i] = 1.5f; break;                            /* all equal */
        case 3: l[i] = (float)(u * 5); break;                  /* + NaN/-inf below */
        case 4: l[i] = (float)(u * 2); break;                  /* one far ahead below */
        case 5: l[i] = (float)(u * 80); break;                 /* wide */
        default: l[i] = -INFINITY; break;                      /* all but a few -inf */
        }
    }
    if (kind == 3)
        for (int32_t i = 0; i < n; i += 1 + (int32_t)(sc_next() % 17))
            l[i] = sc_next() % 2 ? NAN : -INFINITY;
    if (kind == 4)
        l[sc_next() % (uint64_t)n] = 30.f;
    if (kind == 6)
        for (int k = 0; k < 5; k++)
            l[sc_next() % (uint64_t)n] = (float)(sc_unif() * 3);
}

#endif
