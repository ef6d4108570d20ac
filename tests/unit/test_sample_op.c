/* test_sample_op — the CPU backend's ops->sample against engine/sample.c
 * used directly, the way the scheduler uses it today (mask the row, then
 * sampler_sample, sampler_accept, sample_logprobs): every parameter
 * combination of tests/sample_cases.h, every kind of logits row, many steps
 * of one sequence (so the RNG streams stay aligned), masked steps, steps
 * under allowed-token bits (a JSON constraint's, dense and sparse), score
 * requests, several requests on one row, a 151936-token vocabulary. Exact:
 * tokens, logprobs and top lists bit for bit, and the flat state's history
 * equal to the sampler's.
 *
 * Also: engine/sample_exp.h (the device's copy of glibc's expf) against
 * this machine's libm expf on a dense sample of [-104, 0], the range the
 * sampler calls expf on, so CI notices a libm whose expf differs.
 */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/backend.h"
#include "engine/cpu.h"
#include "engine/err.h"
#include "engine/sample.h"
#include "engine/sample_exp.h"
#include "tests/check.h"
#include "tests/sample_cases.h"

static void test_expf(void)
{
    long n = 0, bad = 0;
    /* every 61st float from -0 down to -104 (~18M), and the edges */
    for (uint32_t u = 0x80000000u; u <= 0xc2d00000u; u += 61) {
        float x, a, b;
        memcpy(&x, &u, 4);
        a = sample_expf(x);
        b = expf(x);
        n++;
        if (memcmp(&a, &b, 4)) {
            if (bad < 5)
                fprintf(stderr, "expf(%a): port %a, libm %a\n", x, a, b);
            bad++;
        }
    }
    static const float edge[] = {0.f, -0.f, 1.f, 0.5f, 88.f, 88.7f, 89.f, -87.f, -103.f,
                                 -103.5f, -104.f, -200.f, -INFINITY, INFINITY};
    for (size_t i = 0; i < sizeof(edge) / sizeof(edge[0]); i++) {
        const float a = sample_expf(edge[i]), b = expf(edge[i]);
        n++;
        if (memcmp(&a, &b, 4)) {
            fprintf(stderr, "expf(%a): port %a, libm %a\n", edge[i], a, b);
            bad++;
        }
    }
    CHECK(isnan(sample_expf(NAN)));
    printf("sample_expf vs libm expf: %ld of %ld differ\n", bad, n);
    CHECK(bad == 0);
}

