/* quant — ggml's tensor types, bit for bit: block structs, sizes, dequantization,
 * activation quantization and dot products (plain C reference + AVX2 paths).
 *
 * The block structs live in quant_blocks.h (shared with engine/cuda).
 * The dot product of a weight row of type T with activations follows llama.cpp's
 * CPU scheme: activations are first quantized to quant_vec_dot_type(T) (Q8_0
 * for Q4_0/Q8_0, Q8_K for the K-quants, F16 for F16, BF16 for BF16, F32 for
 * F32), then a kernel (enum quant_kernel) combines the two rows: one of
 * llama.cpp's (its bits, for parity runs) or, for the quantized types, the
 * canonical chain the CUDA backend runs (the invariant numerics' default).
 * All functions are pure and thread-safe.
 */
#ifndef INFERD_QUANT_H
#define INFERD_QUANT_H

#include <stddef.h>
#include <stdint.h>

#include "quant_blocks.h"

/* Name ("q4_K", "f16", ...) or NULL for an id ggml does not define. */
const char *quant_type_name(int type);
/* Elements per block and bytes per block; 0 for an unknown id. */
int quant_block_elems(int type);
size_t quant_block_bytes(int type);
/* 1 when the CPU engine can compute with this weight type. */
int quant_type_supported(int type);
/* Bytes of a row of n elements (n must be a multiple of the block size). */
size_t quant_row_bytes(int type, int64_t n);

float quant_f16_to_f32(quant_f16 h);
quant_f16 quant_f32_to_f16(float f);
float quant_bf16_to_f32(quant_bf16 h);
quant_bf16 quant_f32_to_bf16(float f);

/* Weight row -> floats. n is a multiple of the block size. */
void quant_dequant_row(int type, const void *src, float *dst, int64_t n);

/* Type the activations are converted to before a dot with a weight of `type`. */
int quant_vec_dot_type(int type);
/* floats -> a row of vec_dot_type (Q8_0, Q8_K, F16, BF16 or F32 copy).
 * Q8_0: d = amax/127 (f16), q = round-half-even(x * 127/amax), as llama.cpp's
 * AVX2 quantizer does. Q8_K: ggml's scheme (the first element of largest
 * magnitude maps to -127, float d, bsums per 16). F16/BF16 round to nearest
 * even. Every path writes the same bytes (quant_quantize_row_ref). */
void quant_quantize_row(int vec_dot_type, const float *x, void *dst, int64_t n);
/* The kernels of llama.cpp's CPU backend (AVX2 build) that one output of a
 * matrix product can go through. Which one runs depends on the weight type,
 * on whether ggml repacks the matrix (Q4_0 and Q4_K with a multiple of 8
 * rows) and, for products of two or more activation rows, on its batch
 * paths: tinyBLAS for F32/F16 (n % 8 == 0, rows % 4 == 0) and the 4-row
 * gemm of repacked Q4_K (llama.cpp runs the last rows % 4 of a batch
 * through the gemv). The batch kernels exist so llama.cpp's own
 * batch-dependent numbers can be reproduced (cpu_backend_set_numerics).
 *
 * The *_CANON kernels are not llama.cpp's: they are the float chain of the
 * CUDA backend's products (engine/cuda/qtypes.cuh), so that a CPU and a
 * GPU product of the same rows give the same bits. Per weight block (a
 * 256-element super-block, or a 32-element block for Q4_0/Q8_0) the exact
 * int32 sums S = sum over sub-blocks of scale * (q . x) and, for Q4_K/Q5_K,
 * M = sum over sub-blocks of min * (sum of x); then, block after block in
 * k order from acc = 0:
 *     acc = fmaf(d_w * d_x, (float)S, acc);
 *     acc = fmaf(-(dmin_w * d_x), (float)M, acc);   (Q4_K/Q5_K only)
 * The CPU backend's default (invariant) numerics run every row of a
 * quantized product through these, decode and prefill alike (batch
 * invariance), F32/F16/BF16 weights through llama.cpp's single-row kernels
 * (quant_kernel_invariant).
 * Every kernel's reference (quant_kernel_dot_ref) and AVX2 path give the
 * same bits. */
