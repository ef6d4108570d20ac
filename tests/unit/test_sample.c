/* test_sample — the sampler: greedy, filters, penalties, bias, seeding, the
 * distribution it draws from, and logprobs, checked against computations
 * done here independently (full sorts, softmax in long double).
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "engine/sample.h"
#include "tests/check.h"

#define CHECKN(c, ...)                                                            \
    do {                                                                          \
        if (!(c)) {                                                               \
            if (fails < 20) {                                                     \
                fprintf(stderr, "%s:%d: check failed: %s: ", __FILE__, __LINE__, #c); \
                fprintf(stderr, __VA_ARGS__);                                     \
                fputc('\n', stderr);                                              \
            }                                                                     \
            fails++;                                                              \
        }                                                                         \
    } while (0)

static uint64_t rs = 12345;
static double unif(void)
{
    rs = rs * 6364136223846793005ull + 1442695040888963407ull;
    return (double)(rs >> 11) * 0x1p-53;
}

static void random_logits(float *l, int n, float scale)
{
    for (int i = 0; i < n; i++)
        l[i] = (float)((unif() * 2 - 1) * scale);
}

static struct sampler *mk(int n_vocab, float temp, int top_k, float top_p, float min_p, uint64_t seed)
{
    struct sample_params p;
    sample_params_default(&p);
    p.temperature = temp;
    p.top_k = top_k;
    p.top_p = top_p;
    p.min_p = min_p;
    p.seed = seed;
    return sampler_new(n_vocab, &p);
}

/* indices sorted by logit desc, ties by lower id (the contract) */
static const float *sort_l;
static int cmp_idx(const void *a, const void *b)
{
    int i = *(const int *)a, j = *(const int *)b;
    if (sort_l[i] != sort_l[j])
        return sort_l[i] > sort_l[j] ? -1 : 1;
    return i - j;
}

static void test_greedy(void)
{
    enum { V = 1000 };
    float l[V];
    for (int rep = 0; rep < 50; rep++) {
        random_logits(l, V, 5.f);
        int best = 0;
        for (int i = 1; i < V; i++)
            if (l[i] > l[best])
                best = i;
        if (rep % 5 == 0) {
            l[V - 1] = l[best]; /* a tie later: the lower id wins */
            l[best / 2] = l[best]; /* a tie earlier: that one wins */
            best = best / 2;
        }
        CHECK(sample_argmax(l, V) == best);
        struct sampler *g = mk(V, 0.f, 0, 1.f, 0.f, rep);
        CHECK(sampler_sample(g, l) == best);
        sampler_free(g);
        /* top_k = 1 is greedy at any temperature */
        static const float temps[] = {0.1f, 1.f, 10.f, 1000.f};
        for (int t = 0; t < 4; t++) {
            struct sampler *s = mk(V, temps[t], 1, 1.f, 0.f, (uint64_t)rep * 7 + t);
            for (int k = 0; k < 20; k++)
                CHECK(sampler_sample(s, l) == best);
            sampler_free(s);
        }
    }
    l[3] = NAN;
    CHECK(sample_argmax(l, V) != 3);
}

static void test_seeds(void)
{
    enum { V = 500, N = 300 };
    float l[V];
    random_logits(l, V, 2.f);
    int32_t a[N], b[N], c[N];
    struct sample_params p;
    sample_params_default(&p);
    p.temperature = 0.9f;
    p.top_k = 50;
    p.top_p = 0.95f;
    p.repetition_penalty = 1.1f;
    p.presence_penalty = 0.2f;
    p.frequency_penalty = 0.1f;
    p.seed = 42;
    struct sampler *s1 = sampler_new(V, &p), *s2 = sampler_new(V, &p);
    p.seed = 43;
    struct sampler *s3 = sampler_new(V, &p);
    for (int i = 0; i < N; i++) {
        a[i] = sampler_sample(s1, l);
        b[i] = sampler_sample(s2, l);
        c[i] = sampler_sample(s3, l);
        sampler_accept(s1, a[i], 0);
        sampler_accept(s2, b[i], 0);
        sampler_accept(s3, c[i], 0);
    }
    CHECK(memcmp(a, b, sizeof a) == 0);
    int diff = 0;
    for (int i = 0; i < N; i++)
        diff += a[i] != c[i];
    CHECK(diff > N / 2);
    sampler_free(s1);
    sampler_free(s2);
    sampler_free(s3);
}

