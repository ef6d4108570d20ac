/* cuda/mmq6w_planes — mmq6w's weight expansion (cuda/mmq6w.cu: the two
 * u8 planes a Q6_K fragment word becomes), in a header of its own so that
 * the kernel, its host check and bench/wgmma_probe's int8 form run the
 * same instructions. Host and device. */
#ifndef INFERD_CUDA_MMQ6W_PLANES_CUH
#define INFERD_CUDA_MMQ6W_PLANES_CUH

#include <stdint.h>

#include "engine/cuda/qtypes.cuh" /* cuda_prmt */

/* The two u8 planes of a fragment word w (four int8 q - 32 of one
 * 16-element scale sc): p1 the bytes P1 + 128, p2 the bytes P2 - 1. The
 * lanes t = A' + 4095 are below 8,192, so t >> 5's bytes 0 and 2 are P1 +
 * 128 exactly whatever sits in bytes 1 and 3, and the PRMT that packs them
 * reads only those; P2 - 1 is the low 5 bits of each lane, masked once
 * after packing. (Session 41's form masked and subtracted per lane pair:
 * 3 instructions a word more, mmq6w 8% slower; bench/RESULTS.md session 42) */
static __host__ __device__ __forceinline__ void mmq6w_planes(uint32_t w, int sc, uint32_t &p1, uint32_t &p2)
{
    const uint32_t q = (w & 0x3f3f3f3fu) ^ 0x20202020u; /* q - 32 (6-bit two's complement) + 32 */
    /* (4095 - 32 sc) in both lanes as one IMAD: 0x0fff0fff - sc 0x00200020 (mod 2^32) */
    const uint32_t c = 0x0fff0fffu - (uint32_t)sc * 0x00200020u;
    uint32_t t[2];
    for (int h = 0; h < 2; h++) {
        const uint32_t l = cuda_prmt(q, 0, h ? 0x4342u : 0x4140u); /* two q in 16-bit lanes */
        t[h] = l * (uint32_t)sc + c;                                 /* lanes A' + 4095 */
    }
    p1 = cuda_prmt(t[0] >> 5, t[1] >> 5, 0x6420u);
    p2 = cuda_prmt(t[0], t[1], 0x6420u) & 0x1f1f1f1fu;
}

#endif
