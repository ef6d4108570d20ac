/* cuda/mmq6w_planes — mmq6w's weight expansion (cuda/mmq6w.cu: the two
 * u8 planes a Q6_K fragment word becomes), in a header of its own so that
 * the kernel, its host check and bench/wgmma_probe's int8 form run the
 * same instructions; and the Q4_K planes' (cuda/mmq4p.cu), made at load
 * by cuda/q6planes.cu and checked on the host. Host and device. */
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

/* The two u8 planes of four Q4_K weights q (0..15, a byte each) of one
 * sub-block scale sc (0..63): u = q sc <= 945 = 32 P1 + P2, p1 the bytes
 * P1 (0..29), p2 the bytes P2 (0..31), so 32 D1 + D2 over the activations
 * is the super-block's exact int sum_j sc_j dot_j. The lanes as in
 * mmq6w_planes (two 16-bit lanes a half, no carry between them). */
static __host__ __device__ __forceinline__ void mmq4p_planes(uint32_t q, int sc, uint32_t &p1, uint32_t &p2)
{
    uint32_t t[2];
    for (int h = 0; h < 2; h++)
        t[h] = cuda_prmt(q, 0, h ? 0x4342u : 0x4140u) * (uint32_t)sc; /* lanes q sc */
    p1 = cuda_prmt(t[0] >> 5, t[1] >> 5, 0x6420u);
    p2 = cuda_prmt(t[0], t[1], 0x6420u) & 0x1f1f1f1fu;
}

/* sub-block j's 6-bit scale from a Q4_K block's 12 scale bytes (engine/
 * quant_impl.h's k4_scale_min, the scale half) */
static __host__ __device__ __forceinline__ int mmq4p_scale(const uint8_t *sc12, int j)
{
    return j < 4 ? sc12[j] & 63 : (sc12[j + 4] & 0x0f) | ((sc12[j - 4] >> 6) << 4);
}

/* Both planes of the word of elements kk..kk + 3 (kk % 4 == 0) of the
 * Q4_K super-block b (144 bytes, 4-byte aligned): element e's 4 bits are
 * byte 16 + 32 (e / 64) + e % 32's low (e % 64 < 32) or high nibble */
static __host__ __device__ __forceinline__ void mmq4p_word(const uint8_t *b, int kk, uint32_t &p1, uint32_t &p2)
{
    const uint32_t w = *(const uint32_t *)(b + 16 + 32 * (kk >> 6) + (kk & 31));
    mmq4p_planes((w >> (4 * ((kk >> 5) & 1))) & 0x0f0f0f0fu, mmq4p_scale(b + 4, kk >> 5), p1, p2);
}

#endif
