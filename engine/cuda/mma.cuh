/* cuda/mma — the pieces both MMQ kernel templates (cuda/mmq0_impl.cuh for
 * Q4_0/Q8_0, cuda/mmqk_impl.cuh for the K-quants) stage and multiply with:
 * the int8 tensor-core products with a zero accumulator, the ldmatrix
 * fragment loads, and the cp.async copies of a stage's rows (16-byte
 * granules, or 2-byte aligned blocks for Q6_K's raw kernels); and the F16
 * product with F32 accumulation of the attention scores (cuda/attention.cu). */
#ifndef INFERD_CUDA_MMA_CUH
#define INFERD_CUDA_MMA_CUH

#include <cuda_pipeline.h>
#include <stdint.h>

/* The mma wrappers are plain (not volatile) asm: registers in, registers
 * out, no memory, so the compiler may order them with the code around them
 * (ldmatrix, which reads shared memory, stays volatile). Every measurement
 * in bench/RESULTS.md from 2026-12-02 02:15 on is of this form; the switch
 * alone did not move ptxas's registers or spills. */

/* D = A(16x32 s8) * B(32x8 s8) + c in every element (the int32 sums
 * wrap as any int32 add; callers keep them in range) */
static __device__ __forceinline__ void cuda_mma_k32_c(int d[4], const int a[4], const int b[2], int c)
{
    asm("mma.sync.aligned.m16n8k32.row.col.s32.s8.s8.s32 "
                 "{%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%10,%10,%10,%10};\n"
                 : "=r"(d[0]), "=r"(d[1]), "=r"(d[2]), "=r"(d[3])
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]), "r"(c));
}

/* D = A(16x32 s8) * B(32x8 s8), zero accumulator */
static __device__ __forceinline__ void cuda_mma_k32(int d[4], const int a[4], const int b[2])
{
    cuda_mma_k32_c(d, a, b, 0);
}

/* D = A(16x16 s8) * B(16x8 s8), zero accumulator (A: rows g, g+8) */
static __device__ __forceinline__ void cuda_mma_k16(int d[4], int a0, int a1, int b)
{
    asm("mma.sync.aligned.m16n8k16.row.col.s32.s8.s8.s32 "
                 "{%0,%1,%2,%3}, {%4,%5}, {%6}, {%7,%7,%7,%7};\n"
                 : "=r"(d[0]), "=r"(d[1]), "=r"(d[2]), "=r"(d[3])
                 : "r"(a0), "r"(a1), "r"(b), "r"(0));
}