/* One sequence: combination ci, steps steps over vocabulary V. */
static void run_case(struct backend *be, int ci, int32_t V, int steps, float *rows, float *lm,
                     void *blob, size_t blob_bytes, void *blob2)
{
    static uint32_t allow[(151936 + 31) / 32];
    struct sample_params p;
    sc_params(ci, V, 1000u + (uint64_t)ci, &p);
    struct sampler *ref = sampler_new(V, &p), *twin = sampler_new(V, &p);
    CHECK(ref && twin);
    if (!ref || !twin)
        return;
    for (int i = 0; i < 40; i++) { /* a prompt, with repeats */
        const int32_t t = (int32_t)(sc_next() % (uint64_t)(i % 3 ? V : 50));
        sampler_accept(ref, t, 1);
        sampler_accept(twin, t, 1);
    }
    const int32_t mask[3] = {5, 9, V - 2};
    const int32_t cap = 40 + steps;
    CHECK(sampler_export(twin, mask, 3, cap, blob, blob_bytes) == 0);
    struct sample_state *st = blob;
    int bad = 0;
    for (int s = 0; s < steps && !bad; s++) {
        /* a third of the steps masked (min_tokens), a third through
         * allowed bits (a JSON constraint): a random set, or a sparse one */
        const int kind = (s + ci) % SC_N_KINDS, masked = s % 3 == 0, allowed = s % 3 == 1;
        for (int32_t w = 0; allowed && w < (V + 31) / 32; w++)
            allow[w] = s % 2 ? (uint32_t)sc_next() : (uint32_t)(sc_next() % 97 == 0);
        const int n_top = (s + ci) % 4 == 0 ? -1 : (s * 7 + ci) % (BACKEND_SAMPLE_MAX_TOP + 1);
        sc_logits(kind, rows + V, V); /* the row sampled: row 1 of 2 */
        sc_logits(0, rows, V);
        /* the reference: the scheduler's way */
        memcpy(lm, rows + V, sizeof(float) * (size_t)V);
        if (masked)
            for (int k = 0; k < 3; k++)
                lm[mask[k]] = -INFINITY;
        for (int32_t i = 0; allowed && i < V; i++)
            if (!((allow[i / 32] >> (i % 32)) & 1))
                lm[i] = -INFINITY;
        const int32_t t = sampler_sample(ref, lm);
        sampler_accept(ref, t, 0);
        struct backend_sample_out want[3], got[3];
        memset(want, 0, sizeof(want));
        memset(got, 0, sizeof(got));
        want[0].token = t;
        if (n_top >= 0)
            want[0].logprob = sample_logprobs(lm, V, t, n_top, want[0].top_ids, want[0].top_lps);
        const int32_t score_tok = (int32_t)(sc_next() % (uint64_t)V);
        want[1].token = score_tok;
        want[1].logprob = sample_logprobs(rows + V, V, score_tok, 5, want[1].top_ids,
                                          want[1].top_lps);
        want[2].token = score_tok;
        want[2].logprob = sample_logprobs(rows, V, score_tok, 0, NULL, NULL);

        const struct backend_sample_req req[3] = {
            {1, -1, n_top, masked ? BACKEND_SAMPLE_MASKED : 0, st, allowed ? allow : NULL},
            {1, score_tok, 5, 0, NULL, NULL},
            {0, score_tok, 0, 0, NULL, NULL},
        };
        CHECK(be->ops->sample(be, rows, 2, V, req, 3, got) == 0);
        for (int r = 0; r < 3; r++) {
            const int nt = r == 0 ? n_top : r == 1 ? 5 : 0;
            int ok = got[r].token == want[r].token;
            if (nt >= 0)
                ok = ok && !memcmp(&got[r].logprob, &want[r].logprob, 4) &&
                     !memcmp(got[r].top_ids, want[r].top_ids, sizeof(int32_t) * (size_t)nt) &&
                     !memcmp(got[r].top_lps, want[r].top_lps, sizeof(float) * (size_t)nt);
            if (!ok) {
                fprintf(stderr, "case %d V=%d step %d req %d: token %d want %d, lp %a want %a\n",
                        ci, V, s, r, got[r].token, want[r].token, got[r].logprob,
                        want[r].logprob);
                bad = 1;
            }
        }
    }
    /* the flat history is the sampler's */
    CHECK(sampler_export(ref, mask, 3, cap, blob2, blob_bytes) == 0);
    const struct sample_state *st2 = blob2;
    CHECK(st->n_hist == st2->n_hist);
    CHECK(!memcmp(sample_state_hist(st), sample_state_hist((struct sample_state *)blob2),
                  sizeof(struct sample_hist) * (size_t)st2->n_hist));
    if (bad)
        fails++;
    sampler_free(ref);
    sampler_free(twin);
}

int main(void)
{
    test_expf();

    struct backend *be = cpu_backend_new(1);
    CHECK(be && be->ops->sample);
    if (!be || !be->ops->sample)
        return 1;
    enum { BIG = 151936 };
    float *rows = malloc(sizeof(float) * 2 * BIG), *lm = malloc(sizeof(float) * BIG);
    const size_t blob_bytes = sample_state_bytes(5, 3, 40 + 64);
    void *blob = malloc(blob_bytes), *blob2 = malloc(blob_bytes);
    CHECK(rows && lm && blob && blob2);
    if (!rows || !lm || !blob || !blob2)
        return 1;
    CHECK(be->ops->sample(be, rows, 0, BIG, NULL, 4, NULL) == 0); /* reserve */
    {
        const struct backend_sample_req bad_row = {2, 0, -1, 0, NULL, NULL};
        struct backend_sample_out o;
        CHECK(be->ops->sample(be, rows, 2, 100, &bad_row, 1, &o) == INF_EINVAL);
        const struct backend_sample_req no_state = {0, -1, -1, 0, NULL, NULL};
        CHECK(be->ops->sample(be, rows, 2, 100, &no_state, 1, &o) == INF_EINVAL);
    }
    int n = 0;
    for (int ci = 0; ci < SC_N_PARAMS; ci++, n++)
        run_case(be, ci, 6000, 12, rows, lm, blob, blob_bytes, blob2);
    for (int ci = 7; ci < SC_N_PARAMS; ci += 37, n++)
        run_case(be, ci, BIG, 3, rows, lm, blob, blob_bytes, blob2);
    for (int ci = 3; ci < SC_N_PARAMS; ci += 97, n++) /* long sequences */
        run_case(be, ci, 2000, 64, rows, lm, blob, blob_bytes, blob2);
    printf("sample op (cpu) vs sampler: %d sequences, %s\n", n, fails ? "FAIL" : "ok");
    free(rows);
    free(lm);
    free(blob);
    free(blob2);
    backend_free(be);
    return fails ? 1 : 0;
}
