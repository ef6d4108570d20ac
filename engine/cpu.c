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
 * The float ops have AVX2 versions in cpu_avx2.c that give the same bits as
 * the plain C here (cpu_backend_force_plain selects the plain C, for tests).
 * Threads: one caller thread (the engine thread) drives the backend; pool
 * workers run only inside an op.
 */
#include "cpu.h"

#include <limits.h>
#include <math.h>
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#ifdef __linux__
#include <linux/futex.h>
#include <sys/syscall.h>
#include <unistd.h>
#endif

#include "backend.h"
#include "cpu_avx2.h"
#include "err.h"
#include "quant.h"

/* ------------------------------------------------------------------------ */
/* Thread pool                                                              */
/* ------------------------------------------------------------------------ */
/* An op is split into chunks (row ranges, output tiles, attention units).
 * The caller posts the op and every thread, the caller first, claims chunks
 * from one counter until none are left; the caller then waits only for
 * chunks that were claimed and are still running. A worker that is asleep
 * or descheduled (the machine is often oversubscribed) therefore never holds
 * an op up: the caller just does its share. Which thread runs a chunk
 * changes nothing in the results.
 *
 * An op may have two phases (mul_mat: quantize the activations, then the
 * dot products): chunks [0, n1) first, and a chunk >= n1 starts only when
 * all of [0, n1) are done.
 *
 * The claim counter packs (job generation << 32 | next chunk), so a late
 * worker can never claim a chunk of a job that has ended: its compare-and-
 * swap fails once the generation moved on. Idle workers wait CPU_SPIN_NS
 * for the next op (ops of one forward pass follow each other within
 * microseconds, and a futex wake costs more) -- busy for the first
 * CPU_PAUSE_NS, then yielding the CPU between checks -- and then sleep on a
 * futex. */

#define CPU_SPIN_NS 200000 /* workers: wait this long for the next op, then sleep */
#define CPU_PAUSE_NS 20000 /* ... of which this long busy; then yield between checks */
#define CPU_WAIT_NS 20000  /* the caller: spin this long for stragglers, then yield */

typedef void (*cpu_chunk_fn)(void *arg, int64_t chunk, int ith);

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
    /* the current job: written by the caller before it publishes `claim`;
     * read by a worker only after it claimed a chunk of that job (the job
     * cannot end before that chunk is done) */
    cpu_chunk_fn fn;
    void *arg;
    int64_t n1;
    atomic_int_fast64_t n_chunks; /* read before claiming: may be the next job's */
    atomic_uint_fast64_t claim;   /* generation << 32 | next chunk */
    atomic_int_fast64_t done, done1;
    atomic_uint wake; /* futex word */
    atomic_int sleepers;
    atomic_int stop;
};

static inline void cpu_relax(void)
{
#if defined(__x86_64__) || defined(__i386__)
    __builtin_ia32_pause();
#endif
}

static int64_t cpu_now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

static void cpu_futex_wait(atomic_uint *w, unsigned val)
{
#ifdef __linux__
    syscall(SYS_futex, (unsigned *)w, FUTEX_WAIT_PRIVATE, val, NULL, NULL, 0);
#else
    (void)w, (void)val;
    sched_yield();
#endif
}

static void cpu_futex_wake_all(atomic_uint *w)
{
#ifdef __linux__
    syscall(SYS_futex, (unsigned *)w, FUTEX_WAKE_PRIVATE, INT_MAX, NULL, NULL, 0);
#else
    (void)w;
#endif
}

/* Spin until *v >= target; after `ns` of spinning, yield between checks. */
static void cpu_wait_ge(atomic_int_fast64_t *v, int64_t target, int64_t ns)
{
    if (atomic_load_explicit(v, memory_order_acquire) >= target)
        return;
    const int64_t t0 = cpu_now_ns();
    for (unsigned i = 1; atomic_load_explicit(v, memory_order_acquire) < target; i++) {
        cpu_relax();
        if ((i & 255) == 0 && cpu_now_ns() - t0 > ns)
            sched_yield();
    }
}

