/* quant_dot — the CPU's dot products of a weight row with an activation
 * row: llama.cpp's arithmetic as plain C (the *_ref kernels), the
 * canonical chain of the invariant numerics (the CUDA kernels' float
 * chain), and the kernel choice and dispatch (AVX2 paths in quant_avx2.c,
 * tested against these). */
#include <math.h>
#include <string.h>

#include "err.h"
#include "quant.h"
#include "quant_avx2.h"
#include "quant_impl.h"

/* ------------------------------------------------- reference dot products */
/* Each kernel is llama.cpp's CPU arithmetic on an AVX2+FMA+F16C build, as
 * plain C: the same exact integer sums, grouped into the same float lanes,
 * combined with the same fused operations and horizontal sums. Logits then
 * match llama.cpp's bit for bit wherever the kernels do, which matters on
 * small or random-weight models: there one different rounding of an
 * activation into Q8 or of K/V into F16 moves logprobs by up to 0.1. The
 * AVX2 paths (quant_avx2.c) give the same bits as these.
 *
 * Lane l of a 32-byte integer vector in llama.cpp's kernels (maddubs, then
 * madd) holds the sum over bytes 4l..4l+3 of the 32 elements; KLANE(e) is
 * the lane of element e of such a 32-element group. */
#define KLANE(e) (((e) & 31) >> 2)

/* hsum_float_8: ((v0+v4)+(v2+v6)) + ((v1+v5)+(v3+v7)) */
static float hsum8(const float v[8])
{
    return ((v[0] + v[4]) + (v[2] + v[6])) + ((v[1] + v[5]) + (v[3] + v[7]));
}

/* GGML_F32x8_REDUCE of four 8-lane accumulators: (a0+a2)+(a1+a3) per lane,
 * then lanes l+4 onto l, then (t0+t1)+(t2+t3). */
static float reduce4x8(float acc[4][8])
{
    float v[8], t[4];
    for (int l = 0; l < 8; l++)
        v[l] = (acc[0][l] + acc[2][l]) + (acc[1][l] + acc[3][l]);
    for (int l = 0; l < 4; l++)
        t[l] = v[l] + v[l + 4];
    return (t[0] + t[1]) + (t[2] + t[3]);
}

/* Element loaders for the float kernels. */
static float ld_f32(const void *p, int64_t i) { return ((const float *)p)[i]; }
static float ld_f16(const void *p, int64_t i) { return quant_f16_to_f32(((const quant_f16 *)p)[i]); }
static float ld_bf16(const void *p, int64_t i) { return quant_bf16_to_f32(((const quant_bf16 *)p)[i]); }

/* ggml_vec_dot_f32 / _f16: 32-element steps into four 8-lane FMA chains,
 * GGML_F32x8_REDUCE, then the remaining n % 32 products (F32: summed in
 * float with a separate multiply and add; F16: in double, rounded once).
 * BF16 takes the F16 order (no reference answers check it against
 * llama.cpp's BF16 dot). */
static float dot4x8_ref(int64_t n, const void *w, const void *x, float (*ld)(const void *, int64_t),
                        int tail_in_double)
{
    const int64_t np = n & ~(int64_t)31;
    float acc[4][8] = {{0}};
    for (int64_t i = 0; i < np; i += 32)
        for (int j = 0; j < 4; j++)
            for (int l = 0; l < 8; l++)
                acc[j][l] = fmaf(ld(w, i + 8 * j + l), ld(x, i + 8 * j + l), acc[j][l]);
    const float r = reduce4x8(acc);
    if (tail_in_double) {
        double s = r;
        for (int64_t i = np; i < n; i++)
            s += (double)(ld(w, i) * ld(x, i));
        return (float)s;
    }
    float s = r;
    for (int64_t i = np; i < n; i++)
        s += ld(w, i) * ld(x, i);
    return s;
}

/* tinyBLAS (llamafile_sgemm, products of 2+ activation rows, n % 8 == 0):
 * one 8-lane FMA chain over 8-element steps, then hsum_float_8. */
