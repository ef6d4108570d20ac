/* test_cuda_sample — the CUDA backend's ops->sample against the CPU
 * backend's (the oracle: engine/sample.c through sample_state_step), on the
 * parameter combinations and logits rows of tests/sample_cases.h (random,
 * ties, all equal, NaN/-inf, one far ahead, a +-80 range, nearly all -inf),
 * vocabularies of 6000 and 151936, masked steps, steps under allowed-token
 * bits (a JSON constraint's, dense and sparse), score requests, two
 * sequences sampling one row, more requests than reserved rows, and long
 * sequences (the RNG streams and histories must stay aligned: the device
 * states are compared with the host's after every sequence).
 *
 * Exact: every token, every top-N id, and the states byte for byte. Within
 * 2 float ulp or 2^-40 absolute: the logprob values (CUDA's double exp/log
 * are not glibc's; engine/cuda/sample.cu). Exit 1 on any failure, 77
 * without a device.
 */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/backend.h"
#include "engine/cpu.h"
#include "engine/cuda/cuda.h"
#include "engine/err.h"
#include "engine/sample.h"
#include "tests/check.h"
#include "tests/sample_cases.h"

static struct backend *cpu, *gpu;
static long n_tok, bad_tok, n_lp, bad_lp, n_state, bad_state;

static int close_ulp(float a, float b)
{
    if (a == b || (isnan(a) && isnan(b)))
        return 1;
    if (isinf(a) || isinf(b))
        return 0;
    const float m = fmaxf(fabsf(a), fabsf(b));
    /* or 2^-40 absolute: a logprob is logit - max - log(sum), and log(sum)
     * is a double of magnitude ~1 whose last bits differ between CUDA's and
     * glibc's exp/log (H200, 17:48: 4,251 of 49,907 top-token logprobs near
     * -1e-9, e.g. -0x1.1a954p-30 vs -0x1.1a95cp-30, 7e-15 apart: 2^-47) */
    return fabsf(a - b) <= 2.f * (nextafterf(m, INFINITY) - m) || fabsf(a - b) <= 0x1p-40f;
}

static int same_out(const struct backend_sample_out *g, const struct backend_sample_out *c,
                    int n_top)
{
    n_tok++;
    if (g->token != c->token) {
        bad_tok++;
        return 0;
    }
    if (n_top < 0)
        return 1;
    n_lp++;
    int ok = close_ulp(g->logprob, c->logprob);
    for (int k = 0; k < n_top; k++)
        ok = ok && g->top_ids[k] == c->top_ids[k] && close_ulp(g->top_lps[k], c->top_lps[k]);
    if (!ok)
        bad_lp++;
    return ok;
}

