/* cuda/mul_mat — y[r][j] = dot(row j of w, x[r]) for every weight type.
 *
 * Two kernel families that give every row the same bits: up to MM_COLS
 * rows the warp-per-row products (one warp per weight row and up to
 * MM_COLS activation rows, so a weight row is read once per MM_COLS
 * activation rows: cuda/mmvq.cu for the K-quants, mul_mat_q_kernel below
 * for Q8_0/Q4_0) and, past MM_COLS rows, the int8 tensor-core kernels of
 * cuda/mmq_*.cu.
 *  - quantized weights: the activations are quantized once per call to the
 *    CPU's vec_dot type (cuda/quantize.cu); lanes form the blocks' exact
 *    integer terms (cuda/qtypes.cuh) and one lane per activation row runs
 *    the float chain over the blocks in k order;
 *  - F32/F16/BF16 weights: cuBLASLt (cuda/mm_cublas.cu: one algorithm per
 *    shape for every n) when the library loads and the shape has an
 *    algorithm; else mul_mat_f_kernel below: the activations rounded to the
 *    weight's type as the CPU rounds them (F16/BF16), float products in a
 *    lane-strided order and a fixed butterfly sum. Which of the two serves
 *    a shape is fixed at registration, so every call of it takes the same.
 * Batch invariance: a row's arithmetic depends only on the row length,
 * never on n_rows or on which rows share the warp (cuBLAS: by default; the
 * config key batch_invariant = false gives that up for its speed).
 */
#include <stdio.h>

extern "C" {
#include "engine/quant.h"
}

#include "engine/cuda/mmq.cuh"
#include "engine/cuda/qtypes.cuh"

#define MM_COLS 8  /* activation rows per warp */
#define MM_WARPS 4 /* weight rows per thread block */

/* Q8_0/Q4_0 in ggml's layout (rows cuda_q0_packed leaves alone: not a
 * whole number of 256-element stages): lane l takes 32-element blocks l,
 * l+32, ... (a warp reads 32 consecutive 18-34-byte blocks together); the
 * warp parks their terms in shared memory and lane c runs row c's float
 * chain over them in k order. Packed rows: cuda/mmq0_impl.cuh. */
template <int T>
static __global__ void __launch_bounds__(MM_WARPS *CUDA_WARP)
mul_mat_q_kernel(const uint8_t *__restrict__ w, size_t row_bytes, int32_t n_w_rows, cuda_q80 X, int64_t nb,
                 float *__restrict__ y, int32_t n_rows, struct cuda_epi E)
{
    cuda_pdl_enter();
    typedef cuda_qt<T> Q;
    /* per warp: the terms of 32 blocks x MM_COLS rows (p1, v1) */
    __shared__ float2 terms[MM_WARPS][CUDA_WARP][MM_COLS];
    const int wid = threadIdx.x / CUDA_WARP, lane = threadIdx.x % CUDA_WARP;
    const int32_t j = blockIdx.x * MM_WARPS + wid;
    const int32_t r0 = blockIdx.y * MM_COLS;
    if (j >= n_w_rows)
        return; /* whole warps only: the __syncwarp below stays full */
    const int ncols = n_rows - r0 < MM_COLS ? n_rows - r0 : MM_COLS;
    const uint8_t *row = w + (size_t)j * row_bytes;
    const int64_t x0 = (int64_t)r0 * nb;
    float acc = 0.0f; /* lane c < ncols: activation row r0 + c */
    for (int64_t base = 0; base < nb; base += CUDA_WARP) {
        const int64_t ib = base + lane;
        const int cnt = nb - base < CUDA_WARP ? (int)(nb - base) : CUDA_WARP;
        if (lane < cnt) {
            int v1[MM_COLS], v2[MM_COLS];
            Q::template terms<MM_COLS>(row, ib, X, x0 + ib, nb, ncols, v1, v2);
#pragma unroll
            for (int c = 0; c < MM_COLS; c++)
                if (c < ncols) {
                    float p1, p2;
                    Q::scales(row, ib, X, x0 + ib + c * nb, &p1, &p2);
                    terms[wid][lane][c] = make_float2(p1, (float)v1[c]);
                }
        }
        __syncwarp();
        if (lane < ncols)
            for (int k = 0; k < cnt; k++) {
                const float2 t = terms[wid][k][lane];
                acc = __fmaf_rn(t.x, t.y, acc);
            }
        __syncwarp();
    }
    if (lane < ncols)
        cuda_epi_store(y, r0 + lane, j, n_w_rows, acc, E);
}

/* activation element as the CPU's vec_dot type for weight type T holds it */
template <int T> static __device__ __forceinline__ float mm_act(float v)
{
    if (T == QT_F16)
        return __half2float(__float2half_rn(v));
    if (T == QT_BF16)
        return __bfloat162float(__float2bfloat16_rn(v));
    return v;
}

template <int T>
static __global__ void __launch_bounds__(MM_WARPS *CUDA_WARP)
mul_mat_f_kernel(const uint8_t *__restrict__ w, size_t row_bytes, int32_t n_w_rows,
                 const float *__restrict__ x, int64_t ne0, float *__restrict__ y, int32_t n_rows,
                 struct cuda_epi E)
{
    cuda_pdl_enter();
    const int32_t j = blockIdx.x * MM_WARPS + threadIdx.x / CUDA_WARP;
    const int lane = threadIdx.x % CUDA_WARP;
    const int32_t r0 = blockIdx.y * MM_COLS;
    if (j >= n_w_rows)
        return;
    const int ncols = n_rows - r0 < MM_COLS ? n_rows - r0 : MM_COLS;
    const uint8_t *row = w + (size_t)j * row_bytes;
    float acc[MM_COLS];
#pragma unroll
    for (int c = 0; c < MM_COLS; c++)
        acc[c] = 0.0f;
    for (int64_t i = lane; i < ne0; i += CUDA_WARP) {
        const float wv = cuda_dequant1<T>(row, i);
#pragma unroll
        for (int c = 0; c < MM_COLS; c++)
            if (c < ncols)
                acc[c] = __fmaf_rn(wv, mm_act<T>(x[(int64_t)(r0 + c) * ne0 + i]), acc[c]);
    }
#pragma unroll
    for (int c = 0; c < MM_COLS; c++) {
        const float s = cuda_warp_sum(acc[c]);
        if (lane == 0 && c < ncols)
            cuda_epi_store(y, r0 + c, j, n_w_rows, s, E);
    }
}

