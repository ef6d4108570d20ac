/* cuda/wgmma — Hopper's warpgroup matrix product (wgmma.mma_async, sm_90a)
 * as the exact K-quant kernels use it (cuda/mmqw.cu: both operands from
 * shared memory; cuda/mmqr.cu and cuda/mmq6w.cu: the weights from
 * registers): the m64n128k16 f16 x f16 -> f32 and m64n128k32 u8 x s8 ->
 * s32 forms (and their n64 halves, m64n64k16 and m64n64k32, which
 * bench/wgmma_probe times), their fence / commit / wait, setmaxnreg, and
 * the shared-memory matrix descriptor. WGMMA_DEVICE is 1 in the sm_90a
 * pass only (__CUDA_ARCH_FEAT_SM90_ALL); elsewhere none of this is
 * compiled and the kernels' bodies are empty. */
#ifndef INFERD_CUDA_WGMMA_CUH
#define INFERD_CUDA_WGMMA_CUH

#include <stdint.h>

#include "engine/cuda/mma.cuh" /* cuda_saddr */

#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
#define WGMMA_DEVICE 1
#else
#define WGMMA_DEVICE 0
#endif

#if WGMMA_DEVICE
/* the 64 accumulator operands of an m64n128 wgmma: the string, and the
 * constraint list (c: "+f" read-write or "=f" write-only) */
#define WGMMA_D64 \
    "{" \
    "%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, " \
    "%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, " \
    "%32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, " \
    "%48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63}"
/* the first 32 (an m64n64 form's: its string and operands) */
#define WGMMA_D32 \
    "{" \
    "%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, " \
    "%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31}"
#define WGMMA_DOPS32(c) \
    c(d[0]), c(d[1]), c(d[2]), c(d[3]), c(d[4]), c(d[5]), c(d[6]), c(d[7]), \
    c(d[8]), c(d[9]), c(d[10]), c(d[11]), c(d[12]), c(d[13]), c(d[14]), c(d[15]), \
    c(d[16]), c(d[17]), c(d[18]), c(d[19]), c(d[20]), c(d[21]), c(d[22]), c(d[23]), \
    c(d[24]), c(d[25]), c(d[26]), c(d[27]), c(d[28]), c(d[29]), c(d[30]), c(d[31])
#define WGMMA_DOPS(c) \
    WGMMA_DOPS32(c), \
    c(d[32]), c(d[33]), c(d[34]), c(d[35]), c(d[36]), c(d[37]), c(d[38]), c(d[39]), \
    c(d[40]), c(d[41]), c(d[42]), c(d[43]), c(d[44]), c(d[45]), c(d[46]), c(d[47]), \
    c(d[48]), c(d[49]), c(d[50]), c(d[51]), c(d[52]), c(d[53]), c(d[54]), c(d[55]), \
    c(d[56]), c(d[57]), c(d[58]), c(d[59]), c(d[60]), c(d[61]), c(d[62]), c(d[63])
#define WGMMA_RW(x) "+f"(x)
#define WGMMA_WO(x) "=f"(x)
#define WGMMA_IRW(x) "+r"(x)
#define WGMMA_IWO(x) "=r"(x)

/* D(64 x 128 f32) += A(64 x 16 f16) B(16 x 128 f16), both K-major from
 * shared memory (descriptors); scale-a/b 1, no transposes */
static __device__ __forceinline__ void wgmma_ss(float d[64], uint64_t da, uint64_t db)
{
    asm volatile("wgmma.mma_async.sync.aligned.m64n128k16.f32.f16.f16 " WGMMA_D64 ", %64, %65, 1, 1, 1, 0, 0;\n"
                 : WGMMA_DOPS(WGMMA_RW)
                 : "l"(da), "l"(db));
}
/* the same with D = A B (a super-block's first step) */
static __device__ __forceinline__ void wgmma_ss_z(float d[64], uint64_t da, uint64_t db)
{
    asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, 0, 0;\n"
                 "wgmma.mma_async.sync.aligned.m64n128k16.f32.f16.f16 " WGMMA_D64 ", %64, %65, p, 1, 1, 0, 0;\n}\n"
                 : WGMMA_DOPS(WGMMA_WO)
                 : "l"(da), "l"(db));
}

/* D += A B with A from registers: a[4] the warp's m16 x k16 fragment
 * (mma.sync m16n8k16's A layout: a[0] row g, k 2 t4 and 2 t4 + 1; a[1]
 * row g + 8; a[2], a[3] the same at k + 8; warp w of the warpgroup holds
 * rows 16 w..), B K-major from shared memory. The registers are read
 * asynchronously: they must not change until a wgmma_wait covers this
 * product. */