static float dot_tb_ref(int64_t n, const void *w, const void *x, float (*ld)(const void *, int64_t))
{
    float acc[8] = {0};
    for (int64_t i = 0; i < n; i += 8)
        for (int l = 0; l < 8; l++)
            acc[l] = fmaf(ld(w, i + l), ld(x, i + l), acc[l]);
    return hsum8(acc);
}

/* Q4_0 weights as int8 (low nibbles are elements 0-15, high 16-31). */
static void q4_0_unpack(const struct block_q4_0 *b, int8_t q[32])
{
    for (int j = 0; j < 16; j++) {
        q[j] = (int8_t)((b->qs[j] & 0x0f) - 8);
        q[j + 16] = (int8_t)((b->qs[j] >> 4) - 8);
    }
}

/* ggml_vec_dot_q8_0_q8_0 / q4_0_q8_0 (and tinyBLAS_Q0, which computes the
 * same): per block, d = d_w * d_x (exact) and acc[l] = fma(d, lane sum l,
 * acc[l]); hsum_float_8 at the end. RP: the repacked q4_0 8x8 kernels
 * (Q4_0 matrices of a multiple of 8 rows), one chain of whole-block sums:
 * the canonical chain too (QK_Q8_0_CANON, QK_Q4_0_CANON). */
static float dot_32_ref(int64_t nb, const void *vw, const struct block_q8_0 *x, int q4, int rp)
{
    float acc[8] = {0}, chain = 0.f;
    for (int64_t i = 0; i < nb; i++) {
        int8_t q[32];
        quant_f16 wd;
        if (q4) {
            const struct block_q4_0 *w = (const struct block_q4_0 *)vw + i;
            q4_0_unpack(w, q);
            wd = w->d;
        } else {
            const struct block_q8_0 *w = (const struct block_q8_0 *)vw + i;
            memcpy(q, w->qs, 32);
            wd = w->d;
        }
        const float d = quant_f16_to_f32(wd) * quant_f16_to_f32(x[i].d);
        int32_t lane[8] = {0};
        for (int e = 0; e < 32; e++)
            lane[KLANE(e)] += (int32_t)q[e] * x[i].qs[e];
        if (rp) {
            int32_t t = 0;
            for (int l = 0; l < 8; l++)
                t += lane[l];
            chain = fmaf((float)t, d, chain);
        } else {
            for (int l = 0; l < 8; l++)
                acc[l] = fmaf(d, (float)lane[l], acc[l]);
        }
    }
    return rp ? chain : hsum8(acc);
}

/* Q4_K/Q5_K weight values of one super-block (0..15 / 0..31). */
static void k4_values(const void *blk, int high, uint8_t v[QK_K])
{
    const uint8_t *q = high ? ((const struct block_q5_K *)blk)->qs : ((const struct block_q4_K *)blk)->qs;
    const uint8_t *qh = high ? ((const struct block_q5_K *)blk)->qh : NULL;
    for (int j = 0; j < QK_K / 64; j++, q += 32)
        for (int l = 0; l < 32; l++) {
            v[64 * j + l] = (uint8_t)((q[l] & 0x0f) | (qh ? ((qh[l] >> (2 * j)) & 1) << 4 : 0));
            v[64 * j + 32 + l] = (uint8_t)((q[l] >> 4) | (qh ? ((qh[l] >> (2 * j + 1)) & 1) << 4 : 0));
        }
}

/* The K-quant kinds of Q4_K/Q5_K dot (see quant_kernel). */
enum { K4_VEC, K4_GEMV, K4_GEMM };

/* Q4_K / Q5_K . Q8_K. Per super-block the exact sums: per sub-block s,
 * dot_s = sum q*x and xsum_s = the activations' sum (from bsums); then
 *  K4_VEC (ggml_vec_dot_q4_K/q5_K_q8_K): the scaled dots in 8 lanes,
 *    acc[l] = fma(d_x*d_w, lane l, acc[l]); mins: Q4_K in 4 lanes (pairs of
 *    sub-blocks) acc_m[k] = fma(-(d_x*dmin_w), lane k, acc_m[k]), summed
 *    (0+2)+(1+3); Q5_K as one float sum of -(d_x*dmin_w) * whole-block mins;
 *    result hsum_float_8(acc) + mins;
 *  K4_GEMV (the repacked q4_K 8x8 gemv, one activation row): whole-block
 *    sums into two chains fma(S, d_w*d_x), fma(M, dmin_w*d_x); acc - accm;
 *  K4_GEMM (the repacked gemm, rows in groups of four): the same two
 *    chains, one fma per pair of sub-blocks. */
