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

/* Float types: products summed in double, the most accurate order; the fast
 * paths (float FMA lanes) are compared against it. */
static float dot_f32_ref(int64_t n, const float *w, const float *x)
{
    double s = 0.0;
    for (int64_t i = 0; i < n; i++)
        s += (double)w[i] * (double)x[i];
    return (float)s;
}

static float dot_f16_ref(int64_t n, const quant_f16 *w, const quant_f16 *x)
{
    double s = 0.0;
    for (int64_t i = 0; i < n; i++)
        s += (double)quant_f16_to_f32(w[i]) * (double)quant_f16_to_f32(x[i]);
    return (float)s;
}

static float dot_bf16_ref(int64_t n, const quant_bf16 *w, const quant_bf16 *x)
{
    double s = 0.0;
    for (int64_t i = 0; i < n; i++)
        s += (double)quant_bf16_to_f32(w[i]) * (double)quant_bf16_to_f32(x[i]);
    return (float)s;
}

/* Block types: exact int32 sum per block, then one float multiply-add with
 * the product of the two block scales (llama.cpp's order: d_w * d_x first). */
static float dot_q8_0_ref(int64_t nb, const struct block_q8_0 *w, const struct block_q8_0 *x)
{
    float sumf = 0.f;
    for (int64_t i = 0; i < nb; i++) {
        int32_t sumi = 0;
        for (int j = 0; j < QK8_0; j++)
            sumi += (int32_t)w[i].qs[j] * x[i].qs[j];
        sumf += (float)sumi * (quant_f16_to_f32(w[i].d) * quant_f16_to_f32(x[i].d));
    }
    return sumf;
}

static float dot_q4_0_ref(int64_t nb, const struct block_q4_0 *w, const struct block_q8_0 *x)
{
    float sumf = 0.f;
    for (int64_t i = 0; i < nb; i++) {
        int32_t sumi = 0;
        for (int j = 0; j < QK4_0 / 2; j++) {
            sumi += ((w[i].qs[j] & 0x0f) - 8) * (int32_t)x[i].qs[j];
            sumi += ((w[i].qs[j] >> 4) - 8) * (int32_t)x[i].qs[j + QK4_0 / 2];
        }
        sumf += (float)sumi * (quant_f16_to_f32(w[i].d) * quant_f16_to_f32(x[i].d));
    }
    return sumf;
}

/* Q4_K . Q8_K per super-block:
 *   d*dx * sum_s scale_s * sum_{l in s} q_l*x_l  -  dmin*dx * sum_s min_s * xsum_s
 * where xsum_s (sum of the 32 activations of sub-block s) comes from bsums. */
static float dot_q4_K_ref(int64_t nb, const struct block_q4_K *w, const struct block_q8_K *x)
{
    float sumf = 0.f, summf = 0.f;
    for (int64_t i = 0; i < nb; i++) {
        const uint8_t *q = w[i].qs;
        const int8_t *a = x[i].qs;
        int32_t sumi = 0, summ = 0;
        for (int j = 0; j < QK_K / 64; j++, q += 32, a += 64) {
            int sc0, m0, sc1, m1;
            k4_scale_min(w[i].scales, 2 * j, &sc0, &m0);
            k4_scale_min(w[i].scales, 2 * j + 1, &sc1, &m1);
            int32_t s0 = 0, s1 = 0;
            for (int l = 0; l < 32; l++) {
                s0 += (q[l] & 0x0f) * (int32_t)a[l];
                s1 += (q[l] >> 4) * (int32_t)a[l + 32];
            }
            sumi += sc0 * s0 + sc1 * s1;
            summ += m0 * (x[i].bsums[4 * j] + x[i].bsums[4 * j + 1]) +
                    m1 * (x[i].bsums[4 * j + 2] + x[i].bsums[4 * j + 3]);
        }
        /* llama.cpp's repacked (q4_K 8x8) kernel: whole-block int sums,
         * two float accumulators, subtracted at the end */
        sumf = fmaf((float)sumi, quant_f16_to_f32(w[i].d) * x[i].d, sumf);
        summf = fmaf((float)summ, quant_f16_to_f32(w[i].dmin) * x[i].d, summf);
    }
    return sumf - summf;
}