/* Draw n tokens and compare the histogram with the expected probabilities
 * by Pearson's chi-square; cells with p = 0 must never be drawn. */
static double chi2(struct sampler *s, const float *l, int V, const double *pexp, int n, int *bad)
{
    long hist[64] = {0};
    for (int i = 0; i < n; i++) {
        int t = sampler_sample(s, l);
        if (t < 0 || t >= V)
            return INFINITY;
        hist[t]++;
    }
    double x2 = 0;
    *bad = 0;
    for (int i = 0; i < V; i++) {
        double e = pexp[i] * n;
        if (e == 0)
            *bad += hist[i] != 0;
        else
            x2 += (hist[i] - e) * (hist[i] - e) / e;
    }
    return x2;
}

static void softmax_ld(const float *l, const int *keep, int V, double temp, double *p)
{
    long double m = -INFINITY, z = 0;
    for (int i = 0; i < V; i++)
        if (keep[i] && l[i] > m)
            m = l[i];
    for (int i = 0; i < V; i++)
        z += keep[i] ? expl((l[i] - m) / temp) : 0;
    for (int i = 0; i < V; i++)
        p[i] = keep[i] ? (double)(expl((l[i] - m) / temp) / z) : 0;
}

static void test_distribution(void)
{
    enum { V = 8, N = 200000 };
    /* chi-square critical value, 7 degrees of freedom, p = 0.001: 24.32;
     * 2 dof: 13.82; 3 dof: 16.27 */
    const float l[V] = {1.f, 0.5f, 0.f, -0.5f, 2.f, -1.f, 0.3f, 1.5f};
    int keep[V];
    double p[V];
    int bad;
    for (int i = 0; i < V; i++)
        keep[i] = 1;

    softmax_ld(l, keep, V, 0.7, p);
    struct sampler *s = mk(V, 0.7f, 0, 1.f, 0.f, 1);
    double x = chi2(s, l, V, p, N, &bad);
    printf("temperature 0.7: chi2 %.2f (7 dof)\n", x);
    CHECK(x < 24.32 && bad == 0);
    sampler_free(s);

    /* a wrong temperature must be detected by the same statistic */
    softmax_ld(l, keep, V, 1.0, p);
    s = mk(V, 0.7f, 0, 1.f, 0.f, 1);
    x = chi2(s, l, V, p, N, &bad);
    CHECK(x > 100);
    sampler_free(s);

    /* top-k 3: renormalized over {4, 7, 0} */
    for (int i = 0; i < V; i++)
        keep[i] = i == 4 || i == 7 || i == 0;
    softmax_ld(l, keep, V, 1.3, p);
    s = mk(V, 1.3f, 3, 1.f, 0.f, 2);
    x = chi2(s, l, V, p, N, &bad);
    printf("top-k 3: chi2 %.2f (2 dof)\n", x);
    CHECK(x < 13.82 && bad == 0);
    sampler_free(s);

    /* top-p on probabilities 0.5, 0.3, 0.15, 0.05 */
    const float lp[4] = {logf(0.5f), logf(0.3f), logf(0.15f), logf(0.05f)};
    int keep4[4] = {1, 1, 0, 0};
    double p4[4];
    softmax_ld(lp, keep4, 4, 1.0, p4);
    s = mk(4, 1.f, 0, 0.75f, 0.f, 3); /* 0.5 < 0.75 <= 0.8: keeps two */
    x = chi2(s, lp, 4, p4, N, &bad);
    printf("top-p 0.75: chi2 %.2f (1 dof), p = %.3f %.3f\n", x, p4[0], p4[1]);
    CHECK(x < 10.83 && bad == 0);
    sampler_free(s);
    s = mk(4, 1.f, 0, 0.85f, 0.f, 3); /* 0.8 < 0.85 <= 0.95: keeps three */
    keep4[2] = 1;
    softmax_ld(lp, keep4, 4, 1.0, p4);
    x = chi2(s, lp, 4, p4, N, &bad);
    CHECK(x < 13.82 && bad == 0);
    sampler_free(s);
    /* top-p is computed before temperature (header order): with T = 3 the
     * kept set is still the first two */
    s = mk(4, 3.f, 0, 0.75f, 0.f, 4);
    keep4[2] = 0;
    softmax_ld(lp, keep4, 4, 3.0, p4);
    x = chi2(s, lp, 4, p4, N, &bad);
    CHECK(x < 10.83 && bad == 0);
    sampler_free(s);

    /* min-p 0.2: threshold 0.1 keeps 0.5, 0.3, 0.15 */
    s = mk(4, 1.f, 0, 1.f, 0.2f, 5);
    keep4[2] = 1;
    softmax_ld(lp, keep4, 4, 1.0, p4);
    x = chi2(s, lp, 4, p4, N, &bad);
    printf("min-p 0.2: chi2 %.2f (2 dof)\n", x);
    CHECK(x < 13.82 && bad == 0);
    sampler_free(s);
    s = mk(4, 1.f, 0, 1.f, 0.7f, 5); /* threshold 0.35: only token 0 */
    for (int i = 0; i < 1000; i++)
        CHECK(sampler_sample(s, lp) == 0);
    sampler_free(s);
}

