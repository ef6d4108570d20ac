/* cpu_pool — internal: the CPU backend's thread pool (engine/cpu*.c only).
 *
 * An op is split into chunks (row ranges, output tiles, attention units).
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
 * futex (CPU_SPIN_NS, CPU_PAUSE_NS: cpu_pool.c).
 *
 * Threads: cpu_pool_run is called by one thread (the backend's caller,
 * thread 0); the workers run only inside it.
 */
#ifndef INFERD_CPU_POOL_H
#define INFERD_CPU_POOL_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>

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

/* n threads including the caller (n <= 1: no workers). On failure the
 * workers started so far keep running: cpu_pool_destroy stops them. */
int cpu_pool_init(struct cpu_pool *pool, int n);
/* Stops and joins the workers; accepts a pool whose init failed. */
void cpu_pool_destroy(struct cpu_pool *pool);
/* Run chunks [0, n) of fn (phase 1: [0, n1)) on the pool; returns when all
 * are done. */
void cpu_pool_run(struct cpu_pool *pool, cpu_chunk_fn fn, void *arg, int64_t n1, int64_t n);

#endif
