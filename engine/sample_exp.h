/* sample_exp — glibc's expf, step for step, for a device that must give the
 * CPU sampler's bits (engine/cuda/sample_kernel.cu; the CPU sampler itself calls
 * libm's expf).
 *
 * The algorithm is glibc's (from Arm's optimized-routines): x * 32/ln2 =
 * k + r, 2^(k/32) from a 32-entry table of doubles, a cubic in r, all in
 * double, rounded once to float. The double steps are written out with
 * explicit fused multiply-adds (the pattern of glibc's FMA builds, which
 * x86-64 picks at run time and aarch64 always uses) so no compiler can
 * contract them differently. Checked against this machine's libm over every
 * float in [-104, 0] (the sampler only ever calls expf on values <= 0): 0
 * differences (without the FMAs: 1 difference), and tests/unit/
 * test_sample_op keeps checking a dense sample of that range wherever CI
 * runs. Results outside the finite range follow glibc (0 below -103.97,
 * +inf above 88.72, NaN for NaN) without its errno.
 *
 * Compiles as C11 (host tests) and as CUDA C++ (__device__ functions).
 */
#ifndef INFERD_SAMPLE_EXP_H
#define INFERD_SAMPLE_EXP_H

#include <stdint.h>
#include <string.h>

#ifdef __CUDACC__
#define SAMPLE_HD static __device__ __forceinline__
#define SAMPLE_FMA(a, b, c) __fma_rn((a), (b), (c))
#define SAMPLE_DMUL(a, b) __dmul_rn((a), (b))
#define SAMPLE_DSUB(a, b) __dsub_rn((a), (b))
#else
#include <math.h>
#define SAMPLE_HD static inline
#define SAMPLE_FMA(a, b, c) fma((a), (b), (c))
#define SAMPLE_DMUL(a, b) ((a) * (b))
#define SAMPLE_DSUB(a, b) ((a) - (b))
#endif

SAMPLE_HD double sample_exp_tab(int i)
{
    /* 2^(i/32) as a double, minus i << 47 (the exponent bits k adds back) */
    static const uint64_t tab[32] = {
        0x3ff0000000000000ull, 0x3fefd9b0d3158574ull, 0x3fefb5586cf9890full,
        0x3fef9301d0125b51ull, 0x3fef72b83c7d517bull, 0x3fef54873168b9aaull,
        0x3fef387a6e756238ull, 0x3fef1e9df51fdee1ull, 0x3fef06fe0a31b715ull,
        0x3feef1a7373aa9cbull, 0x3feedea64c123422ull, 0x3feece086061892dull,
        0x3feebfdad5362a27ull, 0x3feeb42b569d4f82ull, 0x3feeab07dd485429ull,
        0x3feea47eb03a5585ull, 0x3feea09e667f3bcdull, 0x3fee9f75e8ec5f74ull,
        0x3feea11473eb0187ull, 0x3feea589994cce13ull, 0x3feeace5422aa0dbull,
        0x3feeb737b0cdc5e5ull, 0x3feec49182a3f090ull, 0x3feed503b23e255dull,
        0x3feee89f995ad3adull, 0x3feeff76f2fb5e47ull, 0x3fef199bdd85529cull,
        0x3fef3720dcef9069ull, 0x3fef5818dcfba487ull, 0x3fef7c97337b9b5full,
        0x3fefa4afa2a490daull, 0x3fefd0765b6e4540ull,
    };
    double d;
    memcpy(&d, &tab[i], sizeof(d));
    return d;
}

SAMPLE_HD float sample_expf(float x)
{
    const double inv_ln2_n = 0x1.71547652b82fep+0 * 32; /* 32 / ln 2 */
    const double shift = 0x1.8p+52;                      /* rounds to an integer */
    const double c0 = 0x1.c6af84b912394p-5 / 32 / 32 / 32;
    const double c1 = 0x1.ebfce50fac4f3p-3 / 32 / 32;
    const double c2 = 0x1.62e42ff0c52d6p-1 / 32;
    uint32_t ux;
    memcpy(&ux, &x, sizeof(ux));
    if (((ux >> 20) & 0x7ff) >= 0x42b) { /* |x| >= 88 (top 12 bits of 88.0f), inf, NaN */
        if (ux == 0xff800000u)
            return 0.f;
        if (((ux >> 20) & 0x7ff) >= 0x7f8)
            return x + x;
        if (x > 0x1.62e42ep6f) { /* overflows: +inf */
            const uint32_t inf = 0x7f800000u;
            float f;
            memcpy(&f, &inf, sizeof(f));
            return f;
        }
        if (x < -0x1.9fe368p6f)
            return 0.f;
    }
    const double xd = (double)x;
    double kd = SAMPLE_FMA(inv_ln2_n, xd, shift);
    uint64_t ki;
    memcpy(&ki, &kd, sizeof(ki));
    kd = SAMPLE_DSUB(kd, shift);
    const double r = SAMPLE_FMA(inv_ln2_n, xd, -kd);
    const double tv = sample_exp_tab((int)(ki % 32));
    uint64_t t;
    memcpy(&t, &tv, sizeof(t));
    t += ki << 47;
    double s;
    memcpy(&s, &t, sizeof(s));
    const double z = SAMPLE_FMA(c0, r, c1);
    const double r2 = SAMPLE_DMUL(r, r);
    double y = SAMPLE_FMA(c2, r, 1.0);
    y = SAMPLE_FMA(z, r2, y);
    y = SAMPLE_DMUL(y, s);
    return (float)y;
}

#endif