static float dot_k4_ref(int64_t nb, const void *vw, const struct block_q8_K *x, int high, int kind)
{
    const size_t bsz = high ? sizeof(struct block_q5_K) : sizeof(struct block_q4_K);
    float acc[8] = {0}, accm4[4] = {0}, chain = 0.f, chainm = 0.f;
    for (int64_t i = 0; i < nb; i++) {
        const struct block_q4_K *w = (const void *)((const uint8_t *)vw + (size_t)i * bsz);
        uint8_t v[QK_K];
        k4_values(w, high, v);
        int sc[8], mn[8];
        for (int s = 0; s < 8; s++)
            k4_scale_min(w->scales, s, &sc[s], &mn[s]);
        const float dw = quant_f16_to_f32(w->d), mw = quant_f16_to_f32(w->dmin);
        int32_t dot[8] = {0}, lane[8] = {0}, msum[8];
        for (int e = 0; e < QK_K; e++) {
            const int32_t p = (int32_t)v[e] * x[i].qs[e];
            dot[e / 32] += p;
            lane[KLANE(e)] += sc[e / 32] * p;
        }
        for (int s = 0; s < 8; s++)
            msum[s] = mn[s] * (x[i].bsums[2 * s] + x[i].bsums[2 * s + 1]);
        if (kind == K4_VEC) {
            const float d = x[i].d * dw, dmin = -x[i].d * mw;
            for (int l = 0; l < 8; l++)
                acc[l] = fmaf(d, (float)lane[l], acc[l]);
            if (high) {
                int32_t t = 0;
                for (int s = 0; s < 8; s++)
                    t += msum[s];
                chainm = fmaf(dmin, (float)t, chainm);
            } else {
                for (int k = 0; k < 4; k++)
                    accm4[k] = fmaf(dmin, (float)(msum[2 * k] + msum[2 * k + 1]), accm4[k]);
            }
        } else {
            const float d = dw * x[i].d, dmin = mw * x[i].d;
            int32_t S = 0, M = 0;
            for (int p = 0; p < 4; p++) {
                const int32_t Sp = sc[2 * p] * dot[2 * p] + sc[2 * p + 1] * dot[2 * p + 1];
                const int32_t Mp = msum[2 * p] + msum[2 * p + 1];
                if (kind == K4_GEMM) {
                    chain = fmaf((float)Sp, d, chain);
                    chainm = fmaf((float)Mp, dmin, chainm);
                }
                S += Sp;
                M += Mp;
            }
            if (kind == K4_GEMV) {
                chain = fmaf((float)S, d, chain);
                chainm = fmaf((float)M, dmin, chainm);
            }
        }
    }
    if (kind != K4_VEC)
        return chain - chainm;
    return hsum8(acc) + (high ? chainm : (accm4[0] + accm4[2]) + (accm4[1] + accm4[3]));
}

/* Q6_K . Q8_K (ggml_vec_dot_q6_K_q8_K): the unsigned q (0..63) times x,
 * scaled by the sub-block's int8 scale, in 8 lanes over each 32-element
 * group; the -32 offset enters through the bsums, lane k starting at
 * -32 * (sc_2k * bsum_2k + sc_2k+1 * bsum_2k+1). Per block acc[l] =
 * fma(d_x*d_w, lane l, acc[l]); hsum_float_8. (Offsetting each element
 * instead groups the same integers into other lanes: measured against the
 * reference answers, it matched 22 of 256 steps of tiny-llama-mixed
 * exactly against 47 for this order.) */
