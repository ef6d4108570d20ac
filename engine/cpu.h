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

/* How products of several activation rows are computed.
 *  CPU_NUMERICS_INVARIANT (the default): every row through one kernel per
 *    weight type (quant_kernel_invariant), so a row's result never depends
 *    on the batch (DESIGN.md gate 4: greedy output under load equals greedy
 *    output alone). Quantized weights take the canonical chain the CUDA
 *    backend runs (engine/quant.h's *_CANON kernels), so a product has the
 *    same bits on both backends; F32/F16/BF16 llama.cpp's single-row
 *    kernels;
 *  CPU_NUMERICS_LLAMACPP: rows through the kernels llama.cpp's CPU backend
 *    picks for the matrix and that batch size (its single-row kernels,
 *    tinyBLAS for F32/F16 weights, the 4-row repacked Q4_K gemm), so a
 *    prompt prefilled in one call reproduces llama.cpp's numbers bit for
 *    bit where the kernels do. Not batch
 *    invariant, as llama.cpp is not; for parity runs and comparisons. Pair
 *    it with graph_params.late_out_rows = 1 (llama.cpp's graph order). */
enum cpu_numerics { CPU_NUMERICS_INVARIANT = 0, CPU_NUMERICS_LLAMACPP = 1 };
void cpu_backend_set_numerics(struct backend *be, enum cpu_numerics mode);

/* Tests: 1 = run the plain C ops only (no AVX2 paths of cpu_avx2.c), 0 =
 * the fastest paths this CPU runs (the default). Both give the same bits. */
void cpu_backend_force_plain(struct backend *be, int on);

#endif