template <int T>
static void mul_mat_q_raw(struct cuda_ctx *c, const struct backend_weight *w, float *y, int32_t n_rows, dim3 grid,
                          dim3 block)
{
    const int64_t nb = w->ne0 / QK8_0;
    cuda_launch(c, mul_mat_q_kernel<T>, grid, block, 0, (const uint8_t *)w->data, w->row_bytes, (int32_t)w->ne1,
                                                        cuda_q80_planes(c->xq, (int64_t)n_rows * nb), nb, y,
                                                        n_rows, c->epi);
}

/* The row count from which the K-quants take mmqs instead of the dp4a
 * kernel. Measured on the H200 with mmqs's chain warp (bench/RESULTS.md,
 * 2026-12-03 20:30 call 3; 4096 x 14336 and the 7B's ffn-up, ffn-down and
 * attn-q, us mmqs / dp4a): q4_K at 3 rows 18.2 / 22.9, 25.9 / 27.6, 21.3 /
 * 27.8, 8.8 / 8.7 (at 2 the dp4a kernel wins ffn-up, 21.7 / 26.1); q5_K
 * and q6_K even in sum at 3 rows, mmqs 8% ahead over the four shapes at 4
 * (the dp4a kernel still wins attn-q and q6_K's ffn-up by 3-6%). */
static int mm_mmqs_min(const struct cuda_ctx *c, int type)
{
    return c->mmqs_min ? c->mmqs_min : type == QT_Q4_K ? 3 : 4;
}

/* Whether a K-quant product of MM_COLS + 1 .. 64 rows runs through mmqs
 * (two n8 tiles a block, k split over its producers) instead of MMQ,
 * whose 64-row weight tiles give ceil(ne1 / 64) blocks that each walk all
 * of k. Measured on the H200 (bench/RESULTS.md, 2026-12-03 22:45 call 2,
 * µs mmqs / MMQ): where MMQ's blocks fill fewer than the SMs, mmqs wins at
 * 9-16 rows (4096 x 14336 q4_K 37 / 62, the 7B's ffn-down 40 / 81, attn-q
 * 13 / 19) and at 17-32 on long rows (ffn-down 70 / 88 at 32; attn-q,
 * 3584 elements, 21 / 20); with 18944 rows (296 MMQ blocks) MMQ wins past
 * 16 rows (ffn-up q4_K 84 / 51 at 32) and ties below; weights of up to
 * 1024 rows (8 MMQ blocks) take mmqs to 64 rows (attn-kv 9 / 23). Capped
 * by c->mmqs_max (INFERD_MMQS_MAX=8..64; 8: MMQ from 9 rows). */
static int mm_mmqs_mid(const struct cuda_ctx *c, const struct backend_weight *w, int32_t n_rows)
{
    const int64_t blocks = (w->ne1 + 63) / 64;
    if (n_rows > c->mmqs_max)
        return 0;
    if (w->ne1 <= 1024)
        return 1;
    if (blocks >= c->n_sm)
        return 0;
    return n_rows <= 16 || (n_rows <= 32 && w->ne0 >= 4096);
}

/* Whether mul_mat_q runs w at n_rows through the MMQ kernels (cuda_mmq): a
 * quantized type past MM_COLS rows (K-quants: unless mm_mmqs_mid gives it
 * to mmqs), whole 256-element stages, Q4_0/Q8_0 in the packed layout.
 * The SwiGLU epilogue asks the same (only those kernels store it:
 * cuda_op_mul_mat_swiglu), so the two cannot drift apart. */
static int mm_takes_mmq(const struct cuda_ctx *c, const struct backend_weight *w, int32_t n_rows)
{
    if (n_rows <= MM_COLS || w->ne0 % 256 || cuda_mmd_takes(c, w, n_rows))
        return 0;
    switch (w->type) {
    case QT_Q4_K:
    case QT_Q5_K:
    case QT_Q6_K: return !mm_mmqs_mid(c, w, n_rows);
    case QT_Q4_0:
    case QT_Q8_0: return cuda_q0_packed(w->type, w->ne0);
    default: return 0;
    }
}

/* *held's value where the quantizer left the int8 plane out (mul_mat_q) */
#define MM_HELD_X16 (-2)

/* Whether w's product at n_rows goes to mmqr (Q4_K through MMQ where the
 * wgmma rule takes it, mmqr's form, x16 room), so its quantizer should
 * also write mmqr's f16 activations: a conversion kernel's 7 MB re-read
 * and launch fewer at 512 x 14336 (mmqh_x16p 8.4-9.1 us under ncu:
 * bench/RESULTS.md 2026-12-06 08:10-, call 9). If mmqr declines after all,
 * the other forms write x16 themselves, at the cost of the f16 writes
 * here. */
static bool mm_x16p_wanted(const struct cuda_ctx *c, const struct backend_weight *w, int32_t n_rows)
{
    return w->type == QT_Q4_K && c->mmqw >= 2 && w->ne0 % QK_K == 0 && cuda_x16_room(c, n_rows, w->ne0) &&
           mm_takes_mmq(c, w, n_rows) &&
           cuda_mmqh_takes(c, c->mmqh, c->mmqh_fill, QT_Q4_K, w->ne0, w->ne1, n_rows) &&
           !cuda_mmq4p_takes(c, w, n_rows); /* the planes' product reads the int8 plane */
}

/* One row of a K-quant through mmvt (rb, max_blocks, cw as cuda_mmvt
 * takes them): the float row where mmvt quantizes it itself (no quantizer
 * kernel, the scratch not written); else, or where the device cannot hold
 * that form, the quantizer's planes in c->xq (quantized here unless *held
 * says they are there; the quantizer then lets mmvt launch at its start).
 * cuda_mmvt's result: 0, INF_EUNSUPPORTED or -1 (the caller falls back to
 * mmvq, whose planes are then in c->xq). */