static float dot_q6_K_ref(int64_t nb, const struct block_q6_K *w, const struct block_q8_K *x)
{
    float acc[8] = {0};
    for (int64_t i = 0; i < nb; i++) {
        const uint8_t *ql = w[i].ql, *qh = w[i].qh;
        int32_t lane[8];
        for (int k = 0; k < 8; k++)
            lane[k] = -32 * (w[i].scales[2 * k] * x[i].bsums[2 * k] +
                             w[i].scales[2 * k + 1] * x[i].bsums[2 * k + 1]);
        for (int h = 0; h < QK_K / 128; h++, ql += 64, qh += 32) {
            for (int l = 0; l < 32; l++) {
                const int q[4] = {
                    (ql[l] & 0x0f) | (((qh[l] >> 0) & 3) << 4),
                    (ql[l + 32] & 0x0f) | (((qh[l] >> 2) & 3) << 4),
                    (ql[l] >> 4) | (((qh[l] >> 4) & 3) << 4),
                    (ql[l + 32] >> 4) | (((qh[l] >> 6) & 3) << 4),
                };
                for (int c = 0; c < 4; c++) {
                    const int e = 128 * h + 32 * c + l;
                    lane[KLANE(e)] += w[i].scales[e / 16] * q[c] * x[i].qs[e];
                }
            }
        }
        const float d = x[i].d * quant_f16_to_f32(w[i].d);
        for (int l = 0; l < 8; l++)
            acc[l] = fmaf(d, (float)lane[l], acc[l]);
    }
    return hsum8(acc);
}

/* ---------------------------------------------------- the canonical chain */
/* The invariant numerics' kernels (QK_*_CANON, see quant.h): the float chain
 * of the CUDA backend's products (engine/cuda/qtypes.cuh, cuda/mmvq.cu), so
 * that the two backends give a product the same bits. Per block only exact
 * int32 sums, then one (Q4_0, Q8_0, Q6_K) or two (Q4_K, Q5_K) fmas into a
 * single scalar chain, blocks in k order: no lanes, no horizontal sum, so
 * nothing depends on how a SIMD path groups the integers. The scales are
 * d_w * d_x rounded once (the GPU's __fmul_rn), the min scale its negation.
 *
 * Q4_0/Q8_0: dot_32_ref with rp = 1 is this chain already (llama.cpp's
 * repacked q4_0 kernels run it). */

/* Q4_K / Q5_K . Q8_K: per super-block S = sum_j sc_j * (q_j . x_j) and
 * M = sum_j m_j * (sum of x_j) over the 8 sub-blocks j of 32 (the sums of x
 * from bsums, as every path reads them). */
static float canon_k4_ref(int64_t nb, const void *vw, const struct block_q8_K *x, int high)
{
    const size_t bsz = high ? sizeof(struct block_q5_K) : sizeof(struct block_q4_K);
    float acc = 0.f;
    for (int64_t i = 0; i < nb; i++) {
        const struct block_q4_K *w = (const void *)((const uint8_t *)vw + (size_t)i * bsz);
        uint8_t v[QK_K];
        k4_values(w, high, v);
        int32_t S = 0, M = 0;
        for (int j = 0; j < QK_K / 32; j++) {
            int sc, mn;
            k4_scale_min(w->scales, j, &sc, &mn);
            int32_t dot = 0;
            for (int l = 0; l < 32; l++)
                dot += (int32_t)v[32 * j + l] * x[i].qs[32 * j + l];
            S += sc * dot;
            M += mn * (x[i].bsums[2 * j] + x[i].bsums[2 * j + 1]);
        }
        const float p1 = quant_f16_to_f32(w->d) * x[i].d;
        const float p2 = -(quant_f16_to_f32(w->dmin) * x[i].d);
        acc = fmaf(p1, (float)S, acc);
        acc = fmaf(p2, (float)M, acc);
    }
    return acc;
}

/* Q6_K value of element e (0..255) of a super-block, q - 32 in [-32, 31]
 * (dequant_q6_K's layout). */
