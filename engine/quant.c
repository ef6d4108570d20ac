/* quant — ggml's tensor types in plain C: half/bfloat conversions, dequantization,
 * activation quantization, reference dot products and reference quantizers.
 *
 * The functions named *_ref here are the readable specification; the AVX2 paths
 * in quant_avx2.c are tested against them. Inside a block, dot products work in
 * integers exactly as llama.cpp's CPU backend does (the int32 block sum is
 * exact, only the float combination of blocks may differ between paths), so
 * our logits match llama.cpp's closely.
 *
 * Activation quantization (quant_quantize_row) must give the same bytes on
 * every path, because batch invariance (DESIGN.md gate 4) and CPU/GPU parity
 * depend on it: the AVX2 versions reproduce these scalar ones bit for bit
 * (same float operations, round-half-to-even).
 *
 * The type table (names, block sizes) lives in quant_types.c.
 * All functions are pure and may be called from any thread; quant_force_ref
 * is a test switch.
 */
#include "quant.h"

#include <math.h>
#include <stdatomic.h>
#include <string.h>

#include "err.h"
#include "quant_avx2.h"

/* ------------------------------------------------------------------ halves */

static uint32_t f32_bits(float f)
{
    uint32_t u;
    memcpy(&u, &f, 4);
    return u;
}

static float bits_f32(uint32_t u)
{
    float f;
    memcpy(&f, &u, 4);
    return f;
}

float quant_f16_to_f32(quant_f16 h)
{
    uint32_t sign = (uint32_t)(h & 0x8000) << 16;
    uint32_t exp = (h >> 10) & 0x1f;
    uint32_t mant = h & 0x3ff;

    if (exp == 0) {
        /* zero or subnormal: mant * 2^-24, exact in float */
        float v = (float)mant * 0x1p-24f;
        return sign ? -v : v;
    }
    if (exp == 31) /* inf or NaN, payload kept */
        return bits_f32(sign | 0x7f800000u | (mant << 13));
    return bits_f32(sign | ((exp + 112) << 23) | (mant << 13));
}

quant_f16 quant_f32_to_f16(float f)
{
    uint32_t u = f32_bits(f);
    uint16_t sign = (uint16_t)((u >> 16) & 0x8000);
    uint32_t a = u & 0x7fffffffu;

    if (a > 0x7f800000u) {
        /* NaN: keep the top payload bits; make sure it stays a NaN */
        uint16_t m = (uint16_t)((a >> 13) & 0x3ff);
        return (quant_f16)(sign | 0x7c00 | (m ? m : 0x200));
    }
    /* 65520 is halfway between 65504 (max half, odd mantissa) and 2^16:
     * ties go to even, i.e. to infinity. */
    if (a >= 0x477ff000u)
        return (quant_f16)(sign | 0x7c00);
    if (a < 0x38800000u) {
        /* below the smallest normal half: the result is a multiple of 2^-24.
         * Adding 0.5 puts the value in [0.5, 1) whose float ulp is 2^-24, so
         * the float addition itself rounds to nearest even for us. */
        float x = bits_f32(a) + 0.5f;
        return (quant_f16)(sign | (f32_bits(x) - 0x3f000000u));
    }
    /* normal: drop 13 mantissa bits, rounding to nearest even; a carry into
     * the exponent is the correct result. */
    a += 0xfffu + ((a >> 13) & 1);
    return (quant_f16)(sign | ((a >> 13) - (112u << 10)));
}

float quant_bf16_to_f32(quant_bf16 h)
{
    return bits_f32((uint32_t)h << 16);
}

quant_bf16 quant_f32_to_bf16(float f)
{
    uint32_t u = f32_bits(f);
    if ((u & 0x7fffffffu) > 0x7f800000u)
        return (quant_bf16)((u >> 16) | 0x40); /* NaN stays NaN (quiet) */
    return (quant_bf16)((u + 0x7fffu + ((u >> 16) & 1)) >> 16);
}

/* Round half to even, like the x86 default rounding mode (and ggml's
 * nearest_int). Valid for |x| < 2^22, which every caller guarantees. */
static int nearest_int(float x)
{
    float v = x + 12582912.f; /* 1.5 * 2^23: the sum's ulp is 1 */
    return (int)(f32_bits(v) & 0x007fffff) - 0x00400000;
}

