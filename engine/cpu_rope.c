/* cpu_rope — the CPU backend's rope (llama and NEOX pairing) and its
 * table of cos/sin per position (struct cpu_rope_cache in cpu_impl.h).
 *
 * Angles as ggml builds them (repeated multiplication in float); the table
 * holds exactly what the plain computation gives. Threads: the backend's
 * caller fills the table, then the pool ropes the rows.
 */
#include <math.h>
#include <string.h>

#include "cpu_avx2.h"
#include "cpu_impl.h"
#include "err.h"

/* ------------------------------------------------------------------------ */
/* rope                                                                     */
/* ------------------------------------------------------------------------ */

/* cos (cs[i]) and sin (cs[n_dims/2 + i]) of the n_dims/2 pairs at position
 * p: theta_i = p * base^(-2i/n_dims),
 * built by repeated multiplication in float as ggml does, so the angles
 * round the same way. */
static void cpu_rope_angles(const struct backend_rope *rp, int32_t p, float *cs)
{
    const int32_t half = rp->n_dims / 2;
    const float theta_scale = powf(rp->freq_base, -2.0f / (float)rp->n_dims);
    float theta = (float)p;
    for (int32_t i = 0; i < half; i++) {
        const float ff = rp->freq_factors ? rp->freq_factors[i] : 1.0f;
        const float t = rp->freq_scale * (theta / ff);
        cs[i] = cosf(t);
        cs[half + i] = sinf(t);
        theta *= theta_scale;
    }
}

/* Make the cache hold the angles of every position of the call (on the
 * calling thread, before the workers read it). */
static void cpu_rope_fill(struct cpu_rope_cache *rc, const struct backend_rope *rp,
                          const int32_t *pos, int32_t n_rows)
{
    if (rc->max_pos == 0 || rp->n_dims > rc->cap_dims)
        return;
    const int32_t half = rp->n_dims / 2;
    int same = rc->n_dims == rp->n_dims && rc->base == rp->freq_base &&
               rc->scale == rp->freq_scale && rc->has_ff == (rp->freq_factors != NULL);
    if (same && rp->freq_factors)
        same = !memcmp(rc->ff, rp->freq_factors, sizeof(float) * (size_t)half);
    if (!same) {
        memset(rc->valid, 0, (size_t)rc->max_pos);
        rc->n_dims = rp->n_dims;
        rc->base = rp->freq_base;
        rc->scale = rp->freq_scale;
        rc->has_ff = rp->freq_factors != NULL;
        if (rp->freq_factors)
            memcpy(rc->ff, rp->freq_factors, sizeof(float) * (size_t)half);
    }
    for (int32_t r = 0; r < n_rows; r++) {
        const int32_t p = pos[r];
        if (p >= 0 && p < rc->max_pos && !rc->valid[p]) {
            cpu_rope_angles(rp, p, rc->cs + (size_t)p * rc->cap_dims);
            rc->valid[p] = 1;
        }
    }
}

struct cpu_rope_job {
    float *x;
    int32_t n_rows, n_head;
    const int32_t *pos;
    const struct backend_rope *r;
    const struct cpu_rope_cache *rc;
    int64_t k;
    int simd;
};

static void cpu_rope_task(void *arg, int64_t ci, int ith)
{
    struct cpu_rope_job *j = arg;
    const struct backend_rope *rp = j->r;
    const struct cpu_rope_cache *rc = j->rc;
    const int32_t n_dims = rp->n_dims, half = n_dims / 2;
    const int cached = rc->max_pos > 0 && n_dims <= rc->cap_dims;
    float local[2 * CPU_MAX_ROPE_PAIRS];
    int64_t r0, r1;
    (void)ith;
    cpu_split(j->n_rows, ci, j->k, &r0, &r1);
    for (int64_t r = r0; r < r1; r++) {
        const int32_t p = j->pos[r];
        const float *cs;
        if (cached && p >= 0 && p < rc->max_pos) {
            cs = rc->cs + (size_t)p * rc->cap_dims;
        } else {
            cpu_rope_angles(rp, p, local);
            cs = local;
        }
        float *xr = j->x + r * j->n_head * (int64_t)n_dims;
#ifdef INFERD_HAVE_AVX2
        if (j->simd) {
            cpu_avx2_rope_row(xr, j->n_head, n_dims, rp->neox, cs);
            continue;
        }
#endif
        for (int32_t h = 0; h < j->n_head; h++) {
            float *v = xr + h * (int64_t)n_dims;
            for (int32_t i = 0; i < half; i++) {
                /* llama pairs adjacent values; NEOX pairs the two halves. */
                const int32_t a = rp->neox ? i : 2 * i;
                const int32_t b = rp->neox ? i + half : 2 * i + 1;
                const float x0 = v[a], x1 = v[b];
                const float co = cs[i], si = cs[half + i];
                /* llama.cpp's build contracts x0's products into FMAs
                 * (GCC, -ffp-contract=fast), x1's are rounded */
                v[a] = fmaf(x0, co, -(x1 * si));
                v[b] = fmaf(x0, si, x1 * co);
            }
        }
    }
}

void cpu_rope(struct backend *be, float *x, int32_t n_rows, int32_t n_head,
              const int32_t *pos, const struct backend_rope *r)
{
    struct cpu_ctx *c = cpu_ctx(be);
    if (r->n_dims / 2 > CPU_MAX_ROPE_PAIRS || r->n_dims % 2) {
        c->error = INF_EUNSUPPORTED;
        return;
    }
    cpu_rope_fill(&c->rope, r, pos, n_rows);
    struct cpu_rope_job j = {x, n_rows, n_head, pos, r, &c->rope, 0, c->simd};
    j.k = cpu_chunks(c, n_rows, (int64_t)n_head * r->n_dims);
    cpu_run(c, cpu_rope_task, &j, 0, j.k, (int64_t)n_rows * n_head * r->n_dims);
}
