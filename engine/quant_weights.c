/* quant_weights — the reference quantizers of weight rows (F32 to Q4_0,
 * Q8_0, Q4_K, Q5_K, Q6_K), as ggml's reference quantize_row_* choose scales:
 * what `inferd mkmodel` and the tests write models with. */
#include <math.h>
#include <string.h>

#include "err.h"
#include "quant.h"
#include "quant_impl.h"

static void k4_pack_scales(uint8_t *q, const uint8_t sc[8], const uint8_t m[8])
{
    for (int j = 0; j < 4; j++) {
        q[j] = (uint8_t)((sc[j] & 63) | ((sc[j + 4] >> 4) << 6));
        q[j + 4] = (uint8_t)((m[j] & 63) | ((m[j + 4] >> 4) << 6));
        q[j + 8] = (uint8_t)((sc[j + 4] & 15) | ((m[j + 4] & 15) << 4));
    }
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
            int q = quant_nearest_int((x[l] + m) / s);
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
    int q = quant_nearest_int((x + m) / d);
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
        int a = d > 0.f ? quant_nearest_int(sc[j] / d) : 0;
        int b = dmin > 0.f ? quant_nearest_int(mn[j] / dmin) : 0;
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
            int s = d > 0.f ? quant_nearest_int(sc[g] / d) : 0;
            s = s > 127 ? 127 : s;
            y[i].scales[g] = (int8_t)s;
            float de = d * (float)s;
            for (int l = 0; l < 16; l++) {
                int v = de != 0.f ? quant_nearest_int(x[16 * g + l] / de) : 0;
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