static void cpu_run_chunk(struct cpu_pool *pool, int64_t c, int ith)
{
    if (c >= pool->n1)
        cpu_wait_ge(&pool->done1, pool->n1, CPU_WAIT_NS);
    pool->fn(pool->arg, c, ith);
    if (c < pool->n1)
        atomic_fetch_add_explicit(&pool->done1, 1, memory_order_release);
    atomic_fetch_add_explicit(&pool->done, 1, memory_order_release);
}

/* Claim and run chunks of job generation `gen` until none are left. */
static void cpu_pool_work(struct cpu_pool *pool, uint32_t gen, int ith)
{
    uint_fast64_t v = atomic_load_explicit(&pool->claim, memory_order_acquire);
    for (;;) {
        if ((uint32_t)(v >> 32) != gen)
            return;
        const int64_t c = (int64_t)(uint32_t)v;
        if (c >= atomic_load_explicit(&pool->n_chunks, memory_order_relaxed))
            return;
        if (!atomic_compare_exchange_weak_explicit(&pool->claim, &v, v + 1,
                                                   memory_order_acq_rel, memory_order_acquire))
            continue; /* v was reloaded */
        cpu_run_chunk(pool, c, ith);
        v = atomic_load_explicit(&pool->claim, memory_order_acquire);
    }
}

static void *cpu_worker_main(void *p)
{
    struct cpu_worker *wk = p;
    struct cpu_pool *pool = wk->pool;
    const int ith = wk->ith;
    uint32_t seen = 0;
    for (;;) {
        uint32_t g = (uint32_t)(atomic_load_explicit(&pool->claim, memory_order_acquire) >> 32);
        if (g == seen) {
            const int64_t t0 = cpu_now_ns();
            unsigned i = 0;
            while ((g = (uint32_t)(atomic_load_explicit(&pool->claim, memory_order_acquire) >>
                                   32)) == seen) {
                cpu_relax();
                if (++i & 63)
                    continue;
                const int64_t dt = cpu_now_ns() - t0;
                if (dt < CPU_PAUSE_NS)
                    continue;
                /* Past the first microseconds, yield between checks: on an
                 * oversubscribed machine a busy worker would take half of
                 * the CPU it shares with the caller, the critical path. */
                if (dt < CPU_SPIN_NS) {
                    sched_yield();
                    continue;
                }
                /* Sleep. The caller publishes `claim` before it reads
                 * `sleepers`, and we count ourselves a sleeper before we
                 * re-read `claim` (all seq_cst), so one of the two sees the
                 * other: either the caller bumps `wake` or we see the job. */
                const unsigned w = atomic_load(&pool->wake);
                atomic_fetch_add(&pool->sleepers, 1);
                if ((uint32_t)(atomic_load(&pool->claim) >> 32) == seen)
                    cpu_futex_wait(&pool->wake, w);
                atomic_fetch_sub(&pool->sleepers, 1);
                i = 0;
            }
        }
        seen = g;
        if (atomic_load(&pool->stop))
            return NULL;
        cpu_pool_work(pool, g, ith);
    }
}

static int cpu_pool_init(struct cpu_pool *pool, int n)
{
    memset(pool, 0, sizeof(*pool));
    pool->n = n;
    atomic_init(&pool->claim, 0);
    atomic_init(&pool->n_chunks, 0);
    atomic_init(&pool->done, 0);
    atomic_init(&pool->done1, 0);
    atomic_init(&pool->wake, 0);
    atomic_init(&pool->sleepers, 0);
    atomic_init(&pool->stop, 0);
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
        atomic_store(&pool->n_chunks, 0);
        atomic_fetch_add(&pool->claim, (uint_fast64_t)1 << 32);
        atomic_fetch_add(&pool->wake, 1);
        cpu_futex_wake_all(&pool->wake);
        for (int i = 1; i <= pool->n_started; i++)
            pthread_join(pool->workers[i].th, NULL);
    }
    free(pool->workers);
}

/* Run chunks [0, n) of fn (phase 1: [0, n1)) on the pool; returns when all
 * are done. */
