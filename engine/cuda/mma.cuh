/* cuda/mma — the pieces both MMQ kernel templates (cuda/mmq0_impl.cuh for
 * Q4_0/Q8_0, cuda/mmqk_impl.cuh for the K-quants) stage and multiply with:
 * the int8 tensor-core products with a zero accumulator, and the cp.async
 * copy of a row of 2-byte aligned blocks (Q6_K's raw kernels); and the F16
 * product with F32 accumulation of the attention scores (cuda/attention.cu). */
#ifndef INFERD_CUDA_MMA_CUH
#define INFERD_CUDA_MMA_CUH

#include <cuda_pipeline.h>
#include <stdint.h>

/* D = A(16x32 s8) * B(32x8 s8), zero accumulator */
static __device__ __forceinline__ void cuda_mma_k32(int d[4], const int a[4], const int b[2])
{
    asm volatile("mma.sync.aligned.m16n8k32.row.col.s32.s8.s8.s32 "
                 "{%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%10,%10,%10,%10};\n"
                 : "=r"(d[0]), "=r"(d[1]), "=r"(d[2]), "=r"(d[3])
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]), "r"(0));
}

/* D = A(16x16 s8) * B(16x8 s8), zero accumulator (A: rows g, g+8) */
static __device__ __forceinline__ void cuda_mma_k16(int d[4], int a0, int a1, int b)
{
    asm volatile("mma.sync.aligned.m16n8k16.row.col.s32.s8.s8.s32 "
                 "{%0,%1,%2,%3}, {%4,%5}, {%6}, {%7,%7,%7,%7};\n"
                 : "=r"(d[0]), "=r"(d[1]), "=r"(d[2]), "=r"(d[3])
                 : "r"(a0), "r"(a1), "r"(b), "r"(0));
}

/* D += A(16x16 f16, rows g, g+8) * B(16x8 f16), F32 accumulation */
static __device__ __forceinline__ void cuda_mma_f16_k16(float d[4], const uint32_t a[4], uint32_t b0, uint32_t b1)
{
    asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 "
                 "{%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};\n"
                 : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

/* Queue the async copy of the SB bytes at src (2-byte aligned) into raw
 * words at dst, thread `part` of `parts`; the caller commits. The bytes
 * start at offset (src & 3) of dst's first word. */
template <int SB>
static __device__ __forceinline__ void cuda_raw_copy(uint32_t *dst, const uint8_t *src, int part, int parts)
{
    const uintptr_t a = (uintptr_t)src;
    const uint32_t *w0 = (const uint32_t *)(a & ~(uintptr_t)3);
    /* whole words inside [a & ~3, a + SB); a 2-byte tail (blocks are 2-byte
     * aligned) is read as such, never past the end of the allocation */
    const int full = (int)(((a & 3) + SB) / 4);
    for (int k = part; k < full; k += parts)
        __pipeline_memcpy_async(dst + k, w0 + k, 4);
    if (((a & 3) + SB) % 4 && part == (full % parts))
        *(uint16_t *)(dst + full) = *(const uint16_t *)(w0 + full);
}

#endif
