/* cuda/qtypes — per-type device code shared by get_rows and the matrix
 * products: element dequantization and the dot of one 32-element sub-block
 * of a weight row with one q8_1 activation block.
 *
 * Layouts are ggml's (engine/quant_blocks.h); the formulas are the ones
 * engine/quant.c documents for the CPU (value = d*scale*q - dmin*min for
 * Q4_K/Q5_K, d*scale*(q-32) for Q6_K, d*(q-8) for Q4_0, d*q for Q8_0).
 *
 * Every sub-block dot is an exact int32 sum (dp4a) turned into float with a
 * fixed sequence of rounded operations (__fmul_rn/__fmaf_rn), so the same
 * (weight row, activation row) pair gives the same bits in every kernel that
 * calls it, whatever else the kernel computes (batch invariance).
 */
#ifndef INFERD_CUDA_QTYPES_CUH
#define INFERD_CUDA_QTYPES_CUH

#include "engine/cuda/common.cuh"

/* 6-bit scale and min j (0..7) of a Q4_K/Q5_K super-block (engine/quant.c). */
static __device__ __forceinline__ void cuda_k4_scale_min(const uint8_t *q, int j, int *sc, int *m)
{
    if (j < 4) {
        *sc = q[j] & 63;
        *m = q[j + 4] & 63;
    } else {
        *sc = (q[j + 4] & 0x0f) | ((q[j - 4] >> 6) << 4);
        *m = (q[j + 4] >> 4) | ((q[j] >> 6) << 4);
    }
}

/* Element i of a weight row of type T, as float. */
template <int T> __device__ float cuda_dequant1(const uint8_t *row, int64_t i);

template <> __device__ __forceinline__ float cuda_dequant1<QT_F32>(const uint8_t *row, int64_t i)
{
    return ((const float *)row)[i];
}
template <> __device__ __forceinline__ float cuda_dequant1<QT_F16>(const uint8_t *row, int64_t i)
{
    return cuda_h2f(((const quant_f16 *)row)[i]);
}
template <> __device__ __forceinline__ float cuda_dequant1<QT_BF16>(const uint8_t *row, int64_t i)
{
    return cuda_bf2f(((const quant_bf16 *)row)[i]);
}
template <> __device__ __forceinline__ float cuda_dequant1<QT_Q4_0>(const uint8_t *row, int64_t i)
{
    const struct block_q4_0 *b = (const struct block_q4_0 *)row + i / QK4_0;
    const int j = (int)(i % QK4_0);
    const int q = j < 16 ? (b->qs[j] & 0x0f) : (b->qs[j - 16] >> 4);
    return (float)(q - 8) * cuda_h2f(b->d);
}
template <> __device__ __forceinline__ float cuda_dequant1<QT_Q8_0>(const uint8_t *row, int64_t i)
{
    const struct block_q8_0 *b = (const struct block_q8_0 *)row + i / QK8_0;
    return (float)b->qs[i % QK8_0] * cuda_h2f(b->d);
}
template <> __device__ __forceinline__ float cuda_dequant1<QT_Q4_K>(const uint8_t *row, int64_t i)
{
    const struct block_q4_K *b = (const struct block_q4_K *)row + i / QK_K;
    const int e = (int)(i % QK_K), s = e / 32, l = e % 32;
    int sc, m;
    cuda_k4_scale_min(b->scales, s, &sc, &m);
    const uint8_t byte = b->qs[32 * (s / 2) + l];
    const int q = (s & 1) ? (byte >> 4) : (byte & 0x0f);
    return cuda_h2f(b->d) * (float)sc * (float)q - cuda_h2f(b->dmin) * (float)m;
}
template <> __device__ __forceinline__ float cuda_dequant1<QT_Q5_K>(const uint8_t *row, int64_t i)
{
    const struct block_q5_K *b = (const struct block_q5_K *)row + i / QK_K;
    const int e = (int)(i % QK_K), s = e / 32, l = e % 32;
    int sc, m;
    cuda_k4_scale_min(b->scales, s, &sc, &m);
    const uint8_t byte = b->qs[32 * (s / 2) + l];
    const int q = ((s & 1) ? (byte >> 4) : (byte & 0x0f)) | (((b->qh[l] >> s) & 1) << 4);
    return cuda_h2f(b->d) * (float)sc * (float)q - cuda_h2f(b->dmin) * (float)m;
}
/* Q6_K element e: half h = e/128; within it quarter t = (e%128)/32 and l = e%32
 * (engine/quant.c's dequant_q6_K order). */
