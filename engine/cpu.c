/* cpu — the CPU backend (see cpu.h): thread pool + the ops of backend.h.
 *
 * Invariants: every output element is written by one thread running the same
 * code for every batch size and thread count, so results are bit-identical
 * whatever the batch or the pool (the scheduler's batch invariance rests on
 * this). Scratch is sized once by reserve(); ops allocate nothing.
 * Numerics follow llama.cpp's CPU backend where it matters for parity:
 * activations quantized to the weight's vec-dot type (engine/quant), the KV
 * cache in F16, attention as its flash-attention kernel (F16 query, online
 * softmax, F16 running accumulator; see "llama.cpp-compatible arithmetic").
 * Threads: one caller thread (the engine thread) drives the backend; pool
 * workers run only inside an op.
 */
#include "cpu.h"

#include <math.h>
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include "backend.h"
#include "err.h"
#include "quant.h"

/* ------------------------------------------------------------------------ */
/* Thread pool                                                              */
/* ------------------------------------------------------------------------ */

/* Busy-wait this many pause instructions before sleeping (workers) or
 * yielding (waiters): ops of one forward pass follow each other within
 * microseconds, and a futex wake costs more than that. */
#define CPU_SPIN 20000

typedef void (*cpu_task_fn)(void *arg, int ith, int nth);

struct cpu_pool;

struct cpu_worker {
    struct cpu_pool *pool;
    int ith;
    pthread_t th;
};

struct cpu_pool {
    int n; /* threads including the caller (thread 0) */
    struct cpu_worker *workers;
    int n_started;
    cpu_task_fn fn; /* job being run; published by the release of `gen` */
    void *arg;
    atomic_uint gen;     /* bumped to post a job */
    atomic_int pending;  /* workers still inside the current job */
    atomic_int stop;
    atomic_int sleepers;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    atomic_int bar_count; /* barrier inside a job */
    atomic_uint bar_gen;
};

static inline void cpu_relax(void)
{
#if defined(__x86_64__) || defined(__i386__)
    __builtin_ia32_pause();
#endif
}

static void *cpu_worker_main(void *p)
{
    struct cpu_worker *w = p;
    struct cpu_pool *pool = w->pool;
    unsigned seen = 0;
    for (;;) {
        unsigned g;
        int spins = 0;
        while ((g = atomic_load_explicit(&pool->gen, memory_order_acquire)) == seen) {
            if (++spins < CPU_SPIN) {
                cpu_relax();
                continue;
            }
            /* Sleep. The poster bumps gen before reading sleepers, and we
             * register as a sleeper before re-reading gen under the mutex, so
             * one of the two always sees the other: no lost wake-up. */
            pthread_mutex_lock(&pool->mu);
            atomic_fetch_add(&pool->sleepers, 1);
            while (atomic_load(&pool->gen) == seen)
                pthread_cond_wait(&pool->cv, &pool->mu);
            atomic_fetch_sub(&pool->sleepers, 1);
            pthread_mutex_unlock(&pool->mu);
            spins = 0;
        }
        seen = g;
        if (atomic_load(&pool->stop))
            return NULL;
        pool->fn(pool->arg, w->ith, pool->n);
        atomic_fetch_sub_explicit(&pool->pending, 1, memory_order_release);
    }
}

static int cpu_pool_init(struct cpu_pool *pool, int n)
{
    memset(pool, 0, sizeof(*pool));
    pool->n = n;
    pthread_mutex_init(&pool->mu, NULL);
    pthread_cond_init(&pool->cv, NULL);
    if (n <= 1)
        return 0;
    pool->workers = calloc((size_t)n, sizeof(*pool->workers));
    if (!pool->workers)
        return INF_ENOMEM;
    for (int i = 1; i < n; i++) {
        pool->workers[i].pool = pool;
        pool->workers[i].ith = i;
        if (pthread_create(&pool->workers[i].th, NULL, cpu_worker_main, &pool->workers[i]))
            return INF_ENOMEM;
        pool->n_started = i;
    }
    return 0;
}

static void cpu_pool_destroy(struct cpu_pool *pool)
{
    if (pool->n_started > 0) {
        atomic_store(&pool->stop, 1);
        pthread_mutex_lock(&pool->mu);
        atomic_fetch_add(&pool->gen, 1);
        pthread_cond_broadcast(&pool->cv);
        pthread_mutex_unlock(&pool->mu);
        for (int i = 1; i <= pool->n_started; i++)
            pthread_join(pool->workers[i].th, NULL);
    }
    free(pool->workers);
    pthread_mutex_destroy(&pool->mu);
    pthread_cond_destroy(&pool->cv);
}