template <int T>
static int mm_mmvt(struct cuda_ctx *c, const struct backend_weight *w, const float *x, float *y, int rb,
                   int max_blocks, int cw, int *held)
{
    const int rc = cuda_mmvt<T>(c, w, x, NULL, y, 1, rb, max_blocks, cw);
    if (rc != INF_EUNSUPPORTED && rc != -1)
        return rc;
    if (*held != QT_Q8_K) {
        cuda_quantize_act(c, QT_Q8_K, x, c->xq, 1, w->ne0, 1);
        *held = QT_Q8_K;
    }
    return cuda_mmvt<T>(c, w, NULL, c->xq, y, 1, rb, max_blocks, cw);
}

/* *held: the vec-dot type the scratch c->xq already holds x in (-1:
 * nothing), so products sharing an activation quantize it once
 * (mul_mat_ex); updated here. */
template <int T>
static void mul_mat_q(struct cuda_ctx *c, const struct backend_weight *w, const float *x, float *y,
                      int32_t n_rows, dim3 grid, dim3 block, int *held)
{
    typedef cuda_qt<T> Q;
    constexpr int kq = Q::QK == QK_K;
    const int64_t nb = w->ne0 / Q::QK;
    /* the activation scratch is sized by ops->reserve */
    const size_t need = kq ? cuda_q8k_act_bytes(n_rows, nb) : cuda_q80_bytes((int64_t)n_rows * nb);
    if (!c->xq || need > c->xq_bytes) {
        c->err = INF_EINTERNAL;
        snprintf(c->err_msg, sizeof(c->err_msg), "mul_mat: %d rows of %lld exceed the reserved scratch",
                 n_rows, (long long)w->ne0);
        return;
    }
    /* one row of a K-quant: the lane-per-row kernel where the device has
     * bulk copies (same bits; with 12-14 compute warps on one-group shapes
     * it beats mmvq on every measured shape: cuda/mmvt.cu's mmvt_cw) */
    if constexpr (kq) {
        if (n_rows == 1 && c->mmvt && mm_mmvt<T>(c, w, x, y, 0, 0, 0, held) == 0)
            return;
    }
    const int vdt = kq ? QT_Q8_K : QT_Q8_0;
    if (*held != vdt) {
        /* MM_HELD_X16: c->xq holds d and the 32-sums, x16 the values, no
         * int8 plane; only a product mmqr takes as launched can use that */
        const bool x16w = mm_x16p_wanted(c, w, n_rows);
        const bool x16_only = x16w && c->mm_x16_ok && cuda_mmqr_takes(c, w, n_rows);
        if (*held != MM_HELD_X16 || !x16_only) {
            /* a Q4_K product mmqr will take: the quantizer writes its f16
             * activations too (mm_x16p_wanted), and leaves the int8 plane
             * out where every product of the op reads x16 (c->mm_x16_ok) */
            if (x16w)
                cuda_quantize_x16p(c, x, c->xq, n_rows, w->ne0, c->x16, x16_only);
            else
                cuda_quantize_act(c, vdt, x, c->xq, n_rows, w->ne0, 0);
            *held = x16_only ? MM_HELD_X16 : vdt;
        }
    }
    /* Q4_0/Q8_0 rows left in ggml's layout: the warp-per-row kernel at
     * every batch (cuda_q0_packed) */
    if constexpr (!kq) {
        if (!cuda_q0_packed(T, w->ne0)) {
            mul_mat_q_raw<T>(c, w, y, n_rows, grid, block);
            return;
        }
    }
    /* Past MM_COLS rows the tensor-core kernel (same bits, see qtypes.cuh);
     * it steps 256 elements at a time. */
    if (mm_takes_mmq(c, w, n_rows)) {
        cuda_mmq<T>(c, w, c->xq, y, n_rows);
        return;
    }
    /* K-quants from mm_mmqs_min rows (INFERD_MMQS_MIN=1..9 for A/B runs, 9:
     * never) to MM_COLS, and past it where mm_mmqs_mid says (the MMQ case
     * returned above): the tensor-core small-batch kernel (same bits), else
     * the dp4a kernel up to MM_COLS rows and MMQ past them (also where the
     * device cannot hold the tensor-core one's shared memory, rc -1, or it
     * does not take the shape). */
    if constexpr (kq) {
        /* 2-8 rows (Q6_K 3-8): mmqs's form fed by bulk copies where its
         * ring fills (sm_90+; cuda/mmqt_impl.cuh, mmqt_fills; -1 or
         * INF_EUNSUPPORTED: the rules below). On such shapes it beats the
         * dp4a kernel from 2 rows (bench/RESULTS.md 2026-12-04 10:15-, us
         * mmqt / dp4a: q4_K 4096 x 14336 15.7 / 17.9, the 7B's ffn-up 19.4 /
         * 21.7; q5_K 17.0 / 19.2, 20.8 / 24.1), Q6_K from 3 (25.8 / 34.3,
         * 34.9 / 37.2; at 2 ffn-up 34.3 / 30.3). INFERD_MMQS_MIN moves the
         * start too, for A/B runs. */
        if (n_rows >= (c->mmqs_min ? c->mmqs_min : T == QT_Q6_K ? 3 : 2) && n_rows <= 8 && c->mmqt &&
            cuda_mmqt<T>(c, w, c->xq, y, n_rows, c->mmqt_tl, 0) == 0)
            return;
        if ((n_rows >= mm_mmqs_min(c, T) || n_rows > MM_COLS) && w->ne0 % 256 == 0) {
            const int rc = cuda_mmqs<T>(c, w, c->xq, y, n_rows, -1, 0);
            if (rc == 0)
                return;
            if (rc != -1 && rc != INF_EUNSUPPORTED) {
                c->err = rc;
                snprintf(c->err_msg, sizeof(c->err_msg), "mmqs: no kernel for %lld x %lld", (long long)w->ne0,
                         (long long)w->ne1);
                return;
            }
        }
        if (n_rows > MM_COLS) {
            cuda_mmq<T>(c, w, c->xq, y, n_rows);
            return;
        }
    }
    cuda_mmvq<T>(c, w, c->xq, y, n_rows, 0, 0, 0);
}