static __device__ __forceinline__ void wgmma_rs(float d[64], const uint32_t a[4], uint64_t db)
{
    asm volatile("wgmma.mma_async.sync.aligned.m64n128k16.f32.f16.f16 " WGMMA_D64
                 ", {%64, %65, %66, %67}, %68, 1, 1, 1, 0;\n"
                 : WGMMA_DOPS(WGMMA_RW)
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(db));
}
/* the same with D = A B */
static __device__ __forceinline__ void wgmma_rs_z(float d[64], const uint32_t a[4], uint64_t db)
{
    asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, 0, 0;\n"
                 "wgmma.mma_async.sync.aligned.m64n128k16.f32.f16.f16 " WGMMA_D64
                 ", {%64, %65, %66, %67}, %68, p, 1, 1, 0;\n}\n"
                 : WGMMA_DOPS(WGMMA_WO)
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(db));
}

/* D(64 x 128 s32) += A(64 x 32 u8) B(32 x 128 s8): A from registers (a[4]
 * the warp's m16 x k32 fragment, mma.sync m16n8k32's A layout: a[0] row g,
 * k 4 t4..4 t4 + 3; a[1] row g + 8; a[2], a[3] the same at k + 16), B
 * K-major from shared memory; exact integer sums. The registers are read
 * asynchronously, as wgmma_rs's. */
static __device__ __forceinline__ void wgmma_u8s8(int d[64], const uint32_t a[4], uint64_t db)
{
    asm volatile("wgmma.mma_async.sync.aligned.m64n128k32.s32.u8.s8 " WGMMA_D64 ", {%64, %65, %66, %67}, %68, 1;\n"
                 : WGMMA_DOPS(WGMMA_IRW)
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(db));
}
/* the same with D = A B */
static __device__ __forceinline__ void wgmma_u8s8_z(int d[64], const uint32_t a[4], uint64_t db)
{
    asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, 0, 0;\n"
                 "wgmma.mma_async.sync.aligned.m64n128k32.s32.u8.s8 " WGMMA_D64 ", {%64, %65, %66, %67}, %68, p;\n}\n"
                 : WGMMA_DOPS(WGMMA_IWO)
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(db));
}

/* D(64 x 128 s32) += A(64 x 32 u8) B(32 x 128 s8), both K-major from
 * shared memory (descriptors): mmq6w's form with the weight planes made
 * at load (cuda/mmq6w.cu EXP); exact integer sums */
static __device__ __forceinline__ void wgmma_u8s8_ss(int d[64], uint64_t da, uint64_t db)
{
    asm volatile("wgmma.mma_async.sync.aligned.m64n128k32.s32.u8.s8 " WGMMA_D64 ", %64, %65, 1;\n"
                 : WGMMA_DOPS(WGMMA_IRW)
                 : "l"(da), "l"(db));
}
/* the same with D = A B */
static __device__ __forceinline__ void wgmma_u8s8_ss_z(int d[64], uint64_t da, uint64_t db)
{
    asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, 0, 0;\n"
                 "wgmma.mma_async.sync.aligned.m64n128k32.s32.u8.s8 " WGMMA_D64 ", %64, %65, p;\n}\n"
                 : WGMMA_DOPS(WGMMA_IWO)
                 : "l"(da), "l"(db));
}

/* m64n64k32 u8 x s8 with A from registers: the 32 accumulators of half an
 * m64n128 set (a thread's groups j 0-7 of 16, d = &set[0][0] or
 * &set[8][0]), B the tile's rows 0-63 or, 8 x 1,024 bytes on (the
 * swizzle's phase kept), 64-127. Two of them with the same A run at the
 * rate of one m64n128k32 (bench/wgmma_probe chain6, session 52: 71.0
 * against 72.1 cycles a k32 step). Session 52's halves forms of mmq6w and
 * mmqr (each warpgroup's part as two n64 halves, one half's chain under
 * the other's products) were exact and 1.10-1.15x slower: withdrawn
 * (bench/RESULTS.md; their code at 4c837ee). */
static __device__ __forceinline__ void wgmma_u8s8_n64(int *d, const uint32_t a[4], uint64_t db)
{
    asm volatile("wgmma.mma_async.sync.aligned.m64n64k32.s32.u8.s8 " WGMMA_D32 ", {%32, %33, %34, %35}, %36, 1;\n"
                 : WGMMA_DOPS32(WGMMA_IRW)
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(db));
}

/* m64n64k16 f16 with A from registers: half of wgmma_rs's (d its 32
 * accumulators, B rows 0-63 or 64-127 as wgmma_u8s8_n64's) */