/* ----------------------------------------------------- K-quant scale bytes */

/* Q4_K/Q5_K keep eight 6-bit scales and eight 6-bit mins in 12 bytes:
 * bytes 0-3: scale[0..3] (low 6 bits), top 2 bits = scale[4..7] >> 4
 * bytes 4-7: min[0..3] (low 6 bits),   top 2 bits = min[4..7] >> 4
 * bytes 8-11: low nibble scale[4..7] & 15, high nibble min[4..7] & 15 */
static void k4_scale_min(const uint8_t *q, int j, int *sc, int *m)
{
    if (j < 4) {
        *sc = q[j] & 63;
        *m = q[j + 4] & 63;
    } else {
        *sc = (q[j + 4] & 0x0f) | ((q[j - 4] >> 6) << 4);
        *m = (q[j + 4] >> 4) | ((q[j] >> 6) << 4);
    }
}

static void k4_pack_scales(uint8_t *q, const uint8_t sc[8], const uint8_t m[8])
{
    for (int j = 0; j < 4; j++) {
        q[j] = (uint8_t)((sc[j] & 63) | ((sc[j + 4] >> 4) << 6));
        q[j + 4] = (uint8_t)((m[j] & 63) | ((m[j + 4] >> 4) << 6));
        q[j + 8] = (uint8_t)((sc[j + 4] & 15) | ((m[j + 4] & 15) << 4));
    }
}

/* ---------------------------------------------------------- dequantization */

static void dequant_q4_0(const struct block_q4_0 *b, float *y, int64_t nb)
{
    for (int64_t i = 0; i < nb; i++, y += QK4_0) {
        float d = quant_f16_to_f32(b[i].d);
        /* byte j holds element j (low nibble) and element j+16 (high) */
        for (int j = 0; j < QK4_0 / 2; j++) {
            y[j] = (float)((b[i].qs[j] & 0x0f) - 8) * d;
            y[j + QK4_0 / 2] = (float)((b[i].qs[j] >> 4) - 8) * d;
        }
    }
}

static void dequant_q8_0(const struct block_q8_0 *b, float *y, int64_t nb)
{
    for (int64_t i = 0; i < nb; i++, y += QK8_0) {
        float d = quant_f16_to_f32(b[i].d);
        for (int j = 0; j < QK8_0; j++)
            y[j] = (float)b[i].qs[j] * d;
    }
}

/* Q4_K: 8 sub-blocks of 32; y = d*scale*q - dmin*min. Each group of 32 bytes
 * of qs holds two sub-blocks: low nibbles the first, high nibbles the second. */
static void dequant_q4_K(const struct block_q4_K *b, float *y, int64_t nb)
{
    for (int64_t i = 0; i < nb; i++) {
        float d = quant_f16_to_f32(b[i].d);
        float dmin = quant_f16_to_f32(b[i].dmin);
        const uint8_t *q = b[i].qs;
        for (int j = 0; j < QK_K / 64; j++, q += 32) {
            int sc0, m0, sc1, m1;
            k4_scale_min(b[i].scales, 2 * j, &sc0, &m0);
            k4_scale_min(b[i].scales, 2 * j + 1, &sc1, &m1);
            float d0 = d * (float)sc0, mm0 = dmin * (float)m0;
            float d1 = d * (float)sc1, mm1 = dmin * (float)m1;
            for (int l = 0; l < 32; l++)
                *y++ = d0 * (float)(q[l] & 0x0f) - mm0;
            for (int l = 0; l < 32; l++)
                *y++ = d1 * (float)(q[l] >> 4) - mm1;
        }
    }
}

/* Q5_K: Q4_K plus a fifth bit per element in qh: element l of sub-block s
 * takes bit s of qh[l]. */