template <int T>
static void mul_mat_f(struct cuda_ctx *c, const struct backend_weight *w, const float *x, float *y,
                      int32_t n_rows, dim3 grid, dim3 block)
{
    cuda_launch(c, mul_mat_f_kernel<T>, grid, block, 0, (const uint8_t *)w->data, w->row_bytes,
                                                        (int32_t)w->ne1, x, w->ne0, y, n_rows, c->epi);
}

static void mul_mat_one(struct cuda_ctx *c, const struct backend_weight *w, const float *x, float *y,
                        int32_t n_rows, int *held)
{
    if ((w->type == QT_F32 || w->type == QT_F16 || w->type == QT_BF16) &&
        cuda_mmc_try(c, w, x, y, n_rows, held))
        return;
    /* batch_invariant = false: large K-quant batches as F16 through
     * cuBLASLt (cuda/mm_deq.cu), where that mode allows it */
    if (c->batch_variant && cuda_mmd_try(c, w, x, y, n_rows, held))
        return;
    const dim3 grid(cuda_blocks(w->ne1, MM_WARPS), cuda_blocks(n_rows, MM_COLS));
    const dim3 block(MM_WARPS * CUDA_WARP);
    switch (w->type) {
    case QT_F32: mul_mat_f<QT_F32>(c, w, x, y, n_rows, grid, block); break;
    case QT_F16: mul_mat_f<QT_F16>(c, w, x, y, n_rows, grid, block); break;
    case QT_BF16: mul_mat_f<QT_BF16>(c, w, x, y, n_rows, grid, block); break;
    case QT_Q4_0: mul_mat_q<QT_Q4_0>(c, w, x, y, n_rows, grid, block, held); break;
    case QT_Q8_0: mul_mat_q<QT_Q8_0>(c, w, x, y, n_rows, grid, block, held); break;
    case QT_Q4_K: mul_mat_q<QT_Q4_K>(c, w, x, y, n_rows, grid, block, held); break;
    case QT_Q5_K: mul_mat_q<QT_Q5_K>(c, w, x, y, n_rows, grid, block, held); break;
    case QT_Q6_K: mul_mat_q<QT_Q6_K>(c, w, x, y, n_rows, grid, block, held); break;
    default:
        c->err = INF_EUNSUPPORTED;
        return;
    }
    CUDA_CHECK_LAUNCH(c, "mul_mat kernel");
}

void cuda_op_mul_mat(struct backend *be, const struct backend_weight *w, const float *x, float *y,
                     int32_t n_rows)
{
    struct cuda_ctx *c = cuda_ctx_of(be);
    if (cuda_op_begin(c) || n_rows <= 0)
        return;
    int held = -1;
    c->mm_x16_ok = c->x16only; /* one product: the int8 plane only if it reads it */
    mul_mat_one(c, w, x, y, n_rows, &held);
    c->mm_x16_ok = 0;
}

/* b continues a: slices of one fused allocation (ops->weight_fuse), b's
 * rows (and expanded rows, when both have them) right after a's, so one
 * product over a's and b's rows reads exactly the bytes the two read.
 * Only quantized weights are ever fused (cuda/weights.cu: cuBLASLt picks
 * its algorithm per F32/F16/BF16 weight shape, and a fused view would be
 * another shape with other bits). */
static int mm_adjacent(const struct backend_weight *a, const struct backend_weight *b)
{
    if (!a->group || a->group != b->group || a->type != b->type || a->ne0 != b->ne0 ||
        a->row_bytes != b->row_bytes)
        return 0;
    if ((const char *)b->data != (const char *)a->data + (size_t)a->ne1 * a->row_bytes)
        return 0;
    if (!a->aux != !b->aux)
        return 0;
    return !a->aux || (const char *)b->aux == (const char *)a->aux + cuda_mmq_expand_q6_K_bytes(a);
}

/* ops->mul_mat_ex: the activation quantized once per vec-dot type for all
 * the products that read it (Q/K/V, gate/up), each product's bias or
 * residual add done where it stores (struct cuda_epi). Consecutive outs
 * whose weights are adjacent slices of one fused group (mm_adjacent) run
 * as ONE product over their rows (a view of the group with ne1 = the sum)
 * whose epilogue sends each row to its own output (cuda_epi segments):
 * more tiles per launch at prefill (a 512 x 3584 K or V weight alone
 * gives the MMQ kernel 8 x 8 tiles for 132 SMs), one launch instead of
 * three at decode. Every kernel computes each weight row on its own (a
 * row's arithmetic depends on ne0 and the row only; the tile table may
 * pick another depth for the larger ne1, which changes speed, never
 * results), so the bits are those of mul_mat then add_bias / add
 * (tests/cuda/test_cuda_ops.c checks both, fused and not). */