static __device__ __forceinline__ void wgmma_rs_n64(float *d, const uint32_t a[4], uint64_t db)
{
    asm volatile("wgmma.mma_async.sync.aligned.m64n64k16.f32.f16.f16 " WGMMA_D32
                 ", {%32, %33, %34, %35}, %36, 1, 1, 1, 0;\n"
                 : WGMMA_DOPS32(WGMMA_RW)
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(db));
}

/* before a warpgroup's first wgmma after its registers (accumulators, A
 * fragments) or the shared memory it reads were written */
static __device__ __forceinline__ void wgmma_fence(void)
{
    asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory");
}

/* the wgmma issued since the last commit as one group */
static __device__ __forceinline__ void wgmma_commit(void)
{
    asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory");
}

/* until at most N committed groups are pending */
template <int N> static __device__ __forceinline__ void wgmma_wait(void)
{
    asm volatile("wgmma.wait_group.sync.aligned %0;\n" ::"n"(N) : "memory");
}

/* Pin d at this point of the program: the asm "reads and writes" it, so
 * the compiler cannot move its uses above the wait that makes the
 * hardware's writes (between the wgmma and its wait_group) complete. */
static __device__ __forceinline__ void wgmma_pin(float d[64])
{
#pragma unroll
    for (int i = 0; i < 64; i++)
        asm volatile("" : "+f"(d[i])::"memory");
}

/* A warpgroup's registers a thread from here on (setmaxnreg; all of its
 * warps execute it): a producer warpgroup gives some back, the consumers
 * take them. The launch bound sets the count every warp starts with; the
 * register file is split among the 4 schedulers, so what binds is the sum
 * over the warps one scheduler holds (65,536 / 4 / 32 = 512 a lane). */
template <int N> static __device__ __forceinline__ void wgmma_regs_dec(void)
{
    static_assert(N >= 24 && N <= 256 && N % 8 == 0, "setmaxnreg: 24..256, a multiple of 8");
    asm volatile("setmaxnreg.dec.sync.aligned.u32 %0;\n" ::"n"(N));
}
template <int N> static __device__ __forceinline__ void wgmma_regs_inc(void)
{
    static_assert(N >= 24 && N <= 256 && N % 8 == 0, "setmaxnreg: 24..256, a multiple of 8");
    asm volatile("setmaxnreg.inc.sync.aligned.u32 %0;\n" ::"n"(N));
}

/* d = 0 (a float accumulator set the chain adds into) */
static __device__ __forceinline__ void wgmma_zero(float d[64])
{
#pragma unroll
    for (int i = 0; i < 64; i++)
        d[i] = 0.0f;
}

/* Pin integer accumulators (wgmma_pin's int form) */
static __device__ __forceinline__ void wgmma_pin_i(int d[64])
{
#pragma unroll
    for (int i = 0; i < 64; i++)
        asm volatile("" : "+r"(d[i])::"memory");
}

/* A use of n A-fragment registers at this point: placed after the wait
 * that covers the wgmma reading them, so that no register they occupy is
 * given to another value while the tensor core may still read it (the
 * compiler sees the wgmma asm as their last use) */
template <int N> static __device__ __forceinline__ void wgmma_keep(const uint32_t (&f)[N][4])
{
#pragma unroll
    for (int i = 0; i < N; i++)
        asm volatile("" ::"r"(f[i][0]), "r"(f[i][1]), "r"(f[i][2]), "r"(f[i][3]) : "memory");
}

/* The kernel's shared memory as an S at its first 1,024-byte boundary
 * (the 128-byte swizzle repeats every 1,024 bytes, so the swizzled tiles,
 * S's first members, start on one; the launch asks for sizeof(S) + 1,024) */
template <class S> static __device__ __forceinline__ S &wgmma_smem(uint8_t *raw)
{
    return *(S *)(raw + ((1024 - (cuda_saddr(raw) & 1023)) & 1023));
}

/* the shared-memory matrix descriptor of a tile at byte address sa: 14-bit
 * fields of the address, the leading (K) and the stride (M/N) byte
 * offsets, each in 16-byte units; bits 62-63 the layout: 0 core matrices
 * without swizzle, 1 the 128-byte swizzle (LBO unused there) */
static __device__ __forceinline__ uint64_t wgmma_desc(uint32_t sa, uint32_t lbo, uint32_t sbo, uint64_t sw)
{
    return (uint64_t)((sa & 0x3ffff) >> 4) | ((uint64_t)(lbo >> 4) << 16) | ((uint64_t)(sbo >> 4) << 32) | (sw << 62);
}
#endif

#endif