static float dot_q5_K_ref(int64_t nb, const struct block_q5_K *w, const struct block_q8_K *x)
{
    float sumf = 0.f;
    for (int64_t i = 0; i < nb; i++) {
        const uint8_t *q = w[i].qs;
        const uint8_t *qh = w[i].qh;
        const int8_t *a = x[i].qs;
        int32_t sumi = 0, summ = 0;
        for (int j = 0; j < QK_K / 64; j++, q += 32, a += 64) {
            int sc0, m0, sc1, m1;
            k4_scale_min(w[i].scales, 2 * j, &sc0, &m0);
            k4_scale_min(w[i].scales, 2 * j + 1, &sc1, &m1);
            int32_t s0 = 0, s1 = 0;
            for (int l = 0; l < 32; l++) {
                int q0 = (q[l] & 0x0f) | (((qh[l] >> (2 * j)) & 1) << 4);
                int q1 = (q[l] >> 4) | (((qh[l] >> (2 * j + 1)) & 1) << 4);
                s0 += q0 * (int32_t)a[l];
                s1 += q1 * (int32_t)a[l + 32];
            }
            sumi += sc0 * s0 + sc1 * s1;
            summ += m0 * (x[i].bsums[4 * j] + x[i].bsums[4 * j + 1]) +
                    m1 * (x[i].bsums[4 * j + 2] + x[i].bsums[4 * j + 3]);
        }
        float d = x[i].d * quant_f16_to_f32(w[i].d);
        float dmin = x[i].d * quant_f16_to_f32(w[i].dmin);
        sumf += d * (float)sumi - dmin * (float)summ;
    }
    return sumf;
}

/* Q6_K . Q8_K: d*dx * sum over the 16 sub-blocks of scale_s * sum (q-32)*x. */
static float dot_q6_K_ref(int64_t nb, const struct block_q6_K *w, const struct block_q8_K *x)
{
    float sumf = 0.f;
    for (int64_t i = 0; i < nb; i++) {
        const uint8_t *ql = w[i].ql;
        const uint8_t *qh = w[i].qh;
        const int8_t *sc = w[i].scales;
        const int8_t *a = x[i].qs;
        int32_t sumi = 0;
        for (int h = 0; h < QK_K / 128; h++, ql += 64, qh += 32, sc += 8, a += 128) {
            int32_t s[8] = {0};
            for (int l = 0; l < 32; l++) {
                int g = l / 16;
                int q1 = ((ql[l] & 0x0f) | (((qh[l] >> 0) & 3) << 4)) - 32;
                int q2 = ((ql[l + 32] & 0x0f) | (((qh[l] >> 2) & 3) << 4)) - 32;
                int q3 = ((ql[l] >> 4) | (((qh[l] >> 4) & 3) << 4)) - 32;
                int q4 = ((ql[l + 32] >> 4) | (((qh[l] >> 6) & 3) << 4)) - 32;
                s[g + 0] += q1 * a[l];
                s[g + 2] += q2 * a[l + 32];
                s[g + 4] += q3 * a[l + 64];
                s[g + 6] += q4 * a[l + 96];
            }
            for (int g = 0; g < 8; g++)
                sumi += sc[g] * s[g];
        }
        sumf += x[i].d * quant_f16_to_f32(w[i].d) * (float)sumi;
    }
    return sumf;
}

