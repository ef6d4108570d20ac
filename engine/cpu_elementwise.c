/* cpu_elementwise — the CPU backend's row and elementwise ops: get_rows,
 * gather, rms_norm, add_bias, add, silu_mul (see cpu_impl.h).
 *
 * Each output element is computed by one thread with the same code whatever
 * the chunking (see cpu.c); the AVX2 paths (cpu_avx2.c) give the same bits.
 * rms_norm and silu_mul follow ggml's CPU arithmetic. Threads: the backend's
 * caller; chunks on its pool.
 */
#include <math.h>
#include <string.h>

#include "cpu_avx2.h"
#include "cpu_impl.h"
#include "quant.h"

/* ------------------------------------------------------------------------ */
/* get_rows, gather                                                         */
/* ------------------------------------------------------------------------ */

struct cpu_rows_job {
    const struct backend_weight *w;
    const int32_t *ids;
    int32_t n;
    int64_t k; /* chunks */
    float *y;
};

static void cpu_get_rows_task(void *arg, int64_t ci, int ith)
{
    struct cpu_rows_job *j = arg;
    const int64_t ne0 = j->w->ne0;
    int64_t r0, r1;
    (void)ith;
    cpu_split(j->n, ci, j->k, &r0, &r1);
    for (int64_t r = r0; r < r1; r++) {
        const char *row = (const char *)j->w->data + (size_t)j->ids[r] * j->w->row_bytes;
        quant_dequant_row(j->w->type, row, j->y + r * ne0, ne0);
    }
}

void cpu_get_rows(struct backend *be, const struct backend_weight *w, const int32_t *ids,
                  int32_t n, float *y)
{
    struct cpu_ctx *c = cpu_ctx(be);
    struct cpu_rows_job j = {w, ids, n, cpu_chunks(c, n, w->ne0), y};
    cpu_run(c, cpu_get_rows_task, &j, 0, j.k, (int64_t)n * w->ne0);
}

void cpu_gather(struct backend *be, const float *x, const int32_t *rows, int32_t n,
                int32_t row_len, float *y)
{
    (void)be;
    for (int32_t r = 0; r < n; r++)
        memcpy(y + (size_t)r * row_len, x + (size_t)rows[r] * row_len,
               (size_t)row_len * sizeof(float));
}

/* ------------------------------------------------------------------------ */
/* rms_norm, add_bias, add, silu_mul                                        */
/* ------------------------------------------------------------------------ */

struct cpu_norm_job {
    const float *x;
    const float *w;
    float *y;
    int32_t n_rows, n;
    float eps;
    int simd;
    int64_t k;
};

static void cpu_rms_norm_task(void *arg, int64_t ci, int ith)
{
    struct cpu_norm_job *j = arg;
    int64_t r0, r1;
    (void)ith;
    cpu_split((j->n_rows + 3) / 4, ci, j->k, &r0, &r1); /* groups of 4 rows */
    r0 *= 4;
    r1 = r1 * 4 < j->n_rows ? r1 * 4 : j->n_rows;
#ifdef INFERD_HAVE_AVX2
    if (j->simd) {
        cpu_avx2_rms_norm(j->x, j->w, j->y, r0, r1, j->n, j->eps);
        return;
    }
#endif
    for (int64_t r = r0; r < r1; r++) {
        const float *x = j->x + r * j->n;
        float *y = j->y + r * j->n;
        /* As ggml: squares in float, summed in double, mean rounded to float. */
        double sum = 0.0;
        for (int32_t i = 0; i < j->n; i++)
            sum += (double)(x[i] * x[i]);
        const float mean = (float)(sum / j->n);
        const float scale = 1.0f / sqrtf(mean + j->eps);
        if (j->w) {
            for (int32_t i = 0; i < j->n; i++)
                y[i] = (x[i] * scale) * j->w[i];
        } else {
            for (int32_t i = 0; i < j->n; i++)
                y[i] = x[i] * scale;
        }
    }
}