static void cpu_pool_run(struct cpu_pool *pool, cpu_chunk_fn fn, void *arg, int64_t n1, int64_t n)
{
    pool->fn = fn;
    pool->arg = arg;
    pool->n1 = n1;
    atomic_store_explicit(&pool->done, 0, memory_order_relaxed);
    atomic_store_explicit(&pool->done1, 0, memory_order_relaxed);
    atomic_store_explicit(&pool->n_chunks, n, memory_order_relaxed);
    const uint32_t gen =
        (uint32_t)(atomic_load_explicit(&pool->claim, memory_order_relaxed) >> 32) + 1;
    atomic_store(&pool->claim, (uint_fast64_t)gen << 32); /* seq_cst: publishes the job */
    if (atomic_load(&pool->sleepers) > 0) {
        atomic_fetch_add(&pool->wake, 1);
        cpu_futex_wake_all(&pool->wake);
    }
    cpu_pool_work(pool, gen, 0);
    cpu_wait_ge(&pool->done, n, CPU_WAIT_NS);
}

/* ------------------------------------------------------------------------ */
/* Backend context                                                          */
/* ------------------------------------------------------------------------ */

/* Below this much work (about one nanosecond each: multiply-adds / 16 or
 * elements) an op runs on the calling thread alone: posting it to the pool
 * costs more than it saves. Speed only. */
#define CPU_PAR_MIN_WORK 4096

/* Rope needs cos/sin of one position for n_dims/2 pairs; head_dim <= 1024 is
 * enforced by the model loader. */
#define CPU_MAX_ROPE_PAIRS 512
/* Largest cos/sin table kept for rope (floats); positions past it are
 * computed on the fly. */
#define CPU_ROPE_CACHE_FLOATS (1 << 21)

/* cos/sin of every position seen so far for one set of rope parameters:
 * each forward pass ropes q and k of every layer at the same positions, and
 * every request starts again at position 0. The table holds exactly what
 * the plain computation gives, so using it changes no result. */
struct cpu_rope_cache {
    float *cs;       /* [max_pos][cap_dims]: cos of the pairs, then sin */
    uint8_t *valid;  /* [max_pos] */
    int32_t max_pos; /* positions the table can hold (0: none) */
    int32_t cap_dims;
    /* parameters the table was filled for */
    int32_t n_dims;
    float base, scale;
    int has_ff;
    float ff[CPU_MAX_ROPE_PAIRS];
};

struct cpu_ctx {
    struct backend be;
    struct cpu_pool pool;
    int simd;            /* AVX2 paths of cpu_avx2.c */
    int numerics;        /* enum cpu_numerics */
    char *xq;            /* activation rows quantized for one mul_mat */
    size_t xq_bytes;
    float *att;          /* attention scratch: att_stride floats per thread */
    size_t att_stride;
    struct cpu_rope_cache rope;
    int error;
    /* ops->sample scratch: [smp_vocab] each */
    float *smp_work;
    uint64_t *smp_keys;
    float *smp_lp; /* the masked row for logprobs */
    int32_t smp_vocab;
};

static struct cpu_ctx *cpu_ctx(struct backend *be)
{
    return be->ctx;
}

/* Run chunks [0, n) of fn (two phases when n1 > 0). `work` estimates the
 * op's cost; small ops, and any op of a one-thread backend, run here. */
static void cpu_run(struct cpu_ctx *c, cpu_chunk_fn fn, void *arg, int64_t n1, int64_t n,
                    int64_t work)
{
    if (n <= 1 || work < CPU_PAR_MIN_WORK || c->pool.n <= 1) {
        for (int64_t i = 0; i < n; i++)
            fn(arg, i, 0);
        return;
    }
    cpu_pool_run(&c->pool, fn, arg, n1, n);
}

/* Chunks for n items of `cost` each: enough for the threads to balance
 * (up to 4 per thread), none smaller than about CPU_PAR_MIN_WORK. */
static int64_t cpu_chunks(const struct cpu_ctx *c, int64_t n, int64_t cost)
{
    int64_t k = 4 * (int64_t)c->pool.n;
    const int64_t by_work = n * cost / CPU_PAR_MIN_WORK;
    if (k > by_work)
        k = by_work;
    if (k > n)
        k = n;
    return k < 1 ? 1 : k;
}