/* Run fn(arg, ith, nth) on every thread of the pool (the caller is thread 0)
 * and return when all are done. */
static void cpu_pool_run(struct cpu_pool *pool, cpu_task_fn fn, void *arg)
{
    if (pool->n <= 1) {
        fn(arg, 0, 1);
        return;
    }
    pool->fn = fn;
    pool->arg = arg;
    atomic_store(&pool->bar_count, 0);
    atomic_store(&pool->pending, pool->n - 1);
    atomic_fetch_add(&pool->gen, 1); /* seq_cst: publishes fn/arg, ordered before the read below */
    if (atomic_load(&pool->sleepers) > 0) {
        pthread_mutex_lock(&pool->mu);
        pthread_cond_broadcast(&pool->cv);
        pthread_mutex_unlock(&pool->mu);
    }
    fn(arg, 0, pool->n);
    int spins = 0;
    while (atomic_load_explicit(&pool->pending, memory_order_acquire) > 0) {
        if (++spins < CPU_SPIN)
            cpu_relax();
        else
            sched_yield();
    }
}

/* All nth threads of the current job meet here. */
static void cpu_barrier(struct cpu_pool *pool, int nth)
{
    if (nth <= 1)
        return;
    unsigned g = atomic_load(&pool->bar_gen);
    if (atomic_fetch_add(&pool->bar_count, 1) == nth - 1) {
        atomic_store(&pool->bar_count, 0);
        atomic_fetch_add(&pool->bar_gen, 1);
        return;
    }
    int spins = 0;
    while (atomic_load(&pool->bar_gen) == g) {
        if (++spins < CPU_SPIN)
            cpu_relax();
        else
            sched_yield();
    }
}

/* [*i0, *i1): thread ith's share of n items. */
static inline void cpu_split(int64_t n, int ith, int nth, int64_t *i0, int64_t *i1)
{
    *i0 = n * ith / nth;
    *i1 = n * (ith + 1) / nth;
}

/* ------------------------------------------------------------------------ */
/* Backend context                                                          */
/* ------------------------------------------------------------------------ */

/* Below this much work (multiply-adds or elements) an op runs on the calling
 * thread alone: waking the pool costs more than it saves. Speed only. */
#define CPU_PAR_MIN_MACS 32768
#define CPU_PAR_MIN_ELEMS 16384

/* Rope needs cos/sin of one position for n_dims/2 pairs; head_dim <= 1024 is
 * enforced by the model loader. */
#define CPU_MAX_ROPE_PAIRS 512

struct cpu_ctx {
    struct backend be;
    struct cpu_pool pool;
    char *xq;            /* activation rows quantized for one mul_mat */
    size_t xq_bytes;
    float *att;          /* attention scratch: att_stride floats per thread */
    size_t att_stride;
    int error;
};

static struct cpu_ctx *cpu_ctx(struct backend *be)
{
    return be->ctx;
}

static void cpu_run(struct cpu_ctx *c, cpu_task_fn fn, void *arg, int64_t work, int64_t min_work)
{
    if (work < min_work || c->pool.n <= 1)
        fn(arg, 0, 1);
    else
        cpu_pool_run(&c->pool, fn, arg);
}

/* ------------------------------------------------------------------------ */
/* Memory and weights                                                       */
/* ------------------------------------------------------------------------ */

static void *cpu_alloc(struct backend *be, size_t bytes)
{
    (void)be;
    size_t n = (bytes + 63) & ~(size_t)63;
    if (n < bytes)
        return NULL;
    if (n == 0)
        n = 64;
    void *p = aligned_alloc(64, n);
    if (p)
        memset(p, 0, n);
    return p;
}

static void cpu_free(struct backend *be, void *p)
{
    (void)be;
    free(p);
}

static void cpu_memcpy(struct backend *be, void *dst, const void *src, size_t bytes)
{
    (void)be;
    if (bytes)
        memmove(dst, src, bytes);
}

static int cpu_weight_register(struct backend *be, struct backend_weight *w)
{
    (void)be;
    if (!quant_type_supported(w->type))
        return INF_EUNSUPPORTED;
    w->data = (void *)w->host; /* the mapping is read-only: ops never write weights */
    return 0;
}