/* Large vocabulary: every draw lies in the set an independent full sort
 * defines; also times the sampler. */
static void test_big_vocab(void)
{
    enum { V = 151936 };
    float *l = malloc(V * sizeof(float));
    int *idx = malloc(V * sizeof(int));
    char *in = calloc(V, 1);
    for (int i = 0; i < V; i++)
        l[i] = (float)(unif() * 8.0 + (i % 1000 == 0 ? 6.0 : 0.0));
    for (int i = 0; i < V; i++)
        idx[i] = i;
    sort_l = l;
    qsort(idx, V, sizeof(int), cmp_idx);

    static const struct { int top_k; float top_p; } cases[] = {{40, 1.f}, {0, 0.9f}, {0, 0.3f}, {100, 0.5f}, {0, 1.f}};
    for (int c = 0; c < 5; c++) {
        int k = cases[c].top_k ? cases[c].top_k : V;
        /* allowed set: first k of the sort, then the top-p prefix over them */
        memset(in, 0, V);
        long double m = l[idx[0]], z = 0, cum = 0;
        for (int i = 0; i < k; i++)
            z += expl(l[idx[i]] - m);
        int cut = k;
        if (cases[c].top_p < 1.f) {
            for (int i = 0; i < k; i++) {
                cum += expl(l[idx[i]] - m);
                if (cum >= cases[c].top_p * z) {
                    cut = i + 1;
                    break;
                }
            }
        }
        for (int i = 0; i < cut; i++)
            in[idx[i]] = 1;
        struct sampler *s = mk(V, 1.f, cases[c].top_k, cases[c].top_p, 0.f, 77 + c);
        int n = 200, outside = 0;
        struct timespec t0, t1;
        clock_gettime(CLOCK_MONOTONIC, &t0);
        for (int i = 0; i < n; i++)
            outside += !in[sampler_sample(s, l)];
        clock_gettime(CLOCK_MONOTONIC, &t1);
        double us = ((double)(t1.tv_sec - t0.tv_sec) * 1e9 + (double)(t1.tv_nsec - t0.tv_nsec)) / n / 1e3;
        printf("vocab %d top_k %d top_p %.2f: kept %d, %.0f us/sample\n", V, cases[c].top_k,
               cases[c].top_p, cut, us);
        CHECKN(outside == 0, "case %d: %d draws outside the allowed set", c, outside);
        sampler_free(s);
    }
    /* ties at the top-k boundary go to the lower ids */
    for (int i = 0; i < 1000; i++)
        l[i] = 1.f;
    struct sampler *s = mk(1000, 1.f, 5, 1.f, 0.f, 9);
    int hist[5] = {0}, outside = 0;
    for (int i = 0; i < 5000; i++) {
        int t = sampler_sample(s, l);
        if (t < 5)
            hist[t]++;
        else
            outside++;
    }
    CHECK(outside == 0);
    for (int i = 0; i < 5; i++)
        CHECK(hist[i] > 800 && hist[i] < 1200);
    sampler_free(s);
    free(l);
    free(idx);
    free(in);
}

