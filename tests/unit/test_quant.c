/* test_quant — tensor types: half/bfloat conversions, block layouts,
 * quantizers, activation quantization and every dot path.
 *
 * Independent checks, not self-agreement: layouts are checked against a
 * per-element decoder written here from the format description (element ->
 * byte/bit), conversions against exact double arithmetic and the F16C
 * instruction, dots against double sums of dequantized rows, and the real
 * llama.cpp-quantized tensors in ../shared/models are compared across the
 * two files that hold the same weights in different types.
 */
#include <cpuid.h>
#include <immintrin.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/err.h"
#include "engine/gguf.h"
#include "engine/quant.h"
#include "tests/check.h"

/* Like CHECK, but reports only the first few failures of a loop. */
#define CHECKN(c, ...)                                                            \
    do {                                                                          \
        if (!(c)) {                                                               \
            if (fails < 20) {                                                     \
                fprintf(stderr, "%s:%d: check failed: %s: ", __FILE__, __LINE__, #c); \
                fprintf(stderr, __VA_ARGS__);                                     \
                fputc('\n', stderr);                                              \
            }                                                                     \
            fails++;                                                              \
        }                                                                         \
    } while (0)

/* ------------------------------------------------------------- randomness */

static uint64_t rng_state = 0x9e3779b97f4a7c15ull;

static uint64_t rnd(void)
{
    uint64_t z = (rng_state += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

static double unif(void) { return (double)(rnd() >> 11) * 0x1p-53; }

static float gauss(void)
{
    double u = unif(), v = unif();
    return (float)(sqrt(-2.0 * log(u + 1e-300)) * cos(6.283185307179586 * v));
}

/* Activation-like data: gaussian with a few large outliers. */
static void fill_acts(float *x, int64_t n, float scale)
{
    for (int64_t i = 0; i < n; i++) {
        x[i] = gauss() * scale;
        if (rnd() % 97 == 0)
            x[i] *= 20.f;
    }
}

/* A random finite half in a sane range for block scales (may be subnormal). */
static quant_f16 rnd_scale_f16(void)
{
    static const float mags[] = {1e-6f, 1e-4f, 1e-3f, 1e-2f, 0.1f, 1.f, 30.f};
    float v = (float)unif() * mags[rnd() % 7];
    return quant_f32_to_f16(v);
}

/* ---------------------------------------------------------- conversions */

static double f16_value(uint16_t h) /* exact, from the definition */
{
    int s = h >> 15, e = (h >> 10) & 31, m = h & 1023;
    double v = e == 0 ? ldexp(m, -24) : ldexp(1024 + m, e - 25);
    return s ? -v : v;
}

__attribute__((target("f16c"))) static uint16_t hw_f32_to_f16(float f)
{
    return (uint16_t)_cvtss_sh(f, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
}

static float bits_f(uint32_t u)
{
    float f;
    memcpy(&f, &u, 4);
    return f;
}

static uint32_t f_bits(float f)
{
    uint32_t u;
    memcpy(&u, &f, 4);
    return u;
}

static void test_f16(void)
{
    for (uint32_t h = 0; h < 65536; h++) {
        float f = quant_f16_to_f32((quant_f16)h);
        int e = (h >> 10) & 31;
        if (e == 31 && (h & 1023)) {
            CHECKN(isnan(f), "h=%04x", h);
            CHECKN(quant_f32_to_f16(f) == h, "nan payload h=%04x", h);
            continue;
        }
        if (e == 31)
            CHECKN(isinf(f) && (f < 0) == (h >> 15), "h=%04x", h);
        else
            CHECKN((double)f == f16_value((uint16_t)h), "h=%04x f=%g", h, f);
        CHECKN(quant_f32_to_f16(f) == h, "round trip h=%04x", h);
    }
    /* round to nearest even at every tie between neighbouring halves (the
     * midpoint has 12 significant bits: exact in float), and just off it */
    for (uint32_t h = 0; h < 0x7bff; h++) {
        for (int sign = 0; sign < 2; sign++) {
            double mid = (f16_value((uint16_t)h) + f16_value((uint16_t)(h + 1))) / 2;
            float fm = (float)(sign ? -mid : mid);
            uint16_t sb = (uint16_t)(sign << 15);
            uint16_t even = (h & 1) ? (uint16_t)(h + 1) : (uint16_t)h;
            CHECKN(quant_f32_to_f16(fm) == (sb | even), "tie h=%04x", h);
            float up = nextafterf(fabsf(fm), INFINITY), dn = nextafterf(fabsf(fm), 0.f);
            CHECKN(quant_f32_to_f16(sign ? -up : up) == (sb | (h + 1)), "above tie h=%04x", h);
            CHECKN(quant_f32_to_f16(sign ? -dn : dn) == (sb | h), "below tie h=%04x", h);
        }
    }
    CHECK(quant_f32_to_f16(65504.f) == 0x7bff);
    CHECK(quant_f32_to_f16(nextafterf(65520.f, 0.f)) == 0x7bff);
    CHECK(quant_f32_to_f16(65520.f) == 0x7c00);
    CHECK(quant_f32_to_f16(-1e30f) == 0xfc00);
    CHECK(quant_f32_to_f16(1e-30f) == 0x0000);
    CHECK(quant_f32_to_f16(-0.f) == 0x8000);
    CHECK(quant_f32_to_f16(0x1p-25f) == 0x0000);              /* tie -> even (0) */
    CHECK(quant_f32_to_f16(nextafterf(0x1p-25f, 1.f)) == 1); /* just above */
    CHECK(quant_f32_to_f16(3 * 0x1p-25f) == 2);               /* tie 1.5 ulp -> 2 */

    /* random floats of every magnitude against the F16C instruction */
    unsigned a, b, c, d;
    if (__get_cpuid(1, &a, &b, &c, &d) && ((c >> 29) & 1)) { /* F16C */
        for (int i = 0; i < 2000000; i++) {
            uint32_t u = (uint32_t)rnd();
            float f = bits_f(u);
            uint16_t a = quant_f32_to_f16(f), b = hw_f32_to_f16(f);
            if (isnan(f))
                CHECKN((a & 0x7c00) == 0x7c00 && (a & 0x3ff), "nan %08x", u);
            else
                CHECKN(a == b, "f=%a (%08x): %04x vs hw %04x", (double)f, u, a, b);
        }
    }
}

static void test_bf16(void)
{
    for (uint32_t h = 0; h < 65536; h++) {
        float f = quant_bf16_to_f32((quant_bf16)h);
        CHECKN(f_bits(f) == h << 16, "h=%04x", h);
        if (isnan(f))
            CHECKN(isnan(quant_bf16_to_f32(quant_f32_to_bf16(f))), "nan h=%04x", h);
        else
            CHECKN(quant_f32_to_bf16(f) == h, "round trip h=%04x", h);
        /* the tie between h and h+1 is h<<16 | 0x8000 */
        if (((h >> 7) & 0xff) != 0xff) {
            uint32_t tie = (h << 16) | 0x8000u;
            uint16_t even = (h & 1) ? (uint16_t)(h + 1) : (uint16_t)h;
            CHECKN(quant_f32_to_bf16(bits_f(tie)) == even, "tie h=%04x", h);
            CHECKN(quant_f32_to_bf16(bits_f(tie + 1)) == (uint16_t)(h + 1), "above h=%04x", h);
            CHECKN(quant_f32_to_bf16(bits_f(tie - 1)) == h, "below h=%04x", h);
        }
    }
}

/* ------------------------------------------- independent element decoder */

static int elems_of(int t) { return quant_block_elems(t); }

/* Element i (0 <= i < block size) of one block as integers, from the format
 * description written as "which byte, which bits" rather than as loops over
 * the block: the value q (Q4_0: nibble - 8; Q6_K: 6 bits - 32), the integer
 * scale sc of its sub-block (1 for Q4_0/Q8_0) and its min mn (Q4_K/Q5_K;
 * 0 otherwise). */
static void elem_ints(int type, const uint8_t *b, int i, int *q, int *sc, int *mn)
{
    *sc = 1;
    *mn = 0;
    switch (type) {
    case QT_Q4_0: {
        const struct block_q4_0 *qb = (const void *)b;
        int byte = qb->qs[i % 16];
        *q = (i < 16 ? (byte & 15) : (byte >> 4)) - 8;
        break;
    }
    case QT_Q8_0:
        *q = ((const struct block_q8_0 *)(const void *)b)->qs[i];
        break;
    case QT_Q4_K:
    case QT_Q5_K: {
        const uint8_t *scales = type == QT_Q4_K ? ((const struct block_q4_K *)(const void *)b)->scales
                                                : ((const struct block_q5_K *)(const void *)b)->scales;
        int s = i / 32; /* sub-block */
        /* 6-bit scale and min of sub-block s */
        if (s < 4) {
            *sc = scales[s] & 0x3f;
            *mn = scales[s + 4] & 0x3f;
        } else {
            *sc = (scales[s + 4] & 0xf) + 16 * (scales[s - 4] >> 6);
            *mn = (scales[s + 4] >> 4) + 16 * (scales[s] >> 6);
        }
        const uint8_t *qs = type == QT_Q4_K ? ((const struct block_q4_K *)(const void *)b)->qs
                                            : ((const struct block_q5_K *)(const void *)b)->qs;
        int byte = qs[(s / 2) * 32 + i % 32];
        int v = (s % 2) ? byte >> 4 : byte & 15;
        if (type == QT_Q5_K) {
            const uint8_t *qh = ((const struct block_q5_K *)(const void *)b)->qh;
            v += 16 * ((qh[i % 32] >> s) & 1);
        }
        *q = v;
        break;
    }
    case QT_Q6_K: {
        const struct block_q6_K *qb = (const void *)b;
        int half = i / 128, r = i % 128;
        int quarter = r / 32, l = r % 32;
        /* quarters 0,1 use the low nibbles of ql[l], ql[l+32]; 2,3 the high */
        int byte = qb->ql[half * 64 + (quarter % 2) * 32 + l];
        int lo = quarter < 2 ? byte & 15 : byte >> 4;
        int hi = (qb->qh[half * 32 + l] >> (2 * quarter)) & 3;
        *q = lo + 16 * hi - 32;
        *sc = qb->scales[i / 16];
        break;
    }
    default:
        *q = 0;
        break;
    }
}

/* A block's float scale d and min scale dmin (0 where it has none). */
static void block_scales(int type, const uint8_t *b, float *d, float *dmin)
{
    quant_f16 hd = 0, hm = 0;
    if (type == QT_Q6_K)
        memcpy(&hd, b + offsetof(struct block_q6_K, d), 2);
    else
        memcpy(&hd, b, 2); /* Q4_0, Q8_0, Q4_K, Q5_K: d first */
    if (type == QT_Q4_K || type == QT_Q5_K)
        memcpy(&hm, b + 2, 2);
    *d = quant_f16_to_f32(hd);
    *dmin = quant_f16_to_f32(hm);
}

/* Element i of one block as float: d * sc * q - dmin * mn. */
static float decode_elem(int type, const uint8_t *b, int i)
{
    int q, sc, mn;
    float d, dmin;
    elem_ints(type, b, i, &q, &sc, &mn);
    block_scales(type, b, &d, &dmin);
    switch (type) {
    case QT_Q4_0:
    case QT_Q8_0: return (float)q * d;
    case QT_Q4_K:
    case QT_Q5_K: return d * (float)sc * (float)q - dmin * (float)mn;
    case QT_Q6_K: return d * (float)sc * (float)q;
    default: return NAN;
    }
}

/* Random bytes everywhere, with finite sane f16 scales. */
static void random_block(int type, uint8_t *b)
{
    size_t nb = quant_block_bytes(type);
    for (size_t k = 0; k < nb; k++)
        b[k] = (uint8_t)rnd();
    quant_f16 d = rnd_scale_f16(), dm = rnd_scale_f16();
    switch (type) {
    case QT_Q4_0:
    case QT_Q8_0:
        memcpy(b, &d, 2);
        break;
    case QT_Q4_K:
    case QT_Q5_K:
        memcpy(b, &d, 2);
        memcpy(b + 2, &dm, 2);
        break;
    case QT_Q6_K:
        memcpy(b + offsetof(struct block_q6_K, d), &d, 2);
        break;
    }
}

static const int block_types[] = {QT_Q4_0, QT_Q8_0, QT_Q4_K, QT_Q5_K, QT_Q6_K};
static const int all_types[] = {QT_F32, QT_F16, QT_BF16, QT_Q4_0, QT_Q8_0, QT_Q4_K, QT_Q5_K, QT_Q6_K};
#define NELEM(a) ((int)(sizeof(a) / sizeof((a)[0])))

static void test_layouts(void)
{
    uint8_t blk[512];
    float y[256];
    for (int t = 0; t < NELEM(block_types); t++) {
        int type = block_types[t], ne = elems_of(type);
        for (int rep = 0; rep < 300; rep++) {
            random_block(type, blk);
            quant_dequant_row(type, blk, y, ne);
            for (int i = 0; i < ne; i++) {
                float e = decode_elem(type, blk, i);
                CHECKN(fabsf(y[i] - e) <= 1e-6f * fabsf(e) + 1e-30f, "%s elem %d: %g vs %g",
                       quant_type_name(type), i, y[i], e);
            }
        }
    }
}

/* -------------------------------------------------- weight quantizers */

/* Max |err| allowed for element x given the block's decoded grid: the nearest
 * grid point is within half a step, plus how far x lies outside the grid. */
static void test_quantizers(void)
{
    static const int64_t lens[] = {256, 768, 2560};
    /* rmse / rms bounds for gaussian data (measured q4_0 0.086, q8_0 0.0052,
     * q4_K 0.072, q5_K 0.035, q6_K 0.0195, f16 2e-4, bf16 1.6e-3; the
     * bounds leave 25-50% room). */
    static const struct { int type; double rel_rmse; } bound[] = {
        {QT_F32, 0.0}, {QT_F16, 4e-4}, {QT_BF16, 3e-3}, {QT_Q4_0, 0.11}, {QT_Q8_0, 0.0075},
        {QT_Q4_K, 0.10}, {QT_Q5_K, 0.05}, {QT_Q6_K, 0.025},
    };
    for (int t = 0; t < NELEM(bound); t++) {
        int type = bound[t].type;
        for (int li = 0; li < NELEM(lens); li++) {
            int64_t n = lens[li];
            float *x = malloc((size_t)n * 4), *y = malloc((size_t)n * 4);
            uint8_t *q = malloc(quant_row_bytes(type, n));
            float scale = (float)pow(10.0, (double)(li * 2 - 2)); /* 0.01, 1, 100 */
            for (int64_t i = 0; i < n; i++)
                x[i] = gauss() * scale;
            CHECK(quant_quantize_weights(type, x, q, n) == 0);
            quant_dequant_row(type, q, y, n);
            double se = 0, sx = 0;
            for (int64_t i = 0; i < n; i++) {
                se += (double)(x[i] - y[i]) * (x[i] - y[i]);
                sx += (double)x[i] * x[i];
            }
            double rel = sqrt(se / sx);
            if (li == 1)
                printf("quantize %-5s n=%lld rel rmse %.4f\n", quant_type_name(type), (long long)n, rel);
            CHECKN(rel <= bound[t].rel_rmse, "%s n=%lld: rel rmse %.5f > %.5f", quant_type_name(type),
                   (long long)n, rel, bound[t].rel_rmse);

            /* per element: the quantizer picked the nearest point of the
             * grid its own stored scales define (decoded independently) */
            if (type == QT_Q4_K || type == QT_Q5_K || type == QT_Q6_K || type == QT_Q8_0) {
                int ne = elems_of(type);
                size_t bb = quant_block_bytes(type);
                for (int64_t i = 0; i < n; i++) {
                    const uint8_t *b = q + (size_t)(i / ne) * bb;
                    int k = (int)(i % ne);
                    /* grid step and range of this element's sub-block: decode
                     * the extreme codes through a patched copy of the block */
                    uint8_t c[512];
                    float lo, hi, step;
                    memcpy(c, b, bb);
                    if (type == QT_Q8_0) {
                        float d = quant_f16_to_f32(((const struct block_q8_0 *)(const void *)b)->d);
                        step = d;
                        lo = -128 * d;
                        hi = 127 * d;
                    } else if (type == QT_Q6_K) {
                        const struct block_q6_K *bq = (const void *)b;
                        step = fabsf(quant_f16_to_f32(bq->d) * bq->scales[k / 16]);
                        lo = -32 * step;
                        hi = 31 * step;
                        if (quant_f16_to_f32(bq->d) * bq->scales[k / 16] < 0) {
                            lo = -31 * step;
                            hi = 32 * step;
                        }
                    } else {
                        /* K4: value(q) = d*sc*q - dmin*m: probe q=0 and q=1 */
                        int nmax = type == QT_Q4_K ? 15 : 31;
                        uint8_t *qs = type == QT_Q4_K ? ((struct block_q4_K *)(void *)c)->qs
                                                      : ((struct block_q5_K *)(void *)c)->qs;
                        int s = k / 32, byte = (s / 2) * 32 + k % 32;
                        qs[byte] = (uint8_t)((s % 2) ? (qs[byte] & 0x0f) : (qs[byte] & 0xf0));
                        if (type == QT_Q5_K)
                            ((struct block_q5_K *)(void *)c)->qh[k % 32] &= (uint8_t)~(1u << s);
                        lo = decode_elem(type, c, k);
                        qs[byte] = (uint8_t)((s % 2) ? ((qs[byte] & 0x0f) | 0x10) : ((qs[byte] & 0xf0) | 1));
                        step = decode_elem(type, c, k) - lo;
                        hi = lo + step * (float)nmax;
                    }
                    float out = x[i] < lo ? lo - x[i] : x[i] > hi ? x[i] - hi : 0.f;
                    float err = fabsf(x[i] - y[i]);
                    /* 0.5 step for rounding, plus float slack */
                    CHECKN(err <= 0.5f * step * 1.002f + out + 1e-6f * fabsf(x[i]) + 1e-30f,
                           "%s n=%lld i=%lld: x=%g y=%g step=%g", quant_type_name(type), (long long)n,
                           (long long)i, x[i], y[i], step);
                }
            }
            free(x);
            free(y);
            free(q);
        }
    }
    CHECK(quant_quantize_weights(QT_Q4_K, NULL, NULL, 100) == INF_EINVAL);
    CHECK(quant_quantize_weights(QT_Q2_K, NULL, NULL, 256) == INF_EUNSUPPORTED);
}

/* ------------------------------------------------ activation quantizing */

static void test_act_quant(void)
{
    /* Q8_K: the first element of largest magnitude maps to -127 exactly, the
     * rest by round-half-even; bsums are the sums of 16 */
    float x[256];
    struct block_q8_K bk;
    for (int i = 0; i < 256; i++)
        x[i] = (float)(i % 7) - 3.5f; /* ties at .5 with iscale -1 */
    x[10] = 127.f;
    x[20] = -127.f; /* same magnitude later: not the max */
    quant_quantize_row_ref(QT_Q8_K, x, &bk, 256);
    CHECK(bk.d == -1.f);
    CHECK(bk.qs[10] == -127 && bk.qs[20] == 127);
    int ok = 1;
    for (int i = 0; i < 256; i++) {
        if (i == 10 || i == 20)
            continue;
        /* -x with ties to even */
        float v = -x[i];
        int want = (int)rint(v);
        ok &= bk.qs[i] == want;
    }
    CHECK(ok);
    for (int g = 0; g < 16; g++) {
        int s = 0;
        for (int l = 0; l < 16; l++)
            s += bk.qs[16 * g + l];
        CHECK(bk.bsums[g] == s);
    }
    /* Q8_0: d = amax/127 stored as f16, q in [-127, 127], error <= d/2 */
    struct block_q8_0 b0[8];
    fill_acts(x, 256, 1.f);
    quant_quantize_row_ref(QT_Q8_0, x, b0, 256);
    for (int i = 0; i < 256; i++) {
        float amax = 0;
        for (int l = 0; l < 32; l++)
            amax = fmaxf(amax, fabsf(x[(i / 32) * 32 + l]));
        float d = amax / 127.f;
        CHECKN(b0[i / 32].d == quant_f32_to_f16(d), "i=%d", i);
        CHECKN(b0[i / 32].qs[i % 32] >= -127, "i=%d", i);
        CHECKN(fabsf(x[i] - d * b0[i / 32].qs[i % 32]) <= 0.5f * d * 1.0001f, "i=%d", i);
    }
}

/* Fast activation quantization gives the reference bytes. */
static void test_act_quant_fast(void)
{
    static const int vdts[] = {QT_Q8_0, QT_Q8_K, QT_F16, QT_BF16, QT_F32};
    float x[256 * 7];
    uint8_t a[8192], b[8192];
    for (int rep = 0; rep < 400; rep++) {
        int64_t n = 256 * (1 + rep % 7);
        int kind = rep % 5;
        for (int64_t i = 0; i < n; i++) {
            switch (kind) {
            case 0: x[i] = gauss(); break;
            case 1: x[i] = gauss() * 3e4f; break;
            case 2: x[i] = gauss() * 1e-30f; break; /* scales underflow the half range */
            case 3: x[i] = (float)((int)(rnd() % 255) - 127) + 0.5f * (float)(rnd() % 2); break;
            default: x[i] = (rnd() % 3) ? 0.f : gauss() * 5.f; break;
            }
        }
        if (kind == 4 && rep % 10 == 4)
            memset(x, 0, sizeof(float) * 256); /* an all-zero block */
        for (int v = 0; v < NELEM(vdts); v++) {
            size_t bytes = quant_row_bytes(vdts[v], n);
            quant_quantize_row_ref(vdts[v], x, a, n);
            quant_force_ref(0);
            quant_quantize_row(vdts[v], x, b, n);
            CHECKN(memcmp(a, b, bytes) == 0, "type %s rep %d kind %d", quant_type_name(vdts[v]), rep, kind);
        }
    }
}

/* --------------------------------------------------------------- dots */

/* The kernels the engine can run for a weight type (enum quant_kernel):
 * llama.cpp's decode kernel and batch kernels of repacked and non-repacked
 * matrices, and the invariant numerics' kernel. Returns how many. */
#define MAX_KERNELS 5
static int kernels_of(int type, int64_t n, int out[MAX_KERNELS])
{
    int k = 0;
    const int cand[MAX_KERNELS] = {quant_kernel_for(type, 8, n, 0), quant_kernel_for(type, 8, n, 1),
                                   quant_kernel_for(type, 7, n, 0), quant_kernel_for(type, 7, n, 1),
                                   quant_kernel_invariant(type)};
    for (int i = 0; i < MAX_KERNELS; i++) {
        int seen = cand[i] == QK_NONE;
        for (int j = 0; j < k; j++)
            seen |= out[j] == cand[i];
        if (!seen)
            out[k++] = cand[i];
    }
    return k;
}

/* The canonical chain of a quantized product (quant.h's *_CANON kernels,
 * the CUDA backend's engine/cuda/qtypes.cuh) written from its description
 * with elem_ints: per weight block the exact sums S = sum sc * q * x and
 * M = sum mn * x, then acc = fmaf(d_w * d_x, S, acc) and, for Q4_K/Q5_K,
 * acc = fmaf(-(dmin_w * d_x), M, acc), blocks in order. */
static float canon_spec(int type, int64_t n, const uint8_t *w, const uint8_t *xq)
{
    const int be = elems_of(type);
    const size_t bb = quant_block_bytes(type);
    float acc = 0.f;
    for (int64_t b = 0; b < n / be; b++) {
        const uint8_t *wb = w + (size_t)b * bb;
        const int8_t *xs;
        float xd, d, dmin;
        if (be == QK_K) {
            const struct block_q8_K *x = (const struct block_q8_K *)(const void *)xq + b;
            xd = x->d;
            xs = x->qs;
        } else {
            const struct block_q8_0 *x = (const struct block_q8_0 *)(const void *)xq + b;
            xd = quant_f16_to_f32(x->d);
            xs = x->qs;
        }
        int64_t S = 0, M = 0;
        for (int i = 0; i < be; i++) {
            int q, sc, mn;
            elem_ints(type, wb, i, &q, &sc, &mn);
            S += (int64_t)sc * q * xs[i];
            M += (int64_t)mn * xs[i];
        }
        block_scales(type, wb, &d, &dmin);
        acc = fmaf(d * xd, (float)S, acc);
        if (type == QT_Q4_K || type == QT_Q5_K)
            acc = fmaf(-(dmin * xd), (float)M, acc);
    }
    return acc;
}

/* Every kernel of the type: its reference against an independent
 * computation (dequantize both rows, sum in double; the bound is relative to
 * sum |w_i x_i|, the scale of float summation error, which stays meaningful
 * when the dot cancels to ~0), and its fast path against its reference, bit
 * for bit (both are llama.cpp's arithmetic, or both the canonical chain);
 * the invariant kernel of a quantized type against canon_spec, bit for
 * bit. */
static void dot_check(int type, int64_t n, const void *w, const float *xf, int check_fast, const char *what)
{
    int vdt = quant_vec_dot_type(type);
    size_t xb = quant_row_bytes(vdt, n);
    uint8_t *xq = malloc(xb);
    float *wd = malloc((size_t)n * 4), *xd = malloc((size_t)n * 4);
    quant_quantize_row_ref(vdt, xf, xq, n);
    quant_dequant_row(type, w, wd, n);
    quant_dequant_row(vdt, xq, xd, n);
    double exact = 0, mag = 0;
    for (int64_t i = 0; i < n; i++) {
        exact += (double)wd[i] * xd[i];
        mag += fabs((double)wd[i] * xd[i]);
    }
    int ks[MAX_KERNELS];
    const int nk = kernels_of(type, n, ks);
    CHECKN(nk > 0, "%s has no kernel", quant_type_name(type));
    const float inv = quant_kernel_dot_ref(quant_kernel_invariant(type), n, w, xq);
    const float vd = quant_vec_dot_ref(type, n, w, xq);
    CHECKN(memcmp(&vd, &inv, 4) == 0, "%s: quant_vec_dot_ref is not the invariant kernel", quant_type_name(type));
    if (elems_of(type) > 1) {
        const float spec = canon_spec(type, n, w, xq);
        CHECKN(memcmp(&spec, &inv, 4) == 0, "%s %s n=%lld: canonical kernel %.9g, the chain as described %.9g",
               quant_type_name(type), what, (long long)n, inv, spec);
    }
    for (int k = 0; k < nk; k++) {
        float ref = quant_kernel_dot_ref(ks[k], n, w, xq);
        CHECKN(fabs(ref - exact) <= 1e-5 * mag + 1e-30, "%s kernel %d %s n=%lld: ref %.9g exact %.9g (mag %g)",
               quant_type_name(type), ks[k], what, (long long)n, ref, exact, mag);
        if (check_fast) {
            quant_force_ref(0);
            float fast = quant_kernel_func(ks[k])(n, w, xq);
            CHECKN(memcmp(&fast, &ref, 4) == 0, "%s kernel %d %s n=%lld: fast %.9g ref %.9g",
                   quant_type_name(type), ks[k], what, (long long)n, fast, ref);
            quant_force_ref(1);
            fast = quant_kernel_func(ks[k])(n, w, xq);
            CHECKN(memcmp(&fast, &ref, 4) == 0, "%s kernel %d forced ref", quant_type_name(type), ks[k]);
            quant_force_ref(0);
        }
    }
    free(xq);
    free(wd);
    free(xd);
}

static void test_dots(void)
{
    int have = quant_have_avx2();
    printf("avx2 paths: %s\n", have ? "yes" : "no (fast = reference)");
    for (int t = 0; t < NELEM(all_types); t++) {
        int type = all_types[t], be = elems_of(type);
        /* odd block counts; float types get odd element counts too */
        static const int nblk_k[] = {1, 3, 5, 11, 17};
        static const int nblk_32[] = {1, 3, 7, 9, 33, 65, 80};
        static const int nel_f[] = {1, 7, 31, 33, 257, 1001, 4096};
        const int *ns = be == QK_K ? nblk_k : be == 32 ? nblk_32 : nel_f;
        int nn = be == QK_K ? NELEM(nblk_k) : be == 32 ? NELEM(nblk_32) : NELEM(nel_f);
        for (int k = 0; k < nn; k++) {
            int64_t n = (int64_t)ns[k] * be;
            float *wf = malloc((size_t)n * 4), *xf = malloc((size_t)n * 4);
            uint8_t *w = malloc(quant_row_bytes(type, n));
            for (int rep = 0; rep < 12; rep++) {
                /* quantized real-looking weights */
                fill_acts(wf, n, rep % 3 == 0 ? 0.05f : 1.f);
                fill_acts(xf, n, rep % 4 == 0 ? 100.f : 1.f);
                quant_quantize_weights(type, wf, w, n);
                dot_check(type, n, w, xf, 1, "quantized");
                /* random bytes: every code, extreme scales */
                if (be > 1) {
                    for (int64_t b = 0; b < n / be; b++)
                        random_block(type, w + (size_t)b * quant_block_bytes(type));
                    dot_check(type, n, w, xf, 1, "random-bytes");
                }
            }
            /* extremes: large values, ties, zeros */
            for (int64_t i = 0; i < n; i++) {
                wf[i] = (i % 5 == 0) ? 6e4f * ((i & 1) ? 1 : -1) : gauss();
                xf[i] = (i % 3 == 0) ? 0.f : (float)((int)(i % 255) - 127) + 0.5f;
            }
            quant_quantize_weights(type, wf, w, n);
            dot_check(type, n, w, xf, 1, "extreme");
            free(wf);
            free(xf);
            free(w);
        }
    }
}

/* One weight row against many activation rows: through every kernel, each
 * result bit-identical to the single-row dot (batch invariance), whatever
 * the group size. */
static void test_multi(void)
{
    for (int t = 0; t < NELEM(all_types); t++) {
        int type = all_types[t], vdt = quant_vec_dot_type(type), be = elems_of(type);
        int64_t n = (be == QK_K ? 3 : be == 32 ? 9 : 37) * (int64_t)be;
        if (be == 1)
            n = 296; /* a multiple of 8: the tinyBLAS kernels take it */
        size_t xb = quant_row_bytes(vdt, n) + 4; /* a stride that is not the row size */
        float *f = malloc((size_t)n * 4);
        uint8_t *w = malloc(quant_row_bytes(type, n)), *x = malloc(xb * 9);
        fill_acts(f, n, 1.f);
        quant_quantize_weights(type, f, w, n);
        for (int r = 0; r < 9; r++) {
            fill_acts(f, n, r + 1.f);
            quant_quantize_row(vdt, f, x + (size_t)r * xb, n);
        }
        int ks[MAX_KERNELS];
        const int nk = kernels_of(type, n, ks);
        for (int k = 0; k < nk; k++)
            for (int nx = 1; nx <= 9; nx++) {
                float out[9];
                quant_kernel_dots(ks[k], n, w, x, xb, nx, out);
                for (int r = 0; r < nx; r++) {
                    float one = quant_kernel_func(ks[k])(n, w, x + (size_t)r * xb);
                    CHECKN(memcmp(&one, &out[r], 4) == 0, "%s kernel %d nx=%d r=%d: %.9g vs %.9g",
                           quant_type_name(type), ks[k], nx, r, out[r], one);
                }
            }
        free(f);
        free(w);
        free(x);
    }
}

/* --------------------------------------------- real llama.cpp-made tensors */

/* tiny-llama-mixed.gguf holds the same weights as tiny-llama-Q4_K_M.gguf in
 * other types (README): dequantized, the two must agree up to quantization
 * noise. A wrong layout decodes to noise (relative difference ~1.4). */
static void test_real_models(void)
{
    const char *sh = getenv("INFERD_SHARED");
    if (!sh) {
        printf("INFERD_SHARED not set: skipping the real-model checks\n");
        return;
    }
    char pa[1024], pb[1024];
    snprintf(pa, sizeof pa, "%s/models/tiny-llama-mixed.gguf", sh);
    snprintf(pb, sizeof pb, "%s/models/tiny-llama-Q4_K_M.gguf", sh);
    struct gguf_file *fa = NULL, *fb = NULL;
    struct inf_error e;
    if (gguf_open(pa, &fa, &e) != 0 || gguf_open(pb, &fb, &e) != 0) {
        printf("real models not readable (%s): skipping\n", e.msg);
        gguf_close(fa);
        gguf_close(fb);
        return;
    }
    int seen[QT_COUNT] = {0}, compared = 0;
    for (int64_t t = 0; t < gguf_n_tensors(fa); t++) {
        const struct gguf_tensor *ta = gguf_tensor_at(fa, t);
        const struct gguf_tensor *tb = gguf_find_tensor(fb, ta->name);
        if (!tb || ta->n_dims != 2 || !quant_type_supported((int)ta->type) || !quant_type_supported((int)tb->type))
            continue;
        int64_t ne0 = ta->ne[0], rows = ta->ne[1] < 64 ? ta->ne[1] : 64;
        float *ya = malloc((size_t)ne0 * 4), *yb = malloc((size_t)ne0 * 4), *x = malloc((size_t)ne0 * 4);
        double se = 0, sb = 0;
        size_t rba = quant_row_bytes((int)ta->type, ne0), rbb = quant_row_bytes((int)tb->type, ne0);
        for (int64_t r = 0; r < rows; r++) {
            const uint8_t *wa = (const uint8_t *)ta->data + (size_t)r * rba;
            const uint8_t *wb = (const uint8_t *)tb->data + (size_t)r * rbb;
            quant_dequant_row((int)ta->type, wa, ya, ne0);
            quant_dequant_row((int)tb->type, wb, yb, ne0);
            for (int64_t i = 0; i < ne0; i++) {
                se += (double)(ya[i] - yb[i]) * (ya[i] - yb[i]);
                sb += (double)yb[i] * yb[i];
            }
            /* the dot paths on real blocks */
            fill_acts(x, ne0, 1.f);
            dot_check((int)ta->type, ne0, wa, x, 1, ta->name);
            dot_check((int)tb->type, ne0, wb, x, 1, tb->name);
        }
        seen[ta->type] = seen[tb->type] = 1;
        double rel = sqrt(se / (sb + 1e-30));
        /* identical types must decode identically */
        double lim = ta->type == tb->type ? 0.0 : 0.2;
        printf("real %-28s %-5s vs %-5s rel diff %.4f\n", ta->name, quant_type_name((int)ta->type),
               quant_type_name((int)tb->type), rel);
        CHECKN(rel <= lim, "%s: %s vs %s rel %.4f", ta->name, quant_type_name((int)ta->type),
               quant_type_name((int)tb->type), rel);
        compared++;
        free(ya);
        free(yb);
        free(x);
    }
    CHECK(compared > 0);
    for (int k = 0; k < NELEM(all_types); k++)
        if (all_types[k] != QT_F32 && all_types[k] != QT_BF16 && !seen[all_types[k]])
            printf("note: no real %s tensor compared\n", quant_type_name(all_types[k]));
    /* Q8_0 and Q4_0 made by llama.cpp requantize to the same bytes with
     * ggml's scheme (their extreme code is always used), a bit-exact check
     * of both layouts and of our quantizers on real data */
    for (int64_t t = 0; t < gguf_n_tensors(fa); t++) {
        const struct gguf_tensor *ta = gguf_tensor_at(fa, t);
        if ((ta->type != QT_Q8_0 && ta->type != QT_Q4_0) || ta->n_dims != 2)
            continue;
        int64_t ne0 = ta->ne[0];
        size_t rb = quant_row_bytes((int)ta->type, ne0);
        float *y = malloc((size_t)ne0 * 4);
        uint8_t *q = malloc(rb);
        int same = 0, rows = (int)(ta->ne[1] < 256 ? ta->ne[1] : 256);
        for (int r = 0; r < rows; r++) {
            const uint8_t *w = (const uint8_t *)ta->data + (size_t)r * rb;
            quant_dequant_row((int)ta->type, w, y, ne0);
            quant_quantize_weights((int)ta->type, y, q, ne0);
            same += memcmp(q, w, rb) == 0;
        }
        printf("real %-28s %-5s requantized identically: %d/%d rows\n", ta->name,
               quant_type_name((int)ta->type), same, rows);
        CHECK(same == rows);
        free(y);
        free(q);
    }
    gguf_close(fa);
    gguf_close(fb);
}

int main(void)
{
    test_f16();
    test_bf16();
    test_layouts();
    test_quantizers();
    test_act_quant();
    test_act_quant_fast();
    test_dots();
    test_multi();
    test_real_models();
    printf("%s\n", fails ? "FAIL" : "ok");
    return fails ? 1 : 0;
}