template <> __device__ __forceinline__ float cuda_dequant1<QT_Q6_K>(const uint8_t *row, int64_t i)
{
    const struct block_q6_K *b = (const struct block_q6_K *)row + i / QK_K;
    const int e = (int)(i % QK_K), h = e / 128, t = (e % 128) / 32, l = e % 32;
    const uint8_t lo = b->ql[64 * h + 32 * (t & 1) + l];
    const int q = ((t < 2 ? (lo & 0x0f) : (lo >> 4)) | (((b->qh[32 * h + l] >> (2 * t)) & 3) << 4)) - 32;
    return cuda_h2f(b->d) * (float)b->scales[8 * h + l / 16 + 2 * t] * (float)q;
}

/* ---- sub-block dots --------------------------------------------------- */

static __device__ __forceinline__ int cuda_load_i32(const uint8_t *p)
{
    /* the blocks are only 2-byte aligned (block_q4_0 is 18 bytes) */
    const uint16_t *h = (const uint16_t *)p;
    return (int)((uint32_t)h[0] | ((uint32_t)h[1] << 16));
}

/* Dot of 32-element sub-block ib of a weight row of type T with the q8_1
 * block x holding the same 32 activations. */
template <int T> __device__ float cuda_dot32(const uint8_t *row, int64_t ib, const struct block_q8_1 *x);

template <> __device__ __forceinline__ float cuda_dot32<QT_Q8_0>(const uint8_t *row, int64_t ib,
                                                                const struct block_q8_1 *x)
{
    const struct block_q8_0 *b = (const struct block_q8_0 *)row + ib;
    const int *xq = (const int *)x->qs;
    int sumi = 0;
#pragma unroll
    for (int k = 0; k < 8; k++)
        sumi = __dp4a(cuda_load_i32((const uint8_t *)b->qs + 4 * k), xq[k], sumi);
    return __fmul_rn(__fmul_rn(cuda_h2f(b->d), cuda_h2f(x->d)), (float)sumi);
}

template <> __device__ __forceinline__ float cuda_dot32<QT_Q4_0>(const uint8_t *row, int64_t ib,
                                                                const struct block_q8_1 *x)
{
    const struct block_q4_0 *b = (const struct block_q4_0 *)row + ib;
    const int *xq = (const int *)x->qs;
    int sumi = 0;
#pragma unroll
    for (int k = 0; k < 4; k++) {
        const int v = cuda_load_i32(b->qs + 4 * k);
        sumi = __dp4a(v & 0x0f0f0f0f, xq[k], sumi);            /* elements 4k..4k+3 */
        sumi = __dp4a((v >> 4) & 0x0f0f0f0f, xq[k + 4], sumi); /* 16+4k.. */
    }
    /* sum((q-8) dw * qx dx) = dw * (dx*sumi - 8 * s) */
    const float dw = cuda_h2f(b->d);
    return __fmul_rn(dw, __fmaf_rn(cuda_h2f(x->d), (float)sumi, __fmul_rn(-8.0f, cuda_h2f(x->s))));
}