static void test_penalties(void)
{
    enum { V = 64 };
    float l[V], out[V];
    random_logits(l, V, 3.f);
    struct sample_params p;
    sample_params_default(&p);
    p.repetition_penalty = 1.3f;
    p.presence_penalty = 0.4f;
    p.frequency_penalty = 0.25f;
    p.temperature = 0.f;
    struct sampler *s = sampler_new(V, &p);
    int cnt[V] = {0}, seen[V] = {0};
    /* prompt tokens: repetition only; generated: all three */
    int prompt[] = {1, 2, 3, 2, 10};
    int gen[] = {3, 5, 5, 5, 7, 1, 60};
    for (int i = 0; i < 5; i++) {
        sampler_accept(s, prompt[i], 1);
        seen[prompt[i]] = 1;
    }
    for (int i = 0; i < 7; i++) {
        sampler_accept(s, gen[i], 0);
        seen[gen[i]] = 1;
        cnt[gen[i]]++;
    }
    sampler_accept(s, -1, 0); /* ignored */
    sampler_accept(s, V, 0);
    sampler_penalized_logits(s, l, out);
    for (int i = 0; i < V; i++) {
        float e = l[i];
        if (seen[i])
            e = e > 0 ? e / 1.3f : e * 1.3f;
        if (cnt[i])
            e -= 0.4f + 0.25f * (float)cnt[i];
        CHECKN(out[i] == e, "token %d: %g vs %g", i, out[i], e);
    }
    sampler_free(s);

    /* the penalty moves greedy exactly where the formula says */
    float g[2] = {2.0f, 1.5f};
    p.presence_penalty = p.frequency_penalty = 0;
    p.repetition_penalty = 1.5f; /* 2/1.5 = 1.33 < 1.5 */
    s = sampler_new(2, &p);
    sampler_accept(s, 0, 1);
    CHECK(sampler_sample(s, g) == 1);
    sampler_free(s);
    p.repetition_penalty = 1.25f; /* 1.6 > 1.5 */
    s = sampler_new(2, &p);
    sampler_accept(s, 0, 1);
    CHECK(sampler_sample(s, g) == 0);
    sampler_free(s);
    float gn[2] = {-1.0f, -1.2f}; /* negative: multiplied */
    p.repetition_penalty = 1.3f;  /* -1.3 < -1.2 */
    s = sampler_new(2, &p);
    sampler_accept(s, 0, 1);
    CHECK(sampler_sample(s, gn) == 1);
    sampler_free(s);
    /* presence/frequency ignore prompt tokens */
    p.repetition_penalty = 1.f;
    p.presence_penalty = 10.f;
    p.frequency_penalty = 10.f;
    s = sampler_new(2, &p);
    sampler_accept(s, 0, 1);
    CHECK(sampler_sample(s, g) == 0);
    sampler_accept(s, 0, 0);
    CHECK(sampler_sample(s, g) == 1);
    sampler_free(s);
}