static void cpu_weight_release(struct backend *be, struct backend_weight *w)
{
    (void)be;
    w->data = NULL;
}

static int cpu_reserve(struct backend *be, const struct backend_reserve *r)
{
    struct cpu_ctx *c = cpu_ctx(be);
    /* The widest activation row any vec-dot type needs is F32: 4 bytes/element. */
    size_t xq = (size_t)r->max_rows * ((size_t)r->max_ne0 * 4 + 64);
    if (xq > c->xq_bytes) {
        void *p = cpu_alloc(be, xq);
        if (!p)
            return INF_ENOMEM;
        free(c->xq);
        c->xq = p;
        c->xq_bytes = xq;
    }
    /* attention: an F16 query and accumulator per thread (2 x head_dim
     * halves fit in head_dim floats) */
    size_t att = ((size_t)r->head_dim + 16) & ~(size_t)15;
    if (att > c->att_stride) {
        void *p = cpu_alloc(be, att * sizeof(float) * (size_t)c->pool.n);
        if (!p)
            return INF_ENOMEM;
        free(c->att);
        c->att = p;
        c->att_stride = att;
    }
    return 0;
}

static int cpu_sync(struct backend *be)
{
    struct cpu_ctx *c = cpu_ctx(be);
    int e = c->error;
    c->error = 0;
    return e;
}

/* ------------------------------------------------------------------------ */
/* llama.cpp-compatible arithmetic                                          */
/* ------------------------------------------------------------------------ */
/* The attention kernel rounds to F16 where llama.cpp's does, and its F16
 * dot product sums in the same order as llama.cpp's 8-lane AVX2 code (fmaf:
 * glibc uses the FMA instruction when the CPU has it). This matters on small
 * models: measured on stories260K, llama.cpp's F16 accumulator alone moves
 * logprobs by ~1e-2 against an all-F32 attention, and a 1-ulp change of K
 * before its F16 rounding moves them by up to ~7e-3. */

/* F16 -> F32 by table (exact; filled once by cpu_backend_new). */
static float cpu_f16_table[1 << 16];

static inline float cpu_f16_to_f32(quant_f16 h)
{
    return cpu_f16_table[h];
}

static inline quant_f16 cpu_f32_to_f16(float f)
{
    return quant_f32_to_f16(f); /* round to nearest even, as F16C */
}

/* Four 8-lane accumulators over 32-element steps, reduced (0+1), (2+3),
 * then together, then across lanes with horizontal adds: ggml's
 * GGML_F32_VEC_REDUCE. */
static inline float cpu_reduce4x8(float acc[4][8])
{
    float v[8];
    for (int l = 0; l < 8; l++)
        v[l] = (acc[0][l] + acc[1][l]) + (acc[2][l] + acc[3][l]);
    float t[4];
    for (int l = 0; l < 4; l++)
        t[l] = v[l] + v[l + 4];
    return (t[0] + t[1]) + (t[2] + t[3]);
}

/* Dot of two F16 rows as ggml_vec_dot_f16: 32-element steps in four 8-lane
 * FMA accumulators, the rest added in double. */
static float cpu_dot_f16(const quant_f16 *a, const quant_f16 *b, int32_t n)
{
    const int32_t np = n & ~31;
    double sum = 0.0;
    if (np > 0) {
        float acc[4][8];
        memset(acc, 0, sizeof(acc));
        for (int32_t i = 0; i < np; i += 32)
            for (int j = 0; j < 4; j++)
                for (int l = 0; l < 8; l++)
                    acc[j][l] = fmaf(cpu_f16_to_f32(a[i + 8 * j + l]),
                                     cpu_f16_to_f32(b[i + 8 * j + l]), acc[j][l]);
        sum = cpu_reduce4x8(acc);
    }
    for (int32_t i = np; i < n; i++)
        sum += (double)(cpu_f16_to_f32(a[i]) * cpu_f16_to_f32(b[i]));
    return (float)sum;
}

/* ------------------------------------------------------------------------ */
/* get_rows, gather                                                         */
/* ------------------------------------------------------------------------ */

struct cpu_rows_job {
    const struct backend_weight *w;
    const int32_t *ids;
    int32_t n;
    float *y;
};

