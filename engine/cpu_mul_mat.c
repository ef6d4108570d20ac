/* cpu_mul_mat — the CPU backend's matrix products: activation rows
 * converted once to the weight's vec-dot type (engine/quant), then output
 * tiles of dot products (see cpu_impl.h).
 *
 * Every output is one dot through one kernel whatever the tile or thread
 * (batch invariance): by default (CPU_NUMERICS_INVARIANT) the canonical
 * chain shared with the CUDA backend for quantized weights
 * (quant_kernel_invariant), so both backends give a product the same bits.
 * CPU_NUMERICS_LLAMACPP runs llama.cpp's kernels instead: its single-row
 * kernel per matrix, batches through its batch kernels (cpu.h). Threads:
 * the backend's caller; chunks on its pool.
 */
#include <string.h>

#include "cpu.h"
#include "cpu_avx2.h"
#include "cpu_impl.h"
#include "err.h"
#include "quant.h"

/* ------------------------------------------------------------------------ */
/* mul_mat                                                                  */
/* ------------------------------------------------------------------------ */

/* Output tiles: up to MM_TR activation rows x tc weight rows. A tile's
 * weight rows stay in cache while its activation rows go by in groups of
 * four (quant_vec_dots decodes each weight block once per group). Tiles of
 * one column range are consecutive chunks, so the threads share those
 * weights in L2. Speed only: every output is one dot whatever the tile. */
#define MM_TR 32
#define MM_TC_MIN 16
#define MM_SLAB_BYTES (256 * 1024)

struct cpu_mm_job {
    const struct backend_weight *w;
    const float *x;
    float *y;
    int32_t n_rows;
    int vdt;           /* quant_vec_dot_type(w->type) */
    size_t xrow_bytes; /* bytes of one converted activation row */
    const char *xrows; /* converted rows (or x itself for F32) */
    char *xq;          /* where to convert them; NULL: no conversion */
    int64_t n_qchunks; /* phase 1: conversion chunks */
    int32_t tiles_r;
    int64_t tc;
    /* rows [0, batch_rows) go through kernel[1], the rest through
     * kernel[0] (batch_rows is 0 unless llama.cpp numerics are on) */
    int kernel[2];
    int32_t batch_rows;
    quant_vec_dot_fn dot[2];
    int simd;
};

/* out[r] for rows [r0, r0 + nr) of the tile against one weight row, all
 * through one kernel. */
static void cpu_mm_dots(const struct cpu_mm_job *j, int k, const char *wr, int32_t r0, int32_t nr,
                        float *out)
{
    const int64_t ne0 = j->w->ne0;
    const char *xr = j->xrows + (size_t)r0 * j->xrow_bytes;
    if (nr == 1) {
        out[0] = j->dot[k](ne0, wr, xr);
        return;
    }
#ifdef INFERD_HAVE_AVX2
    if (j->simd && (j->kernel[k] == QK_F32 || j->kernel[k] == QK_F32_TB)) {
        cpu_avx2_dots_f32(ne0, (const float *)(const void *)wr, (const float *)(const void *)xr,
                          (size_t)ne0, nr, out, j->kernel[k] == QK_F32_TB);
        return;
    }
#endif
    quant_kernel_dots(j->kernel[k], ne0, wr, xr, j->xrow_bytes, nr, out);
}

static void cpu_mm_task(void *arg, int64_t ci, int ith)
{
    struct cpu_mm_job *j = arg;
    const struct backend_weight *w = j->w;
    const int64_t ne0 = w->ne0, ne1 = w->ne1;
    (void)ith;

    /* phase 1: convert activation rows once to the weight's vec-dot type */
    if (ci < j->n_qchunks) {
        int64_t r0, r1;
        cpu_split(j->n_rows, ci, j->n_qchunks, &r0, &r1);
        for (int64_t r = r0; r < r1; r++)
            quant_quantize_row(j->vdt, j->x + r * ne0, j->xq + (size_t)r * j->xrow_bytes, ne0);
        return;
    }

    /* phase 2: one output tile, in at most two row ranges of one kernel */
    const int64_t t = ci - j->n_qchunks;
    const int64_t c0 = (t / j->tiles_r) * j->tc;
    const int32_t r0 = (int32_t)(t % j->tiles_r) * MM_TR;
    const int64_t c1 = c0 + j->tc < ne1 ? c0 + j->tc : ne1;
    const int32_t nr = r0 + MM_TR < j->n_rows ? MM_TR : j->n_rows - r0;
    int32_t nb = j->batch_rows - r0; /* rows of this tile on the batch kernel */
    nb = nb < 0 ? 0 : nb > nr ? nr : nb;
    float *y = j->y + (int64_t)r0 * ne1;
    const char *wr = (const char *)w->data + (size_t)c0 * w->row_bytes;
    if (nr == 1) { /* decode: one dot per weight row */
        const quant_vec_dot_fn dot = j->dot[nb > 0];
        const char *xr = j->xrows + (size_t)r0 * j->xrow_bytes;
        for (int64_t col = c0; col < c1; col++, wr += w->row_bytes)
            y[col] = dot(ne0, wr, xr);
        return;
    }
    float out[MM_TR];
    for (int64_t col = c0; col < c1; col++, wr += w->row_bytes) {
        if (nb > 0)
            cpu_mm_dots(j, 1, wr, r0, nb, out);
        if (nb < nr)
            cpu_mm_dots(j, 0, wr, r0 + nb, nr - nb, out + nb);
        for (int32_t r = 0; r < nr; r++)
            y[(int64_t)r * ne1 + col] = out[r];
    }
}

