/* cpu — the CPU backend: the reference implementation of engine/backend.h.
 *
 * Plain C ops over host memory (with AVX2 versions that give the same bits),
 * a small persistent thread pool (the caller is thread 0 and takes work
 * first, so it never waits for a worker that has not started; idle workers
 * poll briefly, yielding the CPU, then sleep), weights used in place in the
 * GGUF mapping. Quantized dot products go through engine/quant (AVX2 when the
 * CPU has it). Every output element is computed by exactly one thread with the
 * same code whatever the thread count or batch size, so results are bit-identical
 * across both (batch invariance; threads change speed, never results).
 *
 * Threads: a backend belongs to one thread (the engine thread); its workers
 * only run inside an op.
 */
#ifndef INFERD_CPU_H
#define INFERD_CPU_H

struct backend;

/* n_threads <= 0 picks the default (2). Returns NULL on failure. */
struct backend *cpu_backend_new(int n_threads);

/* Threads of a CPU backend (including the caller). */
int cpu_backend_threads(const struct backend *be);

/* Tests: 1 = run the plain C ops only (no AVX2 paths of cpu_avx2.c), 0 =
 * the fastest paths this CPU runs (the default). Both give the same bits. */
void cpu_backend_force_plain(struct backend *be, int on);

#endif