static void cpu_get_rows_task(void *arg, int ith, int nth)
{
    struct cpu_rows_job *j = arg;
    const int64_t ne0 = j->w->ne0;
    int64_t r0, r1;
    cpu_split(j->n, ith, nth, &r0, &r1);
    for (int64_t r = r0; r < r1; r++) {
        const char *row = (const char *)j->w->data + (size_t)j->ids[r] * j->w->row_bytes;
        quant_dequant_row(j->w->type, row, j->y + r * ne0, ne0);
    }
}

static void cpu_get_rows(struct backend *be, const struct backend_weight *w, const int32_t *ids,
                         int32_t n, float *y)
{
    struct cpu_rows_job j = {w, ids, n, y};
    cpu_run(cpu_ctx(be), cpu_get_rows_task, &j, (int64_t)n * w->ne0, CPU_PAR_MIN_ELEMS);
}

static void cpu_gather(struct backend *be, const float *x, const int32_t *rows, int32_t n,
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
};

static void cpu_rms_norm_task(void *arg, int ith, int nth)
{
    struct cpu_norm_job *j = arg;
    int64_t r0, r1;
    cpu_split(j->n_rows, ith, nth, &r0, &r1);
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

static void cpu_rms_norm(struct backend *be, const float *x, const struct backend_weight *w,
                         float *y, int32_t n_rows, int32_t n, float eps)
{
    struct cpu_norm_job j = {x, w ? (const float *)w->data : NULL, y, n_rows, n, eps};
    cpu_run(cpu_ctx(be), cpu_rms_norm_task, &j, (int64_t)n_rows * n, CPU_PAR_MIN_ELEMS);
}

static void cpu_add_bias(struct backend *be, float *y, const struct backend_weight *b,
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
};

static void cpu_add_task(void *arg, int ith, int nth)
{
    struct cpu_ew_job *j = arg;
    int64_t i0, i1;
    cpu_split(j->n, ith, nth, &i0, &i1);
    for (int64_t i = i0; i < i1; i++)
        j->y[i] += j->x[i];
}

static void cpu_add(struct backend *be, float *y, const float *x, int64_t n)
{
    struct cpu_ew_job j = {y, x, n};
    cpu_run(cpu_ctx(be), cpu_add_task, &j, n, 4 * CPU_PAR_MIN_ELEMS);
}

static void cpu_silu_mul_task(void *arg, int ith, int nth)
{
    struct cpu_ew_job *j = arg;
    int64_t i0, i1;
    cpu_split(j->n, ith, nth, &i0, &i1);
    for (int64_t i = i0; i < i1; i++) {
        const float g = j->y[i];
        j->y[i] = g / (1.0f + expf(-g)) * j->x[i];
    }
}

static void cpu_silu_mul(struct backend *be, float *gate, const float *up, int64_t n,
                         int64_t row)
{
    (void)row;
    struct cpu_ew_job j = {gate, up, n};
    cpu_run(cpu_ctx(be), cpu_silu_mul_task, &j, n, CPU_PAR_MIN_ELEMS);
}

/* ------------------------------------------------------------------------ */
/* mul_mat                                                                  */
/* ------------------------------------------------------------------------ */

/* Output tiles: MM_TR activation rows x MM_TC weight rows. Weight rows of a
 * tile stay in L1 while the activation rows stream by. Speed only. */
#define MM_TR 16
#define MM_TC 16

struct cpu_mm_job {
    struct cpu_ctx *c;
    const struct backend_weight *w;
    const float *x;
    float *y;
    int32_t n_rows;
    int vdt;           /* quant_vec_dot_type(w->type) */
    size_t xrow_bytes; /* bytes of one converted activation row */
    char *xq;          /* converted rows; NULL when x is used as it is (F32) */
    int32_t tiles_r, tiles_c;
    atomic_int next;
};

static void cpu_mm_task(void *arg, int ith, int nth)
{
    struct cpu_mm_job *j = arg;
    const struct backend_weight *w = j->w;
    const int64_t ne0 = w->ne0, ne1 = w->ne1;

    /* 1. Convert each activation row once to the weight's vec-dot type. */
    const char *xrows = (const char *)j->x;
    if (j->xq) {
        for (int32_t r = ith; r < j->n_rows; r += nth)
            quant_quantize_row(j->vdt, j->x + (int64_t)r * ne0, j->xq + (size_t)r * j->xrow_bytes,
                               ne0);
        cpu_barrier(&j->c->pool, nth);
        xrows = j->xq;
    }

    /* 2. Dot products, tile by tile; whoever takes a tile computes all of it. */
    const int32_t n_tiles = j->tiles_r * j->tiles_c;
    for (;;) {
        int32_t t = atomic_fetch_add_explicit(&j->next, 1, memory_order_relaxed);
        if (t >= n_tiles)
            break;
        const int64_t c0 = (int64_t)(t / j->tiles_r) * MM_TC;
        const int32_t r0 = (t % j->tiles_r) * MM_TR;
        const int64_t c1 = c0 + MM_TC < ne1 ? c0 + MM_TC : ne1;
        const int32_t r1 = r0 + MM_TR < j->n_rows ? r0 + MM_TR : j->n_rows;
        for (int32_t r = r0; r < r1; r++) {
            const char *xr = xrows + (size_t)r * j->xrow_bytes;
            float *yr = j->y + (int64_t)r * ne1;
            const char *wr = (const char *)w->data + (size_t)c0 * w->row_bytes;
            for (int64_t col = c0; col < c1; col++, wr += w->row_bytes)
                yr[col] = quant_vec_dot(w->type, ne0, wr, xr);
        }
    }
}

static void cpu_mul_mat(struct backend *be, const struct backend_weight *w, const float *x,
                        float *y, int32_t n_rows)
{
    struct cpu_ctx *c = cpu_ctx(be);
    struct cpu_mm_job j;
    memset(&j, 0, sizeof(j));
    j.c = c;
    j.w = w;
    j.x = x;
    j.y = y;
    j.n_rows = n_rows;
    j.vdt = quant_vec_dot_type(w->type);
    if (j.vdt == QT_F32) {
        j.xq = NULL;
        j.xrow_bytes = (size_t)w->ne0 * sizeof(float);
    } else {
        j.xq = c->xq;
        j.xrow_bytes = quant_row_bytes(j.vdt, w->ne0);
        if ((size_t)n_rows * j.xrow_bytes > c->xq_bytes) {
            c->error = INF_EINTERNAL; /* reserve() was not told about this size */
            return;
        }
    }
    j.tiles_r = (n_rows + MM_TR - 1) / MM_TR;
    j.tiles_c = (int32_t)((w->ne1 + MM_TC - 1) / MM_TC);
    atomic_init(&j.next, 0);
    cpu_run(c, cpu_mm_task, &j, (int64_t)n_rows * w->ne0 * w->ne1, CPU_PAR_MIN_MACS);
}

/* ------------------------------------------------------------------------ */
/* rope                                                                     */
/* ------------------------------------------------------------------------ */

struct cpu_rope_job {
    float *x;
    int32_t n_rows, n_head;
    const int32_t *pos;
    const struct backend_rope *r;
};

static void cpu_rope_task(void *arg, int ith, int nth)
{
    struct cpu_rope_job *j = arg;
    const struct backend_rope *rp = j->r;
    const int32_t n_dims = rp->n_dims, half = n_dims / 2;
    /* theta_i = p * base^(-2i/n_dims), built by repeated multiplication in
     * float as ggml does, so the angles round the same way. */
    const float theta_scale = powf(rp->freq_base, -2.0f / (float)n_dims);
    float cs[CPU_MAX_ROPE_PAIRS], sn[CPU_MAX_ROPE_PAIRS];
    int64_t r0, r1;
    cpu_split(j->n_rows, ith, nth, &r0, &r1);
    for (int64_t r = r0; r < r1; r++) {
        float theta = (float)j->pos[r];
        for (int32_t i = 0; i < half; i++) {
            const float ff = rp->freq_factors ? rp->freq_factors[i] : 1.0f;
            const float t = rp->freq_scale * (theta / ff);
            cs[i] = cosf(t);
            sn[i] = sinf(t);
            theta *= theta_scale;
        }
        for (int32_t h = 0; h < j->n_head; h++) {
            float *v = j->x + (r * j->n_head + h) * (int64_t)n_dims;
            for (int32_t i = 0; i < half; i++) {
                /* llama pairs adjacent values; NEOX pairs the two halves. */
                const int32_t a = rp->neox ? i : 2 * i;
                const int32_t b = rp->neox ? i + half : 2 * i + 1;
                const float x0 = v[a], x1 = v[b];
                v[a] = x0 * cs[i] - x1 * sn[i];
                v[b] = x0 * sn[i] + x1 * cs[i];
            }
        }
    }
}

static void cpu_rope(struct backend *be, float *x, int32_t n_rows, int32_t n_head,
                     const int32_t *pos, const struct backend_rope *r)
{
    if (r->n_dims / 2 > CPU_MAX_ROPE_PAIRS || r->n_dims % 2) {
        cpu_ctx(be)->error = INF_EUNSUPPORTED;
        return;
    }
    struct cpu_rope_job j = {x, n_rows, n_head, pos, r};
    cpu_run(cpu_ctx(be), cpu_rope_task, &j, (int64_t)n_rows * n_head * r->n_dims,
            CPU_PAR_MIN_ELEMS);
}

/* ------------------------------------------------------------------------ */
/* KV cache and attention                                                   */
/* ------------------------------------------------------------------------ */

/* The cache holds F16 rows (as llama.cpp's default cache type): half the
 * memory, and the attention below rounds exactly where llama.cpp does. */
static void cpu_kv_store(struct backend *be, void *k_cache, void *v_cache, const float *k,
                         const float *v, const int32_t *slots, int32_t n_rows, int32_t row_len)
{
    (void)be;
    quant_f16 *kc = k_cache, *vc = v_cache;
    for (int32_t r = 0; r < n_rows; r++) {
        quant_f16 *kd = kc + (size_t)slots[r] * row_len, *vd = vc + (size_t)slots[r] * row_len;
        const float *ks = k + (size_t)r * row_len, *vs = v + (size_t)r * row_len;
        for (int32_t i = 0; i < row_len; i++) {
            kd[i] = cpu_f32_to_f16(ks[i]);
            vd[i] = cpu_f32_to_f16(vs[i]);
        }
    }
}

struct cpu_attn_job {
    struct cpu_ctx *c;
    const float *q;
    const quant_f16 *k_cache, *v_cache;
    float *out;
    int32_t n_rows;
    const int32_t *pos, *seq, *block_table;
    const struct backend_attn *a;
    atomic_int next;
};

/* One query head of one row, over positions 0..pos of its sequence, the way
 * llama.cpp's CPU flash attention does it: the query rounded to F16;
 * scores s_p = dot_f16(q, k_p) * scale; an online softmax that keeps the
 * running maximum M, the running sum S and the weighted sum of V in an F16
 * accumulator (rescaled by exp(M_old - M) when the maximum grows);
 * out = acc / S. */
static void cpu_attn_head(const struct backend_attn *a, const float *q, const quant_f16 *k_cache,
                          const quant_f16 *v_cache, const int32_t *bt, int32_t n_kv, int32_t kvo,
                          quant_f16 *q16, quant_f16 *acc, float *out)
{
    const int32_t hd = a->head_dim, bs = a->block_size, kvdim = a->n_head_kv * a->head_dim;
    for (int32_t d = 0; d < hd; d++) {
        q16[d] = cpu_f32_to_f16(q[d]);
        acc[d] = 0;
    }
    float M = -INFINITY, S = 0.0f;
    for (int32_t p = 0; p < n_kv; p++) {
        const size_t slot = (size_t)bt[p / bs] * bs + (size_t)(p % bs);
        const quant_f16 *kp = k_cache + slot * kvdim + kvo;
        const quant_f16 *vp = v_cache + slot * kvdim + kvo;
        const float s = cpu_dot_f16(kp, q16, hd) * a->scale;
        float ms = 1.0f, vs = 1.0f;
        if (s > M) {
            const float m_old = M;
            M = s;
            ms = expf(m_old - M);
            for (int32_t d = 0; d < hd; d++)
                acc[d] = cpu_f32_to_f16(cpu_f16_to_f32(acc[d]) * ms);
        } else {
            vs = expf(s - M);
        }
        for (int32_t d = 0; d < hd; d++)
            acc[d] = cpu_f32_to_f16(fmaf(cpu_f16_to_f32(vp[d]), vs, cpu_f16_to_f32(acc[d])));
        S = fmaf(S, ms, vs);
    }
    const float inv = S == 0.0f ? 0.0f : 1.0f / S;
    for (int32_t d = 0; d < hd; d++)
        out[d] = cpu_f16_to_f32(acc[d]) * inv;
}

static void cpu_attn_task(void *arg, int ith, int nth)
{
    struct cpu_attn_job *j = arg;
    const struct backend_attn *a = j->a;
    const int32_t hd = a->head_dim, qdim = a->n_head * hd;
    const int32_t group = a->n_head / a->n_head_kv;
    /* per-thread scratch: the F16 query and accumulator of one head */
    quant_f16 *q16 = (quant_f16 *)(j->c->att + (size_t)ith * j->c->att_stride);
    quant_f16 *acc = q16 + hd;
    (void)nth;
    /* One task = one (row, head): the unit whose arithmetic never changes. */
    const int32_t n_tasks = j->n_rows * a->n_head;
    for (;;) {
        int32_t t = atomic_fetch_add_explicit(&j->next, 1, memory_order_relaxed);
        if (t >= n_tasks)
            break;
        const int32_t r = t / a->n_head, h = t % a->n_head;
        cpu_attn_head(a, j->q + (size_t)r * qdim + (size_t)h * hd, j->k_cache, j->v_cache,
                      j->block_table + (size_t)j->seq[r] * a->bt_stride, j->pos[r] + 1,
                      (h / group) * hd, q16, acc, j->out + (size_t)r * qdim + (size_t)h * hd);
    }
}

static void cpu_attention(struct backend *be, const float *q, const void *k_cache,
                          const void *v_cache, float *out, int32_t n_rows, const int32_t *pos,
                          const int32_t *seq, const int32_t *block_table,
                          const struct backend_attn *a)
{
    struct cpu_ctx *c = cpu_ctx(be);
    if ((size_t)a->head_dim > c->att_stride) {
        c->error = INF_EINTERNAL; /* reserve() was not told about this head size */
        return;
    }
    int64_t work = 0;
    for (int32_t r = 0; r < n_rows; r++)
        work += (int64_t)(pos[r] + 1) * a->n_head * a->head_dim * 2;
    struct cpu_attn_job j;
    memset(&j, 0, sizeof(j));
    j.c = c;
    j.q = q;
    j.k_cache = k_cache;
    j.v_cache = v_cache;
    j.out = out;
    j.n_rows = n_rows;
    j.pos = pos;
    j.seq = seq;
    j.block_table = block_table;
    j.a = a;
    atomic_init(&j.next, 0);
    cpu_run(c, cpu_attn_task, &j, work, CPU_PAR_MIN_MACS);
}

/* ------------------------------------------------------------------------ */
/* The table                                                                */
/* ------------------------------------------------------------------------ */

static void cpu_destroy(struct backend *be)
{
    struct cpu_ctx *c = cpu_ctx(be);
    cpu_pool_destroy(&c->pool);
    free(c->xq);
    free(c->att);
    free(c);
}

static const struct backend_ops cpu_ops = {
    .name = "cpu",
    .kv_type = QT_F16,
    .destroy = cpu_destroy,
    .reserve = cpu_reserve,
    .alloc = cpu_alloc,
    .free = cpu_free,
    .upload = cpu_memcpy,
    .download = cpu_memcpy,
    .copy = cpu_memcpy,
    .weight_register = cpu_weight_register,
    .weight_release = cpu_weight_release,
    .get_rows = cpu_get_rows,
    .gather = cpu_gather,
    .rms_norm = cpu_rms_norm,
    .mul_mat = cpu_mul_mat,
    .add_bias = cpu_add_bias,
    .rope = cpu_rope,
    .kv_store = cpu_kv_store,
    .attention = cpu_attention,
    .silu_mul = cpu_silu_mul,
    .add = cpu_add,
    .sync = cpu_sync,
};

static void cpu_f16_table_init(void)
{
    for (uint32_t i = 0; i < (1u << 16); i++)
        cpu_f16_table[i] = quant_f16_to_f32((quant_f16)i);
}

struct backend *cpu_backend_new(int n_threads)
{
    if (n_threads <= 0)
        n_threads = 2;
    if (n_threads > 256)
        n_threads = 256;
    static pthread_once_t once = PTHREAD_ONCE_INIT;
    pthread_once(&once, cpu_f16_table_init);
    struct cpu_ctx *c = calloc(1, sizeof(*c));
    if (!c)
        return NULL;
    c->be.ops = &cpu_ops;
    c->be.ctx = c;
    if (cpu_pool_init(&c->pool, n_threads) != 0) {
        cpu_pool_destroy(&c->pool);
        free(c);
        return NULL;
    }
    return &c->be;
}

int cpu_backend_threads(const struct backend *be)
{
    const struct cpu_ctx *c = be->ctx;
    return c->pool.n;
}