float quant_vec_dot_ref(int type, int64_t n, const void *w, const void *x)
{
    switch (type) {
    case QT_F32: return dot_f32_ref(n, w, x);
    case QT_F16: return dot_f16_ref(n, w, x);
    case QT_BF16: return dot_bf16_ref(n, w, x);
    case QT_Q4_0: return dot_q4_0_ref(n / QK4_0, w, x);
    case QT_Q8_0: return dot_q8_0_ref(n / QK8_0, w, x);
    case QT_Q4_K: return dot_q4_K_ref(n / QK_K, w, x);
    case QT_Q5_K: return dot_q5_K_ref(n / QK_K, w, x);
    case QT_Q6_K: return dot_q6_K_ref(n / QK_K, w, x);
    default: return 0.f; /* unsupported: rejected at model load */
    }
}

/* Typed entry points with the quant_vec_dot_fn signature. */
static float ref_dot_f32(int64_t n, const void *w, const void *x) { return dot_f32_ref(n, w, x); }
static float ref_dot_f16(int64_t n, const void *w, const void *x) { return dot_f16_ref(n, w, x); }
static float ref_dot_bf16(int64_t n, const void *w, const void *x) { return dot_bf16_ref(n, w, x); }
static float ref_dot_q4_0(int64_t n, const void *w, const void *x) { return dot_q4_0_ref(n / QK4_0, w, x); }
static float ref_dot_q8_0(int64_t n, const void *w, const void *x) { return dot_q8_0_ref(n / QK8_0, w, x); }
static float ref_dot_q4_K(int64_t n, const void *w, const void *x) { return dot_q4_K_ref(n / QK_K, w, x); }
static float ref_dot_q5_K(int64_t n, const void *w, const void *x) { return dot_q5_K_ref(n / QK_K, w, x); }
static float ref_dot_q6_K(int64_t n, const void *w, const void *x) { return dot_q6_K_ref(n / QK_K, w, x); }

quant_vec_dot_fn quant_vec_dot_func(int type)
{
#ifdef INFERD_HAVE_AVX2
    if (use_avx2()) {
        switch (type) {
        case QT_F32: return quant_avx2_dot_f32;
        case QT_F16: return quant_avx2_dot_f16;
        case QT_BF16: return quant_avx2_dot_bf16;
        case QT_Q4_0: return quant_avx2_dot_q4_0;
        case QT_Q8_0: return quant_avx2_dot_q8_0;
        case QT_Q4_K: return quant_avx2_dot_q4_K;
        case QT_Q5_K: return quant_avx2_dot_q5_K;
        case QT_Q6_K: return quant_avx2_dot_q6_K;
        default: break;
        }
    }
#endif
    switch (type) {
    case QT_F32: return ref_dot_f32;
    case QT_F16: return ref_dot_f16;
    case QT_BF16: return ref_dot_bf16;
    case QT_Q4_0: return ref_dot_q4_0;
    case QT_Q8_0: return ref_dot_q8_0;
    case QT_Q4_K: return ref_dot_q4_K;
    case QT_Q5_K: return ref_dot_q5_K;
    case QT_Q6_K: return ref_dot_q6_K;
    default: return NULL;
    }
}

void quant_vec_dots(int type, int64_t n, const void *w, const void *x, size_t x_stride, int nx,
                    float *out)
{
#ifdef INFERD_HAVE_AVX2
    if (use_avx2()) {
        switch (type) {
        case QT_Q4_0: quant_avx2_dots_q4_0(n, w, x, x_stride, nx, out); return;
        case QT_Q8_0: quant_avx2_dots_q8_0(n, w, x, x_stride, nx, out); return;
        case QT_Q4_K: quant_avx2_dots_q4_K(n, w, x, x_stride, nx, out); return;
        case QT_Q5_K: quant_avx2_dots_q5_K(n, w, x, x_stride, nx, out); return;
        case QT_Q6_K: quant_avx2_dots_q6_K(n, w, x, x_stride, nx, out); return;
        default: break;
        }
    }
#endif
    /* float types are bandwidth-bound on the weights either way */
    quant_vec_dot_fn f = quant_vec_dot_func(type);
    for (int r = 0; r < nx; r++)
        out[r] = f ? f(n, w, (const uint8_t *)x + (size_t)r * x_stride) : 0.f;
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