template <> __device__ __forceinline__ float cuda_dot32<QT_Q4_K>(const uint8_t *row, int64_t ib,
                                                                const struct block_q8_1 *x)
{
    const struct block_q4_K *b = (const struct block_q4_K *)row + ib / 8;
    const int s = (int)(ib % 8);
    int sc, m;
    cuda_k4_scale_min(b->scales, s, &sc, &m);
    const int *q = (const int *)(b->qs + 32 * (s / 2)); /* 4-byte aligned: 144-byte blocks */
    const int *xq = (const int *)x->qs;
    const int shift = 4 * (s & 1);
    int sumi = 0;
#pragma unroll
    for (int k = 0; k < 8; k++)
        sumi = __dp4a((q[k] >> shift) & 0x0f0f0f0f, xq[k], sumi);
    const float dd = __fmul_rn(__fmul_rn(cuda_h2f(b->d), (float)sc), cuda_h2f(x->d));
    const float mm = __fmul_rn(__fmul_rn(cuda_h2f(b->dmin), (float)m), cuda_h2f(x->s));
    return __fmaf_rn(dd, (float)sumi, -mm);
}

template <> __device__ __forceinline__ float cuda_dot32<QT_Q5_K>(const uint8_t *row, int64_t ib,
                                                                const struct block_q8_1 *x)
{
    const struct block_q5_K *b = (const struct block_q5_K *)row + ib / 8;
    const int s = (int)(ib % 8);
    int sc, m;
    cuda_k4_scale_min(b->scales, s, &sc, &m);
    const int *q = (const int *)(b->qs + 32 * (s / 2)); /* 176-byte blocks: 4-byte aligned */
    const int *qh = (const int *)b->qh;
    const int *xq = (const int *)x->qs;
    const int shift = 4 * (s & 1);
    int sumi = 0;
#pragma unroll
    for (int k = 0; k < 8; k++) {
        /* bit s of qh[4k..4k+3] to bit 4 of each byte */
        const int hi = ((qh[k] >> s) & 0x01010101) << 4;
        sumi = __dp4a(((q[k] >> shift) & 0x0f0f0f0f) | hi, xq[k], sumi);
    }
    const float dd = __fmul_rn(__fmul_rn(cuda_h2f(b->d), (float)sc), cuda_h2f(x->d));
    const float mm = __fmul_rn(__fmul_rn(cuda_h2f(b->dmin), (float)m), cuda_h2f(x->s));
    return __fmaf_rn(dd, (float)sumi, -mm);
}

template <> __device__ __forceinline__ float cuda_dot32<QT_Q6_K>(const uint8_t *row, int64_t ib,
                                                                const struct block_q8_1 *x)
{
    const struct block_q6_K *b = (const struct block_q6_K *)row + ib / 8;
    const int s = (int)(ib % 8), h = s / 4, t = s % 4;
    const uint8_t *ql = b->ql + 64 * h + 32 * (t & 1);
    const uint8_t *qh = b->qh + 32 * h;
    const int *xq = (const int *)x->qs;
    const int lshift = 4 * (t >> 1), hshift = 2 * t;
    int sum0 = 0, sum1 = 0; /* elements 0-15 and 16-31 have their own scales */
#pragma unroll
    for (int k = 0; k < 8; k++) {
        const int lo = (cuda_load_i32(ql + 4 * k) >> lshift) & 0x0f0f0f0f;
        const int hi = ((cuda_load_i32(qh + 4 * k) >> hshift) & 0x03030303) << 4;
        const int v = __vsubss4(lo | hi, 0x20202020); /* q - 32, in [-32, 31] */
        if (k < 4)
            sum0 = __dp4a(v, xq[k], sum0);
        else
            sum1 = __dp4a(v, xq[k], sum1);
    }
    const int8_t *sc = b->scales + 8 * h + 2 * t;
    const int sumi = sum0 * (int)sc[0] + sum1 * (int)sc[1];
    return __fmul_rn(__fmul_rn(cuda_h2f(b->d), cuda_h2f(x->d)), (float)sumi);
}

#endif
