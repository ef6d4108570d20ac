/* quant — ggml's tensor types in plain C: half/bfloat conversions, dequantization,
 * activation quantization and the CPU path's dispatch; the reference dot products
 * and the canonical chain are quant_dot.c, the reference quantizers
 * quant_weights.c.
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
#include "quant_impl.h"

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


/* ----------------------------------------------------- K-quant scale bytes */

/* The 12-byte packing of Q4_K/Q5_K scales and mins: quant_impl.h (k4_scale_min) */


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
            y[i].qs[j] = (int8_t)quant_nearest_int(x[j] * id);
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
            int v = quant_nearest_int(iscale * x[j]);
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
int quant_use_avx2(void)
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
    if (quant_use_avx2()) {
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