void cuda_op_mul_mat_ex(struct backend *be, const float *x, int32_t n_rows, const struct backend_mm_out *out,
                        int n_out)
{
    struct cuda_ctx *c = cuda_ctx_of(be);
    if (cuda_op_begin(c) || n_rows <= 0)
        return;
    int held = -1;
    /* the int8 plane left out only where every product of the op is a
     * Q4_K one the quantizer writes x16 for (mul_mat_q then still asks
     * cuda_mmqr_takes for each launch, and quantizes again in full if one
     * would not read x16: correct, only slower); mixed ops (a Q6_K V
     * beside Q4_K Q and K) keep it */
    c->mm_x16_ok = c->x16only;
    for (int i = 0; i < n_out; i++)
        if (!mm_x16p_wanted(c, out[i].w, n_rows))
            c->mm_x16_ok = 0;
    for (int i = 0; i < n_out && !c->err;) {
        int k = 1; /* outs i .. i+k-1 in one launch */
        while (i + k < n_out && k < CUDA_EPI_SEGS && mm_adjacent(out[i + k - 1].w, out[i + k].w))
            k++;
        for (int s = 0; s < k; s++)
            if (out[i + s].w->ne0 != out[0].w->ne0) {
                c->err = INF_EINVAL;
                snprintf(c->err_msg, sizeof(c->err_msg),
                         "mul_mat_ex: weights of one activation differ in width");
                break;
            }
        if (c->err)
            break;
        /* the last launch of the op: in the step (engine/graph.c) every
         * mul_mat_ex and mul_mat_swiglu is followed by a small kernel (a
         * norm, rope, silu_mul), so mmvt may trigger it early
         * (cuda_mmvt_trig); not before another product of this op */
        c->mm_tail = i + k == n_out;
        if (k == 1) {
            c->epi.bias = out[i].bias ? (const float *)out[i].bias->data : NULL;
            c->epi.accumulate = out[i].accumulate;
            mul_mat_one(c, out[i].w, x, out[i].y, n_rows, &held);
        } else {
            struct backend_weight v = *out[i].w; /* the group's rows of outs i.. */
            int32_t j0 = 0;
            c->epi.n_seg = k;
            for (int s = 0; s < k; s++) {
                const struct backend_mm_out *o = &out[i + s];
                c->epi.seg[s].y = o->y;
                c->epi.seg[s].bias = o->bias ? (const float *)o->bias->data : NULL;
                c->epi.seg[s].j0 = j0;
                c->epi.seg[s].ne1 = (int32_t)o->w->ne1;
                c->epi.seg[s].accumulate = o->accumulate;
                j0 += (int32_t)o->w->ne1;
            }
            v.ne1 = j0;
            mul_mat_one(c, &v, x, out[i].y, n_rows, &held);
        }
        c->epi = cuda_epi{};
        c->mm_tail = 0;
        i += k;
    }
    c->epi = cuda_epi{};
    c->mm_tail = 0;
    c->mm_x16_ok = 0;
}

/* ops->mul_mat_swiglu. Where the product runs through MMQ (mm_takes_mmq)
 * and gate and up are adjacent slices of one fused group (mm_adjacent: up's
 * rows right after gate's), one MMQ launch over the 2F rows whose tiles
 * pair gate row j with up row j (cuda/glu_rows.h mmq_wrow) stores
 * silu(gate) * up: no
 * [n_rows][2F] product round trip and no silu_mul launch. Elsewhere (the
 * decode kernels, whose warp per row never holds both; float weights,
 * never fused) the two ops it stands for. Either way the bits of
 * mul_mat_ex then silu_mul (tests/cuda/test_cuda_ops.c mm-swiglu). */
void cuda_op_mul_mat_swiglu(struct backend *be, const float *x, int32_t n_rows, const struct backend_weight *gate,
                            const struct backend_weight *up, float *y, float *u)
{
    struct cuda_ctx *c = cuda_ctx_of(be);
    if (cuda_op_begin(c) || n_rows <= 0)
        return;
    if (gate->ne1 != up->ne1 || gate->ne0 != up->ne0) {
        c->err = INF_EINVAL;
        snprintf(c->err_msg, sizeof(c->err_msg), "mul_mat_swiglu: gate and up differ in shape");
        return;
    }
    if (!c->glu_off && mm_adjacent(gate, up) && mm_takes_mmq(c, gate, n_rows)) {
        struct backend_weight v = *gate; /* the group's rows of gate and up */
        v.ne1 = 2 * gate->ne1;
        int held = -1;
        c->epi = cuda_epi{};
        c->epi.glu = (int32_t)gate->ne1;
        c->mm_x16_ok = c->x16only; /* one product */
        mul_mat_one(c, &v, x, y, n_rows, &held);
        c->mm_x16_ok = 0;
        c->epi = cuda_epi{};
        return;
    }
    const struct backend_mm_out o[2] = {{gate, y, NULL, 0}, {up, u, NULL, 0}};
    cuda_op_mul_mat_ex(be, x, n_rows, o, 2);
    cuda_op_silu_mul(be, y, u, (int64_t)n_rows * gate->ne1, gate->ne1);
}

/* ---- the dispatcher's table: every product kernel cuda_op_mul_mat can
 * pick, by weight type; prewarm launches each (cuda/prewarm.cu) and
 * tests/cuda/test_cuda.c checks that it did ------------------------------ */

enum { MMV_FLOAT, MMV_WPR, MMV_MMVQ, MMV_MMQK, MMV_CUBLAS, MMV_MMQS, MMV_MMVT, MMV_MMQT, MMV_DEQ, MMV_MMQH, MMV_MMQ6W };
struct mm_variant {
    /* MMVQ: a = activation rows per weight read, b = warps per weight row
     * (K-quants; 0: Q4_0/Q8_0's one), c = super-blocks a pass (0: the
     * dispatcher's; 8); MMQK: a = KDR, b = EXP, c = activation
     * rows per block (0: 64, or 128); MMQS: a = activation rows (8: one
     * n8 tile; 16: two, NT = 2; 40: NT = 2 in three blocks side by side),
     * b = EXP, c = super-blocks a stage (0: the kernel's choice; 1); MMVT
     * (one activation row): a = weight rows a group, b = the grid's cap
     * (0: the dispatcher's; 1: one block, streaming every row group), c =
     * compute warps a block (0: by shape; 8, 12 or, Q4_K, 14 forced);
     * MMQT: a = activation rows, b = 16-row tiles a block (1 or 2), c =
     * the grid's cap (0: the dispatcher's; 1: one block, streaming every
     * row group) */
    int type, kind, a, b, c;
};
#define MMV_MMQ(t) {t, MMV_MMQK, 1, 0, 0}, {t, MMV_MMQK, 2, 0, 0}
#define MMV_MMQW(t, e) {t, MMV_MMQK, 1, e, 128}, {t, MMV_MMQK, 2, e, 128}
#define MMV_Q0(t)                                                                                  \
    {t, MMV_WPR, 0, 0}, {t, MMV_MMVQ, 1, 0}, {t, MMV_MMVQ, 2, 0}, {t, MMV_MMVQ, 4, 0},             \
        {t, MMV_MMVQ, 8, 0}, MMV_MMQ(t), MMV_MMQW(t, 0)