/* D += A(16x16 f16, rows g, g+8) * B(16x8 f16), F32 accumulation */
static __device__ __forceinline__ void cuda_mma_f16_k16(float d[4], const uint32_t a[4], uint32_t b0, uint32_t b1)
{
    asm("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 "
                 "{%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};\n"
                 : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

/* D = A(16x16 f16) * B(16x8 f16), zero accumulator (an accumulation's
 * first step: nothing to clear before it) */
static __device__ __forceinline__ void cuda_mma_f16_k16_z(float d[4], const uint32_t a[4], uint32_t b0, uint32_t b1)
{
    asm("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 "
        "{%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%10,%10,%10,%10};\n"
        : "=f"(d[0]), "=f"(d[1]), "=f"(d[2]), "=f"(d[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1), "f"(0.0f));
}

/* Four 8 x 8 matrices of 16-bit elements from shared memory (ldmatrix
 * .x4): lane l gives the address of row l % 8 of matrix l / 8 (16 bytes,
 * 16-byte aligned), and thread (g = lane / 4, t = lane % 4) receives word
 * t of row g of matrix i in r[i]. For int8 rows that is the m16n8k32
 * fragment word layout (A: rows g, g + 8 x words t, t + 4; B: row g x
 * words t, t + 4), one instruction where four 32-bit loads were. Rows
 * whose stride is an odd number of 16-byte granules put a matrix's 8 row
 * reads in 8 distinct bank groups: no conflict without a swizzle. */
static __device__ __forceinline__ void cuda_ldsm_x4(uint32_t r[4], uint32_t saddr)
{
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                 : "r"(saddr));
}

/* the shared-window address of p, for ldmatrix */
static __device__ __forceinline__ uint32_t cuda_saddr(const void *p)
{
    return (uint32_t)__cvta_generic_to_shared(p);
}

/* A shared-memory mbarrier (sm_80 and later): a phase completes when its
 * `count` arrivals are in; arrive releases the arriving thread's shared
 * stores and a completed wait acquires them (PTX ISA: mbarrier, .release
 * and .acquire at CTA scope are the defaults). Waiting for parity p
 * returns once the phase of that parity has completed; on a fresh barrier
 * (phase 0 pending) a wait for parity 1 returns at once, so a producer
 * starts its "slot empty" waits at parity 1. */
static __device__ __forceinline__ void cuda_mbar_init(uint64_t *bar, uint32_t count)
{
    asm volatile("mbarrier.init.shared.b64 [%0], %1;\n" ::"r"(cuda_saddr(bar)), "r"(count) : "memory");
}

static __device__ __forceinline__ void cuda_mbar_arrive(uint64_t *bar)
{
    asm volatile("{\n .reg .b64 st;\n mbarrier.arrive.shared.b64 st, [%0];\n}\n" ::"r"(cuda_saddr(bar))
                 : "memory");
}

/* Wait for the phase of parity `parity`. Each try_wait (sm_90 and later)
 * may suspend the thread until the phase completes (up to the hint,
 * 0x100000 ns) instead of returning at once: a waiting warp (mmqs's chain
 * warp, most of its time) then sleeps (SASS: a NANOSLEEP loop) rather than
 * spinning on the issue slots the other warps of its scheduler need.
 * sm_80/sm_89 have no try_wait: test_wait polls (the fat binary's default
 * gpu_arch builds them). On sm_90 the planes kernels' consumer waits by
 * polling measured 1.04-1.05x slower (bench/RESULTS.md session 59,
 * MMQP_SPIN: the polling takes issue slots from the other warpgroup's
 * chain). */
static __device__ __forceinline__ void cuda_mbar_wait(uint64_t *bar, uint32_t parity)
{
#if __CUDA_ARCH__ >= 900
    asm volatile("{\n .reg .pred done;\n"
                 "MBAR_WAIT:\n"
                 " mbarrier.try_wait.parity.shared.b64 done, [%0], %1, 0x100000;\n"
                 " @!done bra MBAR_WAIT;\n}\n" ::"r"(cuda_saddr(bar)),
                 "r"(parity)
                 : "memory");
#else
    asm volatile("{\n .reg .pred done;\n"
                 "MBAR_POLL:\n"
                 " mbarrier.test_wait.parity.shared.b64 done, [%0], %1;\n"
                 " @!done bra MBAR_POLL;\n}\n" ::"r"(cuda_saddr(bar)),
                 "r"(parity)
                 : "memory");
#endif
}

/* The tensor memory accelerator's bulk copy (sm_90 and later): `bytes`
 * (a multiple of 16) from global src to shared dst (both 16-byte
 * aligned), one instruction of one thread, completing as `bytes` of
 * transaction count on bar. The barrier's phase must have been told to
 * expect them (cuda_mbar_expect) by its arriving thread. Without a cluster
 * launch a CTA's shared::cta addresses are its shared::cluster ones. */
static __device__ __forceinline__ void cuda_bulk_copy(void *dst, const void *src, uint32_t bytes, uint64_t *bar)
{
#if __CUDA_ARCH__ >= 900
    asm volatile("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];\n" ::"r"(
                     cuda_saddr(dst)),
                 "l"(src), "r"(bytes), "r"(cuda_saddr(bar))
                 : "memory");
#endif
}

/* The tensor memory accelerator's tiled copy of a box of rows (sm_90 and
 * later): one instruction of one thread moves box_rows rows of box_bytes
 * each (cuda_tmap_rows's map) from element (x8 8-byte words into a row,
 * row y) to shared dst (128-byte aligned), densely, rows box_bytes apart;
 * parts of the box past the weight's rows or a row's end land as zeros
 * and every byte of the box counts against bar. Why not a bulk copy a
 * row: the accelerator took ~33 ns a copy on the H200 whatever its size
 * (bench/RESULTS.md 2026-12-04 12:00-, call 1), so a stage of 32 row
 * copies took ~1.1 us to queue. `map`: a __grid_constant__ kernel
 * parameter's address. (mmvt measured slower with it: its 64 KB stages
 * then arrive a box after the other, bench/RESULTS.md 2026-12-04 12:00-,
 * calls 2-3; it keeps a copy a row.) */
static __device__ __forceinline__ void cuda_tma_rows(void *dst, const void *map, int32_t x8, int32_t y, uint64_t *bar)
{
#if __CUDA_ARCH__ >= 900
    asm volatile("cp.async.bulk.tensor.2d.shared::cluster.global.tile.mbarrier::complete_tx::bytes [%0], [%1, {%2, %3}], "
                 "[%4];\n" ::"r"(cuda_saddr(dst)),
                 "l"(map), "r"(x8), "r"(y), "r"(cuda_saddr(bar))
                 : "memory");
#endif
}

/* Arrive on bar and add `bytes` of expected transactions to its phase:
 * the phase completes when its arrivals are in and the bulk copies
 * counted against it have landed. */
static __device__ __forceinline__ void cuda_mbar_expect(uint64_t *bar, uint32_t bytes)
{
#if __CUDA_ARCH__ >= 900
    asm volatile("{\n .reg .b64 st;\n mbarrier.arrive.expect_tx.shared::cta.b64 st, [%0], %1;\n}\n" ::"r"(
                     cuda_saddr(bar)),
                 "r"(bytes)
                 : "memory");
#endif
}

/* A streaming kernel's feed warp (cuda/mmvt.cu, cuda/mmqt_impl.cuh): one
 * stage of a row group into its slot by a bulk copy a row. Lane r < the
 * group's rows (at most rb; rows past the weight copy nothing) copies row
 * row0 + r's run of `run` bytes from byte `off` of the row, from the
 * 16-byte granule it starts in to the one it ends in (Q4_K/Q5_K: the run
 * itself; Q6_K's 2-byte aligned runs land up to 14 bytes into their slot
 * row and read up to 15 bytes past a weight's end: CUDA_W_SLACK), rows rs
 * bytes apart; lane 0 has bar expect every lane's bytes first. Every lane
 * of the warp calls it. */
static __device__ __forceinline__ void cuda_feed_rows(uint8_t *slot, uint32_t rs, const uint8_t *w, size_t row_bytes,
                                                      int32_t n_w, int32_t row0, int rb, size_t off, uint32_t run,
                                                      uint64_t *bar)
{
    const int lane = threadIdx.x & 31;
    const int32_t rows = n_w - row0 < rb ? n_w - row0 : rb;
    const uintptr_t src = (uintptr_t)(w + (size_t)(row0 + lane) * row_bytes + off);
    const uint32_t sz = (uint32_t)(((src & 15) + run + 15) & ~(uintptr_t)15);
    const uint32_t all = __reduce_add_sync(0xffffffffu, lane < rows ? sz : 0u);
    if (lane == 0)
        cuda_mbar_expect(bar, all);
    __syncwarp();
    if (lane < rows)
        cuda_bulk_copy(slot + lane * rs, (const void *)(src & ~(uintptr_t)15), sz, bar);
}

/* After mbarrier.init, before another thread or the async proxy (bulk
 * copies) uses the barriers; a __syncthreads follows. */
static __device__ __forceinline__ void cuda_mbar_init_fence(void)
{
#if __CUDA_ARCH__ >= 900
    asm volatile("fence.mbarrier_init.release.cluster;\n fence.proxy.async.shared::cta;\n" ::: "memory");
#endif
}

/* After this thread's shared-memory stores that a wgmma (the async proxy)
 * will read, before the barrier arrival that hands them over */
static __device__ __forceinline__ void cuda_fence_async_smem(void)
{
#if __CUDA_ARCH__ >= 900
    asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");
#endif
}

/* dot of four unsigned bytes a with four signed bytes b, plus c */
static __device__ __forceinline__ int cuda_dp4a_us(uint32_t a, int b, int c)
{
    int d;
    asm("dp4a.u32.s32 %0, %1, %2, %3;" : "=r"(d) : "r"(a), "r"(b), "r"(c));
    return d;
}

/* Queue N 16-byte granules from src to dst (both 16-byte aligned), thread
 * part `lp` of P taking granules lp, lp + P, ...; the caller commits.
 * The trip count is a compile-time constant, so the copies unroll into
 * straight LDGSTS at immediate offsets from one base: the runtime loops
 * `for (i = lp; i < n; i += 4)` they replace compiled (ptxas 13.0, sm_90)
 * to a remainder dispatch with branches and spilled pointers, ~325 SASS
 * instructions of the 1,233 in a q4_K MMQ stage (census 2026-12-02). */
template <int N, int P>
static __device__ __forceinline__ void cuda_copy16(void *dst, const void *src, int lp)
{
    uint8_t *d = (uint8_t *)dst + 16 * lp;
    const uint8_t *s = (const uint8_t *)src + 16 * lp;
#pragma unroll
    for (int k = 0; k < (N + P - 1) / P; k++)
        if (N % P == 0 || lp + P * k < N)
            __pipeline_memcpy_async(d + 16 * P * k, s + 16 * P * k, 16);
}

/* Queue the async copy of the SB bytes at src (2-byte aligned) into raw
 * words at dst, thread `part` of P; the caller commits. The bytes start at
 * offset (src & 3) of dst's first word. */
template <int SB, int P>
static __device__ __forceinline__ void cuda_raw_copy(uint32_t *dst, const uint8_t *src, int part)
{
    const uintptr_t a = (uintptr_t)src;
    const uint32_t *w0 = (const uint32_t *)(a & ~(uintptr_t)3);
    /* whole words inside [a & ~3, a + SB); a 2-byte tail (blocks are 2-byte
     * aligned) is read as such, never past the end of the allocation. The
     * word count is SB / 4 or one more (src & 3 is 0 or 2): a compile-time
     * trip count with one guard, as in cuda_copy16 */
    const int full = (int)(((a & 3) + SB) / 4);
#pragma unroll
    for (int k = 0; k < (SB / 4 + 1 + P - 1) / P; k++)
        if (part + P * k < full)
            __pipeline_memcpy_async(dst + part + P * k, w0 + part + P * k, 4);
    if (((a & 3) + SB) % 4 && part == (full % P))
        *(uint16_t *)(dst + full) = *(const uint16_t *)(w0 + full);
}

#endif