static void dequant_q5_K(const struct block_q5_K *b, float *y, int64_t nb)
{
    for (int64_t i = 0; i < nb; i++) {
        float d = quant_f16_to_f32(b[i].d);
        float dmin = quant_f16_to_f32(b[i].dmin);
        const uint8_t *ql = b[i].qs;
        const uint8_t *qh = b[i].qh;
        for (int j = 0; j < QK_K / 64; j++, ql += 32) {
            int sc0, m0, sc1, m1;
            k4_scale_min(b[i].scales, 2 * j, &sc0, &m0);
            k4_scale_min(b[i].scales, 2 * j + 1, &sc1, &m1);
            float d0 = d * (float)sc0, mm0 = dmin * (float)m0;
            float d1 = d * (float)sc1, mm1 = dmin * (float)m1;
            for (int l = 0; l < 32; l++) {
                int q = (ql[l] & 0x0f) | (((qh[l] >> (2 * j)) & 1) << 4);
                *y++ = d0 * (float)q - mm0;
            }
            for (int l = 0; l < 32; l++) {
                int q = (ql[l] >> 4) | (((qh[l] >> (2 * j + 1)) & 1) << 4);
                *y++ = d1 * (float)q - mm1;
            }
        }
    }
}

/* Q6_K: 16 sub-blocks of 16 with int8 scales; q in [0,63] stored as 4 low bits
 * in ql and 2 high bits in qh, value = d * scale * (q - 32). Each half of 128
 * elements uses 64 bytes of ql and 32 of qh: element l (<32) low nibble of
 * ql[l] + qh bits 0-1; l+32: ql[l+32] low, bits 2-3; l+64: ql[l] high, bits
 * 4-5; l+96: ql[l+32] high, bits 6-7. */
static void dequant_q6_K(const struct block_q6_K *b, float *y, int64_t nb)
{
    for (int64_t i = 0; i < nb; i++) {
        float d = quant_f16_to_f32(b[i].d);
        const uint8_t *ql = b[i].ql;
        const uint8_t *qh = b[i].qh;
        const int8_t *sc = b[i].scales;
        for (int h = 0; h < QK_K / 128; h++, y += 128, ql += 64, qh += 32, sc += 8) {
            for (int l = 0; l < 32; l++) {
                int s = l / 16;
                int q1 = ((ql[l] & 0x0f) | (((qh[l] >> 0) & 3) << 4)) - 32;
                int q2 = ((ql[l + 32] & 0x0f) | (((qh[l] >> 2) & 3) << 4)) - 32;
                int q3 = ((ql[l] >> 4) | (((qh[l] >> 4) & 3) << 4)) - 32;
                int q4 = ((ql[l + 32] >> 4) | (((qh[l] >> 6) & 3) << 4)) - 32;
                y[l] = d * (float)sc[s] * (float)q1;
                y[l + 32] = d * (float)sc[s + 2] * (float)q2;
                y[l + 64] = d * (float)sc[s + 4] * (float)q3;
                y[l + 96] = d * (float)sc[s + 6] * (float)q4;
            }
        }
    }
}

static void dequant_q8_K(const struct block_q8_K *b, float *y, int64_t nb)
{
    for (int64_t i = 0; i < nb; i++, y += QK_K)
        for (int j = 0; j < QK_K; j++)
            y[j] = b[i].d * (float)b[i].qs[j];
}

void quant_dequant_row(int type, const void *src, float *dst, int64_t n)
{
    switch (type) {
    case QT_F32:
        memcpy(dst, src, (size_t)n * sizeof(float));
        break;
    case QT_F16: {
        const quant_f16 *s = src;
        for (int64_t i = 0; i < n; i++)
            dst[i] = quant_f16_to_f32(s[i]);
        break;
    }
    case QT_BF16: {
        const quant_bf16 *s = src;
        for (int64_t i = 0; i < n; i++)
            dst[i] = quant_bf16_to_f32(s[i]);
        break;
    }
    case QT_Q4_0: dequant_q4_0(src, dst, n / QK4_0); break;
    case QT_Q8_0: dequant_q8_0(src, dst, n / QK8_0); break;
    case QT_Q4_K: dequant_q4_K(src, dst, n / QK_K); break;
    case QT_Q5_K: dequant_q5_K(src, dst, n / QK_K); break;
    case QT_Q6_K: dequant_q6_K(src, dst, n / QK_K); break;
    case QT_Q8_K: dequant_q8_K(src, dst, n / QK_K); break;
    default:
        /* Callers check quant_type_supported() when loading the model; an
         * unsupported type here is a bug, and zeros are the least harmful. */
        memset(dst, 0, (size_t)n * sizeof(float));
        break;
    }
}