static int q6_value(const struct block_q6_K *b, int e)
{
    const int h = e / 128, t = (e % 128) / 32, l = e % 32;
    const uint8_t lo = b->ql[64 * h + 32 * (t & 1) + l];
    return ((t < 2 ? (lo & 0x0f) : (lo >> 4)) | (((b->qh[32 * h + l] >> (2 * t)) & 3) << 4)) - 32;
}

/* Q6_K . Q8_K: per super-block S = sum_g sc_g * ((q_g - 32) . x_g) over
 * the 16 sub-blocks g of 16. */
static float canon_q6_K_ref(int64_t nb, const struct block_q6_K *w, const struct block_q8_K *x)
{
    float acc = 0.f;
    for (int64_t i = 0; i < nb; i++) {
        int32_t S = 0;
        for (int g = 0; g < QK_K / 16; g++) {
            int32_t dot = 0;
            for (int l = 0; l < 16; l++)
                dot += q6_value(&w[i], 16 * g + l) * x[i].qs[16 * g + l];
            S += w[i].scales[g] * dot;
        }
        acc = fmaf(quant_f16_to_f32(w[i].d) * x[i].d, (float)S, acc);
    }
    return acc;
}

/* Kernels with the quant_vec_dot_fn signature. */
#define REFK(name, expr) \
    static float ref_k_##name(int64_t n, const void *w, const void *x) { return expr; }
REFK(f32, dot4x8_ref(n, w, x, ld_f32, 0))
REFK(f32_tb, dot_tb_ref(n, w, x, ld_f32))
REFK(f16, dot4x8_ref(n, w, x, ld_f16, 1))
REFK(f16_tb, dot_tb_ref(n, w, x, ld_f16))
REFK(bf16, dot4x8_ref(n, w, x, ld_bf16, 1))
REFK(q8_0, dot_32_ref(n / QK8_0, w, x, 0, 0))
REFK(q4_0, dot_32_ref(n / QK4_0, w, x, 1, 0))
REFK(q4_0_rp, dot_32_ref(n / QK4_0, w, x, 1, 1))
REFK(q4_K, dot_k4_ref(n / QK_K, w, x, 0, K4_VEC))
REFK(q4_K_gemv, dot_k4_ref(n / QK_K, w, x, 0, K4_GEMV))
REFK(q4_K_gemm, dot_k4_ref(n / QK_K, w, x, 0, K4_GEMM))
REFK(q5_K, dot_k4_ref(n / QK_K, w, x, 1, K4_VEC))
REFK(q6_K, dot_q6_K_ref(n / QK_K, w, x))
REFK(q8_0_canon, dot_32_ref(n / QK8_0, w, x, 0, 1))
REFK(q4_0_canon, dot_32_ref(n / QK4_0, w, x, 1, 1))
REFK(q4_K_canon, canon_k4_ref(n / QK_K, w, x, 0))
REFK(q5_K_canon, canon_k4_ref(n / QK_K, w, x, 1))
REFK(q6_K_canon, canon_q6_K_ref(n / QK_K, w, x))
#undef REFK

static quant_vec_dot_fn ref_kernel_func(int kernel)
{
    switch (kernel) {
    case QK_F32: return ref_k_f32;
    case QK_F32_TB: return ref_k_f32_tb;
    case QK_F16: return ref_k_f16;
    case QK_F16_TB: return ref_k_f16_tb;
    case QK_BF16: return ref_k_bf16;
    case QK_Q8_0: return ref_k_q8_0;
    case QK_Q4_0: return ref_k_q4_0;
    case QK_Q4_0_RP: return ref_k_q4_0_rp;
    case QK_Q4_K: return ref_k_q4_K;
    case QK_Q4_K_GEMV: return ref_k_q4_K_gemv;
    case QK_Q4_K_GEMM: return ref_k_q4_K_gemm;
    case QK_Q5_K: return ref_k_q5_K;
    case QK_Q6_K: return ref_k_q6_K;
    case QK_Q8_0_CANON: return ref_k_q8_0_canon;
    case QK_Q4_0_CANON: return ref_k_q4_0_canon;
    case QK_Q4_K_CANON: return ref_k_q4_K_canon;
    case QK_Q5_K_CANON: return ref_k_q5_K_canon;
    case QK_Q6_K_CANON: return ref_k_q6_K_canon;
    default: return NULL;
    }
}

