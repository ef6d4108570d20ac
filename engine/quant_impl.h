/* quant_impl — helpers shared by engine/quant.c, quant_dot.c and
 * quant_weights.c (not an interface: engine/quant.h is). */
#ifndef INFERD_ENGINE_QUANT_IMPL_H
#define INFERD_ENGINE_QUANT_IMPL_H

#include <stdint.h>
#include <string.h>

/* Round half to even, like the x86 default rounding mode (and ggml's
 * nearest_int). Valid for |x| < 2^22, which every caller guarantees. */
static inline int quant_nearest_int(float x)
{
    float v = x + 12582912.f; /* 1.5 * 2^23: the sum's ulp is 1 */
    uint32_t u;
    memcpy(&u, &v, sizeof(u));
    return (int)(u & 0x007fffff) - 0x00400000;
}

/* Q4_K/Q5_K keep eight 6-bit scales and eight 6-bit mins in 12 bytes:
 * bytes 0-3: scale[0..3] (low 6 bits), top 2 bits = scale[4..7] >> 4
 * bytes 4-7: min[0..3] (low 6 bits),   top 2 bits = min[4..7] >> 4
 * bytes 8-11: low nibble scale[4..7] & 15, high nibble min[4..7] & 15 */
static inline void k4_scale_min(const uint8_t *q, int j, int *sc, int *m)
{
    if (j < 4) {
        *sc = q[j] & 63;
        *m = q[j + 4] & 63;
    } else {
        *sc = (q[j + 4] & 0x0f) | ((q[j - 4] >> 6) << 4);
        *m = (q[j + 4] >> 4) | ((q[j] >> 6) << 4);
    }
}

#ifdef INFERD_HAVE_AVX2
/* quant.c: the AVX2 paths are on (the CPU has them, quant_force_ref off) */
int quant_use_avx2(void);
#endif

#endif
