/* cpu_pool — the CPU backend's thread pool (see cpu_pool.h for the design:
 * chunks claimed from one counter, the caller first; two-phase ops; idle
 * workers spin, yield, then sleep on a futex). Which thread runs a chunk
 * changes no result. Threads: see cpu_pool.h.
 */
#include "cpu_pool.h"

#include <limits.h>
#include <sched.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#ifdef __linux__
#include <linux/futex.h>
#include <sys/syscall.h>
#include <unistd.h>
#endif

#include "err.h"


#define CPU_SPIN_NS 200000 /* workers: wait this long for the next op, then sleep */
#define CPU_PAUSE_NS 20000 /* ... of which this long busy; then yield between checks */
#define CPU_WAIT_NS 20000  /* the caller: spin this long for stragglers, then yield */

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

int cpu_pool_init(struct cpu_pool *pool, int n)
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

void cpu_pool_destroy(struct cpu_pool *pool)
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

void cpu_pool_run(struct cpu_pool *pool, cpu_chunk_fn fn, void *arg, int64_t n1, int64_t n)
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