#define MMV_KW(t, nc) {t, MMV_MMVQ, nc, 1}, {t, MMV_MMVQ, nc, 2}, {t, MMV_MMVQ, nc, 4}
/* the 8-super-block pass at one activation row, forced (mmvq_u picks it
 * only on long rows) */
#define MMV_KU8(t) {t, MMV_MMVQ, 1, 1, 8}, {t, MMV_MMVQ, 1, 2, 8}, {t, MMV_MMVQ, 1, 4, 8}
/* mmqs at 16 rows (NT = 2) and at 40 (three activation tiles, the last
 * half full) */
#define MMV_K(t) MMV_KW(t, 1), MMV_KU8(t), MMV_KW(t, 2), MMV_KW(t, 4), MMV_KW(t, 8), MMV_MMQ(t), MMV_MMQW(t, 0), \
    {t, MMV_MMQS, 8, 0, 0}, {t, MMV_MMQS, 16, 0, 0}, {t, MMV_MMQS, 40, 0, 0}
#define MMV_T(t) {t, MMV_MMVT, 32, 0, 0}, {t, MMV_MMVT, 16, 0, 0}, {t, MMV_MMVT, 32, 1, 0}, \
    {t, MMV_MMVT, 16, 1, 0}
/* Q4_K/Q5_K: 8 and 12 warps forced (by shape, a 64-row scratch weight
 * would only ever get the one-group count), Q4_K's 14 beside them */
#define MMV_T12(t) {t, MMV_MMVT, 32, 0, 8}, {t, MMV_MMVT, 16, 0, 8}, {t, MMV_MMVT, 32, 1, 8}, \
    {t, MMV_MMVT, 16, 1, 8}, {t, MMV_MMVT, 32, 0, 12}, {t, MMV_MMVT, 16, 0, 12}, {t, MMV_MMVT, 32, 1, 12}
static const struct mm_variant mm_variants[] = {
    {QT_F32, MMV_FLOAT, 0, 0},  {QT_F16, MMV_FLOAT, 0, 0},  {QT_BF16, MMV_FLOAT, 0, 0},
    {QT_F32, MMV_CUBLAS, 0, 0}, {QT_F16, MMV_CUBLAS, 0, 0}, {QT_BF16, MMV_CUBLAS, 0, 0},
    MMV_Q0(QT_Q4_0),            MMV_Q0(QT_Q8_0),            MMV_K(QT_Q4_K),
    {QT_Q4_K, MMV_MMQS, 8, 0, 1}, /* K = 1: sm_121's and odd rows' form */
    MMV_K(QT_Q5_K),             MMV_K(QT_Q6_K),             {QT_Q6_K, MMV_MMQK, 1, 1, 0},
    {QT_Q6_K, MMV_MMQK, 2, 1, 0}, MMV_MMQW(QT_Q6_K, 1), {QT_Q6_K, MMV_MMQS, 8, 1, 0},
    {QT_Q6_K, MMV_MMQS, 16, 1, 0}, {QT_Q6_K, MMV_MMQS, 40, 1, 0},
    MMV_T12(QT_Q4_K),           {QT_Q4_K, MMV_MMVT, 32, 0, 14}, {QT_Q4_K, MMV_MMVT, 16, 1, 14},
    {QT_Q4_K, MMV_MMQH, 0, 0, 0}, /* the exact F16 MMQ (sm_80+ with 203 KB of shared memory) */
    {QT_Q4_K, MMV_MMQH, 0, 1, 0}, /* Q4_K on int8 wgmma from its planes made at load (cuda/mmq4p.cu; b) */
    {QT_Q6_K, MMV_MMQ6W, 0, 0, 0}, /* Q6_K on int8 wgmma (cuda/mmq6w.cu; compute capability 9.0) */
    {QT_Q6_K, MMV_MMQ6W, 0, 1, 0}, /* the same from the planes made at load (b = EXP) */
    MMV_T12(QT_Q5_K),           MMV_T(QT_Q6_K),
    {QT_Q4_K, MMV_MMQT, 8, 1, 0}, {QT_Q4_K, MMV_MMQT, 8, 2, 0}, {QT_Q4_K, MMV_MMQT, 5, 2, 1},
    {QT_Q5_K, MMV_MMQT, 8, 1, 0}, {QT_Q5_K, MMV_MMQT, 8, 2, 0}, {QT_Q5_K, MMV_MMQT, 3, 1, 1},
    {QT_Q6_K, MMV_MMQT, 8, 2, 0}, {QT_Q6_K, MMV_MMQT, 5, 2, 1},
    /* batch_invariant = false only (elsewhere prewarm says "not picked here") */
    {QT_Q4_K, MMV_DEQ, 0, 0, 0}, {QT_Q5_K, MMV_DEQ, 0, 0, 0}, {QT_Q6_K, MMV_DEQ, 0, 0, 0},
};
#undef MMV_T12
#undef MMV_T
#undef MMV_K
#undef MMV_KW
#undef MMV_KU8
#undef MMV_Q0
#undef MMV_MMQ
#undef MMV_MMQW

extern "C" int cuda_mm_variant_count(void)
{
    return (int)(sizeof(mm_variants) / sizeof(mm_variants[0]));
}

extern "C" int cuda_mm_variant_type(int i)
{
    return mm_variants[i].type;
}