/* [*i0, *i1): chunk `ci` of n items split into k. */
static inline void cpu_split(int64_t n, int64_t ci, int64_t k, int64_t *i0, int64_t *i1)
{
    *i0 = n * ci / k;
    *i1 = n * (ci + 1) / k;
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

/* Host memory is all the CPU has: host_alloc is alloc, and a download into
 * it is done when it returns. */
static void cpu_download_async(struct backend *be, void *dst, const void *src, size_t bytes)
{
    cpu_memcpy(be, dst, src, bytes);
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
    /* attention, per thread: the plain path needs an F16 query and
     * accumulator (2 x head_dim halves fit in head_dim floats), the AVX2
     * path the scratch of a group of up to n_head heads */
    size_t att = cpu_attn_scratch_floats(r->n_head, r->head_dim);
    att = (att + 15) & ~(size_t)15;
    if (att > c->att_stride) {
        void *p = cpu_alloc(be, att * sizeof(float) * (size_t)c->pool.n);
        if (!p)
            return INF_ENOMEM;
        free(c->att);
        c->att = p;
        c->att_stride = att;
    }
    /* rope table */
    if (r->head_dim <= 2 * CPU_MAX_ROPE_PAIRS && r->head_dim > 0) {
        int64_t pos = r->max_ctx;
        if (pos * r->head_dim > CPU_ROPE_CACHE_FLOATS)
            pos = CPU_ROPE_CACHE_FLOATS / r->head_dim;
        if (pos > c->rope.max_pos || r->head_dim > c->rope.cap_dims) {
            const int32_t dims = r->head_dim > c->rope.cap_dims ? r->head_dim : c->rope.cap_dims;
            if (pos < c->rope.max_pos)
                pos = c->rope.max_pos;
            float *cs = cpu_alloc(be, (size_t)pos * (size_t)dims * sizeof(float));
            uint8_t *valid = cpu_alloc(be, (size_t)pos);
            if (!cs || !valid) {
                free(cs);
                free(valid);
                return INF_ENOMEM;
            }
            free(c->rope.cs);
            free(c->rope.valid);
            c->rope.cs = cs;
            c->rope.valid = valid; /* zeroed: nothing cached */
            c->rope.max_pos = (int32_t)pos;
            c->rope.cap_dims = dims;
        }
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

static inline float cpu_f16_to_f32(quant_f16 h)
{
    return quant_f16_to_f32(h); /* exact */
}

static inline quant_f16 cpu_f32_to_f16(float f)
{
    return quant_f32_to_f16(f); /* round to nearest even, as F16C */
}

/* Dot of two F16 rows as ggml_vec_dot_f16: quant's F16 kernel (its plain C
 * reference; cpu_avx2_attn computes the same bits). */
static float cpu_dot_f16(const quant_f16 *a, const quant_f16 *b, int32_t n)
{
    return quant_kernel_dot_ref(QK_F16, n, a, b);
}

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

static void cpu_get_rows(struct backend *be, const struct backend_weight *w, const int32_t *ids,
                         int32_t n, float *y)
{
    struct cpu_ctx *c = cpu_ctx(be);
    struct cpu_rows_job j = {w, ids, n, cpu_chunks(c, n, w->ne0), y};
    cpu_run(c, cpu_get_rows_task, &j, 0, j.k, (int64_t)n * w->ne0);
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

static void cpu_rms_norm(struct backend *be, const float *x, const struct backend_weight *w,
                         float *y, int32_t n_rows, int32_t n, float eps)
{
    struct cpu_ctx *c = cpu_ctx(be);
    struct cpu_norm_job j = {x, w ? (const float *)w->data : NULL, y, n_rows, n, eps, c->simd, 0};
    /* chunks of whole groups of 4 rows keep the 4-row SIMD sum busy (any
     * split gives the same bits) */
    j.k = cpu_chunks(c, (n_rows + 3) / 4, 4 * (int64_t)n);
    cpu_run(c, cpu_rms_norm_task, &j, 0, j.k, (int64_t)n_rows * n);
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

static void cpu_add(struct backend *be, float *y, const float *x, int64_t n)
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

static void cpu_silu_mul(struct backend *be, float *gate, const float *up, int64_t n,
                         int64_t row)
{
    struct cpu_ctx *c = cpu_ctx(be);
    if (row < 1 || row > n)
        row = n > 0 ? n : 1;
    struct cpu_silu_job j = {gate, up, n, row, (n + row - 1) / row, 0, c->simd};
    j.k = cpu_chunks(c, j.n_rows, row);
    cpu_run(c, cpu_silu_mul_task, &j, 0, j.k, n);
}

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

static void cpu_mul_mat(struct backend *be, const struct backend_weight *w, const float *x,
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
    j.kernel[0] = j.kernel[1] = quant_kernel_for(w->type, ne1, ne0, 0);
    if (c->numerics == CPU_NUMERICS_LLAMACPP && n_rows >= 2) {
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

static void cpu_rope(struct backend *be, float *x, int32_t n_rows, int32_t n_head,
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

/* ------------------------------------------------------------------------ */
/* KV cache and attention                                                   */
/* ------------------------------------------------------------------------ */

/* The cache holds F16 rows (as llama.cpp's default cache type): half the
 * memory, and the attention below rounds exactly where llama.cpp does.
 * quant_quantize_row(QT_F16) gives the bytes of quant_f32_to_f16 on every
 * path. Layout: one allocation, per layer the K plane then the V plane, each
 * [n_blocks * block_size][row_len] F16, so a block is one contiguous run of
 * every plane. */
struct backend_kv {
    struct backend_kv_shape s;
    size_t row_bytes; /* row_len F16 */
    size_t plane;     /* bytes of one layer's K (or V) */
    char *data;       /* [n_layer][2][slots][row_len] */
};

static quant_f16 *cpu_kv_plane(const struct backend_kv *kv, int32_t layer, int v)
{
    return (quant_f16 *)(kv->data + ((size_t)layer * 2 + (size_t)v) * kv->plane);
}

static int cpu_kv_alloc(struct backend *be, const struct backend_kv_shape *s,
                        struct backend_kv **out)
{
    *out = NULL;
    if (s->n_layer < 1 || s->n_blocks < 1 || s->block_size < 1 || s->row_len < 1)
        return INF_EINVAL;
    struct backend_kv *kv = calloc(1, sizeof(*kv));
    if (!kv)
        return INF_ENOMEM;
    kv->s = *s;
    kv->row_bytes = (size_t)s->row_len * sizeof(quant_f16);
    const size_t slots = (size_t)s->n_blocks * (size_t)s->block_size;
    if (slots > SIZE_MAX / kv->row_bytes ||
        slots * kv->row_bytes > SIZE_MAX / 2 / (size_t)s->n_layer) {
        free(kv);
        return INF_ENOMEM;
    }
    kv->plane = slots * kv->row_bytes;
    kv->data = cpu_alloc(be, kv->plane * 2 * (size_t)s->n_layer);
    if (!kv->data) {
        free(kv);
        return INF_ENOMEM;
    }
    *out = kv;
    return 0;
}

static void cpu_kv_free(struct backend *be, struct backend_kv *kv)
{
    if (!kv)
        return;
    cpu_free(be, kv->data);
    free(kv);
}

static void cpu_kv_copy_blocks(struct backend *be, struct backend_kv *kv, const int32_t *src,
                               const int32_t *dst, int32_t n)
{
    struct cpu_ctx *c = cpu_ctx(be);
    const size_t bb = (size_t)kv->s.block_size * kv->row_bytes;
    for (int32_t i = 0; i < n; i++) {
        if (src[i] < 0 || src[i] >= kv->s.n_blocks || dst[i] < 0 || dst[i] >= kv->s.n_blocks) {
            c->error = INF_EINTERNAL; /* the caller checks the ids */
            return;
        }
        for (int32_t l = 0; l < kv->s.n_layer; l++)
            for (int v = 0; v < 2; v++) {
                char *p = (char *)cpu_kv_plane(kv, l, v);
                memcpy(p + (size_t)dst[i] * bb, p + (size_t)src[i] * bb, bb);
            }
    }
}

static int cpu_kv_read(struct backend *be, struct backend_kv *kv, int32_t layer, int64_t slot0,
                       int64_t n, void *k_host, void *v_host)
{
    const int64_t slots = (int64_t)kv->s.n_blocks * kv->s.block_size;
    if (layer < 0 || layer >= kv->s.n_layer || slot0 < 0 || n < 0 || slot0 + n > slots)
        return INF_EINVAL;
    memcpy(k_host, (char *)cpu_kv_plane(kv, layer, 0) + (size_t)slot0 * kv->row_bytes,
           (size_t)n * kv->row_bytes);
    memcpy(v_host, (char *)cpu_kv_plane(kv, layer, 1) + (size_t)slot0 * kv->row_bytes,
           (size_t)n * kv->row_bytes);
    return cpu_sync(be);
}

static void cpu_kv_store(struct backend *be, struct backend_kv *kv, int32_t layer, const float *k,
                         const float *v, const int32_t *slots, int32_t n_rows)
{
    (void)be;
    const int32_t row_len = kv->s.row_len;
    quant_f16 *kc = cpu_kv_plane(kv, layer, 0), *vc = cpu_kv_plane(kv, layer, 1);
    for (int32_t r = 0; r < n_rows; r++) {
        quant_quantize_row(QT_F16, k + (size_t)r * row_len, kc + (size_t)slots[r] * row_len,
                           row_len);
        quant_quantize_row(QT_F16, v + (size_t)r * row_len, vc + (size_t)slots[r] * row_len,
                           row_len);
    }
}

/* One query head of one row, over positions 0..n_kv-1 of its sequence, the
 * way llama.cpp's CPU flash attention does it: the query rounded to F16;
 * scores s_p = dot_f16(q, k_p) * scale; an online softmax that keeps the
 * running maximum M, the running sum S and the weighted sum of V in an F16
 * accumulator (rescaled by exp(M_old - M) when the maximum grows);
 * out = acc / S. (cpu_avx2_attn computes the same bits.) */
static void cpu_attn_head(const struct cpu_attn_group *g, const float *q, quant_f16 *q16,
                          quant_f16 *acc, float *out)
{
    const int32_t hd = g->head_dim, bs = g->block_size;
    for (int32_t d = 0; d < hd; d++) {
        q16[d] = cpu_f32_to_f16(q[d]);
        acc[d] = 0;
    }
    float M = -INFINITY, S = 0.0f;
    for (int32_t p = 0; p < g->n_kv; p++) {
        const size_t slot = (size_t)g->bt[p / bs] * bs + (size_t)(p % bs);
        const quant_f16 *kp = g->k + slot * g->kv_stride;
        const quant_f16 *vp = g->v + slot * g->kv_stride;
        const float s = cpu_dot_f16(kp, q16, hd) * g->scale;
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
        S = fmaf(S, ms, vs); /* contracted in llama.cpp's build */
    }
    const float inv = S == 0.0f ? 0.0f : 1.0f / S;
    for (int32_t d = 0; d < hd; d++)
        out[d] = cpu_f16_to_f32(acc[d]) * inv;
}

struct cpu_attn_job {
    struct cpu_ctx *c;
    const float *q;
    const quant_f16 *k_cache, *v_cache;
    float *out;
    const int32_t *pos, *seq, *block_table;
    const struct backend_attn *a;
    int simd;
};

/* One chunk = one (row, KV head): the query heads sharing that KV head read
 * each K/V row once. Each head's arithmetic is the same whatever the
 * grouping. */
static void cpu_attn_task(void *arg, int64_t ci, int ith)
{
    struct cpu_attn_job *j = arg;
    const struct backend_attn *a = j->a;
    const int32_t hd = a->head_dim, qdim = a->n_head * hd, kvdim = a->n_head_kv * hd;
    const int32_t group = a->n_head / a->n_head_kv;
    const int64_t r = ci / a->n_head_kv;
    const int32_t kvh = (int32_t)(ci % a->n_head_kv);
    float *scratch = j->c->att + (size_t)ith * j->c->att_stride;
    struct cpu_attn_group g = {
        .q = j->q + (size_t)r * qdim + (size_t)kvh * group * hd,
        .out = j->out + (size_t)r * qdim + (size_t)kvh * group * hd,
        .k = j->k_cache + (size_t)kvh * hd,
        .v = j->v_cache + (size_t)kvh * hd,
        .bt = j->block_table + (size_t)j->seq[r] * a->bt_stride,
        .n_kv = j->pos[r] + 1,
        .nq = group,
        .head_dim = hd,
        .block_size = a->block_size,
        .kv_stride = kvdim,
        .scale = a->scale,
        .scratch = scratch,
    };
#ifdef INFERD_HAVE_AVX2
    if (j->simd) {
        cpu_avx2_attn(&g);
        return;
    }
#endif
    quant_f16 *q16 = (quant_f16 *)scratch, *acc = q16 + hd;
    for (int32_t h = 0; h < group; h++)
        cpu_attn_head(&g, g.q + (size_t)h * hd, q16, acc, g.out + (size_t)h * hd);
}

static void cpu_attention(struct backend *be, const float *q, struct backend_kv *kv,
                          int32_t layer, float *out, int32_t n_rows, const int32_t *pos,
                          const int32_t *seq, const int32_t *block_table,
                          const struct backend_attn *a)
{
    struct cpu_ctx *c = cpu_ctx(be);
    const int32_t group = a->n_head_kv > 0 ? a->n_head / a->n_head_kv : 0;
    const quant_f16 *k_cache = cpu_kv_plane(kv, layer, 0);
    const quant_f16 *v_cache = cpu_kv_plane(kv, layer, 1);
    if (group < 1 || group * a->n_head_kv != a->n_head ||
        kv->s.row_len != a->n_head_kv * a->head_dim || kv->s.block_size != a->block_size ||
        cpu_attn_scratch_floats(group, a->head_dim) > c->att_stride) {
        c->error = INF_EINTERNAL; /* reserve() was not told about this shape */
        return;
    }
    int64_t work = 0;
    for (int32_t r = 0; r < n_rows; r++)
        work += (int64_t)(pos[r] + 1) * a->n_head * a->head_dim * 2;
    struct cpu_attn_job j = {c, q, k_cache, v_cache, out, pos, seq, block_table, a, 0};
    j.simd = c->simd && a->head_dim % 8 == 0 && group <= 64;
    cpu_run(c, cpu_attn_task, &j, 0, (int64_t)n_rows * a->n_head_kv, work / 8);
}

/* ------------------------------------------------------------------------ */
/* The table                                                                */
/* ------------------------------------------------------------------------ */

/* ---- sample: engine/sample.c over the flat states (the reference) ---- */

static int cpu_sample_reserve(struct cpu_ctx *c, int32_t n_vocab)
{
    if (n_vocab <= c->smp_vocab)
        return 0;
    float *w = malloc((size_t)n_vocab * sizeof(float));
    uint64_t *k = malloc((size_t)n_vocab * sizeof(uint64_t));
    float *lp = malloc((size_t)n_vocab * sizeof(float));
    if (!w || !k || !lp) {
        free(w);
        free(k);
        free(lp);
        return INF_ENOMEM;
    }
    free(c->smp_work);
    free(c->smp_keys);
    free(c->smp_lp);
    c->smp_work = w;
    c->smp_keys = k;
    c->smp_lp = lp;
    c->smp_vocab = n_vocab;
    return 0;
}

static int cpu_sample(struct backend *be, const float *logits, int32_t n_rows, int32_t n_vocab,
                      const struct backend_sample_req *reqs, int32_t n_reqs,
                      struct backend_sample_out *out)
{
    struct cpu_ctx *c = cpu_ctx(be);
    if (n_vocab <= 0 || n_reqs < 0)
        return INF_EINVAL;
    int rc = cpu_sample_reserve(c, n_vocab);
    if (rc || !reqs)
        return rc;
    for (int32_t i = 0; i < n_reqs; i++) {
        const struct backend_sample_req *q = &reqs[i];
        if (q->row < 0 || q->row >= n_rows || q->n_top > BACKEND_SAMPLE_MAX_TOP ||
            q->token >= n_vocab || (q->token < 0 && !q->state))
            return INF_EINVAL;
    }
    for (int32_t i = 0; i < n_reqs; i++) {
        const struct backend_sample_req *q = &reqs[i];
        const float *L = logits + (size_t)q->row * (size_t)n_vocab;
        const int masked = q->state && (q->flags & BACKEND_SAMPLE_MASKED);
        struct backend_sample_out *o = &out[i];
        o->token = q->token >= 0 ? q->token
                                 : sample_state_step(q->state, n_vocab, L, masked,
                                                     c->smp_work, c->smp_keys);
        o->logprob = 0.f;
        if (q->n_top < 0)
            continue;
        if (masked) { /* the scheduler's masking of the row, on a copy */
            const int32_t *m = sample_state_mask(q->state);
            memcpy(c->smp_lp, L, (size_t)n_vocab * sizeof(float));
            for (int32_t k = 0; k < q->state->n_mask; k++)
                if (m[k] >= 0 && m[k] < n_vocab)
                    c->smp_lp[m[k]] = -INFINITY;
            L = c->smp_lp;
        }
        o->logprob = sample_logprobs(L, n_vocab, o->token, q->n_top, o->top_ids, o->top_lps);
    }
    return 0;
}

static void cpu_destroy(struct backend *be)
{
    struct cpu_ctx *c = cpu_ctx(be);
    free(c->smp_work);
    free(c->smp_keys);
    free(c->smp_lp);
    cpu_pool_destroy(&c->pool);
    free(c->xq);
    free(c->att);
    free(c->rope.cs);
    free(c->rope.valid);
    free(c);
}

static const struct backend_ops cpu_ops = {
    .name = "cpu",
    .kv_type = QT_F16,
    .async = 0,
    .destroy = cpu_destroy,
    .reserve = cpu_reserve,
    .alloc = cpu_alloc,
    .free = cpu_free,
    .upload = cpu_memcpy,
    .download = cpu_memcpy,
    .copy = cpu_memcpy,
    .host_alloc = cpu_alloc,
    .host_free = cpu_free,
    .download_async = cpu_download_async,
    .weight_register = cpu_weight_register,
    .weight_release = cpu_weight_release,
    .get_rows = cpu_get_rows,
    .gather = cpu_gather,
    .rms_norm = cpu_rms_norm,
    .mul_mat = cpu_mul_mat,
    .add_bias = cpu_add_bias,
    .rope = cpu_rope,
    .kv_alloc = cpu_kv_alloc,
    .kv_free = cpu_kv_free,
    .kv_copy_blocks = cpu_kv_copy_blocks,
    .kv_read = cpu_kv_read,
    .kv_store = cpu_kv_store,
    .attention = cpu_attention,
    .silu_mul = cpu_silu_mul,
    .add = cpu_add,
    .sync = cpu_sync,
    .sample = cpu_sample,
};

struct backend *cpu_backend_new(int n_threads)
{
    if (n_threads <= 0)
        n_threads = 2;
    if (n_threads > 256)
        n_threads = 256;
    struct cpu_ctx *c = calloc(1, sizeof(*c));
    if (!c)
        return NULL;
    c->be.ops = &cpu_ops;
    c->be.ctx = c;
#ifdef INFERD_HAVE_AVX2
    c->simd = quant_have_avx2();
#endif
    if (cpu_pool_init(&c->pool, n_threads) != 0) {
        cpu_pool_destroy(&c->pool);
        free(c);
        return NULL;
    }
    return &c->be;
}

void cpu_backend_set_numerics(struct backend *be, enum cpu_numerics mode)
{
    struct cpu_ctx *c = be->ctx;
    c->numerics = mode;
}

int cpu_backend_threads(const struct backend *be)
{
    const struct cpu_ctx *c = be->ctx;
    return c->pool.n;
}

void cpu_backend_force_plain(struct backend *be, int on)
{
    struct cpu_ctx *c = be->ctx;
#ifdef INFERD_HAVE_AVX2
    c->simd = !on && quant_have_avx2();
#else
    (void)on;
    c->simd = 0;
#endif
}