/* --------------------------------------------------- activation quantizing */

int quant_vec_dot_type(int type)
{
    switch (type) {
    case QT_Q4_0:
    case QT_Q8_0: return QT_Q8_0;
    case QT_Q4_K:
    case QT_Q5_K:
    case QT_Q6_K: return QT_Q8_K;
    case QT_F16: return QT_F16;
    case QT_BF16: return QT_BF16;
    default: return QT_F32;
    }
}

/* Q8_0: d = amax/127, q = round-half-even(x * 127/amax). The scale is the
 * one llama.cpp's AVX2 quantizer computes (127/amax, not 1/d), which is what
 * its CPU backend actually runs; rounding is half-even for the same reason. */
static void quantize_row_q8_0_ref(const float *x, struct block_q8_0 *y, int64_t nb)
{
    for (int64_t i = 0; i < nb; i++, x += QK8_0) {
        float amax = 0.f;
        for (int j = 0; j < QK8_0; j++)
            amax = fmaxf(amax, fabsf(x[j]));
        float d = amax / 127.f;
        float id = amax != 0.f ? 127.f / amax : 0.f;
        y[i].d = quant_f32_to_f16(d);
        for (int j = 0; j < QK8_0; j++)
            y[i].qs[j] = (int8_t)nearest_int(x[j] * id);
    }
}

/* Q8_K (ggml's scheme): the element of largest magnitude (first one on ties)
 * maps to -127; d = 1/iscale is kept in float; bsums hold the sums of each 16
 * quantized values, which the K-quant dots use for the min/offset terms. */
static void quantize_row_q8_K_ref(const float *x, struct block_q8_K *y, int64_t nb)
{
    for (int64_t i = 0; i < nb; i++, x += QK_K) {
        float amax = 0.f, max = 0.f;
        for (int j = 0; j < QK_K; j++) {
            float ax = fabsf(x[j]);
            if (ax > amax) {
                amax = ax;
                max = x[j];
            }
        }
        if (amax == 0.f) {
            memset(&y[i], 0, sizeof(y[i]));
            continue;
        }
        float iscale = -127.f / max;
        for (int j = 0; j < QK_K; j++) {
            int v = nearest_int(iscale * x[j]);
            y[i].qs[j] = (int8_t)(v > 127 ? 127 : v);
        }
        for (int g = 0; g < QK_K / 16; g++) {
            int s = 0;
            for (int l = 0; l < 16; l++)
                s += y[i].qs[g * 16 + l];
            y[i].bsums[g] = (int16_t)s;
        }
        y[i].d = 1.f / iscale;
    }
}

/* ------------------------------------------------------- dispatch helpers */

static atomic_int force_ref;

#ifdef INFERD_HAVE_AVX2
#include <cpuid.h>

static atomic_int avx2_state = -1; /* -1: not probed yet */

/* AVX2 + FMA + F16C, and the OS saves the YMM registers (XCR0 bits 1-2).
 * cpuid directly: compilers disagree on __builtin_cpu_supports names. */
static int probe_avx2(void)
{
    unsigned a, b, c, d;
    if (!__get_cpuid(1, &a, &b, &c, &d))
        return 0;
    int fma = (c >> 12) & 1, osxsave = (c >> 27) & 1, avx = (c >> 28) & 1, f16c = (c >> 29) & 1;
    if (!(fma && osxsave && avx && f16c))
        return 0;
    unsigned xlo, xhi;
    __asm__ volatile("xgetbv" : "=a"(xlo), "=d"(xhi) : "c"(0));
    if ((xlo & 6) != 6)
        return 0;
    if (__get_cpuid_max(0, NULL) < 7)
        return 0;
    __cpuid_count(7, 0, a, b, c, d);
    return (b >> 5) & 1;
}
#endif

int quant_have_avx2(void)
{
#ifdef INFERD_HAVE_AVX2
    int s = atomic_load_explicit(&avx2_state, memory_order_relaxed);
    if (s < 0) {
        s = probe_avx2();
        atomic_store_explicit(&avx2_state, s, memory_order_relaxed);
    }
    return s;
#else
    return 0;
#endif
}

void quant_force_ref(int on)
{
    atomic_store_explicit(&force_ref, on ? 1 : 0, memory_order_relaxed);
}

