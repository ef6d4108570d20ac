/* cuda_ops_harness — test_cuda_ops.c's backends, random data, device
 * helpers and the one-line reports (NMSE against a threshold, or bits that
 * differ). Header-only: test_cuda_ops.c is one translation unit (its
 * products' cases are in cuda_ops_mm.h). */
#ifndef INFERD_TESTS_CUDA_OPS_HARNESS_H
#define INFERD_TESTS_CUDA_OPS_HARNESS_H

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/backend.h"
#include "tests/check.h"
#include "tests/xorshift.h"

static struct backend *cpu, *gpu;

static uint64_t rng_state = 0x9E3779B97F4A7C15ull;
static uint64_t rng(void)
{
    return rng_step(&rng_state);
}
static float frand(void) /* uniform in [-1, 1) */
{
    return (float)((rng() >> 11) * (1.0 / 9007199254740992.0)) * 2.0f - 1.0f;
}
static int32_t irand(int32_t n) /* uniform in [0, n) */
{
    return (int32_t)(rng() % (uint64_t)n);
}
static void fill(float *x, size_t n, float scale)
{
    for (size_t i = 0; i < n; i++)
        x[i] = frand() * scale;
}
static void *xmalloc(size_t n)
{
    void *p = malloc(n ? n : 1);
    if (!p) {
        fprintf(stderr, "out of host memory\n");
        exit(1);
    }
    return p;
}

/* ---- device helpers ------------------------------------------------------ */

static void *dalloc(size_t bytes)
{
    void *p = gpu->ops->alloc(gpu, bytes);
    CHECK(p != NULL);
    if (!p)
        exit(1);
    return p;
}
static void *dup_host(const void *h, size_t bytes) /* device copy of host data */
{
    void *p = dalloc(bytes);
    gpu->ops->upload(gpu, p, h, bytes);
    return p;
}
static void dfree(void *p)
{
    gpu->ops->free(gpu, p);
}
/* Wait for the GPU, then copy a result back (download synchronizes too);
 * a queued error fails the case. */
static void dget(void *h, const void *d, size_t bytes)
{
    CHECK(gpu->ops->sync(gpu) == 0);
    gpu->ops->download(gpu, h, d, bytes);
    CHECK(gpu->ops->sync(gpu) == 0);
}

/* The same weight bytes registered with one backend. */
static void wreg(struct backend *be, struct backend_weight *w, int type, int64_t ne0, int64_t ne1,
                 const void *bytes)
{
    *w = (struct backend_weight){.type = type, .ne0 = ne0, .ne1 = ne1,
                                 .row_bytes = quant_row_bytes(type, ne0), .host = bytes};
    snprintf(w->name, sizeof(w->name), "test.%s", quant_type_name(type));
    CHECK(be->ops->weight_register(be, w) == 0);
}

/* free()/dfree() of every pointer listed */
static void free_list(void *const *p, size_t n, int dev)
{
    for (size_t i = 0; i < n; i++)
        if (dev)
            dfree(p[i]);
        else
            free(p[i]);
}
#define PTRS(...) ((void *const[]){__VA_ARGS__})
#define NPTRS(...) (sizeof(PTRS(__VA_ARGS__)) / sizeof(void *))
#define HFREE(...) free_list(PTRS(__VA_ARGS__), NPTRS(__VA_ARGS__), 0)
#define DFREE(...) free_list(PTRS(__VA_ARGS__), NPTRS(__VA_ARGS__), 1)

/* ---- metrics and reporting ----------------------------------------------- */

static double sumsq(const float *x, size_t n)
{
    double s = 0;
    for (size_t i = 0; i < n; i++)
        s += (double)x[i] * x[i];
    return s;
}
static double sqdist(const float *a, const float *b, size_t n)
{
    double s = 0;
    for (size_t i = 0; i < n; i++)
        s += ((double)a[i] - b[i]) * ((double)a[i] - b[i]);
    return s;
}
/* sum((g - c)^2) / sum(c^2) */
static double nmse(const float *g, const float *c, size_t n)
{
    const double num = sqdist(g, c, n), den = sumsq(c, n);
    return den > 0 ? num / den : (num > 0 ? INFINITY : 0.0);
}

/* Rows of `len` floats that are not bit-identical. */
static int rows_differ(const float *a, const float *b, int64_t rows, int64_t len)
{
    int n = 0;
    for (int64_t r = 0; r < rows; r++)
        n += memcmp(a + r * len, b + r * len, sizeof(float) * (size_t)len) != 0;
    return n;
}

static int n_cases, strict;

/* INFERD_CUDA_OPS_STRICT=1 caps thresholds at s (1e-10 for most ops): for
 * a GPU that mirrors the CPU's numerics (activation types, F16 attention),
 * where only float summation order and ulps of exp/sin/cos may differ. */
static double thr_of(double thr, double s)
{
    return strict && thr > s ? s : thr;
}

/* One case: its gated metric e against thr; raw >= 0: the plain NMSE too,
 * printed when the gate used another denominator (mul_mat). */
static void report_raw(const char *op, const char *type, const char *shape, double e, double thr,
                       double raw)
{
    const int ok = e <= thr; /* NaN fails */
    n_cases++;
    printf("%-10s %-5s %-34s nmse %9.3e  thr %7.1e  %s", op, type, shape, e, thr,
           ok ? "ok" : "FAIL");
    if (raw >= 0 && raw != e)
        printf("  (raw nmse %.3e)", raw);
    printf("\n");
    if (!ok)
        fails++;
}

static void report(const char *op, const char *type, const char *shape, double e, double thr)
{
    report_raw(op, type, shape, e, thr_of(thr, 1e-10), -1);
}

/* Exact checks: `bad` rows (or elements) differ in their bits; must be 0. */
static void report_bits(const char *op, const char *type, const char *shape, int bad, int total)
{
    n_cases++;
    printf("%-10s %-5s %-34s differ %4d of %-6d thr 0        %s\n", op, type, shape, bad, total,
           bad ? "FAIL" : "ok");
    if (bad)
        fails++;
}

#endif