void cpu_rms_norm(struct backend *be, const float *x, const struct backend_weight *w,
                  float *y, int32_t n_rows, int32_t n, float eps)
{
    struct cpu_ctx *c = cpu_ctx(be);
    struct cpu_norm_job j = {x, w ? (const float *)w->data : NULL, y, n_rows, n, eps, c->simd, 0};
    /* chunks of whole groups of 4 rows keep the 4-row SIMD sum busy (any
     * split gives the same bits) */
    j.k = cpu_chunks(c, (n_rows + 3) / 4, 4 * (int64_t)n);
    cpu_run(c, cpu_rms_norm_task, &j, 0, j.k, (int64_t)n_rows * n);
}

void cpu_add_bias(struct backend *be, float *y, const struct backend_weight *b,
                  int32_t n_rows)
{
    (void)be;
    const float *bias = b->data;
    const int64_t n = b->ne0;
    for (int32_t r = 0; r < n_rows; r++)
        for (int64_t i = 0; i < n; i++)
            y[r * n + i] += bias[i];
}

struct cpu_ew_job {
    float *y;
    const float *x;
    int64_t n;
    int64_t k;
    int simd;
};

static void cpu_add_task(void *arg, int64_t ci, int ith)
{
    struct cpu_ew_job *j = arg;
    int64_t i0, i1;
    (void)ith;
    cpu_split(j->n, ci, j->k, &i0, &i1);
    for (int64_t i = i0; i < i1; i++)
        j->y[i] += j->x[i];
}

void cpu_add(struct backend *be, float *y, const float *x, int64_t n)
{
    struct cpu_ctx *c = cpu_ctx(be);
    struct cpu_ew_job j = {y, x, n, 0, c->simd};
    j.k = cpu_chunks(c, n, 1);
    /* memory-bound and cheap: only large adds are worth the pool */
    cpu_run(c, cpu_add_task, &j, 0, j.k, n / 4);
}

/* SwiGLU as llama.cpp's CPU backend computes it, row by row: the full
 * groups of 8 of a row through ggml's vector expf (cpu_poly_expf), the last
 * row_len % 8 elements through libm's expf. Chunks of whole rows; the last
 * row may be partial (n need not be a multiple of row_len). */
struct cpu_silu_job {
    float *g;
    const float *u;
    int64_t n, row_len, n_rows, k;
    int simd;
};

static void cpu_silu_mul_task(void *arg, int64_t ci, int ith)
{
    struct cpu_silu_job *j = arg;
    int64_t r0, r1;
    (void)ith;
    cpu_split(j->n_rows, ci, j->k, &r0, &r1);
    const int64_t vec_len = j->row_len - j->row_len % 8;
    for (int64_t r = r0; r < r1; r++) {
        float *g = j->g + r * j->row_len;
        const float *u = j->u + r * j->row_len;
        const int64_t left = j->n - r * j->row_len;
        const int64_t len = left < j->row_len ? left : j->row_len;
        const int64_t nv = len < vec_len ? len : vec_len;
#ifdef INFERD_HAVE_AVX2
        if (j->simd)
            cpu_avx2_silu_mul(g, u, nv);
        else
#endif
            for (int64_t i = 0; i < nv; i++)
                g[i] = g[i] / (1.0f + cpu_poly_expf(0.0f - g[i])) * u[i];
        for (int64_t i = nv; i < len; i++)
            g[i] = g[i] / (1.0f + expf(-g[i])) * u[i];
    }
}

void cpu_silu_mul(struct backend *be, float *gate, const float *up, int64_t n,
                  int64_t row)
{
    struct cpu_ctx *c = cpu_ctx(be);
    if (row < 1 || row > n)
        row = n > 0 ? n : 1;
    struct cpu_silu_job j = {gate, up, n, row, (n + row - 1) / row, 0, c->simd};
    j.k = cpu_chunks(c, j.n_rows, row);
    cpu_run(c, cpu_silu_mul_task, &j, 0, j.k, n);
}