#ifdef INFERD_HAVE_AVX2
static int use_avx2(void)
{
    return !atomic_load_explicit(&force_ref, memory_order_relaxed) && quant_have_avx2();
}
#endif

void quant_quantize_row_ref(int vec_dot_type, const float *x, void *dst, int64_t n)
{
    switch (vec_dot_type) {
    case QT_Q8_0: quantize_row_q8_0_ref(x, dst, n / QK8_0); break;
    case QT_Q8_K: quantize_row_q8_K_ref(x, dst, n / QK_K); break;
    case QT_F16: {
        quant_f16 *d = dst;
        for (int64_t i = 0; i < n; i++)
            d[i] = quant_f32_to_f16(x[i]);
        break;
    }
    case QT_BF16: {
        quant_bf16 *d = dst;
        for (int64_t i = 0; i < n; i++)
            d[i] = quant_f32_to_bf16(x[i]);
        break;
    }
    default:
        memcpy(dst, x, (size_t)n * sizeof(float));
        break;
    }
}

void quant_quantize_row(int vec_dot_type, const float *x, void *dst, int64_t n)
{
#ifdef INFERD_HAVE_AVX2
    if (use_avx2()) {
        switch (vec_dot_type) {
        case QT_Q8_0: quant_avx2_quantize_q8_0(x, dst, n / QK8_0); return;
        case QT_Q8_K: quant_avx2_quantize_q8_K(x, dst, n / QK_K); return;
        case QT_F16: quant_avx2_quantize_f16(x, dst, n); return;
        default: break;
        }
    }
#endif
    quant_quantize_row_ref(vec_dot_type, x, dst, n);
}

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
    if (use_avx2()) {
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
    if (use_avx2() && quant_avx2_kernel_dots(kernel, n, w, x, x_stride, nx, out))
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

/* ------------------------------------------------- reference quantizers */

/* Q4_0 as ggml quantizes it: the signed value of largest magnitude maps to
 * -8, q = min(15, trunc(x/d + 8.5)). */
static void quantize_q4_0(const float *x, struct block_q4_0 *y, int64_t nb)
{
    for (int64_t i = 0; i < nb; i++, x += QK4_0) {
        float amax = 0.f, max = 0.f;
        for (int j = 0; j < QK4_0; j++) {
            if (fabsf(x[j]) > amax) {
                amax = fabsf(x[j]);
                max = x[j];
            }
        }
        float d = max / -8.f;
        float id = d != 0.f ? 1.f / d : 0.f;
        y[i].d = quant_f32_to_f16(d);
        for (int j = 0; j < QK4_0 / 2; j++) {
            int q0 = (int)(x[j] * id + 8.5f);
            int q1 = (int)(x[j + QK4_0 / 2] * id + 8.5f);
            q0 = q0 > 15 ? 15 : q0;
            q1 = q1 > 15 ? 15 : q1;
            y[i].qs[j] = (uint8_t)(q0 | (q1 << 4));
        }
    }
}

static void quantize_q8_0(const float *x, struct block_q8_0 *y, int64_t nb)
{
    for (int64_t i = 0; i < nb; i++, x += QK8_0) {
        float amax = 0.f;
        for (int j = 0; j < QK8_0; j++)
            amax = fmaxf(amax, fabsf(x[j]));
        /* round against the stored (f16) scale: each element then lands
         * within half a step of its value; |x|/d16 <= 127.07 stays in range */
        y[i].d = quant_f32_to_f16(amax / 127.f);
        float d = quant_f16_to_f32(y[i].d);
        float id = d != 0.f ? 1.f / d : 0.f;
        for (int j = 0; j < QK8_0; j++)
            y[i].qs[j] = (int8_t)roundf(x[j] * id);
    }
}

/* Affine fit of n values to q in [0, nmax]: x ~ scale*q - min with min >= 0
 * (the K-quant form). Start from the range, then refine (scale, min) by least
 * squares on the chosen q a few times, keeping the best error. */
static void fit_scale_min(const float *x, int n, int nmax, float *scale, float *min)
{
    float lo = x[0], hi = x[0];
    for (int l = 1; l < n; l++) {
        lo = fminf(lo, x[l]);
        hi = fmaxf(hi, x[l]);
    }
    if (lo > 0.f)
        lo = 0.f;
    float s = (hi - lo) / (float)nmax, m = -lo;
    if (s == 0.f) {
        *scale = 0.f;
        *min = m;
        return;
    }
    float best_s = s, best_m = m, best_err = INFINITY;
    for (int it = 0; it < 4; it++) {
        double sq = 0, sq2 = 0, sx = 0, sqx = 0, err = 0;
        for (int l = 0; l < n; l++) {
            int q = nearest_int((x[l] + m) / s);
            q = q < 0 ? 0 : q > nmax ? nmax : q;
            float e = s * (float)q - m - x[l];
            err += (double)e * e;
            sq += q;
            sq2 += (double)q * q;
            sx += x[l];
            sqx += (double)q * x[l];
        }
        if (err < best_err) {
            best_err = (float)err;
            best_s = s;
            best_m = m;
        }
        /* least squares for x = a*q + b over the current q */
        double det = n * sq2 - sq * sq;
        if (det <= 0)
            break;
        double a = (n * sqx - sq * sx) / det;
        double b = (sx - a * sq) / n;
        if (a <= 0 || b > 0) /* keep min >= 0 as the format requires */
            break;
        s = (float)a;
        m = (float)-b;
    }
    *scale = best_s;
    *min = best_m;
}

/* Per-element quantization of a sub-block once its scale and min are final
 * (after the 6-bit and f16 rounding of the stored values). */
static int q_affine(float x, float d, float m, int nmax)
{
    if (d == 0.f)
        return 0;
    int q = nearest_int((x + m) / d);
    return q < 0 ? 0 : q > nmax ? nmax : q;
}

/* Q4_K/Q5_K share the scale layout: fit each 32-value sub-block, then
 * quantize the 8 scales and 8 mins to 6 bits against super-block d/dmin. */
static void k4_quantize_scales(const float *x, int nmax, uint8_t scales[K_SCALE_SIZE],
                               quant_f16 *dd, quant_f16 *ddmin, float deff[8], float meff[8])
{
    float sc[8], mn[8], max_sc = 0.f, max_mn = 0.f;
    for (int j = 0; j < 8; j++) {
        fit_scale_min(x + 32 * j, 32, nmax, &sc[j], &mn[j]);
        max_sc = fmaxf(max_sc, sc[j]);
        max_mn = fmaxf(max_mn, mn[j]);
    }
    *dd = quant_f32_to_f16(max_sc / 63.f);
    *ddmin = quant_f32_to_f16(max_mn / 63.f);
    float d = quant_f16_to_f32(*dd), dmin = quant_f16_to_f32(*ddmin);
    uint8_t qs[8], qm[8];
    for (int j = 0; j < 8; j++) {
        int a = d > 0.f ? nearest_int(sc[j] / d) : 0;
        int b = dmin > 0.f ? nearest_int(mn[j] / dmin) : 0;
        qs[j] = (uint8_t)(a < 0 ? 0 : a > 63 ? 63 : a);
        qm[j] = (uint8_t)(b < 0 ? 0 : b > 63 ? 63 : b);
        deff[j] = d * (float)qs[j];
        meff[j] = dmin * (float)qm[j];
    }
    k4_pack_scales(scales, qs, qm);
}

static void quantize_q4_K(const float *x, struct block_q4_K *y, int64_t nb)
{
    for (int64_t i = 0; i < nb; i++, x += QK_K) {
        float deff[8], meff[8];
        k4_quantize_scales(x, 15, y[i].scales, &y[i].d, &y[i].dmin, deff, meff);
        for (int j = 0; j < QK_K / 64; j++) {
            const float *x0 = x + 64 * j, *x1 = x0 + 32;
            for (int l = 0; l < 32; l++) {
                int q0 = q_affine(x0[l], deff[2 * j], meff[2 * j], 15);
                int q1 = q_affine(x1[l], deff[2 * j + 1], meff[2 * j + 1], 15);
                y[i].qs[32 * j + l] = (uint8_t)(q0 | (q1 << 4));
            }
        }
    }
}

static void quantize_q5_K(const float *x, struct block_q5_K *y, int64_t nb)
{
    for (int64_t i = 0; i < nb; i++, x += QK_K) {
        float deff[8], meff[8];
        k4_quantize_scales(x, 31, y[i].scales, &y[i].d, &y[i].dmin, deff, meff);
        memset(y[i].qh, 0, sizeof(y[i].qh));
        for (int j = 0; j < QK_K / 64; j++) {
            const float *x0 = x + 64 * j, *x1 = x0 + 32;
            for (int l = 0; l < 32; l++) {
                int q0 = q_affine(x0[l], deff[2 * j], meff[2 * j], 31);
                int q1 = q_affine(x1[l], deff[2 * j + 1], meff[2 * j + 1], 31);
                y[i].qs[32 * j + l] = (uint8_t)((q0 & 15) | ((q1 & 15) << 4));
                y[i].qh[l] |= (uint8_t)(((q0 >> 4) << (2 * j)) | ((q1 >> 4) << (2 * j + 1)));
            }
        }
    }
}

/* Q6_K: each 16-value sub-block gets a symmetric scale amax/31 (so q stays in
 * [-31, 31] before the scales are rounded), the 16 scales become int8
 * against the super-block d = max|scale|/127. */
static void quantize_q6_K(const float *x, struct block_q6_K *y, int64_t nb)
{
    for (int64_t i = 0; i < nb; i++, x += QK_K) {
        float sc[16], max_sc = 0.f;
        for (int g = 0; g < 16; g++) {
            float amax = 0.f;
            for (int l = 0; l < 16; l++)
                amax = fmaxf(amax, fabsf(x[16 * g + l]));
            sc[g] = amax / 31.f;
            max_sc = fmaxf(max_sc, sc[g]);
        }
        y[i].d = quant_f32_to_f16(max_sc / 127.f);
        float d = quant_f16_to_f32(y[i].d);
        uint8_t q[QK_K];
        for (int g = 0; g < 16; g++) {
            int s = d > 0.f ? nearest_int(sc[g] / d) : 0;
            s = s > 127 ? 127 : s;
            y[i].scales[g] = (int8_t)s;
            float de = d * (float)s;
            for (int l = 0; l < 16; l++) {
                int v = de != 0.f ? nearest_int(x[16 * g + l] / de) : 0;
                v = v < -32 ? -32 : v > 31 ? 31 : v;
                q[16 * g + l] = (uint8_t)(v + 32);
            }
        }
        memset(y[i].qh, 0, sizeof(y[i].qh));
        for (int h = 0; h < 2; h++) {
            uint8_t *ql = y[i].ql + 64 * h, *qh = y[i].qh + 32 * h;
            const uint8_t *qq = q + 128 * h;
            for (int l = 0; l < 32; l++) {
                ql[l] = (uint8_t)((qq[l] & 15) | ((qq[l + 64] & 15) << 4));
                ql[l + 32] = (uint8_t)((qq[l + 32] & 15) | ((qq[l + 96] & 15) << 4));
                qh[l] = (uint8_t)((qq[l] >> 4) | ((qq[l + 32] >> 4) << 2) |
                                  ((qq[l + 64] >> 4) << 4) | ((qq[l + 96] >> 4) << 6));
            }
        }
    }
}

int quant_quantize_weights(int type, const float *x, void *dst, int64_t n)
{
    switch (type) {
    case QT_F32:
        memcpy(dst, x, (size_t)n * sizeof(float));
        return 0;
    case QT_F16:
    case QT_BF16:
        quant_quantize_row(type, x, dst, n); /* same bytes on every path */
        return 0;
    case QT_Q4_0:
        if (n % QK4_0)
            return INF_EINVAL;
        quantize_q4_0(x, dst, n / QK4_0);
        return 0;
    case QT_Q8_0:
        if (n % QK8_0)
            return INF_EINVAL;
        quantize_q8_0(x, dst, n / QK8_0);
        return 0;
    case QT_Q4_K:
    case QT_Q5_K:
    case QT_Q6_K:
        if (n % QK_K)
            return INF_EINVAL;
        if (type == QT_Q4_K)
            quantize_q4_K(x, dst, n / QK_K);
        else if (type == QT_Q5_K)
            quantize_q5_K(x, dst, n / QK_K);
        else
            quantize_q6_K(x, dst, n / QK_K);
        return 0;
    default:
        return INF_EUNSUPPORTED;
    }
}