extern "C" void cuda_mm_variant_name(int i, char *buf, size_t n)
{
    const struct mm_variant *v = &mm_variants[i];
    const char *t = quant_type_name(v->type);
    switch (v->kind) {
    case MMV_FLOAT: snprintf(buf, n, "mul_mat<%s> float", t); break;
    case MMV_WPR: snprintf(buf, n, "mul_mat<%s> warp-per-row", t); break;
    case MMV_MMVQ:
        if (v->b)
            snprintf(buf, n, "mul_mat<%s> mmvq nc=%d w=%d%s", t, v->a, v->b, v->c ? " u=8" : "");
        else
            snprintf(buf, n, "mul_mat<%s> mmvq nc=%d", t, v->a);
        break;
    case MMV_CUBLAS: snprintf(buf, n, "mul_mat<%s> cublas", t); break;
    case MMV_DEQ: snprintf(buf, n, "mul_mat<%s> f16 cublas", t); break;
    case MMV_MMQH: /* b: from the planes made at load */
        snprintf(buf, n, v->b ? "mul_mat<%s> mmq4p<int8 wgmma> exp" : "mul_mat<%s> mmqh<f16 exact>", t);
        break;
    case MMV_MMQ6W: snprintf(buf, n, "mul_mat<%s> mmq6w<int8 wgmma>%s", t, v->b ? " exp" : ""); break;
    case MMV_MMQS:
        snprintf(buf, n, "mul_mat<%s> mmqs<%s>%s%s", t, v->b ? "true" : "false", v->c ? " k=1" : "",
                 v->a == 16 ? " nt=2" : v->a > 16 ? " nt=2 x3" : "");
        break;
    case MMV_MMQT:
        snprintf(buf, n, "mul_mat<%s> mmqt tl=%d rows=%d%s", t, v->b, v->a, v->c ? " grid=1" : "");
        break;
    case MMV_MMVT:
        snprintf(buf, n, "mul_mat<%s> mmvt rb=%d%s%s", t, v->a, v->b ? " grid=1" : "",
                 v->c == 14 ? " cw=14" : v->c == 12 ? " cw=12" : v->c == 8 ? " cw=8" : "");
        break;
    default:
        snprintf(buf, n, "mul_mat<%s> mmq<%d,%s>%s", t, v->a, v->b ? "true" : "false", v->c ? " bn=128" : "");
        break;
    }
}

/* The status of a variant launcher's return rc (0, -1: this device
 * cannot hold it, or an INF_ code): 1 for -1, the code, else the launch's
 * own error (what names the kernel in the report). */
static int mm_variant_status(struct cuda_ctx *c, int rc, const char *what)
{
    if (rc == -1)
        return 1;
    if (rc)
        return rc;
    CUDA_CHECK_LAUNCH(c, what);
    return c->err;
}

/* Launch variant i once on w (its type) and x ([n_rows][w->ne0], n_rows
 * large enough for MMQ): 0, 1 when this device cannot hold it (sm_121:
 * KDR = 2's shared memory; no cuBLASLt library; the dispatcher never
 * picks it there), INF_EUNSUPPORTED for a shape it does not take, or the
 * first error. EXP variants need w->aux. The float kernel runs one row,
 * forced (the dispatcher may give w to cuBLAS), cuBLAS all n_rows. */