void cpu_mul_mat(struct backend *be, const struct backend_weight *w, const float *x,
                 float *y, int32_t n_rows)
{
    struct cpu_ctx *c = cpu_ctx(be);
    struct cpu_mm_job j;
    memset(&j, 0, sizeof(j));
    j.w = w;
    j.x = x;
    j.y = y;
    j.n_rows = n_rows;
    j.vdt = quant_vec_dot_type(w->type);
    const int64_t ne0 = w->ne0, ne1 = w->ne1;
    const int llamacpp = c->numerics == CPU_NUMERICS_LLAMACPP;
    j.kernel[0] = j.kernel[1] =
        llamacpp ? quant_kernel_for(w->type, ne1, ne0, 0) : quant_kernel_invariant(w->type);
    if (llamacpp && n_rows >= 2) {
        /* llama.cpp's batch paths: tinyBLAS takes every row; the repacked
         * Q4_K gemm takes whole groups of four, its gemv the rest */
        j.kernel[1] = quant_kernel_for(w->type, ne1, ne0, 1);
        j.batch_rows = j.kernel[1] == QK_Q4_K_GEMM ? n_rows - n_rows % 4 : n_rows;
    }
    j.dot[0] = quant_kernel_func(j.kernel[0]);
    j.dot[1] = quant_kernel_func(j.kernel[1]);
    j.simd = c->simd;
    if (!j.dot[0] || !j.dot[1] || n_rows < 1) {
        if (!j.dot[0] || !j.dot[1])
            c->error = INF_EUNSUPPORTED;
        return;
    }
    if (j.vdt == QT_F32) {
        j.xrows = (const char *)x;
        j.xrow_bytes = (size_t)ne0 * sizeof(float);
    } else {
        j.xq = c->xq;
        j.xrows = c->xq;
        j.xrow_bytes = quant_row_bytes(j.vdt, ne0);
        if ((size_t)n_rows * j.xrow_bytes > c->xq_bytes) {
            c->error = INF_EINTERNAL; /* reserve() was not told about this size */
            return;
        }
        /* a handful of rows is converted faster than the pool is woken */
        j.n_qchunks = n_rows < 8 ? 0 : cpu_chunks(c, n_rows, ne0);
        if (j.n_qchunks == 0)
            for (int32_t r = 0; r < n_rows; r++)
                quant_quantize_row(j.vdt, x + (int64_t)r * ne0, c->xq + (size_t)r * j.xrow_bytes,
                                   ne0);
    }
    const int64_t macs = (int64_t)n_rows * ne0 * ne1;
    j.tiles_r = (n_rows + MM_TR - 1) / MM_TR;
    /* column tiles: enough tiles for the threads to balance (16 per
     * thread), no more weight bytes than fit in L2 next to the activations
     * (the tile's weights are read once per 32 activation rows), no
     * narrower than MM_TC_MIN columns */
    const int64_t want = 16 * (int64_t)c->pool.n;
    int64_t tc = (ne1 * j.tiles_r + want - 1) / want;
    if (tc > (int64_t)(MM_SLAB_BYTES / w->row_bytes))
        tc = (int64_t)(MM_SLAB_BYTES / w->row_bytes);
    if (tc < MM_TC_MIN)
        tc = MM_TC_MIN;
    j.tc = tc;
    const int64_t tiles = (int64_t)j.tiles_r * ((ne1 + tc - 1) / tc);
    cpu_run(c, cpu_mm_task, &j, j.n_qchunks, j.n_qchunks + tiles, macs / 16);
}