enum quant_kernel {
    QK_NONE = 0,
    QK_F32,       /* ggml_vec_dot_f32 */
    QK_F32_TB,    /* tinyBLAS F32 */
    QK_F16,       /* ggml_vec_dot_f16 (activations rounded to F16) */
    QK_F16_TB,    /* tinyBLAS F16 */
    QK_BF16,
    QK_Q8_0,      /* ggml_vec_dot_q8_0_q8_0 (tinyBLAS_Q0 computes the same) */
    QK_Q4_0,      /* ggml_vec_dot_q4_0_q8_0 */
    QK_Q4_0_RP,   /* repacked q4_0 8x8 gemv/gemm (the two agree) */
    QK_Q4_K,      /* ggml_vec_dot_q4_K_q8_K */
    QK_Q4_K_GEMV, /* repacked q4_K 8x8 gemv */
    QK_Q4_K_GEMM, /* repacked q4_K 8x8 gemm */
    QK_Q5_K,      /* ggml_vec_dot_q5_K_q8_K */
    QK_Q6_K,      /* ggml_vec_dot_q6_K_q8_K */
    QK_Q8_0_CANON, /* the canonical chain, one fma per 32-block */
    QK_Q4_0_CANON, /* the same (llama.cpp's repacked kernel runs it too) */
    QK_Q4_K_CANON, /* the canonical chain, two fmas per super-block */
    QK_Q5_K_CANON,
    QK_Q6_K_CANON, /* the canonical chain, one fma per super-block */
};
/* The kernel for a weight of `type` with w_rows rows and rows of n
 * elements; batch: the product has 2+ activation rows and this row is one
 * llama.cpp sends down its batch path. QK_NONE for an unsupported type. */
int quant_kernel_for(int type, int64_t w_rows, int64_t n, int batch);
/* The kernel of the invariant numerics for a weight of `type`, whatever
 * the matrix or batch: the *_CANON kernel of a quantized type, llama.cpp's
 * single-row kernel of F32/F16/BF16. QK_NONE for an unsupported type. */
int quant_kernel_invariant(int type);
float quant_kernel_dot_ref(int kernel, int64_t n, const void *w, const void *x);

/* Dot of one weight row of `type` with one activation row already converted
 * to quant_vec_dot_type(type), through the invariant numerics' kernel
 * (quant_kernel_invariant: what the CPU backend computes by default). Uses
 * the fastest path the CPU supports (AVX2 when built in and the CPU has
 * it); the fast path gives the bits of quant_vec_dot_ref. llama.cpp's own
 * kernels: quant_kernel_for + quant_kernel_func. */
float quant_vec_dot(int type, int64_t n, const void *w, const void *x);
/* Plain C reference, the specification the fast paths are tested against. */
float quant_vec_dot_ref(int type, int64_t n, const void *w, const void *x);

/* Reference activation quantization: the bytes quant_quantize_row must give on
 * every path (tests compare them bit for bit). */
void quant_quantize_row_ref(int vec_dot_type, const float *x, void *dst, int64_t n);

/* The dot of quant_vec_dot for one type, resolved once (the best path this CPU
 * runs, or the reference when forced): lets a matmul loop skip the dispatch.
 * NULL for a type the engine does not compute with. */
typedef float (*quant_vec_dot_fn)(int64_t n, const void *w, const void *x);
quant_vec_dot_fn quant_vec_dot_func(int type);
quant_vec_dot_fn quant_kernel_func(int kernel);
/* quant_vec_dots for a kernel. */
void quant_kernel_dots(int kernel, int64_t n, const void *w, const void *x, size_t x_stride, int nx,
                       float *out);

/* One weight row against nx activation rows (row r at x + r*x_stride bytes,
 * each already converted to quant_vec_dot_type(type)): out[r]. Each out[r]
 * is bit-identical to quant_vec_dot(type, n, w, x_r) -- batch invariance --
 * but each weight block is loaded and decoded once per group of up to 4
 * rows: a 4x cut in weight traffic for prefill when the matrix does not fit
 * in cache (on cache-resident weights it runs at the per-dot speed of
 * quant_vec_dot). Float types fall back to one quant_vec_dot per row. */
void quant_vec_dots(int type, int64_t n, const void *w, const void *x, size_t x_stride, int nx,
                    float *out);

/* Quantize floats into a weight row of `type` (reference quantizers; used by
 * tests and by `inferd mkmodel`). Supported for Q4_0, Q8_0, Q4_K, Q5_K, Q6_K,
 * F16, BF16, F32. Q4_0 is ggml's scheme; Q8_0 rounds against the stored f16
 * scale; the K-quants fit each sub-block's scale/min by least squares, then
 * quantize the scales and requantize against the stored values. Returns 0,
 * INF_EUNSUPPORTED, or INF_EINVAL when n is not a whole number of blocks. */
int quant_quantize_weights(int type, const float *x, void *dst, int64_t n);

/* 1 when the AVX2 paths are compiled in and this CPU runs them. */
int quant_have_avx2(void);
/* Force the reference paths (tests): 1 = reference only, 0 = best available. */
void quant_force_ref(int on);

#endif