/* Two sequences (combinations ci and ci + 1) for `steps` steps over V. */
static void run_case(int ci, int32_t V, int steps)
{
    enum { NSEQ = 2, NREQ = 4 };
    const int32_t mask[3] = {5, 9, V - 2};
    const int32_t cap = 40 + steps;
    const size_t sb = sample_state_bytes(5, 3, cap);
    void *hs[NSEQ];
    struct sample_state *ds[NSEQ];
    for (int q = 0; q < NSEQ; q++) {
        struct sample_params p;
        sc_params((ci + q) % SC_N_PARAMS, V, 77u * (uint64_t)ci + (uint64_t)q, &p);
        struct sampler *s = sampler_new(V, &p);
        CHECK(s != NULL);
        for (int i = 0; i < 40; i++)
            sampler_accept(s, (int32_t)(sc_next() % (uint64_t)(i % 3 ? V : 50)), i % 4 != 0);
        hs[q] = malloc(sb);
        CHECK(hs[q] && sampler_export(s, mask, 3, cap, hs[q], sb) == 0);
        sampler_free(s);
        ds[q] = gpu->ops->alloc(gpu, sb);
        CHECK(ds[q] != NULL);
        gpu->ops->upload(gpu, ds[q], hs[q], sb);
    }
    float *rows = malloc(sizeof(float) * 2 * (size_t)V);
    float *drows = gpu->ops->alloc(gpu, sizeof(float) * 2 * (size_t)V);
    const int32_t words = (V + 31) / 32;
    uint32_t *allow = malloc(sizeof(uint32_t) * (size_t)words);
    uint32_t *dallow = gpu->ops->alloc(gpu, sizeof(uint32_t) * (size_t)words);
    CHECK(rows && drows && allow && dallow);
    int first_bad = -1;
    for (int s = 0; s < steps; s++) {
        sc_logits((s + ci) % SC_N_KINDS, rows, V);
        sc_logits((s + ci + 3) % SC_N_KINDS, rows + V, V);
        gpu->ops->upload(gpu, drows, rows, sizeof(float) * 2 * (size_t)V);
        const int n_top = (s + ci) % 4 == 0 ? -1 : (s * 7 + ci) % (BACKEND_SAMPLE_MAX_TOP + 1);
        const int32_t score_tok = (int32_t)(sc_next() % (uint64_t)V);
        /* every third step, sequence 1 under allowed bits (a JSON
         * constraint's): dense on even steps, sparse on odd ones */
        const int allowed = s % 3 == 2;
        for (int32_t w = 0; allowed && w < words; w++)
            allow[w] = s % 2 ? (uint32_t)(sc_next() % 61 == 0) : (uint32_t)sc_next();
        if (allowed)
            gpu->ops->upload(gpu, dallow, allow, sizeof(uint32_t) * (size_t)words);
        struct backend_sample_req rc[NREQ] = {
            {0, -1, n_top, s % 3 == 0 ? BACKEND_SAMPLE_MASKED : 0, hs[0], NULL},
            {0, -1, 3, s % 5 == 1 ? BACKEND_SAMPLE_MASKED : 0, hs[1], allowed ? allow : NULL},
            {1, score_tok, 5, 0, NULL, NULL},
            {1, score_tok, -1, 0, NULL, NULL},
        };
        struct backend_sample_req rg[NREQ];
        memcpy(rg, rc, sizeof(rc));
        rg[0].state = ds[0];
        rg[1].state = ds[1];
        rg[1].allow = allowed ? dallow : NULL;
        struct backend_sample_out oc[NREQ], og[NREQ];
        CHECK(cpu->ops->sample(cpu, rows, 2, V, rc, NREQ, oc) == 0);
        CHECK(gpu->ops->sample(gpu, drows, 2, V, rg, NREQ, og) == 0);
        for (int r = 0; r < NREQ; r++)
            if (!same_out(&og[r], &oc[r], rc[r].n_top) && first_bad < 0) {
                first_bad = s;
                fprintf(stderr,
                        "case %d V=%d step %d req %d: gpu token %d lp %a, cpu token %d lp %a\n",
                        ci, V, s, r, og[r].token, og[r].logprob, oc[r].token, oc[r].logprob);
            }
    }
    /* the device states are the host's, byte for byte (RNG, history) */
    void *back = malloc(sb);
    for (int q = 0; q < NSEQ; q++) {
        CHECK(gpu->ops->sync(gpu) == 0);
        gpu->ops->download(gpu, back, ds[q], sb);
        const struct sample_state *a = back, *b = hs[q];
        const size_t used = sample_state_bytes(5, 3, b->n_hist);
        n_state++;
        if (memcmp(back, hs[q], used)) {
            bad_state++;
            fprintf(stderr, "case %d V=%d seq %d: device state differs (n_hist %d vs %d)\n", ci,
                    V, q, a->n_hist, b->n_hist);
        }
        gpu->ops->free(gpu, ds[q]);
        free(hs[q]);
    }
    free(back);
    gpu->ops->free(gpu, drows);
    gpu->ops->free(gpu, dallow);
    free(allow);
    free(rows);
}

int main(void)
{
    struct inf_error err;
    memset(&err, 0, sizeof(err));
    gpu = cuda_backend_new(0, &err);
    if (!gpu) {
        printf("cuda-sample: no CUDA backend (%s): skip\n", err.msg);
        return 77;
    }
    cpu = cpu_backend_new(2);
    CHECK(cpu != NULL && gpu->ops->sample != NULL && cpu->ops->sample != NULL);
    if (!cpu || !gpu->ops->sample)
        return 1;
    /* 3 rows of scratch for 4 requests: every call runs two rounds */
    CHECK(gpu->ops->sample(gpu, NULL, 0, 151936, NULL, 3, NULL) == 0);
    CHECK(cpu->ops->sample(cpu, NULL, 0, 151936, NULL, 3, NULL) == 0);

    int n = 0;
    for (int ci = 0; ci < SC_N_PARAMS; ci++, n++) /* every combination */
        run_case(ci, 6000, 8);
    printf("cuda-sample V=6000: %d cases\n", n);
    for (int ci = 11; ci < SC_N_PARAMS; ci += 13, n++) /* the big vocabulary */
        run_case(ci, 151936, 4);
    printf("cuda-sample V=151936: done\n");
    for (int ci = 2; ci < SC_N_PARAMS; ci += 191, n++) /* long sequences */
        run_case(ci, 32000, 200);

    printf("cuda-sample: %d cases; tokens %ld/%ld differ, logprob sets %ld/%ld beyond 2 ulp, "
           "states %ld/%ld differ\n",
           n, bad_tok, n_tok, bad_lp, n_lp, bad_state, n_state);
    if (bad_tok || bad_lp || bad_state)
        fails++;
    CHECK(gpu->ops->sync(gpu) == 0);
    backend_free(gpu);
    backend_free(cpu);
    printf("cuda-sample: %s\n", fails ? "FAIL" : "ok");
    return fails ? 1 : 0;
}