int cuda_mm_variant_run(struct cuda_ctx *c, int i, const struct backend_weight *w, const float *x, float *y,
                        int32_t n_rows)
{
    const struct mm_variant *v = &mm_variants[i];
    struct backend be = {NULL, c};
    const int q0 = v->type == QT_Q4_0 || v->type == QT_Q8_0;
    if (v->kind == MMV_WPR) {
        /* ggml-layout rows only; on a packed scratch weight (prewarm) a
         * 32-element view, which stays in ggml's layout, loads the kernel */
        struct backend_weight raw = *w;
        if (cuda_q0_packed(w->type, w->ne0)) {
            raw.ne0 = QK8_0;
            raw.row_bytes = w->row_bytes; /* rows keep their stride */
        }
        cuda_op_mul_mat(&be, &raw, x, y, 1);
        return c->err;
    }
    if (v->kind == MMV_CUBLAS)
        return cuda_mmc_variant(c, w, x, y, n_rows);
    if (v->kind == MMV_DEQ)
        return cuda_mmd_variant(c, w, x, y, n_rows);
    if (v->kind == MMV_FLOAT) {
        const dim3 grid(cuda_blocks(w->ne1, MM_WARPS), 1), block(MM_WARPS * CUDA_WARP);
        switch (w->type) {
        case QT_F32: mul_mat_f<QT_F32>(c, w, x, y, 1, grid, block); break;
        case QT_F16: mul_mat_f<QT_F16>(c, w, x, y, 1, grid, block); break;
        default: mul_mat_f<QT_BF16>(c, w, x, y, 1, grid, block); break;
        }
        CUDA_CHECK_LAUNCH(c, "mul_mat kernel");
        return c->err;
    }
    if (v->kind == MMV_MMQH) {
        /* where the dispatcher never picks it (c->mmqh 0: devices without
         * the wgmma form, unless INFERD_MMQH asks): as a device that cannot
         * hold it. Else its f16 activations for n_rows: the reserve gives
         * that scratch only to batches the dispatcher sends it (c->mmqh
         * rows and more), prewarm runs 64. */
        if (!c->mmqh)
            return 1;
        /* b: the planes' form (cuda/mmq4p.cu); w without planes (INFERD_Q4P
         * off, no budget) as a device that cannot hold it */
        if (v->b) {
            if (c->mmqw < 2 || !cuda_mmq4p_takes(c, w, c->q6p_min))
                return 1;
            cuda_quantize_act(c, QT_Q8_K, x, c->xq, n_rows, w->ne0, 0);
            const int rc = cuda_mmq4p(c, w, c->xq, y, n_rows, 1);
            return mm_variant_status(c, rc == INF_EUNSUPPORTED ? -1 : rc, "mmq4p kernel");
        }
        const int grc = cuda_scratch_grow(c, &c->x16, &c->x16_bytes, (size_t)n_rows * (size_t)w->ne0 * 2);
        if (grc)
            return grc;
        cuda_quantize_act(c, QT_Q8_K, x, c->xq, n_rows, w->ne0, 0); /* and x16p_ready = 0: x16 may have moved */
        /* before sm_80, or no room for its shared memory: as a device
         * that cannot hold it */
        const int rc = cuda_mmqh<QT_Q4_K>(c, w, c->xq, y, n_rows);
        return mm_variant_status(c, rc == INF_EUNSUPPORTED ? -1 : rc, "mmqh kernel");
    }
    if (v->kind == MMV_MMQ6W) {
        /* where the dispatcher never picks it (c->mmq6w 0: not an sm_90
         * build on compute capability 9.0, or INFERD_MMQ6W=0), or it cannot
         * run here (no expanded copy): as a device that cannot hold it */
        if (!c->mmq6w)
            return 1;
        /* b: the planes made at load; w without them (no budget: config
         * off) as a device that cannot hold it */
        if (v->b && !cuda_q6p_find(c, w))
            return 1;
        cuda_quantize_act(c, QT_Q8_K, x, c->xq, n_rows, w->ne0, 0);
        const int rc = cuda_mmq6w(c, w, c->xq, y, n_rows, v->b);
        return mm_variant_status(c, rc == INF_EUNSUPPORTED ? -1 : rc, "mmq6w kernel");
    }
    if (v->kind == MMV_MMVQ && !v->b) { /* Q4_0/Q8_0: the dispatcher at v->a rows */
        cuda_op_mul_mat(&be, w, x, y, v->a);
        return c->err;
    }
    if (v->kind == MMV_MMQS) {
        cuda_quantize_act(c, QT_Q8_K, x, c->xq, v->a, w->ne0, 0);
        int rc = 0;
        switch (v->type) {
        case QT_Q4_K: rc = cuda_mmqs<QT_Q4_K>(c, w, c->xq, y, v->a, v->b, v->c); break;
        case QT_Q5_K: rc = cuda_mmqs<QT_Q5_K>(c, w, c->xq, y, v->a, v->b, v->c); break;
        default: rc = cuda_mmqs<QT_Q6_K>(c, w, c->xq, y, v->a, v->b, v->c); break;
        }
        return mm_variant_status(c, rc, "mmqs kernel");
    }
    if (v->kind == MMV_MMQT) {
        cuda_quantize_act(c, QT_Q8_K, x, c->xq, v->a, w->ne0, 0);
        const int rc = v->type == QT_Q4_K   ? cuda_mmqt<QT_Q4_K>(c, w, c->xq, y, v->a, v->b, v->c)
                       : v->type == QT_Q5_K ? cuda_mmqt<QT_Q5_K>(c, w, c->xq, y, v->a, v->b, v->c)
                                            : cuda_mmqt<QT_Q6_K>(c, w, c->xq, y, v->a, v->b, v->c);
        /* before sm_90 (no bulk copies) never picked: as a device that
         * cannot hold it */
        return mm_variant_status(c, rc == INF_EUNSUPPORTED && c->sm < 90 ? -1 : rc, "mmqt kernel");
    }
    if (v->kind == MMV_MMVT) {
        int held = -1;
        const int rc = v->type == QT_Q4_K   ? mm_mmvt<QT_Q4_K>(c, w, x, y, v->a, v->b, v->c, &held)
                       : v->type == QT_Q5_K ? mm_mmvt<QT_Q5_K>(c, w, x, y, v->a, v->b, v->c, &held)
                                            : mm_mmvt<QT_Q6_K>(c, w, x, y, v->a, v->b, v->c, &held);
        /* before sm_90 (no bulk copies) never picked: as a device that
         * cannot hold it */
        return mm_variant_status(c, rc == INF_EUNSUPPORTED && c->sm < 90 ? -1 : rc, "mmvt kernel");
    }
    if (v->kind == MMV_MMVQ) {
        cuda_quantize_act(c, QT_Q8_K, x, c->xq, v->a, w->ne0, 0);
        switch (v->type) {
        case QT_Q4_K: cuda_mmvq<QT_Q4_K>(c, w, c->xq, y, v->a, v->a, v->b, v->c); break;
        case QT_Q5_K: cuda_mmvq<QT_Q5_K>(c, w, c->xq, y, v->a, v->a, v->b, v->c); break;
        default: cuda_mmvq<QT_Q6_K>(c, w, c->xq, y, v->a, v->a, v->b, v->c); break;
        }
        CUDA_CHECK_LAUNCH(c, "mmvq kernel");
        return c->err;
    }
    cuda_quantize_act(c, q0 ? QT_Q8_0 : QT_Q8_K, x, c->xq, n_rows, w->ne0, 0);
    int rc = 0;
    switch (v->type) {
    case QT_Q4_0: rc = cuda_mmqk_variant<QT_Q4_0>(c, w, c->xq, y, n_rows, v->a, v->b, v->c); break;
    case QT_Q8_0: rc = cuda_mmqk_variant<QT_Q8_0>(c, w, c->xq, y, n_rows, v->a, v->b, v->c); break;
    case QT_Q4_K: rc = cuda_mmqk_variant<QT_Q4_K>(c, w, c->xq, y, n_rows, v->a, v->b, v->c); break;
    case QT_Q5_K: rc = cuda_mmqk_variant<QT_Q5_K>(c, w, c->xq, y, n_rows, v->a, v->b, v->c); break;
    default: rc = cuda_mmqk_variant<QT_Q6_K>(c, w, c->xq, y, n_rows, v->a, v->b, v->c); break;
    }
    return mm_variant_status(c, rc, "mmq kernel");
}

extern "C" int cuda_backend_mm_variant(struct backend *be, int i, const struct backend_weight *w,
                                       const float *x, float *y, int32_t n_rows, int32_t *rows_done)
{
    struct cuda_ctx *c = cuda_ctx_of(be);
    *rows_done = 0;
    if (i < 0 || i >= cuda_mm_variant_count() || mm_variants[i].type != w->type || n_rows < MM_COLS + 1)
        return INF_EINVAL;
    /* the warp-per-row kernel reads ggml's layout: not a packed weight's */
    if (mm_variants[i].kind == MMV_WPR && cuda_q0_packed(w->type, w->ne0))
        return INF_EUNSUPPORTED;
    if (cuda_op_begin(c))
        return c->err;
    const struct mm_variant *v = &mm_variants[i];
    const int rc = cuda_mm_variant_run(c, i, w, x, y, n_rows);
    *rows_done = rc                    ? 0
                 : (v->kind == MMV_MMVQ || v->kind == MMV_MMQS || v->kind == MMV_MMQT) ? v->a
                 : (v->kind == MMV_MMQK || v->kind == MMV_CUBLAS || v->kind == MMV_DEQ || v->kind == MMV_MMQH ||
                    v->kind == MMV_MMQ6W)
                       ? n_rows
                                                                 : 1;
    return rc;
}