static void test_bias(void)
{
    enum { V = 100 };
    float l[V];
    random_logits(l, V, 2.f);
    int best = sample_argmax(l, V);
    struct sample_bias b[2] = {{best, -100.f}, {17, 0.5f}};
    struct sample_params p;
    sample_params_default(&p);
    p.bias = b;
    p.n_bias = 2;
    p.temperature = 1.f;
    p.seed = 5;
    struct sampler *s = sampler_new(V, &p);
    b[1].bias = 99.f; /* copied at sampler_new: this must not matter */
    float out[V];
    sampler_penalized_logits(s, l, out);
    CHECK(isinf(out[best]) && out[best] < 0);
    CHECK(out[17] == l[17] + 0.5f);
    for (int i = 0; i < 20000; i++)
        CHECKN(sampler_sample(s, l) != best, "banned token drawn");
    sampler_free(s);
    /* +100 forces a low token */
    int worst = 0;
    for (int i = 1; i < V; i++)
        if (l[i] < l[worst])
            worst = i;
    struct sample_bias f = {worst, 100.f};
    p.bias = &f;
    p.n_bias = 1;
    s = sampler_new(V, &p);
    for (int i = 0; i < 2000; i++)
        CHECK(sampler_sample(s, l) == worst);
    sampler_free(s);
    /* everything banned: still a valid token */
    struct sample_bias all[V];
    for (int i = 0; i < V; i++)
        all[i] = (struct sample_bias){i, -100.f};
    p.bias = all;
    p.n_bias = V;
    s = sampler_new(V, &p);
    int t = sampler_sample(s, l);
    CHECK(t >= 0 && t < V);
    sampler_free(s);
}

static void test_logprobs(void)
{
    enum { V = 1000 };
    float l[V];
    for (int rep = 0; rep < 3; rep++) {
        float scale = rep == 0 ? 3.f : rep == 1 ? 30.f : 3e4f; /* the last overflows a naive exp */
        random_logits(l, V, scale);
        l[10] = l[11] = l[12] = 1.5f * scale; /* a three-way tie at the top */
        long double m = -INFINITY, z = 0;
        for (int i = 0; i < V; i++)
            m = l[i] > m ? l[i] : m;
        for (int i = 0; i < V; i++)
            z += expl((long double)l[i] - m);
        long double lse = m + logl(z);
        long double sum = 0;
        double maxerr = 0;
        for (int i = 0; i < V; i++) {
            float lp = sample_logprobs(l, V, i, 0, NULL, NULL);
            double err = fabs((double)(lp - (float)((long double)l[i] - lse)));
            maxerr = err > maxerr ? err : maxerr;
            sum += expl((long double)lp);
        }
        CHECKN(maxerr <= 1e-5 * (1 + fabs((double)lse) * 1e-2), "scale %g: max err %g", scale, maxerr);
        CHECKN(fabsl(sum - 1) < 1e-4, "scale %g: sum %Lg", scale, sum);

        int32_t ids[20];
        float lps[20];
        float lp5 = sample_logprobs(l, V, 5, 20, ids, lps);
        CHECK(lp5 == sample_logprobs(l, V, 5, 0, NULL, NULL));
        int idx[V];
        for (int i = 0; i < V; i++)
            idx[i] = i;
        sort_l = l;
        qsort(idx, V, sizeof(int), cmp_idx);
        for (int k = 0; k < 20; k++) {
            CHECKN(ids[k] == idx[k], "rank %d: %d vs %d", k, ids[k], idx[k]);
            CHECK(lps[k] == sample_logprobs(l, V, ids[k], 0, NULL, NULL));
        }
        CHECK(ids[0] == 10 && ids[1] == 11 && ids[2] == 12);
    }
    /* n larger than the vocabulary */
    float small[3] = {1.f, 3.f, 2.f};
    int32_t ids[5] = {-7, -7, -7, -7, -7};
    float lps[5];
    sample_logprobs(small, 3, 0, 5, ids, lps);
    CHECK(ids[0] == 1 && ids[1] == 2 && ids[2] == 0 && ids[3] == -7);
    CHECK(fabsf(expf(lps[0]) + expf(lps[1]) + expf(lps[2]) - 1.f) < 1e-6f);
    CHECK(isinf(sample_logprobs(small, 3, 7, 0, NULL, NULL)));
}

int main(void)
{
    test_greedy();
    test_seeds();
    test_distribution();
    test_big_vocab();
    test_penalties();
    test_bias();
    test_logprobs();
    CHECK(sampler_new(0, NULL) == NULL);
    sampler_free(NULL);
    printf("%s\n", fails ? "FAIL" : "ok");
    return fails ? 1 : 0;
}