float quant_kernel_dot_ref(int kernel, int64_t n, const void *w, const void *x)
{
    quant_vec_dot_fn f = ref_kernel_func(kernel);
    return f ? f(n, w, x) : 0.f; /* unsupported: rejected at model load */
}

int quant_kernel_for(int type, int64_t w_rows, int64_t n, int batch)
{
    switch (type) {
    /* tinyBLAS takes products of 2+ rows when n % 8 == 0 and the matrix
     * has a multiple of 4 rows */
    case QT_F32: return batch && n % 8 == 0 && w_rows % 4 == 0 ? QK_F32_TB : QK_F32;
    case QT_F16: return batch && n % 8 == 0 && w_rows % 4 == 0 ? QK_F16_TB : QK_F16;
    case QT_BF16: return QK_BF16;
    case QT_Q8_0: return QK_Q8_0;
    /* ggml repacks Q4_0 and Q4_K matrices of a multiple of 8 rows on AVX2 */
    case QT_Q4_0: return w_rows % 8 == 0 ? QK_Q4_0_RP : QK_Q4_0;
    case QT_Q4_K: return w_rows % 8 != 0 ? QK_Q4_K : batch ? QK_Q4_K_GEMM : QK_Q4_K_GEMV;
    case QT_Q5_K: return QK_Q5_K;
    case QT_Q6_K: return QK_Q6_K;
    default: return QK_NONE;
    }
}

int quant_kernel_invariant(int type)
{
    switch (type) {
    case QT_Q8_0: return QK_Q8_0_CANON;
    case QT_Q4_0: return QK_Q4_0_CANON;
    case QT_Q4_K: return QK_Q4_K_CANON;
    case QT_Q5_K: return QK_Q5_K_CANON;
    case QT_Q6_K: return QK_Q6_K_CANON;
    /* float weights: llama.cpp's single-row kernels (batch does not pick
     * tinyBLAS here, and the matrix's rows do not matter to them) */
    default: return quant_kernel_for(type, 1, 1, 0);
    }
}

/* What quant_vec_dot and friends compute for a type: the invariant
 * numerics' kernel (the engine's default product). */
static int single_kernel(int type)
{
    return quant_kernel_invariant(type);
}

float quant_vec_dot_ref(int type, int64_t n, const void *w, const void *x)
{
    return quant_kernel_dot_ref(single_kernel(type), n, w, x);
}

quant_vec_dot_fn quant_kernel_func(int kernel)
{
#ifdef INFERD_HAVE_AVX2
    if (quant_use_avx2()) {
        quant_vec_dot_fn f = quant_avx2_kernel_func(kernel);
        if (f)
            return f;
    }
#endif
    return ref_kernel_func(kernel);
}

quant_vec_dot_fn quant_vec_dot_func(int type)
{
    return quant_kernel_func(single_kernel(type));
}

void quant_kernel_dots(int kernel, int64_t n, const void *w, const void *x, size_t x_stride, int nx,
                       float *out)
{
#ifdef INFERD_HAVE_AVX2
    if (quant_use_avx2() && quant_avx2_kernel_dots(kernel, n, w, x, x_stride, nx, out))
        return;
#endif
    quant_vec_dot_fn f = quant_kernel_func(kernel);
    for (int r = 0; r < nx; r++)
        out[r] = f ? f(n, w, (const uint8_t *)x + (size_t)r * x_stride) : 0.f;
}

void quant_vec_dots(int type, int64_t n, const void *w, const void *x, size_t x_stride, int nx,
                    float *out)
{
    quant_kernel_dots(single_kernel(type), n, w, x, x_stride, nx, out);
}

float quant_vec_dot(int type, int64_t n, const void *w, const void *x)
{
    quant_vec_dot_fn f = quant_vec_dot_func(type);
    return f ? f(n, w, x) : 0.f;
}

